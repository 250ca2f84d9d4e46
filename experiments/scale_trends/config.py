r"""Seed 000, scale trends: where does the paper's effect appear?

  python -m el_jax.experiment --config=experiments/scale_trends/config.py:copy_task

For a task where E1 + warmup's gain over cross-entropy does not show at CPU size, the paper's
comparison (CE, CE + warmup, E1 + warmup) is measured at three points along the axis that
matters most for that task, each method's setting chosen on the validation split at that point
(`el_jax.report.stats.select`), and tested on other seeds (run.py's `design` holds each task's
points, candidates and seeds):

  copy_task          context length: 1, 2, 4 strings per context (`configs/copy_task.py:cpu`)
  path_star          model size: 2 x 128, 3 x 192, 4 x 256 on G(2,3) (`configs/path_star.py:cpu`)
  path_star_budget   training budget at 2 x 128: 2500, 10,000, 40,000 steps of 32 graphs
  label_copy         pretraining of the small GPT-2: 200, 800, 3200 steps, one model a point
  label_copy_models  the same axis, six small GPT-2s a point (seed s fine-tunes model s)

Each task's tuning runs go to `<results_dir>/<task>_tune.json`, its test runs and the choice
to `<task>.json`; runs train in runs/scale_trends/<task>/{tune,test,pretrain}/ and resume after
a kill. The analysis (every comparison, Holm family, paired test, the trend test PREREGISTERED
below) covers every task whose JSON is there. Wall times on the 2-core development machines,
two tasks side by side: copy_task 74 min (its second run's 6 added tuning runs and 9 test runs
101 min on an Intel Xeon Cascade Lake); path_star's test runs 51 min in two one-core processes
on an AMD EPYC Zen 5 (its tuning about 1.5 h on an earlier machine, unrecorded);
path_star_budget about 2.5 h (its 2500-step point's tuning runs and CE's test seeds on the
Cascade Lake, the rest on the Zen 5); label_copy_models' 200- and 800-step points 70 min on the
Zen 5, its 3200-step point about 2.5 h on an AMD EPYC Zen 4 (six pretrainings of 43-48 min).
Expected: E1 + warmup - CE +0.460 / -0.001 / -0.007 on the copy task (a falling trend),
path-star within 0.01 of 0 at every size and budget (E1 + warmup at 1/d), label copy within
0.02 at every point (CE does not fail).

Variants:
  cpu                all five tasks, in order (each one's variant below).
  copy_task, path_star, path_star_budget, label_copy, label_copy_models: one task each.
  paper              the seed paper has no scale-trend experiment (this is our question of it):
                     `cpu`, the points run here.
  test               the copy task's first point at test size (`configs/copy_task.py:test`):
                     seconds, under runs/.
Fields beside the task: `train=False` writes each JSON from the runs that finished, training
nothing; `tune_only=True` trains only the tuning runs; `points` runs only the named points
(give a `results_dir` of its own: the JSON then holds only them).
"""
import ml_collections

TASKS = ("copy_task", "path_star", "path_star_budget", "label_copy", "label_copy_models")
VARIANTS = ("cpu", *TASKS, "paper", "test")
METHODS = ("ce", "ce_warmup", "e1_warmup")
METHOD_NAMES = {"ce": "CE", "ce_warmup": "CE + warmup", "e1_warmup": "E1 + warmup"}
# The comparisons at every point (treatment, baseline). The paper's comparison, E1 + warmup
# against CE, is the primary family (one test per point, Holm over the points); the two
# controls are the secondary family (Holm over their tests at every point).
PRIMARY = (("e1_warmup", "ce"),)
SECONDARY = (("e1_warmup", "ce_warmup"), ("ce_warmup", "ce"))
PAIRS = PRIMARY + SECONDARY
FAMILIES = (("primary", PRIMARY), ("secondary", SECONDARY))
# The trend test, fixed before the runs that test it (the first points were run before it, so
# reading a trend off them is post hoc). One number per task: the least-squares slope of
# mean(E1 + warmup) - mean(CE) on the test metric against log2 of the scale axis, with a 95%
# percentile bootstrap interval resampling each arm's test seeds at each point
# (el_jax.report.stats.trend_slope). A trend is claimed only where the interval excludes 0 and
# the design holds: >= 3 points, >= 5 test seeds per arm and point, and every arm given the
# same number of tuning candidates. A task's JSON records whether its test runs came after it
# (`fixed_before_test_runs`).
PREREGISTERED = {"statistic": "slope of mean(e1_warmup) - mean(ce) against log2(x)",
                 "interval": "95% percentile bootstrap over each arm's test seeds per point",
                 "claim": "the interval excludes 0", "min_points": 3,
                 "min_test_seeds": 5, "equal_tuning_budgets": True}


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/scale_trends"  # <task>.json, <task>_tune.json, the figures, analysis.json
  c.runs_dir = "runs/scale_trends"  # run folders: <runs_dir>/<task>/{tune,test,pretrain}/
  c.tasks = TASKS  # the tasks run, in order (each its own design: run.design)
  c.size = "cpu"  # "cpu": the committed designs; "test": the same designs at test size (seconds)
  c.points = ()  # only these scale points (e.g. "k=1"; () = all)
  c.train = True  # False: write each JSON from the runs that finished, training nothing
  c.tune_only = False  # True: only the tuning runs (no choice, no test runs)
  if variant in TASKS:
    c.tasks = (variant,)
  elif variant == "test":
    c.results_dir = "runs/scale_trends_test"
    c.runs_dir = "runs/scale_trends_test/runs"
    c.tasks = ("copy_task",)
    c.size = "test"
    c.points = ("k=1",)
  return c
