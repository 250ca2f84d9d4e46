"""One run of configs/ntp_linear.py:test per instance draw, as one grid."""
import os

from el_jax.run import grid as grid_lib


def _summarize(cfg, summary):
  return [int(cfg.seed)], [{"cos_mm": float(summary["runs"]["gd"]["cos_mm"])}], {}


def run(config):
  g = grid_lib.Grid(os.path.join(config.results_dir, "grid.json"), runs_dir=config.runs_dir)
  for draw in config.draws:
    g.add(f"draw {draw}", "ntp_linear", "test", {"seed": draw}, fit_devices=False,
          summarize=_summarize)
  g.run(verbose=False)
  return g.write()
