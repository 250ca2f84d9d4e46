r"""Two real training steps of every paper-size run on this CPU.

  python -m el_jax.experiment --config=tools/paper_two_steps/config.py:cpu
  python -m el_jax.experiment --config=tools/paper_two_steps/config.py:cpu \
      --config.only=copy_task:paper,path_star:paper --config.rows=2

Shows that each `paper` variant (`el_jax.tools.plan.paper_variants`) runs end to end outside the
plan's abstract shapes: its real data pipeline at its full configuration (the data are built, or
read from their cache, by `el_jax.run.setup.Setup` exactly as a launch would), the model
initialised, the jitted step compiled and run for 2 steps on real batches of `rows` rows, one
CPU device, nothing evaluated or checkpointed. Each variant runs in a process of its own with a
timeout; one that cannot run here is recorded as "not run: <why>". Writes
results/paper_two_steps/two_steps.json, two_steps.md and analysis.json; its section is
"Paper-size runs: two real steps" on docs/results/speed.md. About 5 minutes on a 2-core CPU (the
machine was not recorded). Expected: every variant "ran", with finite losses and norms.

Variants: `cpu` and `paper` (the same: the paper's configurations, two steps on a CPU), `test`
(configs/copy_task.py:test and configs/path_star.py:test, seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/paper_two_steps"  # two_steps.json, two_steps.md, analysis.json
  c.only = ""  # comma-separated name:variant of configs/ (default: every paper variant)
  c.rows = 2  # rows per step (the paper's batch is larger)
  c.timeout_s = 900  # seconds per variant, its data included
  c.fresh_cache = True  # build each variant's data from scratch (an empty EL_JAX_CACHE)
  if variant == "test":
    c.results_dir = "runs/paper_two_steps_test"
    c.only = "copy_task:test,path_star:test"
    c.timeout_s = 600
  return c
