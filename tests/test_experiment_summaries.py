"""Numbers the experiment scripts add to their JSON beside the trained metrics."""
import json
import os

import numpy as np
import reliability

from el_jax.report import stats
from el_jax.run import setup as setup_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_script = reliability.experiment_script


def test_train_ce_summary_is_the_seed_mean_over_each_window(tmp_path):
  rng = np.random.default_rng(0)
  steps = np.arange(25, 1001, 25)
  ce = {(s, k): rng.random(len(steps)) for s in (0, 1, 2) for k in ("ce_decision", "ce_rest")}
  with open(tmp_path / "metrics.jsonl", "w") as f:
    for s in (0, 1, 2):
      for i, t in enumerate(steps):
        f.write(json.dumps({"seed": s, "step": int(t), "kind": "train",
                            "ce_decision": ce[s, "ce_decision"][i],
                            "ce_rest": ce[s, "ce_rest"][i]}) + "\n")
        f.write(json.dumps({"seed": s, "step": int(t), "kind": "eval", "ce_decision": 99.0}) + "\n")
  got = _script("path_star_table1").train_ce_summary(str(tmp_path), 1000)
  for key, group in (("ce_decision", "decision"), ("ce_rest", "rest")):
    both = np.mean([ce[s, key] for s in (0, 1, 2)], axis=0)
    np.testing.assert_allclose(got[group]["end"], both[steps > 900].mean(), rtol=1e-12)
    np.testing.assert_allclose(got[group]["end_minus_500"],
                               both[(steps > 400) & (steps <= 500)].mean(), rtol=1e-12)
  assert _script("path_star_table1").train_ce_summary(str(tmp_path / "gone"), 1000) is None
  # A run shorter than 500 steps has no window 500 steps before its end: None, not NaN.
  short = _script("path_star_table1").train_ce_summary(str(tmp_path), 450)
  assert short["decision"]["end_minus_500"] is None and short["decision"]["end"] is not None


def test_data_coverage_counts_easy_test_letters_seen_in_training():
  from el_jax.run.grid import make_config
  suite = _script("copy_task_suite")
  for lo in ({}, {"data.num_letters": 500, "data.num_train": 800}):
    got = suite.data_coverage(lo)
    cfg = make_config("copy_task", "cpu", lo, [0])
    task = setup_lib.Setup(cfg).task
    tr, te = task.train, task.test
    seen = {tuple(a) for a, e in zip(tr.answers.tolist(), tr.easy) if e}
    want = np.mean([tuple(a) in seen for a, e in zip(te.answers.tolist(), te.easy) if e])
    assert got == {"test_easy_seen_in_train": want, "train_num_easy": int(tr.easy.sum())}
  assert suite.data_coverage({})["test_easy_seen_in_train"] == 1.0  # 26 letters, 320 strings
  assert suite.data_coverage(lo)["test_easy_seen_in_train"] < 0.8  # 500 letters, 641 strings


def test_demo_runs_are_the_setting_chosen_on_validation():
  """configs/copy_task.py sweep() holds what experiments/copy_task_cpu_sweep.py --stage=select
  chose on the validation split (results/copy_task_cpu_sweep/selection.json)."""
  from el_jax.tools import demo
  with open(os.path.join(ROOT, "results", "copy_task_cpu_sweep", "selection.json")) as f:
    sel = json.load(f)
  assert sel["metric"].startswith("valid_")
  runs = demo.demo_runs()
  e_runs = [o for o in runs.values() if o["loss.name"] != "ce"]
  assert len(e_runs) == 1
  chosen = sel["chosen_overrides"]
  assert {k: v for k, v in e_runs[0].items()} == chosen
  warm = chosen.get("optim.warmup_steps")
  assert runs["ce_warmup"]["optim.warmup_steps"] == warm  # the warmup-only control
  assert runs["ce"] == {"loss.name": "ce"}
  # The choice is the argmax of the recorded validation scores.
  assert sel["candidates"][sel["chosen_run"]] == max(sel["candidates"].values())
  # CE got as many candidates (issue 24); its choice is the demo's tuned-CE run.
  assert sel["budget"] == {"e1": len(sel["candidates"]), "ce": len(sel["ce_candidates"])}
  assert sel["budget"]["ce"] == sel["budget"]["e1"]
  assert sel["ce_candidates"][sel["ce_chosen_run"]] == max(sel["ce_candidates"].values())
  assert runs[demo.TUNED_CE] == sel["ce_chosen_overrides"]


def test_comparisons_recorded_in_experiment_json_match_their_per_seed_values():
  """Every p-value in the committed JSON is the permutation test of the per-seed values
  beside it (recomputed here from those values)."""
  checked = 0
  paths = [os.path.join(ROOT, "results", "copy_task_suite", f"{stage}.json")
           for stage in ("table3", "fig1_context", "fig1_width")]
  for path in paths + [os.path.join(ROOT, "results", "demo", "summary.json")]:
    summ = json.load(open(path))
    per_seed = {r["label"]: r["per_seed"] for r in summ["rows"]}
    for metric, comps in summ["comparisons"].items():
      for c in comps:
        va, vb = per_seed[c["a"]][metric], per_seed[c["b"]][metric]
        assert c["p_value"] == stats.permutation_test(va, vb)
        assert c["mean_a"] == np.mean(va)
        checked += 1
      assert [c["p_holm"] for c in comps] == stats.holm([c["p_value"] for c in comps])
  assert checked > 16  # Table 3 (8), Figure 1 (4 + 4) and the demo


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


def test_cross_machine_matches_a_field_one_row_lacks_only_at_its_old_default():
  """experiments/cross_machine.py: a config field added after some rows were written (here
  `train.attention_blocks`, which today's workdirs record) matches a row that lacks it only at
  the value every run had before it existed; today's config itself has every DEFAULTS field
  at that value, so a rerun of an old config still finds its committed rows."""
  from el_jax.run import config as config_lib
  xm = _script("cross_machine")
  old = {"task": "copy", "loss.name": "ce", "optim.lr": 1e-3, "train.num_steps": 10,
         "data.n": 1, "model.d": 2}
  assert xm.same_config({**old, "train.attention_blocks": 1}, old) == (
      True, ["train.attention_blocks"])
  assert not xm.same_config({**old, "train.attention_blocks": 4}, old)[0]
  assert not xm.same_config({**old, "train.unknown_field": 1}, old)[0]
  today = xm.flatten(config_lib.get_config("copy_task", "cpu").to_dict())
  for k, v in xm.DEFAULTS.items():
    if k in today:
      assert today[k] == v, (k, today[k], v)
