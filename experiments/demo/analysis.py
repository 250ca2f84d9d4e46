"""What the demo's section shows: the setting, each run's EM and CL per split and group, each
run against CE on hard test strings (and E1 + warmup against CE + warmup, the CE setting
validation chose with E1's tuning budget) as one Holm family (`stats.family`), the paper's
numbers beside ours, and the means over the first four seeds (the demo's earlier seed set)."""
import numpy as np

from el_jax.report import stats

METRIC = "test_em_hard"  # the comparisons' metric
BASELINE = "ce"
# CE's setting chosen on validation with as many candidates as E1 (`ce_chosen_run` of
# results/copy_task_cpu_sweep/selection.json, 750 warmup steps): the demo's CE + warmup run.
TUNED_CE = "ce_warmup"
SPLITS = ("train", "valid", "test")
GROUPS = ("easy", "hard")
# The config fields the page's setting paragraph names.
SETTING = {"data": ("seq_len", "pad_len", "context_len", "num_train", "num_valid", "num_test",
                    "data_seed"),
           "model": ("num_layers", "embed_dim", "num_heads"), "optim": ("lr", "grad_clip"),
           "train": ("batch_strings", "num_steps")}
EARLY = 4  # the demo's earlier seed set: its first four seeds


def pairs(labels):
  """The family: each run against CE, then E1 + warmup against the tuned CE (where present)."""
  out = [(l, BASELINE) for l in labels if l != BASELINE] if BASELINE in labels else []
  if "e1_warmup" in labels and TUNED_CE in labels and BASELINE in labels:
    out.append(("e1_warmup", TUNED_CE))
  return out


def comparisons(rows):
  """`stats.family` of `pairs` on the per-seed hard-test EM of grid rows (unpaired: the runs'
  seeds are separate initialisations)."""
  by = {r["label"]: r for r in rows}
  return stats.family([(a, by[a]["per_seed"][METRIC], b, by[b]["per_seed"][METRIC])
                       for a, b in pairs(list(by))])


def analyze(src, config):
  doc = src.load("summary.json")
  rows = doc["rows"]
  comps = comparisons(rows)
  return {
      "setting": {part: {k: doc["config"][part][k] for k in keys}
                  for part, keys in SETTING.items()},
      "seeds": doc["seeds"],
      "runs": [{"label": r["label"], "overrides": r["overrides"], "seeds": r["seeds"]}
               for r in rows],
      "table": [{"label": r["label"], "split": s, "group": g,
                 "em": r["aggregate"][f"{s}_em_{g}"], "cl": r["aggregate"][f"{s}_cl_{g}"]}
                for r in rows for s in SPLITS for g in GROUPS],
      "aggregate": {r["label"]: {m: r["aggregate"][m] for m in
                                 ("test_em_hard", "test_em_easy", "test_cl_all", "test_cl_hard")}
                    for r in rows},
      "comparisons": {f"{c['a']} vs {c['b']}": c for c in comps},
      "early_seeds": rows[0]["seeds"][:EARLY],
      "early_test_em_hard": {r["label"]: float(np.mean(r["per_seed"][METRIC][:EARLY]))
                             for r in rows},
      "metric": METRIC,
      "ran_on": src.ran_on(["summary.json"]),
  }
