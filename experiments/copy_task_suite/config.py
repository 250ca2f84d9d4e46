r"""Seed 000's copy-task figures at CPU size: Figure 1 (context length, width) and Table 3
(the paper's ablations).

  python -m el_jax.experiment --config=experiments/copy_task_suite/config.py:table3
  python -m el_jax.experiment --config=experiments/copy_task_suite/config.py:fig1_context
  python -m el_jax.experiment --config=experiments/copy_task_suite/config.py:fig1_width
  python -m el_jax.experiment --config=experiments/copy_task_suite/config.py:cpu --stage=analyze

(10, 10 and 3 seeds; the last writes analysis.json and the figures from the JSON).

Every run is `configs/copy_task.py:cpu` (L_c = 1, L_p = 50, 2-layer GPT-NeoX, 8 strings per
step, 1500 steps) with its overrides, on model seeds 2-11 (the paper's count of 10; the width
stage on 2-4). Each stage is one grid written to results/copy_task_suite/<stage>.json (the runs
train in runs/copy_task_suite/<stage>/; a finished run of any stage or of the demo is read
back, a JSON row reused for the same config and seeds), with each run against the CE run of
the same context / width on hard-test EM (`analysis.comparisons`: one Holm family per stage).
`--stage=analyze` writes analysis.json and the figures fig1.png and table3.png.

* table3: the paper's ablations (E1 with and without warmup at lam 1, 2, 4, 8; V = 500; warmup
  alone) and the demo's three runs. The paper reports easy-test CL at L_c = 5; at L_c = 1 easy
  strings are always solved, so hard-test EM is what separates the runs here.
* fig1_context: k in {1, 2, 4, 8} strings per context (context 55 k), strings per batch fixed
  at 8, for CE and for E1 (lam 1) + 750 warmup steps. Paper Fig. 1a: CE's hard-test accuracy
  falls as k grows.
* fig1_width: width 256 and 512 at k in {1, 8}, CE and E1 + warmup. Paper Fig. 1b: the worst
  wide runs reach 1/26.

Wall time on the 2-core development machine (its CPU not recorded), beside other jobs: Table 3
83 min, the context stage 66 min. Expected: Table 3 E1 + warmup lam 1 0.688 against CE 0.408
and warmup alone 0.415 (hard-test EM); Figure 1 CE 0.408 at k = 1 and 0.05-0.08 from k = 2 on,
E1 + warmup no better there; width 512 (and CE at 256 with k = 8) does not fit its training
strings in 1500 steps.

Variants: `cpu` (the three stages), `table3`, `fig1_context`, `fig1_width` (one each),
`paper` (the same grids at the paper's sizes: Table 3 on configs/copy_task.py:paper, L_c = 5,
L_p = 2000, Figure 1 on :paper_lc1, 4 x 1024, widths 2048 and 4096, warmup half of the 20,000
steps, the variants' seeds 0-9; for an accelerator, not run; into results/copy_task_suite_paper),
`test` (configs/copy_task.py:test, strings of 11 tokens, 8 steps, widths and warmup scaled alike,
seeds 0, 1; two runs of Table 3 and Figure 1's k = 1 runs read back from them: seconds).
"""
import ml_collections

STAGES = ("table3", "fig1_context", "fig1_width")
VARIANTS = ("cpu", "paper", "test", *STAGES)


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/copy_task_suite"  # <stage>.json, fig1.png, table3.png, analysis.json
  c.runs_dir = "runs/copy_task_suite"  # each stage's runs train in <runs_dir>/<stage>/<label>
  c.stages = STAGES  # the grids to run, in order
  c.size = "cpu"  # cpu | test | paper: the copy_task variants, the cpu-size overrides scaled
  c.seeds = ()  # model seeds of every run (empty: the size's, 2-11 and 2-4 for fig1_width at cpu)
  c.labels = ()  # only these runs of each stage (empty: all); needs another results_dir
  c.reuse_from = ("results/demo/*",)  # finished run folders read back besides every stage's
  if variant in STAGES:
    c.stages = (variant,)
  elif variant == "paper":
    c.results_dir = "results/copy_task_suite_paper"
    c.runs_dir = "runs/copy_task_suite_paper"
    c.size = "paper"
    c.reuse_from = ()
  elif variant == "test":
    c.results_dir = "runs/copy_task_suite_test"
    c.runs_dir = "runs/copy_task_suite_test/runs"
    c.stages = ("table3", "fig1_context")
    c.size = "test"
    c.labels = ("CE (no warmup)", "E1 + warmup, lam=1", "CE k=1", "E1+warmup k=1")
    c.reuse_from = ()
  return c
