r"""Seed 002's question asked of seed 000's copy task: does equal learning land in flatter
solutions? Tr(H), Tr(F) and the top Hessian eigenvalue along the demo's CE and E1 + warmup runs.

  python -m el_jax.experiment --config=experiments/flatness_copy_task/config.py:cpu

Trains the CE and E1 + warmup runs of `make demo` (the `sweep()` of configs/copy_task.py) on
`configs/copy_task.py:<variant>` as one `el_jax.run.grid.Grid` (a run per loss in
`<runs_dir>/<label>`, resumable), and the training loop measures every `every` steps, on the
same fixed training batches, the Hessian trace (Hutchinson), the Fisher trace (labels sampled
from the model) and the top Hessian eigenvalue of the *mean cross-entropy* on the scored answer
tokens, so both runs are measured on the same objective whatever they were trained with.
Writes results/flatness_copy_task/ (copy_task.json: every measurement, a summary per loss and
seed, the grid's rows; copy_task.png; analysis.json). About 4.5 min on a 2-core CPU for the
committed run (docs/flatness.md; copy_task.json does not record which of the development
machines' CPUs), `seeds_0_1` about twice that. Expected: after both fit the training
set, E1 + warmup's Tr(H) stays near 1,400 while CE's falls to about 3 (not at equal loss: CE
saturates), with E1 + warmup better on hard test strings.

Variants: `cpu` (the committed run: model seed 2, measured every 150 steps, 5 Lanczos steps),
`seeds_0_1` (model seeds 0 and 1, every 100 steps, 10 Lanczos steps; under runs/), `paper`
(configs/copy_task.py:paper, 20,000 steps measured every 1,000: for an accelerator, not run;
its results replace the page's), `test` (configs/copy_task.py:test, 8 steps, seeds 0 and 1, one
measurement: seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test", "seeds_0_1")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/flatness_copy_task"  # copy_task.json, copy_task.png, analysis.json
  c.runs_dir = "runs/flatness_copy_task"  # a run folder per loss (checkpoints, metrics.jsonl)
  c.variant = "cpu"  # of configs/copy_task.py
  c.seeds = (2,)  # model seeds
  c.steps = 1500  # training steps (train.num_steps)
  c.every = 150  # steps between measurements (flatness.every)
  c.probes = 8  # Hutchinson probes per batch (flatness.num_probes)
  c.batches = 8  # fixed training batches measured on (flatness.num_batches)
  c.fisher_samples = 4  # sampled labels per input for Tr(F) (flatness.fisher_samples)
  c.lanczos_steps = 5  # Lanczos steps for the top eigenvalue (flatness.lanczos_steps)
  if variant == "seeds_0_1":
    c.results_dir = "runs/flatness_copy_task_seeds_0_1/results"
    c.runs_dir = "runs/flatness_copy_task_seeds_0_1"
    c.seeds = (0, 1)
    c.every = 100
    c.lanczos_steps = 10
  elif variant == "paper":
    c.runs_dir = "runs/flatness_copy_task_paper"
    c.variant = "paper"
    c.seeds = (0, 1, 2)
    c.steps = 20_000
    c.every = 1000
  elif variant == "test":
    c.results_dir = "runs/flatness_copy_task_test/results"
    c.runs_dir = "runs/flatness_copy_task_test"
    c.variant = "test"
    c.seeds = (0, 1)
    c.steps = 8
    c.every = 8
    c.probes = 2
    c.batches = 2
    c.fisher_samples = 2
    c.lanczos_steps = 3
  return c
