r"""Seed 000, the copy task at CPU size (`make demo`, the main job): CE, CE + warmup and
E1 + warmup on one fixed dataset, 10 model seeds each.

  python -m el_jax.experiment --config=experiments/demo/config.py:cpu [--config.seeds=2,3,4]

Trains each run of `sweep()` in configs/copy_task.py (CE; CE + warmup, the warmup-only
control; E1 + warmup, the setting chosen on the validation split by
experiments/copy_task_cpu_sweep/) on `configs/copy_task.py:<config_variant>`, every run on the
same fixed dataset with the variant's model seeds (2-11 at cpu); prints the table run x split x
group x (EM, CL) as mean (min, max) over seeds and each run against CE on hard test strings
(difference, bootstrap 95% interval, permutation p, Holm over the family), and writes
results/demo/ (summary.json, summary.png, loss_easy_hard.png, analysis.json; each run's folder,
not committed); at cpu it then regenerates the pages (`--stage=run` only trains). A killed run
resumes from its checkpoints; finished runs are read back. Wall time: the 30 trainings 490 s on
a 2-core Intel Xeon, up to 650 s on other 2-core machines (8-11 min with the install).
Expected: every run fits every training string; hard-test EM E1 + warmup 0.688 against CE
0.408 (p at the floor of 10 vs 10 seeds) and CE + warmup 0.415 (no gain from warmup alone); on
another CPU the per-seed numbers move by a few hundredths (0.694 / 0.407 / 0.407), the
conclusions not.

Variants: `cpu` (`make demo`), `paper` (the same three runs on configs/copy_task.py:paper,
L_c = 5, L_p = 2000, 4 x 1024, seeds 0-9, for an accelerator; not run; into results/demo_paper,
so that the CPU-size page is not overwritten), `test` (configs/copy_task.py:test, its one seed:
seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/demo"  # summary.json, the figures, analysis.json, each run's folder
  c.config_variant = "cpu"  # the variant of configs/copy_task.py every run trains
  c.seeds = ()  # model seeds (empty: the config variant's, 2-11 at cpu)
  c.runs = ()  # labels of the runs to train, e.g. "'ce','e1_warmup'" (empty: all of sweep())
  c.reuse_from = ()  # glob patterns of finished run folders to read back instead of training
  if variant == "paper":
    c.results_dir = "results/demo_paper"
    c.config_variant = "paper"
  elif variant == "test":
    c.results_dir = "runs/demo_test"
    c.config_variant = "test"
  return c
