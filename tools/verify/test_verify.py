"""tools/verify: the analysis of verify's sessions (a passed, a preflight-only and a failed one;
none at all: each table "Not yet run"), and the accelerator and speed pages' sentences held to
the committed sessions."""
import json
import os
import shutil

from el_jax.report import render
from el_jax.report import sources

from tools.verify import analysis
from tools.verify import config as config_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERIFY = os.path.join(ROOT, "results", "verify")


def _checkout(tmp_path):
  root = tmp_path / "checkout"
  for d in (os.path.join("docs", "results"), "experiments", "tools"):
    shutil.copytree(os.path.join(ROOT, d), root / d,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  (root / "results" / "verify").mkdir(parents=True)
  return root


def _analyze(root):
  out = root / "results" / "verify"
  src = sources.Sources(str(out), root=str(root))
  a = {**analysis.analyze(src, config_file.get_config("cpu")), "sources": src.read}
  (out / "analysis.json").write_text(json.dumps(a))
  return a


def _render(root, name):
  return render.render_section(name, root=str(root))


def test_sessions_failed_or_preflight_only_say_so(tmp_path):
  """A copy of the full H200 session, one whose golden step failed and one that ran env and
  golden only: the verdicts, the checks that did not run as "-" / "not run", the speed rows
  of the sessions that timed them, and the files the analysis read."""
  root = _checkout(tmp_path)
  with open(os.path.join(VERIFY, "verify_h200_20261126.json")) as f:
    full = json.load(f)
  failed = json.loads(json.dumps(full))
  failed["ok"] = False
  failed["parts"]["main"]["ok"] = False
  preflight = {"ok": True, "parts": {k: full["parts"][k] for k in ("env", "golden")}}
  out = root / "results" / "verify"
  for name, doc in (("a_full", full), ("b_failed", failed), ("c_preflight", preflight)):
    (out / f"verify_{name}.json").write_text(json.dumps(doc))
  (out / "other.json").write_text("{}")  # not a session
  a = _analyze(root)
  assert list(a["sessions"]) == ["a_full", "b_failed", "c_preflight"]
  assert a["sources"] == [f"results/verify/verify_{n}.json"
                          for n in ("a_full", "b_failed", "c_preflight")]
  s = a["sessions"]
  assert s["a_full"]["ok"] and not s["b_failed"]["ok"] and s["c_preflight"]["preflight"]
  assert s["a_full"]["main"] is True and s["b_failed"]["main"] is False
  assert s["c_preflight"]["main"] is None and s["c_preflight"]["seeds"] is None
  assert s["a_full"]["golden_default_max"] == max(
      full["parts"]["golden"]["rel_err"]["default"].values())
  assert len(a["vs_torch"]) == 2 * len(full["vs_torch"])
  table = _render(root, "verify/checks.md")
  assert "| b_failed | NVIDIA H200 (jax 0.11.2) | **FAILED** |" in table
  assert "| c_preflight | NVIDIA H200 (jax 0.11.2) | passed (env and golden only: `--preflight`) |" in table
  assert table.count("| yes |") == 1 and table.count("| no |") == 1
  assert "| - | not run |" in table
  assert table.rstrip().endswith("*Ran on: gpu: 1 x NVIDIA H200 (jax 0.11.2, matmul default).*")
  speed = _render(root, "verify/throughput.md")
  assert speed.count("| `copy_task:paper_lc1`, 5 seeds | float32 | vmap (scored) |") == 2


def test_without_a_session_every_table_is_not_yet_run(tmp_path):
  root = _checkout(tmp_path)
  a = _analyze(root)
  assert not a["ran"] and a["sessions"] == {} and a["vs_torch"] == []
  for name, what in (("checks", "results/verify/verify_*.json"),
                     ("throughput", "results/verify/verify_*.json"),
                     ("vs_torch", "results/verify/verify_*.json (its torch part)")):
    assert _render(root, f"verify/{name}.md").strip() == (
        f"*Not yet run* (`{what}` is absent; `python -m el_jax.tools.verify` writes it).")


def _committed():
  with open(os.path.join(VERIFY, "analysis.json")) as f:
    return json.load(f)


def _page(name):
  with open(os.path.join(ROOT, "docs", "results", name)) as f:
    return " ".join(f.read().split())


def test_the_accelerator_sentences_hold():
  """Every committed session passed (its golden step within 1e-4 at the highest precision);
  on the H200 the highest precision differs by float32 rounding, the default precision moves
  the gradient norm by more, and float32 at the highest precision ran far below TF32; bf16
  shortens the step far less than its matmul ceiling would promise; stacked seeds run more
  seed-steps per second than one after the other; PyTorch's eager step hardly depends on the
  dtype, and el_jax's step is faster than it in every row."""
  a = _committed()
  page = _page("accelerator.md")
  for name, s in a["sessions"].items():
    assert s["ok"] and s["golden_highest"] <= 1e-4, name
  h = a["sessions"]["h200_20261126"]
  assert h["golden_highest"] < 1e-6 < h["golden_rel_err"]["default"]["grad_norm"]
  assert (f"differs from the CPU by a relative {h['golden_highest']:.1e} (float32 rounding); at "
          f"JAX's default precision the gradient norm moves by "
          f"{h['golden_rel_err']['default']['grad_norm']:.1e}") in page
  pk = h["peak_tflops"]
  assert pk["float32_highest"] < pk["float32"] / 4
  assert (f"float32 matmuls ran at {pk['float32_highest']:.0f} instead of {pk['float32']:.0f} "
          "TFLOP/s here") in page
  ceiling = pk["bfloat16"] / pk["float32"]
  for model in ("path_star:paper", "copy_task:paper_lc1"):
    rows = {(r["dtype"], r["all_positions"]): r for r in h["throughput"] if r["model"] == model}
    gain = rows["float32", False]["step_ms"] / rows["bfloat16", False]["step_ms"]
    assert 1 <= gain < ceiling / 1.3, (model, gain, ceiling)
    assert all(r["mfu"] < 0.25 for r in rows.values())  # "MFU is low"
  stacked = {r["mode"]: r["seed_steps_per_s"] for r in h["stacked"]}
  assert stacked["vmap"] > 2 * stacked["sequential"]
  assert (f"5 copy-task seeds as one program run at {stacked['vmap']:.0f} seed-steps/s against "
          f"{stacked['sequential']:.0f} one after the other") in page
  torch = {(r["model"], r["dtype"]): r["torch_ms"] for r in a["vs_torch"]}
  for model in ("path_star:paper", "copy_task:paper_lc1"):
    assert abs(torch[model, "bfloat16"] / torch[model, "float32"] - 1) < 0.15
  assert all(r["speedup"] > 1 for r in a["vs_torch"])
  assert "PyTorch's step time hardly depends on the dtype" in page


def test_the_speed_page_shows_the_same_comparison():
  a = _committed()
  page = _page("speed.md")
  for r in a["vs_torch"]:
    assert (f"| `{r['model']}` | {r['dtype']} | "
            f"{'all (equal work)' if r['equal_work'] else 'scored (as trained)'} | "
            f"{r['el_jax_ms']:.2f} | {r['torch_ms']:.2f} |") in page


def test_el_jax_is_compared_with_the_fastest_pytorch_mode_measured(tmp_path):
  """A session that timed PyTorch eager, with torch.compile and with CUDA graphs: one row per
  model, dtype and positions, each mode's time, the fastest mode and el_jax against it; the
  committed H200 session timed eager only: its compiled cells read "not yet measured"."""
  root = _checkout(tmp_path)
  v = {"parts": {"env": {"ran_on": {"device_kind": "GPU X", "jax": "0"}},
                 "torch": {"rows": [
                     {"model": "m", "dtype": "float32", "mode": "eager", "step_s": 0.010,
                      "mfu": 0.05},
                     {"model": "m", "dtype": "float32", "mode": "compile", "step_s": 0.006,
                      "mfu": 0.08},
                     {"model": "m", "dtype": "float32", "mode": "reduce-overhead",
                      "step_s": 0.004, "mfu": 0.125}]}},
       "vs_torch": [{"model": "m", "dtype": "float32", "equal_work": False, "mode": m,
                     "el_jax_step_s": 0.002, "torch_step_s": t, "speedup": t / 0.002}
                    for m, t in (("eager", 0.010), ("compile", 0.006),
                                 ("reduce-overhead", 0.004))]}
  (root / "results" / "verify" / "verify_x.json").write_text(json.dumps(v))
  a = _analyze(root)
  (r,) = a["vs_torch"]
  assert (r["torch_ms"], r["compile_ms"], r["graphs_ms"]) == (10.0, 6.0, 4.0)
  assert r["best_mode"] == "reduce-overhead" and r["speedup_best"] == 2.0
  assert r["speedup"] == 5.0 and (r["torch_mfu"], r["best_mfu"]) == (0.05, 0.125)
  table = _render(root, "verify/vs_torch.md")
  assert ("| `m` | float32 | scored (as trained) | 2.00 | 10.00 | 6.00 | 4.00 | 5.0% / 12.5% | "
          "5.00x | 2.00x (reduce-overhead) |") in table
  page = _page("accelerator.md")
  for c in _committed()["vs_torch"]:
    assert c["compile_ms"] is None and c["graphs_ms"] is None and not c["compiled_measured"]
  assert "| not yet measured | not yet measured |" in page and "(eager only) |" in page
