r"""Where committed numbers disagree: every pair of committed grid rows with the same config
and a shared seed, and (with `rerun`) runs made on this machine matched against them.

  python -m el_jax.experiment --config=tools/cross_machine/config.py:cpu
  python -m el_jax.experiment --config=tools/cross_machine/config.py:cpu \
      --config.rerun=/tmp/xm/ce_warmup_s6,/tmp/xm/ce_s2     # plus runs made here

Reads every grid row under results/ (no JAX, no training) and writes
results/cross_machine/cross_machine.json and analysis.json; its section is "Where the numbers
were computed" on docs/results/seed000_equal_learning.md. About a second on a 2-core CPU (AMD
EPYC). The runs of the committed file's `rerun`, each about 40 s on that CPU:

  python -m el_jax.main --config=configs/copy_task.py:cpu --config.optim.warmup_steps=750 \
      --config.seeds=6 --workdir=/tmp/xm/ce_warmup_s6
  python -m el_jax.main --config=configs/copy_task.py:cpu --config.seeds=2 --workdir=/tmp/xm/ce_s2

Expected: 44 pairs, 25 identical bit for bit, the largest difference 0.094 (a validation EM);
the demo's rows reproduced bit for bit on an AMD EPYC with AVX-512, the scale trend's not.

Variants: `cpu` and `paper` (the same: it reads JSON), `test` (the same reading, written under
runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/cross_machine"  # cross_machine.json and analysis.json
  c.rerun = ""  # comma-separated workdirs of el_jax.main runs made on this machine
  c.min_diff = 1e-4  # the page's table of differing pairs: largest difference at least this
  if variant == "test":
    c.results_dir = "runs/cross_machine_test"
  return c
