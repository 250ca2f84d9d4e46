r"""Seed 000, the validation sweep that chose the demo's setting: a CPU-size copy task where the
paper's effect shows, and E1's (and CE's) setting chosen on the validation split.

  python -m el_jax.experiment --config=experiments/copy_task_cpu_sweep/config.py:scan     # 20 runs
  python -m el_jax.experiment --config=experiments/copy_task_cpu_sweep/config.py:scan2    # 8 runs
  python -m el_jax.experiment --config=experiments/copy_task_cpu_sweep/config.py:scan3    # 3 runs
  python -m el_jax.experiment --config=experiments/copy_task_cpu_sweep/config.py:select  # choice

Each stage is one grid of `configs/copy_task.py:cpu` runs (CE, CE + warmup and E1 + warmup at
several lam, warmup lengths and learning rates; scan also at 4 strings per context) on model
seeds 0 and 1, written to results/copy_task_cpu_sweep/<stage>.json (the runs train in
runs/sweep/<stage>/; a finished run is read back, a JSON row reused for an identical config).
Then the choice (`analysis.selection`, `el_jax.report.stats.select_rows`): the E1 run with the
highest mean hard-string EM on the **validation** split at one string per context, and CE's
best setting on the same metric with as many candidates (scan3 gives CE its extra three);
test numbers are never used. It is written to selection.json, which `sweep()` of
configs/copy_task.py (the demo's runs) must match. `cpu` runs the three stages in turn. Wall
time about 1 h per stage of 20 / 8 runs of 2 seeds on the 2-core development machine (its CPU
not recorded). Expected: E1 with lam 1 and 750 warmup steps (validation 0.695), CE with 750 warmup
steps (0.300); at 4 strings per context every run is near chance on hard test strings.

Variants: `cpu` (the three stages), `scan`, `scan2`, `scan3` (one stage each), `select` (no
training: the choice from the stages' JSON), `paper` (the same search on
configs/copy_task.py:paper_lc1, Fig. 1's 4 x 1024 model, 20,000 steps, warmup scaled alike; not
run; into results/copy_task_cpu_sweep_paper), `test` (configs/copy_task.py:test, strings of 11
tokens, 8 steps, two of the losses: seconds, under runs/).
"""
import ml_collections

STAGES = ("scan", "scan2", "scan3")
VARIANTS = ("cpu", "paper", "test", *STAGES, "select")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/copy_task_cpu_sweep"  # <stage>.json, selection.json, analysis.json
  c.runs_dir = "runs/sweep"  # each stage's runs train in <runs_dir>/<stage>/<label>
  c.stages = STAGES  # the grids to run, in order (then the choice is written)
  c.size = "cpu"  # cpu | test | paper: the copy_task variant, and the cpu-size overrides scaled
  c.losses = ()  # only these losses of each stage (empty: all); needs another results_dir
  c.seeds = (0, 1)  # model seeds of every run (the demo measures the choice on others)
  c.select_context = 55  # the choice is made at one string per context: its length in tokens
  if variant in STAGES:
    c.stages = (variant,)
  elif variant == "select":
    c.stages = ()
  elif variant == "paper":
    c.results_dir = "results/copy_task_cpu_sweep_paper"
    c.runs_dir = "runs/sweep_paper"
    c.size = "paper"
  elif variant == "test":
    c.results_dir = "runs/copy_task_cpu_sweep_test"
    c.runs_dir = "runs/copy_task_cpu_sweep_test/runs"
    c.stages = ("scan", "scan2")
    c.size = "test"
    c.losses = ("ce", "e1_lam1_warmup750")
    c.select_context = 11
  return c
