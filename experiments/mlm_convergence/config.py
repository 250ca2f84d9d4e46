r"""Seed 002: how close masked-LM pre-training gets to the exact optimum (PCFG, LM-sampled
language).

  python -m el_jax.experiment --config=experiments/mlm_convergence/config.py:pcfg
  python -m el_jax.experiment --config=experiments/mlm_convergence/config.py:lm

The synthetic languages of seed 002 have exact conditionals, so a masked LM's valid loss has a
known floor (the mean entropy of the true conditional at the fixed masked positions) and its
distance from it, the gap `valid_gap` = MLM loss - true entropy (and the exact KL), says how
converged the model is; the paper's Figures 1 / 3 start from a model within 0.01 nats of it.
`run.py` trains the runs of `run.design` (an `el_jax.run.grid.Grid` per language, curves
copied from metrics.jsonl into the rows), `analysis.py` the table, the two-run power law and
the figures; the section is docs/results/seed002_flatness.md#how-close-pre-training-gets-to-the-exact-optimum-pcfg-lm-sampled-language.

Variants:
  pcfg   the PCFG (configs/pcfg_mlm.py:cpu on 1M training sentences): 128 x 4 for 3000 and
         12,000 steps and 192 x 5 for 6000 steps, one seed each. 7 min, 44 min and 52 min on
         the 2-core development CPU beside two or three other jobs. Expected: valid gap 0.295 /
         0.171 / 0.233 nats, none within 0.02; the power law through the two 128 x 4 runs
         reaches 0.02 after ~2.8M steps.
  lm     the LM-sampled language (configs/lm_mlm.py:cpu, the small GPT-2 of
         experiments/label_copy.py, pretrained first if absent, about 25 min), model seeds
         0-2. 70 min for the three seeds with the corpus on the same machine. Expected: gap
         0.432 (0.306, 0.668), optimum 2.642 nats.
  cpu    both languages.
  paper  one run per language at the paper's size (configs/pcfg_mlm.py:paper and
         configs/lm_mlm.py:paper, which needs --config.generator=/path/to/gpt2), for an
         accelerator (not run here); written to results/mlm_convergence/paper/.
  test   both languages in seconds (runs/mlm_convergence_test).
"""
import ml_collections

VARIANTS = ("cpu", "pcfg", "lm", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/mlm_convergence"  # <language>.json, .png per language; analysis.json
  c.subdir = ""  # this variant's files go to <results_dir>/<subdir>/ ("": results_dir itself)
  c.runs_dir = "runs/mlm_convergence"  # training workdirs, <runs_dir>/<language>/<label>
  c.languages = ("pcfg", "lm")  # the languages trained, each a grid of run.design's runs
  c.size = "cpu"  # run.design's size: cpu, paper or test
  c.generator = ""  # lm at paper size: the GPT-2 checkpoint directory that samples the language
  c.converged_within = 0.02  # nats: the gap that counts as converged (and the power law's target)
  if variant in ("pcfg", "lm"):
    c.languages = (variant,)
  elif variant == "paper":
    c.subdir = "paper"
    c.runs_dir = "runs/mlm_convergence_paper"
    c.size = "paper"
  elif variant == "test":
    c.results_dir = "runs/mlm_convergence_test"
    c.runs_dir = "runs/mlm_convergence_test/runs"
    c.size = "test"
  return c
