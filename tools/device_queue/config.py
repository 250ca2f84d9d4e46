r"""The device queue: seed 000's paper-size jobs (tools/device_queue/jobs.py: the copy task's
Fig. 1 at k = 1, path-star Table 1's G(2,3) and G(5,3)), a few seeds per lent session.

On a lent accelerator (docs/accelerator.md), one call, then here:

  python -m tools.device_queue session --out=$OUT --budget_s=540      # verify, then the queue
  python -m tools.device_queue collect <returned *.json>               # merge the seeds
  python -m el_jax.experiment --config=tools/device_queue/config.py:cpu --stage=analyze

On an accelerator of your own (trains the missing seeds of the queue within `budget_s`,
collects them into results/device_queue/, analyses and renders the pages):

  python -m el_jax.experiment --config=tools/device_queue/config.py:paper

The analysis (seconds, on any CPU) gives per job and arm the per-seed metric, its mean (min,
max) and sd, the devices, and each arm against the baseline once both have 3 seeds
(`el_jax.report.stats.family`: difference, permutation p with its floor, bootstrap interval,
Holm over the job); each job's dtype and why; each recorded call's timeline against its
prediction; and the prediction of every job's call from each device kind's verify sessions
(tools/device_queue/sizing.py). Its section is "Paper-size jobs (the device queue)" on
docs/results/accelerator.md. Wall time on an H200: 84-100 s per copy-task seed alone and about
90 s per seed stacked 3 at a time (measured); path-star G(2,3): one run at the reference's
budget per call of 9 minutes, 10 runs about 26 minutes (predicted, not yet checked). Expected
(copy_lc1, 5 vs 5 models): E1 + warmup above CE on the hard test strings in every model, p at
the design's floor 0.0079.

Variants: `paper` and `cpu` (the jobs as listed, results/device_queue/; `cpu` analyses what the
accelerators returned), `test` (the copy task and path-star G(2,3) jobs on the `test` configs, 3
seeds per arm, each job one stacked program of 6 runs: about half a minute per job on a 2-core
CPU, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/device_queue"  # <job>.json (the collected seeds), analysis.json
  c.size = "paper"  # "paper": the jobs' configs; "test": their `test` variants
  c.jobs = ""  # comma-separated subset of the jobs (default: all, in priority order)
  c.budget_s = 420.0  # seconds `run` may spend (its calls sized by tools/device_queue/sizing.py)
  c.max_seeds = 0  # seeds per arm at most in one call (0: every missing seed that fits)
  c.verify_dir = "results/verify"  # verify's sessions: the measured rates of each device kind
  c.plan_file = "results/plan_paper/plan.json"  # FLOPs of the jobs verify did not time
  if variant == "test":
    c.results_dir = "runs/device_queue_test"
    c.size = "test"
    c.jobs = "copy_lc1,path_star_g23"
    c.budget_s = 600.0
    c.max_seeds = 3
  return c
