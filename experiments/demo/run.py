"""The demo's grid: every run of `sweep()` in configs/copy_task.py, trained (or resumed, or read
back from a finished folder) in `<results_dir>/<label>`, written to `<results_dir>/summary.json`
with the printed table and the comparisons (`analysis.comparisons`); then the figures
summary.png (final EM per split and group, a dot per seed) and loss_easy_hard.png (the training
loss of easy and hard strings, from each run's metrics.jsonl).

The committed summary.json is never taken as a result: a run is trained in its folder or read
back from a finished one (`config.reuse_from`), never reused from the JSON.
"""
import os
import time

from el_jax.infra import metrics as metrics_lib
from el_jax.infra import plots
from el_jax.report import plots as report_plots
from el_jax.run import cli
from el_jax.run import grid as grid_lib
from el_jax.run import runner

from experiments.demo import analysis

CONFIG = "copy_task"
COMMAND = "python -m el_jax.experiment --config=experiments/demo/config.py"


def demo_runs():
  """{label: config overrides}: the runs of `sweep()` in configs/copy_task.py."""
  return grid_lib.sweep_runs(CONFIG)


def make_grid(config):
  """Every run of `demo_runs()` in `<results_dir>/<label>`, written to `summary.json`."""
  out = config.results_dir
  g = grid_lib.Grid(os.path.join(out, "summary.json"), runs_dir=out,
                    reuse_from=runner.run_dirs(*config.reuse_from), reuse_rows=False)
  for label, overrides in demo_runs().items():
    g.add(label, CONFIG, config.config_variant, overrides, seeds=config.seeds or None)
  return g


def format_table(rows):
  """Rows: run x split x group; columns EM and CL as mean (min, max) over seeds."""
  head = f"{'loss':12s} {'split':5s} {'group':5s}  {'EM mean (min, max)':24s}  CL mean (min, max)"
  lines = [head]
  for row in rows:
    agg = row["aggregate"]
    for split in ("train", "valid", "test"):
      for group in ("easy", "hard"):
        cells = []
        for metric in ("em", "cl"):
          a = agg[f"{split}_{metric}_{group}"]
          cells.append(f"{a['mean']:.3f} ({a['min']:.3f}, {a['max']:.3f})")
        lines.append(f"{row['label']:12s} {split:5s} {group:5s}  {cells[0]:24s}  {cells[1]}")
  return "\n".join(lines)


def run(config):
  """Trains the runs (`config.runs`: only those), writes summary.json and the figures, prints
  the table and the comparisons; returns summary.json's content."""
  g = make_grid(config)
  labels = list(config.runs) or None
  unknown = [l for l in labels or () if l not in g.runs]
  if unknown:
    raise ValueError(f"unknown runs {unknown} in config.runs; the demo's runs: {list(g.runs)}")
  cli.log_devices()
  t0 = time.time()
  rows = g.run(labels)
  out = config.results_dir
  os.makedirs(out, exist_ok=True)  # every run may have been read back from elsewhere
  comps = analysis.comparisons(rows)
  if comps:
    g.comparisons[analysis.METRIC] = [{"metric": analysis.METRIC, **c} for c in comps]
  table = format_table(rows) + "\n" + grid_lib.format_comparisons(
      g.comparisons.get(analysis.METRIC, []))
  doc = g.write(variant=config.config_variant, seeds=rows[-1]["seeds"], config=rows[-1]["config"],
                wall_seconds=round(time.time() - t0, 1), table=table)
  report_plots.bars_with_seeds(rows, [f"{s}_em_{g_}" for s in ("train", "valid", "test")
                                      for g_ in ("easy", "hard")],
                               os.path.join(out, "summary.png"), chance=1 / 26, ylabel="EM",
                               title="final exact match per split and group (copy task)")
  plots.plot_loss_groups({r["label"]: metrics_lib.read_rows(r["workdir"]) for r in rows},
                         os.path.join(out, "loss_easy_hard.png"))
  print(table)
  print(f"wrote {out}/summary.json, summary.png, loss_easy_hard.png "
        f"({doc['wall_seconds']:.0f} s)")
  return doc
