r"""The main job (`make demo`): the copy task's equal-learning comparison, several seeds.

  python -m el_jax.demo --workdir=results/demo [--variant=cpu] [--seeds=2,3,4]

Trains each run of `sweep()` in configs/copy_task.py (CE, CE + warmup, and
the E-loss + warmup setting chosen on the validation split) on
`configs/copy_task.py:<variant>` (every run on the same fixed dataset, with
the variant's model seeds unless `--seeds` is given) through `el_jax.runner`,
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

from el_jax import cli
from el_jax import workdir as wd

# Headline comparisons (treatment, baseline) on this metric, with a permutation-test p-value.
COMPARE_METRIC = "test_em_hard"


def demo_runs():
  """{label: config overrides}: the runs of `sweep()` in configs/copy_task.py."""
  from el_jax import runner
  runs = {}
  runner.load_config_module("copy_task").sweep(
      lambda **overrides: runs.setdefault(run_label(overrides), overrides))
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
  flags.DEFINE_list("reuse_from", [], "glob patterns of finished run folders to read back "
                    "instead of training the same run again (e.g. runs/copy_task_suite/*/*)",
                    flag_values=fv)


def make_config(variant, overrides, seeds=None):
  """The variant's config with `overrides`, on as many devices as split a batch evenly."""
  from el_jax import runner
  cfg = runner.get_config("copy_task", variant, overrides)
  if seeds is not None:
    cfg.seeds = tuple(seeds)
  return runner.fit_devices(cfg)


def comparisons(summaries, metric=COMPARE_METRIC):
  """{"<run> vs ce": runner.compare(per-seed metric)} for every run other than CE."""
  from el_jax import runner
  if "ce" not in summaries:
    return {}
  base = [f[metric] for f in summaries["ce"]["per_seed"]]
  return {f"{label} vs ce": {"metric": metric,
                             **runner.compare([f[metric] for f in s["per_seed"]], base)}
          for label, s in summaries.items() if label != "ce"}


def run(variant="cpu", workdir="results/demo", seeds=None, labels=None, reuse_from=()):
  """Trains the demo runs; writes summary.json and figures; returns the summary dict.

  `reuse_from`: folders of finished runs to read back instead of training, when
  one trained exactly a demo run (see `el_jax.runner.run_or_reuse`).
  """
  from el_jax import plots, runner
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
    run_dir = os.path.join(workdir, label)
    print(f"== {label}: {runs[label]}, seeds {tuple(cfg.seeds)} -> {run_dir}", file=sys.stderr,
          flush=True)
    summaries[label] = runner.run_or_reuse(cfg, run_dir, reuse_from=reuse_from)
    source, _ = runner.find_finished(cfg, (run_dir, *reuse_from))  # where its metrics are
    rows[label] = runner.read_metrics(source)
  os.makedirs(workdir, exist_ok=True)  # every run may have been read back from elsewhere
  table = format_table(summaries)
  comps = comparisons(summaries)
  table += "\n" + format_comparisons(comps)
  out = {
      "variant": variant,
      "config": runner.config_dict(cfg),
      "runs": {k: runs[k] for k in labels},
      "seeds": list(cfg.seeds),
      "wall_seconds": round(time.time() - t0, 1),
      "aggregate": {k: s["aggregate"] for k, s in summaries.items()},
      "per_seed": {k: s["per_seed"] for k, s in summaries.items()},
      "comparisons": comps,
      "table": table,
  }
  wd.write_json(os.path.join(workdir, "summary.json"), out)
  plots.plot_summary(summaries, os.path.join(workdir, "summary.png"))
  plots.plot_loss_groups(rows, os.path.join(workdir, "loss_easy_hard.png"))
  return out


def format_table(summaries):
  """Rows: run x split x group; columns EM and CL as mean (min, max) over seeds."""
  lines = [f"{'loss':12s} {'split':5s} {'group':5s}  {'EM mean (min, max)':24s}  CL mean (min, max)"]
  for label, summ in summaries.items():
    agg = summ["aggregate"]
    for split in ("train", "valid", "test"):
      for group in ("easy", "hard"):
        cells = []
        for metric in ("em", "cl"):
          a = agg[f"{split}_{metric}_{group}"]
          cells.append(f"{a['mean']:.3f} ({a['min']:.3f}, {a['max']:.3f})")
        lines.append(f"{label:12s} {split:5s} {group:5s}  {cells[0]:24s}  {cells[1]}")
  return "\n".join(lines)


def format_comparisons(comps):
  lines = []
  for name, c in comps.items():
    lines.append(f"{name:18s} {c['metric']}: {c['mean_a']:.3f} vs {c['mean_b']:.3f}, difference "
                 f"{c['diff']:+.3f} (bootstrap 95% [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]), "
                 f"permutation p = {c['p_value']:.2g} ({c['n_a']} vs {c['n_b']} seeds)")
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
  from el_jax import runner
  out = run(fv.variant, fv.workdir, seeds, fv.runs, runner.run_dirs(*fv.reuse_from))
  print(out["table"])
  print(f"wrote {fv.workdir}/summary.json, summary.png, loss_easy_hard.png "
        f"({out['wall_seconds']:.0f} s)")
  return out


if __name__ == "__main__":
  main()
