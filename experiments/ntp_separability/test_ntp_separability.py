"""experiments/ntp_separability: at test size it writes one row per (|S_j|, d / m) cell and its
analysis; the committed sweep's page sentences hold to the analysis: the smallest d / m from
which every draw is separable, and Lemma 1's sufficient condition (every draw above d = m is
separable and compatible)."""
import json
import os

from el_jax import experiment
from el_jax.report import sources

from experiments.ntp_separability import analysis
from experiments.ntp_separability import config as config_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_entry_point_runs_every_stage_at_test_size(tmp_path):
  out = tmp_path / "out"
  code = experiment.main(["el_jax.experiment",
                          f"--config={ROOT}/experiments/ntp_separability/config.py:test",
                          f"--config.results_dir={out}"])
  assert code in (None, 0)
  cfg = config_file.get_config("test")
  with open(out / "separability.json") as f:
    doc = json.load(f)
  assert (doc["m"], doc["V"], doc["trials"]) == (cfg.m, cfg.V, cfg.trials)
  assert [(r["support"], r["d"]) for r in doc["rows"]] == [
      (s, round(q * cfg.m)) for s in cfg.supports for q in cfg.ratios]
  for r in doc["rows"]:
    assert r["both"] <= min(r["compatible"], r["separable"])
    assert r["d_over_m"] == r["d"] / cfg.m
    if r["d"] > cfg.m:  # Lemma 1: d > m (full-rank Gaussian embeddings) suffices for both
      assert r["compatible"] == r["separable"] == 1.0, r
  with open(out / "analysis.json") as f:
    a = json.load(f)
  assert a["sources"] == [os.path.relpath(out / "separability.json", ROOT)]
  assert a["ratios"] == sorted(cfg.ratios)
  assert [t["support"] for t in a["table"]] == list(cfg.supports)
  assert (out / "separability.png").exists()


def test_separable_from_is_where_every_larger_ratio_is_separable():
  assert analysis.separable_from({0.5: 1.0, 1.0: 1.0, 2.0: 1.0}) == 0.5
  assert analysis.separable_from({0.5: 1.0, 1.0: 0.9, 2.0: 1.0}) == 2.0
  assert analysis.separable_from({0.5: 1.0, 2.0: 0.95}) is None


def _page():
  with open(os.path.join(ROOT, "docs", "results", "seed003_linear_ntp.md")) as f:
    return " ".join(f.read().split())


def test_the_page_says_what_the_analysis_gives():
  """"Every draw is separable from d / m = 0.4 / 0.75 / 1 for |S_j| = 1 / 3 / 6": each the
  smallest ratio with every draw separable (and every larger one too); "not necessary:
  sparser supports become separable well below d = m"; "Reproduced: yes (consistent with the
  sufficient condition)": every cell above d = m all separable and all compatible."""
  out = os.path.join(ROOT, "results", "ntp_separability")
  src = sources.Sources(out, root=ROOT)
  a = analysis.analyze(src, config_file.get_config("cpu"))
  rows = src.load("separability.json")["rows"]
  page = _page()
  for s in ("1", "3", "6"):
    first = min(r["d_over_m"] for r in rows if r["support"] == int(s) and r["separable"] == 1.0)
    assert a["separable_from"][s] == first, s
  got = " / ".join(f"{a['separable_from'][s]:.2g}" for s in ("1", "3", "6"))
  assert got == "0.4 / 0.75 / 1"
  assert f"Every draw is separable from d / m = {got} for |S_j| = 1 / 3 / 6" in page
  assert a["separable_from"]["1"] < 1 and a["separable_from"]["3"] < 1
  assert "sparser supports become separable well below d = m" in page
  above = [r for r in rows if r["d_over_m"] > 1]
  assert above and all(r["separable"] == r["compatible"] == 1.0 for r in above)
  assert "Reproduced: **yes** (consistent with the sufficient condition" in page
  t1 = next(t for t in a["table"] if t["support"] == 1)
  assert ("| |S_j| = 1 | " + " | ".join(f"{c['separable']:.2f} / {c['compatible']:.2f}"
                                        for c in t1["cells"]) + " |") in page
