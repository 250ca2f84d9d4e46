r"""Seed 002 (probe sanity): where along a pre-trained encoder the downstream probe loses the task.

  python -m el_jax.experiment --config=experiments/probe_layers/config.py:cpu

For every model seed of an AdamW pre-training run of the transformer encoder (the run Figures
1 / 3 start from: `<language>_adamw` under `runs`, trained here if it is not there), the linear
probe (`mlm_measure.Measurer.probe_features`: 5 probe seeds, the learning rate and feature
normalisation chosen on valid per model, the epoch on valid) reads, at every position, the
residual stream after 0, 1, ..., L blocks (0: the embeddings; `probe.encode(layer=k)`, no
LayerNorm) and the final features (after the last LayerNorm: what the figures probe), of the
trained model and of its own random initialisation, with the features' numerical rank
(`probe.feature_rank`). Writes results/probe_layers/<language>.json; `analysis.py` compares,
per layer, the trained models with their inits (paired over the model seeds, a sign flip:
floor 0.25 for 3 seeds).

Variants: `pcfg` and `hmm` (one committed file each), `cpu` (both), `paper` (both, on the
paper-size runs of experiments/mlm_flatness, for an accelerator; not run), `test` (seconds,
under runs/). Wall time at CPU size: 3-4 min per language (the committed runs: 4000 probe
training examples, 3 seeds, two learning rates; on an AMD EPYC Zen 5, 2 cores), about 10 times
that with the figures' 10,000 examples and both normalisations.

Expected: on the PCFG the embeddings probe level with the random inits and every block after
the first below them (the first block discards what task C needs); on the default HMM every
layer probes at the block's level (5-6%).
"""
import ml_collections

VARIANTS = ("test", "cpu", "paper", "pcfg", "hmm")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/probe_layers"  # <language>.json per language, analysis.json
  c.languages = ("pcfg", "hmm")  # one file each: results_dir/<language>.json
  c.runs = "runs/mlm_flatness"  # the pre-training runs: <language>_adamw (experiments/mlm_flatness)
  c.size = "cpu"  # the variant of configs/<language>_mlm.py the pre-training run was trained at
  c.step = 0  # the checkpoint step probed (0 = the run's train.num_steps: its end)
  c.seeds = (0, 1, 2)  # model seeds of the run
  c.tasks = ""  # downstream tasks ("" = 10 for the HMM, C for the PCFG)
  c.probe_train = 4000  # probe training examples per task
  c.probe_valid = 1000  # probe validation examples (the settings and epoch chosen on them)
  c.probe_test = 2000  # probe test examples
  c.probe_epochs = 30  # probe epochs
  c.probe_lrs = "0.001,0.01"  # probe learning rates, comma-separated (chosen on valid)
  c.probe_normalizations = "standardize"  # standardize and / or whiten (chosen on valid)
  c.probe_cache = ""  # folder of probe results by their inputs' content ("" = none)
  if variant in ("pcfg", "hmm"):
    c.languages = (variant,)
  elif variant == "paper":
    c.runs = "runs/mlm_flatness_paper"
    c.size = "paper"
    c.results_dir = "results/probe_layers/paper"
  elif variant == "test":
    c.results_dir = "runs/probe_layers_test"
    c.runs = "runs/probe_layers_test/runs"
    c.languages = ("hmm",)
    c.size = "test"
    c.seeds = (0, 1)
    c.tasks = "6"
    c.probe_train, c.probe_valid, c.probe_test, c.probe_epochs = 64, 32, 32, 2
    c.probe_lrs = "0.01"
  return c
