r"""The main job (`make demo`): the copy task's equal-learning comparison, several seeds.

  python -m el_jax.tools.demo --workdir=results/demo [--variant=cpu] [--seeds=2,3,4]

Trains each run of `sweep()` in configs/copy_task.py (CE, CE + warmup, and
the E-loss + warmup setting chosen on the validation split) on
`configs/copy_task.py:<variant>` (every run on the same fixed dataset, with
the variant's model seeds unless `--seeds` is given) through `el_jax.run.runner`,
then writes `<workdir>/summary.json`, the figures `<workdir>/summary.png` and
`<workdir>/loss_easy_hard.png`, and prints the table
loss x split x group x (EM, CL) as mean (min, max) over seeds, and each run
against CE on hard test strings with a permutation-test p-value.
Runs resume from their checkpoints if interrupted; finished runs are reused.
"""
import os
import sys
import time

from absl import flags

from el_jax.run import cli
from el_jax.run import grid as grid_lib
from el_jax.infra import metrics as metrics_lib
from el_jax.infra import plots
from el_jax.report import plots as report_plots
from el_jax.run import runner

# Headline comparisons (treatment, baseline) on this metric, with a permutation-test p-value.
COMPARE_METRIC = "test_em_hard"
# CE's setting chosen on validation with as many candidates as E1's (issue 24: the same tuning
# budget; `ce_chosen_run` "ce_warmup750" of results/copy_task_cpu_sweep/selection.json): the
# demo's "ce_warmup" run. E1 + warmup is also compared with it, in the same Holm family.
TUNED_CE = "ce_warmup"
CONFIG = "copy_task"


def demo_runs():
  """{label: config overrides}: the runs of `sweep()` in configs/copy_task.py."""
  return grid_lib.sweep_runs(CONFIG)


def _define(fv):
  flags.DEFINE_string("workdir", "results/demo", "output directory", flag_values=fv)
  flags.DEFINE_string("variant", "cpu", "variant of configs/copy_task.py", flag_values=fv)
  flags.DEFINE_list("seeds", None, "model seeds (default: the variant's config.seeds)",
                    flag_values=fv)
  flags.DEFINE_list("runs", None, "labels of the runs to train (default: all of sweep())",
                    flag_values=fv)
  flags.DEFINE_list("reuse_from", [], "glob patterns of finished run folders to read back "
                    "instead of training the same run again (e.g. runs/copy_task_suite/*/*)",
                    flag_values=fv)


def make_grid(variant="cpu", workdir="results/demo", seeds=None, reuse_from=()):
  """The demo's grid: every run of `demo_runs()` in `<workdir>/<label>`, written to
  `<workdir>/summary.json`. Its runs always train (or resume) in their folders, or are read
  back from `reuse_from`: the committed summary.json is never taken as a result."""
  g = grid_lib.Grid(os.path.join(workdir, "summary.json"), runs_dir=workdir,
                    reuse_from=reuse_from, reuse_rows=False)
  for label, overrides in demo_runs().items():
    g.add(label, CONFIG, variant, overrides, seeds=seeds)
  return g


def run(variant="cpu", workdir="results/demo", seeds=None, labels=None, reuse_from=()):
  """Trains the demo runs; writes summary.json and figures; returns its content.

  `reuse_from`: folders of finished runs to read back instead of training, when
  one trained exactly a demo run (see `el_jax.run.runner.run_or_reuse`).
  """
  g = make_grid(variant, workdir, seeds, reuse_from)
  t0 = time.time()
  rows = g.run(labels)
  os.makedirs(workdir, exist_ok=True)  # every run may have been read back from elsewhere
  if "ce" in g.rows:
    pairs = [(r["label"], "ce") for r in rows if r["label"] != "ce"]
    if "e1_warmup" in g.rows and TUNED_CE in g.rows:
      pairs.append(("e1_warmup", TUNED_CE))
    g.compare(pairs, COMPARE_METRIC)
  table = format_table(rows) + "\n" + grid_lib.format_comparisons(
      g.comparisons.get(COMPARE_METRIC, []))
  out = g.write(variant=variant, seeds=rows[-1]["seeds"], config=rows[-1]["config"],
                wall_seconds=round(time.time() - t0, 1), table=table)
  report_plots.bars_with_seeds(rows, [f"{s}_em_{g_}" for s in ("train", "valid", "test")
                               for g_ in ("easy", "hard")],
                        os.path.join(workdir, "summary.png"), chance=1 / 26, ylabel="EM",
                        title="final exact match per split and group (copy task)")
  plots.plot_loss_groups({r["label"]: metrics_lib.read_rows(r["workdir"]) for r in rows},
                         os.path.join(workdir, "loss_easy_hard.png"))
  return out


def format_table(rows):
  """Rows: run x split x group; columns EM and CL as mean (min, max) over seeds."""
  lines = [f"{'loss':12s} {'split':5s} {'group':5s}  {'EM mean (min, max)':24s}  CL mean (min, max)"]
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


@cli.guard
def main(argv=None):
  fv = flags.FlagValues()
  _define(fv)
  cli.parse_plain_flags(fv, sys.argv if argv is None else argv, doc=__doc__)
  seeds = None
  if fv.seeds:
    try:
      seeds = [int(s) for s in fv.seeds]
    except ValueError:
      raise cli.UsageError(f"error: --seeds={','.join(fv.seeds)} must be integers, "
                           f"e.g. --seeds=2,3,4") from None
  cli.log_devices()
  out = run(fv.variant, fv.workdir, seeds, fv.runs, runner.run_dirs(*fv.reuse_from))
  print(out["table"])
  print(f"wrote {fv.workdir}/summary.json, summary.png, loss_easy_hard.png "
        f"({out['wall_seconds']:.0f} s)")
  return out


if __name__ == "__main__":
  main()
