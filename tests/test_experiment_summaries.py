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
