"""Numbers the experiment scripts add to their JSON beside the trained metrics."""
import json
import os

import numpy as np
import reliability

from el_jax.report import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_script = reliability.experiment_script




def test_loss_baselines_table_recomputes_from_its_runs():
  """results/loss_baselines (el_jax.run.grid files): each loss's setting is the argmax of its
  validation grid (select.json), and every comparison of test.json / label_copy.json with its
  Holm-adjusted p recomputes from the per-seed values of the rows beside it. (The page's
  tables are the report's rendering of these files, checked by tests/test_report.py.)"""
  lb = _script("loss_baselines")
  out = os.path.join(ROOT, "results", "loss_baselines")
  with open(os.path.join(out, "table.json")) as f:
    res = json.load(f)
  select = json.load(open(os.path.join(out, "select.json")))["rows"]
  for r in select:
    assert r["aggregate"][lb.SELECT_METRIC]["mean"] == np.mean(r["per_seed"][lb.SELECT_METRIC])
  for loss, over in res["chosen"].items():
    scores = {r["label"]: r["aggregate"][lb.SELECT_METRIC]["mean"] for r in select
              if r["loss"] == loss}
    assert len(scores) == len(lb.GRID[loss])
    assert scores[lb.point_name(over)] == max(scores.values()), loss
  assert res["chosen"] == lb.chosen(out)
  for part in ("test", "label_copy"):
    doc = json.load(open(os.path.join(out, f"{part}.json")))
    rows = {r["label"]: r for r in doc["rows"]}
    assert len(rows) == len(lb.GRID) + 1  # every loss and CE without warmup
    assert {k: rows[k]["point"] for k in lb.GRID} == res["chosen"]
    for fam, ref in (("vs_ce", "ce_no_warmup"), ("vs_ce_warmup", "ce")):
      comps = doc["comparisons"][fam]
      assert len(comps) == (len(lb.GRID) if fam == "vs_ce" else len(lb.GRID) - 1)
      for c in comps:
        assert c["b"] == ref and c["metric"] == lb.TEST_METRIC
        got = stats.compare(rows[c["a"]]["per_seed"][lb.TEST_METRIC],
                             rows[ref]["per_seed"][lb.TEST_METRIC])
        assert {k: c[k] for k in got} == got
      assert [c["p_holm"] for c in comps] == stats.holm([c["p_value"] for c in comps])
    for r in doc["rows"]:
      assert r["aggregate"][lb.TEST_METRIC]["mean"] == np.mean(r["per_seed"][lb.TEST_METRIC])
    (c,) = doc["comparisons"]["best_baseline_vs_e1"]
    seed001 = [r for r in doc["rows"] if r["label"] not in ("ce_no_warmup", "ce", "e1", "e2", "e3")]
    assert len(seed001) == len(lb.GRID) - 4
    best = max(seed001, key=lambda r: np.mean(r["per_seed"][lb.TEST_METRIC]))
    got = stats.compare(best["per_seed"][lb.TEST_METRIC], rows["e1"]["per_seed"][lb.TEST_METRIC])
    assert (c["a"], c["b"]) == (best["label"], "e1") and {k: c[k] for k in got} == got
