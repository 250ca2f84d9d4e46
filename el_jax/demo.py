r"""The main job (`make demo`): CE against E1 + warmup on the copy task, several seeds.

  python -m el_jax.demo --workdir=results/demo [--variant=cpu] [--seeds=0,1,2]

Trains each run of `RUNS` on `configs/copy_task.py:<variant>` (every run on
the same fixed dataset, `--seeds` model initialisations), then writes
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

# label -> config overrides. E1 lam and warmup from experiments/copy_task_cpu_sweep.py.
RUNS = {
    "ce": {"loss.name": "ce"},
    "e1_warmup": {"loss.name": "e1", "loss.lam": 4.0, "optim.warmup_steps": 300},
}


def _define(fv):
  flags.DEFINE_string("workdir", "results/demo", "output directory", flag_values=fv)
  flags.DEFINE_string("variant", "cpu", "variant of configs/copy_task.py", flag_values=fv)
  flags.DEFINE_list("seeds", ["0", "1", "2"], "model seeds", flag_values=fv)
  flags.DEFINE_list("runs", list(RUNS), f"runs to train, of {list(RUNS)}", flag_values=fv)


def override(cfg, overrides):
  for key, val in overrides.items():
    node = cfg
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    node[leaf] = val
  return cfg


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
  unknown = [r for r in fv.runs if r not in RUNS]
  if unknown:
    raise SystemExit(f"error: unknown --runs {unknown}; valid runs: {list(RUNS)}")
  from configs import copy_task as copy_cfg
  from el_jax import cli, plots, train
  cli.log_devices()
  try:
    seeds = tuple(int(s) for s in fv.seeds)
    base = copy_cfg.get_config(fv.variant)
  except ValueError as e:
    raise SystemExit(f"error: {e}") from None
  summaries, rows = {}, {}
  t0 = time.time()
  for label in fv.runs:
    cfg = override(base.copy_and_resolve_references(), RUNS[label])
    cfg.seeds = seeds
    wd = os.path.join(fv.workdir, label)
    print(f"== {label}: {dict(RUNS[label])}, seeds {seeds} -> {wd}", file=sys.stderr, flush=True)
    summaries[label] = train.train_and_evaluate(cfg, wd)
    rows[label] = train.MetricsWriter(os.path.join(wd, "metrics.jsonl")).rows()
  table = format_table(summaries)
  out = {
      "variant": fv.variant,
      "config": json.loads(base.to_json_best_effort()),
      "runs": {k: RUNS[k] for k in fv.runs},
      "seeds": list(seeds),
      "wall_seconds": round(time.time() - t0, 1),
      "aggregate": {k: s["aggregate"] for k, s in summaries.items()},
      "per_seed": {k: s["per_seed"] for k, s in summaries.items()},
      "table": table,
  }
  with open(os.path.join(fv.workdir, "summary.json"), "w") as f:
    json.dump(out, f, indent=1)
  plots.plot_summary(summaries, os.path.join(fv.workdir, "summary.png"))
  plots.plot_loss_groups(rows, os.path.join(fv.workdir, "loss_easy_hard.png"))
  print(table)
  print(f"wrote {fv.workdir}/summary.json, summary.png, loss_easy_hard.png "
        f"({out['wall_seconds']:.0f} s)")
  return out


if __name__ == "__main__":
  main()
