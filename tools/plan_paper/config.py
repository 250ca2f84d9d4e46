r"""The plan of every paper-size run: `el_jax.tools.plan` for each `paper` variant.

  python -m el_jax.experiment --config=tools/plan_paper/config.py:cpu
  python -m el_jax.experiment --config=tools/plan_paper/config.py:cpu --config.mfu=0.2

For every configs/*.py variant named `paper` or `paper_*` (`el_jax.tools.plan.paper_variants`)
compiles the train step at the config's own batch on `num_devices` forced CPU devices from
abstract inputs (no data, nothing allocated) and writes results/plan_paper/plan.json (every
number of `el_jax.tools.plan.plan`, per variant), plan.md (the table) and analysis.json; its
section is "Paper-size runs: the plan" on docs/results/speed.md. The chips' peaks and their
sources are `el_jax.tools.plan.CHIPS`. A few minutes on a 2-core CPU (compiling every paper
variant on 8 forced CPU devices; the machine was not recorded). Expected: the PCFG MLM the
largest, about 3.4 H100-hours at MFU 0.4.

The forced devices take effect only if JAX's backend has not started in the process (a
one-line error says so otherwise).

Variants: `cpu` and `paper` (the same: a plan for accelerators, made on a CPU), `test`
(configs/copy_task.py:test on one device, 1 row per step, seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/plan_paper"  # plan.json, plan.md, analysis.json
  c.num_devices = 8  # forced CPU devices the step is compiled for (the chips of the plan)
  c.mfu = 0.4  # the fraction of a chip's peak the hours assume
  c.only = ""  # comma-separated name:variant of configs/ (default: every paper variant)
  c.rows = 0  # rows per step (0: each config's own batch)
  if variant == "test":
    c.results_dir = "runs/plan_paper_test"
    c.num_devices = 1
    c.only = "copy_task:test"
    c.rows = 1
  return c
