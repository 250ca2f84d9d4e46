"""The grid: one run per instance (`config.instances`, variants of configs/ntp_linear.py).

Each run goes through `runner.run_or_reuse`, i.e. the same `train_and_evaluate` as the CLI
(`el_jax.run.ntp_train`), in its own folder under `config.results_dir` (metrics.jsonl,
summary.json, the PNGs of Fig. 1, the optimizer comparison and the regularisation path); the
final numbers go to convergence.json in the grid's row schema, one row per instance (labelled
by its variant). A row whose config is the run's is reused without training. In a row,
`seeds` is the instance draw (config.seed), `per_seed` holds each optimizer's final
`<optimizer>_<metric>` (metric one of `el_jax.core.ntp.dynamics.METRICS`), and `instance`,
`runs` and `reg_path` are the run's summary.json fields as they are.
"""
import os

from el_jax.core.ntp import dynamics
from el_jax.run import grid as grid_lib

CONFIG = "ntp_linear"
COMMAND = "python -m el_jax.experiment --config=experiments/ntp_convergence/config.py"


def summarize(cfg, summary):
  """The grid row's seeds, per-seed finals and extra fields of one ntp_linear summary."""
  finals = {f"{opt}_{k}": float(r[k]) for opt, r in summary["runs"].items()
            for k in dynamics.METRICS}
  fields = {k: summary.get(k) for k in ("instance", "runs", "reg_path")}
  return [int(cfg.seed)], [finals], fields


def make_grid(config):
  """One run per instance, trained in `<results_dir>/<variant>`, written to
  `<results_dir>/convergence.json` (its rows reused when their config is the run's)."""
  out = config.results_dir
  g = grid_lib.Grid(os.path.join(out, "convergence.json"), runs_dir=out)
  for v in config.instances:
    g.add(v, CONFIG, v, fit_devices=False, summarize=summarize)
  return g


def run(config):
  g = make_grid(config)
  g.run()
  return g.write(command=COMMAND)
