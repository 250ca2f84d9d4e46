"""Numbers the experiment scripts add to their JSON beside the trained metrics."""
import json
import os

import numpy as np
import reliability

from el_jax.report import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_script = reliability.experiment_script




def test_mlm_flatness_comparisons_and_readme_rows_match_their_points():
  """results/mlm_flatness: the first-vs-last comparisons recompute from the stored points,
  and every row of the Figure 1 / 3 tables (SGD and AdamW continuations) on the results page is the JSON rounded."""
  readme = open(os.path.join(ROOT, "docs", "results", "seed002_flatness.md")).read()
  for name in ("training_pcfg", "training_hmm", "training_adamw_hmm"):
    with open(os.path.join(ROOT, "results", "mlm_flatness", f"{name}.json")) as f:
      r = json.load(f)
    x = "adamw_cont_step" if r.get("continued_with") == "adamw" else "sgd_step"
    several = r["comparison"].get("over") == "model seeds"
    if several:  # one value per pre-trained model: its mean over repetitions / probe seeds
      seeds = r["comparison"]["seeds"]
      at = lambda step: [next(p for p in r["points"] if p["seed"] == s and p[x] == step)
                         for s in seeds]  # noqa: E731
      first, last = at(r["comparison"]["x"][0]), at(r["comparison"]["x"][1])
      trace = lambda pts: [p["trace_b1"] for p in pts]  # noqa: E731
      acc = lambda pts, t: [p["probe"][t]["test_acc_mean"] for p in pts]  # noqa: E731
    else:  # one model: the repetitions and probe seeds of its first and last point
      first, last = r["points"][0], r["points"][-1]
      trace = lambda p: p["trace_b1_reps"]  # noqa: E731
      acc = lambda p, t: p["probe"][t]["test_acc"]  # noqa: E731
    got = stats.compare(trace(last), trace(first))
    c = r["comparison"]["trace_b1_change"]
    assert {k: c[k] for k in got} == got  # and p_holm (tests/test_experiment_grids_seed002.py)
    for task, c in r["comparison"]["probe"].items():
      got = stats.compare(acc(last, task), acc(first, task))
      assert {k: c[k] for k in got} == got
    for p in r["points"]:
      pr = next(iter(p["probe"].values()))
      step = f"{p[x]} (seed {p['seed']})" if several else p[x]
      row = (f"| {step} | {p['valid_mlm_loss']:.4f} | {p['valid_gap']:.4f} | "
             f"{p['trace_b1']:.1f} ({p['trace_b1_std']:.1f}) | {p['trace_hutchinson']:.1f} "
             f"({p['trace_hutchinson_stderr']:.1f}) | {100 * pr['test_acc_mean']:.2f} "
             f"({100 * pr['test_acc_std']:.2f}) |")
      assert row in readme, row


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
