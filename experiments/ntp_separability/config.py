r"""Seed 003, Lemma 1 (d > m suffices for NTP-separability and NTP_H-compatibility): the
fraction of random instances that are separable / compatible, by |S_j| and d / m.

  python -m el_jax.experiment --config=experiments/ntp_separability/config.py:cpu

For every support size |S_j| and ratio d / m, `trials` random instances (Gaussian context
embeddings, random supports; `el_jax.core.ntp.data.random_instance`, draw t of support s has
seed 1000 s + t) are tested for compatibility and separability (`el_jax.core.ntp.geometry`,
each decided with a certificate). Writes results/ntp_separability/ (separability.json, one row
per cell; analysis.json; separability.png). About 25 s on a 2-core CPU (the committed run's
`seconds`; that file does not record which of the development machines' CPUs). Expected: at
|S_j| = 1 / 3 / 6 every draw is separable from d / m = 0.4 / 0.75 / 1, every draw compatible
and separable above d = m.

Variants: `cpu` and `paper` (the sweep of the page; it is small, and the paper runs none),
`test` (m = 6, two supports, three ratios, two draws: a second, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/ntp_separability"  # separability.json, analysis.json, the figure
  c.m = 20  # contexts per instance
  c.V = 10  # vocabulary size
  c.supports = (1, 3, 6)  # |S_j|: next tokens with positive probability per context
  c.ratios = (0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0, 1.05, 1.25, 1.5, 2.0)  # d / m
  c.trials = 20  # random instances per (|S_j|, d / m) cell
  if variant == "test":
    c.results_dir = "runs/ntp_separability_test"
    c.m = 6
    c.V = 4
    c.supports = (1, 3)
    c.ratios = (0.5, 1.0, 2.0)
    c.trials = 2
  return c
