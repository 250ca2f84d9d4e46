"""experiments/ntp_convergence: at test size (configs/ntp_linear.py:test) it writes the grid's
row schema, its numbers are those of `runner.run_or_reuse` of the same config and those the
script gave before it moved onto the grid; its rows are reused from the JSON; the committed
convergence.json recomputes from its runs; the page's sentences follow the analysis."""
import json
import math
import os

from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import runner
from el_jax.report import stats
from el_jax.core.ntp import dynamics

from el_jax import experiment
from el_jax.report import sources

from experiments.ntp_convergence import analysis
from experiments.ntp_convergence import config as config_file
from experiments.ntp_convergence import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# configs/ntp_linear.py:test (the Fig. 1 instance, seed 14, GD lr 0.5, 2,000 steps) as the
# script wrote it before the grid (per-variant convergence.json, 2-core CPU, float64).
BEFORE = {"gd_gap": 0.008160736303155872, "gd_norm": 8.623438024997375,
          "gd_cos_mm": 0.9843164845094622, "gd_cos_diff": 0.9957349871351427,
          "gd_dist_f": 0.16487460738222803}
BEFORE_INSTANCE = {"entropy": 0.8441986137198051, "norm_W_mm": 2.9295246626899965}
BEFORE_REG_PATH_GAP = [0.26939982263475476, 0.04386781149028019, 0.0005985198418547936]


def _close(a, b):
  return math.isclose(a, b, rel_tol=1e-6)


def _check_row(r, variant, out):
  assert set(grid_lib.ROW_FIELDS) <= set(r), r["label"]
  assert r["label"] == r["variant"] == variant and r["config_name"] == "ntp_linear"
  assert r["overrides"] == {} and r["seeds"] == [r["config"]["seed"]]
  assert r["workdir"] == os.path.join(out, variant)
  want = {f"{opt}_{k}": [run[k]] for opt, run in r["runs"].items() for k in dynamics.METRICS}
  assert r["per_seed"] == want
  assert r["aggregate"] == stats.aggregate([{m: col[0] for m, col in r["per_seed"].items()}])
  cfg = config_lib.get_config("ntp_linear", variant)
  assert not config_lib.config_diff(config_lib.flatten(r["config"]),
                                    config_lib.flatten(config_lib.config_dict(cfg)))


def test_ntp_convergence_grid_at_test_size(tmp_path):
  """One run (variant test): the row, the numbers of before the grid, a direct run of its
  config, and the row reused from the JSON when the run folder is gone."""
  out = str(tmp_path / "out")
  exp = config_file.get_config("test")
  exp.results_dir = out
  doc = run_lib.run(exp)
  with open(os.path.join(out, "convergence.json")) as f:
    assert json.load(f) == json.loads(json.dumps(doc))
  assert doc["comparisons"] == {} and len(doc["rows"]) == 1
  assert doc["command"] == run_lib.COMMAND
  (row,) = doc["rows"]
  _check_row(row, "test", out)
  assert row["seeds"] == [14] and list(row["runs"]) == ["gd"]
  assert set(row["per_seed"]) == set(BEFORE)
  for m, v in BEFORE.items():
    assert _close(row["per_seed"][m][0], v), (m, row["per_seed"][m][0], v)
  for k, v in BEFORE_INSTANCE.items():
    assert _close(row["instance"][k], v), k
  assert all(_close(a, b) for a, b in zip(row["reg_path"]["gap"], BEFORE_REG_PATH_GAP))
  for name in ("summary.json", "metrics.jsonl", "fig1.png", "convergence.png", "reg_path.png"):
    assert os.path.exists(os.path.join(out, "test", name)), name
  # A direct run of the same config gives the same numbers.
  cfg = grid_lib.make_config("ntp_linear", "test", fit_devices=False)
  direct = runner.run_or_reuse(cfg, str(tmp_path / "direct"), verbose=False)
  assert direct["reg_path"] == row["reg_path"]
  untimed = lambda d: {k: v for k, v in d.items() if not k.endswith("time_s")}  # noqa: E731
  assert untimed(direct["instance"]) == untimed(row["instance"])
  for opt, r in direct["runs"].items():
    for k in dynamics.METRICS:
      assert row["per_seed"][f"{opt}_{k}"] == [r[k]], (opt, k)
  # The row is reused from the JSON (same config) even when the run folder is gone.
  os.rename(os.path.join(out, "test"), str(tmp_path / "moved"))
  again = run_lib.run(exp)
  assert again["rows"] == doc["rows"]
  assert not os.path.exists(os.path.join(out, "test"))
  # The analysis of the test run: one instance, its geometry and its optimizer.
  a = analysis.analyze(sources.Sources(out), exp)
  assert list(a["instances"]) == ["test"] and list(a["runs"]["test"]) == ["gd"]
  assert a["runs"]["test"]["gd"]["cos_mm"] == row["per_seed"]["gd_cos_mm"][0]


def test_committed_convergence_json_is_a_grid_of_the_current_configs():
  """results/ntp_convergence/convergence.json: one row per variant whose per-seed values are
  its runs' finals and whose config is today's (so the script reuses it), the run folders'
  summaries the same numbers."""
  with open(os.path.join(ROOT, "results", "ntp_convergence", "convergence.json")) as f:
    doc = json.load(f)
  assert [r["label"] for r in doc["rows"]] == ["fig1", "appendix"]
  assert doc["comparisons"] == {}
  for r in doc["rows"]:
    _check_row(r, r["label"], os.path.join("results", "ntp_convergence"))
    with open(os.path.join(ROOT, r["workdir"], "summary.json")) as f:
      summary = json.load(f)
    assert {k: summary[k] for k in ("instance", "runs", "reg_path")} == {
        k: r[k] for k in ("instance", "runs", "reg_path")}
  rows = {r["label"]: r for r in doc["rows"]}
  assert list(rows["appendix"]["runs"]) == ["gd", "ngd", "adam"]
  assert _close(rows["fig1"]["per_seed"]["gd_cos_mm"][0], 0.9958543050553934)


def test_the_entry_point_runs_every_stage_at_test_size(tmp_path):
  """`python -m el_jax.experiment --config=...:test`: trains, writes analysis.json with its
  sources, and renders no page (the results folder is not the committed one)."""
  out = tmp_path / "out"
  code = experiment.main(["el_jax.experiment",
                          f"--config={ROOT}/experiments/ntp_convergence/config.py:test",
                          f"--config.results_dir={out}"])
  assert code in (None, 0)
  with open(out / "analysis.json") as f:
    a = json.load(f)
  assert a["sources"] == [os.path.relpath(out / "convergence.json", ROOT)]
  assert list(a["instances"]) == ["test"]


def _page(text):
  return " ".join(text.split())


def test_the_page_says_what_the_analysis_gives():
  """The Figure 1 sentence: the four limits of the paper come out, i.e. CE - H near 0, cos
  near 1 and ||P_F(W_k) - W*|| small (the page says "all four limits ... come out"); the
  appendix sentence: Adam is less aligned than NGD although its loss gap is smaller."""
  with open(os.path.join(ROOT, "results", "ntp_convergence", "analysis.json")) as f:
    a = json.load(f)
  with open(os.path.join(ROOT, "docs", "results", "seed003_linear_ntp.md")) as f:
    page = _page(f.read())
  gd = a["runs"]["fig1"]["gd"]
  assert gd["gap"] < 1e-3 and gd["cos_mm"] > 0.99 and gd["dist_f"] < 0.05
  assert "all four limits of the paper" in page
  assert f"cos(W_k, W_mm) = {gd['cos_mm']:.3f}" in page
  app = a["runs"]["appendix"]
  assert app["adam"]["cos_mm"] < app["ngd"]["cos_mm"] and app["adam"]["gap"] < app["ngd"]["gap"]
  assert "Adam is *less* aligned than NGD although its loss gap is far smaller" in page
  assert max(r["cos_mm"] for r in app.values()) < 0.99  # "none is near cos = 1"
