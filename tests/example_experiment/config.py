r"""An example experiment: does the instance draw change how fast GD aligns with the NTP-SVM?

  python -m el_jax.experiment --config=experiments/example/config.py:test

Trains configs/ntp_linear.py:test (the Fig. 1 instance size, 2,000 GD steps) on a few instance
draws and compares cos(W_k, W_mm) across them. Seconds on any CPU.
"""
import ml_collections

VARIANTS = ("test", "cpu", "paper")


def get_config(variant="test"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/example"  # rows (grid.json) and analysis.json
  c.runs_dir = "runs/example"  # each draw's run folder
  c.draws = (14, 15)  # instance draws (configs/ntp_linear.py's seed), one run each
  return c
