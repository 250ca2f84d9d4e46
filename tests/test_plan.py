"""el_jax.tools.plan: every `paper` variant's train step compiles; the FLOP count, the
accelerator-hours and the batch shapes it reports are checked against independent counts;
bad input is one line.

The paper variants are compiled at one row on a 1-device mesh, from abstract inputs
(nothing is allocated, no data set is built). Measured on the shared 2-core CPU under a load
average of ~6.7 from other jobs: 10-29 s per paper variant (the 202M-parameter PCFG model the
longest), the whole file 49 s of CPU time and 71 s of wall time with `-n 2`.
"""
import time

import numpy as np
import pytest

import reliability as rel
from el_jax.run import config as config_lib
from el_jax.tools import plan
from el_jax.core import tasks

PAPER = plan.paper_variants()
# LLVM's optimisation off: the same HLO, so the same FLOPs and buffers, compiled faster
# (el_jax.tools.plan.compile_step; tests/reliability.py does the same for its subprocesses).
FAST = {"xla_backend_optimization_level": 0}


def test_paper_variants_found():
  assert {("copy_task", "paper"), ("path_star", "paper"), ("pcfg_mlm", "paper"),
          ("hmm_mlm", "paper"), ("label_copy", "paper")} <= set(PAPER)


@pytest.mark.parametrize("name,variant", PAPER, ids=[f"{n}:{v}" for n, v in PAPER])
def test_paper_variant_step_compiles_at_batch_1(name, variant, record_property):
  cfg = config_lib.get_config(name, variant)
  t0 = time.perf_counter()
  p = plan.plan(cfg, num_devices=1, rows=1, compiler_options=FAST)
  wall = time.perf_counter() - t0
  record_property("compile_s", p["compile_s"])
  record_property("plan_wall_s", round(wall, 2))
  print(f"{name}:{variant}: {p['params']:,} params, compile {p['compile_s']:.1f} s, plan {wall:.1f} s")
  m = p["model"]
  assert (m["num_layers"], m["embed_dim"], m["num_heads"]) == (
      cfg.model.num_layers, cfg.model.embed_dim, cfg.model.num_heads)
  assert p["rows_per_step"] == 1 and p["num_devices"] == 1
  assert p["tokens_per_step"] == m["context_len"]
  # A transformer step costs about 6 FLOPs per parameter per token; the unembedding of the
  # tasks that score a few positions only (label copy) and attention move it by < 2x.
  assert 0.5 < p["flops_per_step"] / p["flops_6nd"] < 2.0, (p["flops_per_step"], p["flops_6nd"])
  b = p["bytes_per_device"]
  assert b["arguments"] > 3 * 4 * p["params"]  # params + Adam's two moments, float32
  assert b["aliased"] > 0  # the donated state is reused for the new state
  for chip in p["chips"].values():
    assert chip["hours_all_seeds"] > 0
  if name == "label_copy":
    # An independent parameter count: GPT-2 small has 124,439,808 parameters with 1024
    # positions; the label-copy model keeps only its context's positions.
    assert p["params"] == 124_439_808 - (1024 - m["context_len"]) * 768


def matmul_flops(layers, d, mlp, vocab, t, p, rows):
  """Matmul FLOPs of one train step of the decoder, counted by hand: per row, every block
  projects all T positions to q, k, v (2 T D 3D); the last block only computes its queries,
  attention, output projection and MLP at the P scored positions; attention is 2 Q T D for
  the scores and again for the weighted values; the (tied) unembedding is 2 P D V. The
  backward pass does two matmuls of the same size per forward matmul: 3 x forward."""
  def block(q):
    return 2 * t * d * 3 * d + 2 * 2 * q * t * d + 2 * q * d * d + 2 * 2 * q * d * mlp
  fwd = sum(block(p if i == layers - 1 else t) for i in range(layers)) + 2 * p * d * vocab
  return 3 * fwd * rows


def test_flops_match_a_hand_count_of_the_matmuls():
  """XLA's FLOPs of a 2-layer 256-wide model = the hand count of its matmuls plus the
  elementwise work (LayerNorm, softmax, GELU, AdamW, clipping, the metrics), which XLA
  counts too: measured 5.2 % more here; allowed 0-15 %."""
  cfg = config_lib.get_config("path_star", "test", {
      "model.num_layers": 2, "model.embed_dim": 256, "model.mlp_dim": 1024,
      "model.num_heads": 4})
  p1 = plan.plan(cfg, num_devices=1, rows=8, compiler_options=FAST)
  m = p1["model"]
  hand = matmul_flops(2, 256, 1024, m["vocab_size"], m["context_len"],
                      p1["logit_positions_per_step"] // 8, 8)
  assert 1.0 <= p1["flops_per_step"] / hand <= 1.15, (p1["flops_per_step"], hand)
  # On 8 devices the compiled module is one device's program: its FLOPs x 8 are those of
  # the 1-device step plus the optimizer update that the 7 other replicas repeat (AdamW,
  # clipping and the norms: measured ~24 FLOPs per parameter; bound 40).
  p8 = plan.plan(cfg, num_devices=8, rows=8, compiler_options=FAST)
  assert p8["flops_per_step"] == pytest.approx(8 * p8["flops_per_step_per_device"])
  extra = p8["flops_per_step"] - p1["flops_per_step"]
  assert 0 < extra < 7 * 40 * p1["params"], (extra, p1["params"])
  assert p8["flops_per_step_per_device"] < p1["flops_per_step"] / 2


def test_accelerator_hours_by_hand():
  # 1e15 FLOPs per step, 10k steps, at 40 % of 197 TFLOP/s: 1e19 / 7.88e13 s = 126,903.6 s
  # = 35.251 h.
  assert plan.accelerator_hours(1e15, 10_000, 197e12, 0.4) == pytest.approx(35.25099, rel=1e-6)
  cfg = config_lib.get_config("path_star", "test", {"seeds": (0, 1, 2)})
  p = plan.plan(cfg, num_devices=8, rows=8, mfu=0.5, compiler_options=FAST)
  steps = cfg.train.num_steps
  peaks = {"tpu_v5e": 197e12, "a100": 156e12, "h100": 494.5e12}  # float32: bf16 pass / TF32
  for key, peak in peaks.items():
    c = p["chips"][key]
    assert c["peak_flops"] == peak
    want = p["flops_per_step"] * steps / (0.5 * peak) / 3600
    assert c["hours_per_seed"] == pytest.approx(want)
    assert c["hours_all_seeds"] == pytest.approx(3 * want)
  # model.dtype="bfloat16" (or --peak=bf16): the bf16 dense peaks.
  for dtype, peak in (("bfloat16", "dtype"), ("float32", "bf16")):
    assert [plan.chip_peak(plan.CHIPS[k], dtype, peak)[0] for k in peaks] == [197e12, 312e12, 989e12]


@pytest.mark.parametrize("name", ["copy_task", "path_star", "pcfg_mlm", "hmm_mlm", "label_copy",
                                  "text_lm"])
def test_abstract_batch_spec_is_what_the_built_task_gives(name):
  cfg = config_lib.get_config(name, "test")
  cls = tasks.get_task_class(cfg.task)
  spec = cls.abstract_batch_spec(cfg)
  task = cls(cfg)
  batch = task.batch(0, 0)
  assert spec["vocab_size"] == task.vocab_size
  assert spec["context_len"] == task.context_len
  assert spec["rows"] == batch["inputs"].shape[0] == cls.rows_per_step(cfg)
  assert batch["inputs"].shape[1] == task.context_len
  if task.scored_positions is None:
    assert spec["scored_positions"] is None
  else:
    np.testing.assert_array_equal(spec["scored_positions"], task.scored_positions)


@pytest.mark.parametrize("args,pattern", [
    (["--config=configs/nope.py:paper"], r"could not load --config"),
    (["--config=configs/path_star.py:test", "--batch=7"],
     r"--batch=7: 7 rows per step cannot be split over 8 devices"),
    (["--config=configs/path_star.py:test", "--mfu=1.5"], r"--mfu=1\.5 must be in \(0, 1\]"),
    (["--config=configs/path_star.py:test", "--config.model.num_heads=3"],
     r"model\.embed_dim=16 is not divisible by model\.num_heads=3"),
], ids=["unknown_config", "batch_not_divisible", "bad_mfu", "bad_model"])
def test_bad_input_is_one_line(args, pattern):
  proc = rel.run(*args, module="el_jax.tools.plan", timeout=120)
  rel.assert_one_line_error(proc, pattern)


def test_cli_prints_the_plan_and_writes_json(tmp_path):
  out = tmp_path / "plan.json"
  proc = rel.run("--config=configs/path_star.py:test", "--num_devices=4", f"--out={out}",
                 module="el_jax.tools.plan", timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "on 4 device(s)" in proc.stdout and "TPU v5e" in proc.stdout
  import json
  p = json.loads(out.read_text())
  assert p["num_devices"] == 4 and p["config"] == "configs/path_star.py:test"
  assert p["flops_per_step"] == pytest.approx(4 * p["flops_per_step_per_device"])


@pytest.mark.parametrize("preset,sizes", [
    ("bilstm", {"model.embed_dim": 64, "model.num_layers": 2, "train.batch_size": 256}),
    ("bilstm", {"model.embed_dim": 128, "model.num_layers": 3, "train.batch_size": 128}),
    ("encoder", {"model.embed_dim": 128, "model.num_layers": 3, "model.mlp_dim": 512,
                 "train.batch_size": 128}),
])
def test_memory_estimate_tracks_the_compiled_step(preset, sizes):
  """el_jax.run.setup.estimate_memory (what a run is refused by) against XLA's memory analysis of
  the same step (el_jax.tools.plan): the activations estimated are within 25% of the compiled
  step's temporaries (measured: 1.04, 1.00, 0.92 for the three rows). The plan of a bilstm
  config compiles the bilstm (it built the transformer's graph and failed before)."""
  from el_jax.run import setup as setup_lib
  cfg = config_lib.get_config("hmm_mlm", "test", {"model.preset": preset, "num_devices": 1,
                                                  **sizes})
  p = plan.plan(cfg, num_devices=1, compiler_options=FAST)
  assert p["model"]["preset"] == preset
  est = setup_lib.Trainer(setup_lib.Setup(cfg)).memory  # the estimate a run is checked by
  assert est["rows"] == p["rows_per_step"]
  assert est["k_activations"] == (setup_lib.K_LSTM_ACTIVATIONS if preset == "bilstm" else
                                  setup_lib.K_ACTIVATIONS)
  temps = p["bytes_per_device"]["temporaries"]
  assert 0.75 < est["activations"] / temps < 1.25, (est["activations"], temps)


def test_a_task_with_its_own_model_is_refused_in_one_line_when_too_big():
  """check_memory for a task with its own model (no model_cfg, activations not estimated):
  the one-line refusal, not an AttributeError (it read model_cfg.arch)."""
  import jax
  import jax.numpy as jnp
  from el_jax.run import setup as setup_lib
  s = setup_lib.Setup(config_lib.get_config("dyck", "test"))
  big = {"params": jax.ShapeDtypeStruct((10**13,), jnp.float32), "opt_state": (), "step": 0}
  with pytest.raises(ValueError, match=r"^this run needs about [\d.]+ TB of memory \(estimate: "
                     r"params 40 TB .* for \d+ rows x \d+ tokens\), more than"):
    setup_lib.check_memory(s, big, jax.devices()[0], 1)
