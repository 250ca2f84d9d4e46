r"""The NTP-SVM's solve time: the analysis and speed-page section of what
`python -m el_jax.tools.ntp_bench` measured (the command is el_jax's own).

  python -m el_jax.tools.ntp_bench [--repeats=5] [--max_dual=3000] [--max_time=1800] \
      2>&1 | tee results/ntp_bench/bench.txt
  python -m el_jax.experiment --config=tools/ntp_bench/config.py:cpu --stage=analyze

The bench solves the appendix instance (m = 50, d = 60, V = 10, |S_j| = 6) and a scaling grid
(Clarabel up to 3000 dual variables, the coefficient-space first-order solver above, the
earlier first-order solver on the same instances) and prints the figures as its last JSON
line; about 20 minutes on a shared 2-core CPU (the machine was not recorded). The analysis
(seconds) reads that line and decides the target: the appendix instance in <= `target_s`
seconds. Its section is "NTP-SVM solve time" on docs/results/speed.md. Expected: 0.19 s, met.

Variants: `cpu` and `paper` (the committed output), `test` (a folder under runs/ a test fills).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/ntp_bench"  # bench.txt (the bench's output), analysis.json
  c.log = "bench.txt"  # the bench's output; its last JSON line holds the figures
  c.target_s = 0.5  # seconds for the appendix instance's NTP-SVM (the target)
  if variant == "test":
    c.results_dir = "runs/ntp_bench_test"
  return c
