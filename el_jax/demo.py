r"""The main job (`make demo`): CE against E1 + warmup on the copy task, several seeds.

  python -m el_jax.demo --workdir=results/demo [--variant=cpu] [--seeds=2,3,4]

Trains each run of `sweep()` in configs/copy_task.py (CE, E1 + warmup) on
`configs/copy_task.py:<variant>` (every run on the same fixed dataset, with
the variant's model seeds unless `--seeds` is given), then writes
`<workdir>/summary.json`, the figures `<workdir>/summary.png` and
`<workdir>/loss_easy_hard.png`, and prints the table
loss x split x group x (EM, CL) as mean (min, max) over seeds.
Runs resume from their checkpoints if interrupted.
"""
import json
import os
import sys
import time

from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)



def demo_runs():
  """{label: config overrides}: the runs of `sweep()` in configs/copy_task.py."""
  from configs import copy_task as copy_cfg
  runs = {}
  copy_cfg.sweep(lambda **overrides: runs.setdefault(run_label(overrides), overrides))
  return runs


def run_label(overrides):
  """"ce", "e1_warmup", ...: the loss name, plus "_warmup" when warmup is on."""
  return overrides["loss.name"] + ("_warmup" if overrides.get("optim.warmup_steps") else "")


def _define(fv):
  flags.DEFINE_string("workdir", "results/demo", "output directory", flag_values=fv)
  flags.DEFINE_string("variant", "cpu", "variant of configs/copy_task.py", flag_values=fv)
  flags.DEFINE_list("seeds", None, "model seeds (default: the variant's config.seeds)",
                    flag_values=fv)
  flags.DEFINE_list("runs", None, "labels of the runs to train (default: all of sweep())",
                    flag_values=fv)


def override(cfg, overrides):
  for key, val in overrides.items():
    node = cfg
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    node[leaf] = val
  return cfg


def make_config(variant, overrides, seeds=None):
  """The variant's config with `overrides`, on as many devices as split a batch evenly."""
  import jax
  from configs import copy_task as copy_cfg
  from el_jax import train
  from el_jax.data import copy_task
  cfg = override(copy_cfg.get_config(variant), overrides)
  if seeds is not None:
    cfg.seeds = tuple(seeds)
  k = copy_task.strings_per_context(train.task_spec(cfg), cfg.data.context_len)
  contexts, n = cfg.train.batch_strings // k, jax.device_count()
  while contexts % n:  # e.g. 8 TPU cores and 4 contexts per batch -> 4 devices
    n -= 1
  cfg.num_devices = n
  return cfg


def run(variant="cpu", workdir="results/demo", seeds=None, labels=None):
  """Trains the demo runs; writes summary.json and figures; returns the summary dict."""
  from el_jax import plots, train
  runs = demo_runs()
  labels = list(runs) if labels is None else list(labels)
  unknown = [r for r in labels if r not in runs]
  if unknown:
    raise ValueError(f"unknown demo runs {unknown}; valid runs: {list(runs)}")
  summaries, rows = {}, {}
  t0 = time.time()
  cfg = None
  for label in labels:
    cfg = make_config(variant, runs[label], seeds)
    wd = os.path.join(workdir, label)
    print(f"== {label}: {runs[label]}, seeds {tuple(cfg.seeds)} -> {wd}", file=sys.stderr,
          flush=True)
    summaries[label] = train.train_and_evaluate(cfg, wd)
    rows[label] = train.MetricsWriter(os.path.join(wd, "metrics.jsonl")).rows()
  table = format_table(summaries)
  out = {
      "variant": variant,
      "config": json.loads(cfg.to_json_best_effort()),
      "runs": {k: runs[k] for k in labels},
      "seeds": list(cfg.seeds),
      "wall_seconds": round(time.time() - t0, 1),
      "aggregate": {k: s["aggregate"] for k, s in summaries.items()},
      "per_seed": {k: s["per_seed"] for k, s in summaries.items()},
      "table": table,
  }
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(out, f, indent=1)
  plots.plot_summary(summaries, os.path.join(workdir, "summary.png"))
  plots.plot_loss_groups(rows, os.path.join(workdir, "loss_easy_hard.png"))
  return out


def format_table(summaries):
  """Rows: run x split x group; columns EM and CL as mean (min, max) over seeds."""
  lines = [f"{'loss':12s} {'split':5s} {'group':5s}  {'EM mean (min, max)':24s}  CL mean (min, max)"]
  for label, summ in summaries.items():
    agg = summ["aggregate"]
    for split in ("train", "test"):
      for group in ("easy", "hard"):
        cells = []
        for metric in ("em", "cl"):
          a = agg[f"{split}_{metric}_{group}"]
          cells.append(f"{a['mean']:.3f} ({a['min']:.3f}, {a['max']:.3f})")
        lines.append(f"{label:12s} {split:5s} {group:5s}  {cells[0]:24s}  {cells[1]}")
  return "\n".join(lines)


def main(argv=None):
  fv = flags.FlagValues()
  _define(fv)
  try:
    fv(sys.argv if argv is None else argv)
  except flags.Error as e:
    raise SystemExit(f"error: {e}") from None
  from el_jax import cli
  cli.log_devices()
  try:
    out = run(fv.variant, fv.workdir, fv.seeds and [int(s) for s in fv.seeds], fv.runs)
  except ValueError as e:
    raise SystemExit(f"error: {e}") from None
  print(out["table"])
  print(f"wrote {fv.workdir}/summary.json, summary.png, loss_easy_hard.png "
        f"({out['wall_seconds']:.0f} s)")
  return out


if __name__ == "__main__":
  main()
