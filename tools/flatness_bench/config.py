r"""The flatness estimators' cost: the analysis and speed-page section of what
`python -m el_jax.tools.flatness_bench` measured (the command is el_jax's own).

  python -m el_jax.tools.flatness_bench --config=configs/copy_task.py:cpu [--probes=8,32] \
      2>&1 | tee results/flatness_bench/bench.log
  python -m el_jax.experiment --config=tools/flatness_bench/config.py:cpu --stage=analyze

The bench times each estimator (a Hutchinson probe alone and in batches, per layer, a Fisher
draw) as a multiple of one gradient timed in the same rounds, at the training batch and at 8x
it, and prints the figures as its last JSON line; about 10 minutes on a shared 2-core CPU (the
machine was not recorded). The analysis (seconds) reads that line and decides the issue's
targets: a probe in a batch of 8 <= `probe_target` gradients, a Fisher draw <= `fisher_target`.
Its section is "Flatness estimators' cost" on docs/results/speed.md. Expected: the Fisher target
met at both batches, the probe target missed at the training batch (1.87x).

Variants: `cpu` and `paper` (the committed log), `test` (a folder under runs/ a test fills).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/flatness_bench"  # bench.log (the bench's output), analysis.json
  c.log = "bench.log"  # the bench's output; its last JSON line holds the figures
  c.probe_target = 1.5  # a probe in a batch of 8, in gradients (the target)
  c.fisher_target = 1.3  # one Fisher draw, in gradients (the target)
  if variant == "test":
    c.results_dir = "runs/flatness_bench_test"
  return c
