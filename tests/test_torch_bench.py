"""el_jax.tools.torch_bench's compiled modes and verify's torch part, on the CPU, in the
PyTorch environment `.venv-torch` (torch is not a dependency of el_jax: tools/bench_vs_torch
makes that environment with `pip install torch==2.13.0 transformers`). `torch.compile` times the
same step eagerly and compiled (its compilation measured apart); CUDA graphs are refused on a
CPU in one line; with little of the part's time left verify's torch part times the eager rows
and lists the compiled ones as skipped, saying why. Skipped where `.venv-torch` is absent."""
import json
import os
import subprocess

import pytest

from el_jax.tools import torch_bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PY = os.path.join(ROOT, ".venv-torch", "bin", "python")
SHAPE = {"preset": "gpt_neox", "num_layers": 2, "num_heads": 2, "embed_dim": 32, "mlp_dim": 64,
         "vocab": 29, "seq": 12, "batch": 4, "layer_norm_eps": 1e-6, "activation": "gelu_tanh",
         "lr": 1e-3, "grad_clip": 1.0, "weight_decay": 0.0}


def _torch_venv():
  if not os.path.exists(TORCH_PY):
    pytest.skip("no .venv-torch (the PyTorch environment of tools/bench_vs_torch: "
                "python -m venv .venv-torch && .venv-torch/bin/pip install torch==2.13.0 "
                "transformers)")
  ok = subprocess.run([TORCH_PY, "-c", "import torch, transformers"],
                      capture_output=True).returncode == 0
  if not ok:
    pytest.skip(".venv-torch has no torch and transformers")
  return TORCH_PY


def _in_torch_venv(code):
  p = subprocess.run([_torch_venv(), "-c", code], cwd=ROOT, capture_output=True, text=True,
                     timeout=900, env={**os.environ, "PYTHONPATH": ROOT})
  assert p.returncode == 0, p.stderr[-3000:]
  return json.loads(p.stdout.strip().splitlines()[-1])


def test_modes_are_refused_where_they_cannot_run():
  assert torch_bench.mode_refusal("eager", "cpu") is None
  assert torch_bench.mode_refusal("compile", "cpu") is None
  assert torch_bench.mode_refusal("reduce-overhead", "cuda") is None
  assert "need a CUDA device" in torch_bench.mode_refusal("reduce-overhead", "cpu")
  assert "is not one of" in torch_bench.mode_refusal("max", "cpu")


def test_torch_compile_times_the_same_step_on_the_cpu():
  rows = _in_torch_venv(f"""
import json
from el_jax.tools import torch_bench
shape = {SHAPE!r}
out = [torch_bench.time_steps(shape, "float32", steps=2, rounds=1, warmup=2, mode=m)
       for m in ("eager", "compile")]
try:
  torch_bench.time_steps(shape, "float32", mode="reduce-overhead")
except ValueError as e:
  out.append(str(e))
print(json.dumps(out))
""")
  eager, compiled, refused = rows
  assert (eager["mode"], compiled["mode"]) == ("eager", "compile")
  assert eager["compile_s"] is None and compiled["compile_s"] > 0
  assert eager["step_s"] > 0 and compiled["step_s"] > 0
  assert eager["num_params"] == compiled["num_params"] and compiled["device"] == "cpu"
  assert refused == ("torch_bench: CUDA graphs (mode='reduce-overhead') need a CUDA device")


def test_verify_torch_part_skips_compiled_modes_without_time():
  res = _in_torch_venv(f"""
import json
from el_jax.tools import verify
rows = [{{"model": "m", "dtype": "float32", "all_positions": True, "flops_per_step": 1e9}}]
res = verify.part_torch("test", shapes={{"m": {SHAPE!r}}}, el_jax_rows=rows,
                        peaks={{"float32": 1e12, "bfloat16": 2e12}}, budget_s=1)
print(json.dumps(res))
""")
  assert res["ok"] is True
  assert [(r["mode"], r["dtype"]) for r in res["rows"]] == [("eager", "float32"),
                                                            ("eager", "bfloat16")]
  for r in res["rows"]:
    assert r["mfu"] == pytest.approx(1e9 / r["step_s"] / {"float32": 1e12, "bfloat16": 2e12}[
        r["dtype"]])
  skipped = {(s["mode"], s["dtype"]): s["why"] for s in res["skipped"]}
  assert set(skipped) == {(m, d) for m in ("compile", "reduce-overhead")
                          for d in ("float32", "bfloat16")}
  assert skipped["compile", "float32"].startswith("out of the part's time")
  assert "need a CUDA device" in skipped["reduce-overhead", "bfloat16"]
