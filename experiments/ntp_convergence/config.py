r"""Seed 003, Figure 1 and the appendix instance: GD, NGD and Adam converge in direction to the
NTP-SVM, and the projection onto the data subspace to the log-odds solution.

  python -m el_jax.experiment --config=experiments/ntp_convergence/config.py:cpu

Trains `configs/ntp_linear.py:fig1` and `:appendix` (one run each: an instance is one random
draw, training starts from W = 0 and is deterministic) and writes results/ntp_convergence/
(convergence.json, each run's folder with its PNGs, analysis.json). About 10 s on a 2-core
CPU (AMD EPYC). Expected: Fig. 1 CE - H 7e-4, cos(W_k, W_mm) 0.996, ||P_F(W_k) - W*|| 0.014;
the appendix instance's cos 0.911 / 0.945 / 0.930 for GD / NGD / Adam.

Variants: `cpu` and `paper` (the paper's sizes run on a CPU: the same), `test` (the Fig. 1
instance at 2,000 steps, seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/ntp_convergence"  # convergence.json, analysis.json, each run's folder
  c.instances = ("fig1", "appendix")  # variants of configs/ntp_linear.py, one run each
  if variant == "test":
    c.results_dir = "runs/ntp_convergence_test"
    c.instances = ("test",)
  return c
