r"""Seed 002 (probe sanity): where a pre-trained encoder's masked position looks, block by block.

  python -m el_jax.experiment --config=experiments/attention_reach/config.py:cpu

On the sharp HMM (experiments/mlm_flatness, `hmm="sharp"`) a masked word is predicted far
better from its two neighbours than from its block's word frequencies (the context is worth
0.6 nats), so an encoder that has left the block plateau should attend from the masked
position to positions i - 1 and i + 1; one on the plateau predicts from the sentence's words
as a bag and needs no position. For every model seed of a finished MLM run of the transformer
encoder, and for its own random initialisation, on the validation sentences with their fixed
evaluation masks, `run.py` reads each block's attention weights (`decoder.attention_probs`) at
the masked query: per block and head the mean weight on keys i - 1 and i + 1
(`neighbour_mass`), on each offset -3..3 (`by_offset`), and what a uniform head gives
(`uniform`), beside each trained model's evaluation (`eval`). `analysis.py` takes each block's
head with the most neighbour mass.

Variants: one per committed file, `init0.1` (the six init-0.1 encoders of
experiments/mlm_flatness:sharp_init0.1, run hmm_sharp_adamw_pretrain_init0.1) and `init0.02`
(one encoder of the same recipe at GPT-2's init, run hmm_sharp_adamw_pretrain_init0.02); `cpu`
(both), `paper` (cpu's at the paper's size; not run), `test` (seconds, under runs/). The runs are read
from `runs` and trained there first when missing (experiments/mlm_flatness's recipes). Wall
time at CPU size: about 5 s per model seed (2000 sentences, the `cpu` encoder; AMD EPYC Zen 5,
2 cores), plus the training of a run that is not there (about 13 min per model).

Expected: the init-0.1 encoders' best head in block 1 puts 0.93-1.00 of its weight on the two
neighbours (a uniform head 0.12); the plateaued init-0.02 encoder's 0.19 in block 1, 0.12 in
block 2.
"""
import ml_collections

# The sharp HMM's encoder recipe (experiments/mlm_flatness/config.py), without its init scale.
SHARP = "train.batch_size=256,train.num_steps=6000,optim.lr=0.002,optim.warmup_steps=300"
HMM_SHARP = "data.num_blocks=4,data.trans_concentration=0.1,data.emit_concentration=0.1"
# file name: (the run's label under `runs`, its pre-training overrides, its model seeds)
RUNS = {"hmm_sharp_init0.1": ("hmm_sharp_adamw_pretrain_init0.1", "model.init_std=0.1," + SHARP,
                              "0,1,2,3,4,5"),
        "hmm_sharp_init0.02": ("hmm_sharp_adamw_pretrain_init0.02", "model.init_std=0.02," + SHARP,
                               "0")}
VARIANTS = ("test", "cpu", "paper", "init0.1", "init0.02")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  names = {"init0.1": ["hmm_sharp_init0.1"], "init0.02": ["hmm_sharp_init0.02"]}.get(
      variant, list(RUNS))
  c = ml_collections.ConfigDict()
  c.results_dir = "results/attention_reach"  # <file>.json per run read, analysis.json
  c.runs = "runs/mlm_flatness"  # the pre-training runs (experiments/mlm_flatness's `runs`)
  c.config = "hmm_mlm"  # configs/<config>.py of the runs
  c.size = "cpu"  # its variant
  c.data = HMM_SHARP  # the runs' data overrides, "key=value,..." (the sharp HMM)
  c.files = tuple(names)  # the files written, <file>.json: one run each
  c.run_labels = tuple(RUNS[n][0] for n in names)  # each file's run, its label under `runs`
  c.pretrain = tuple(RUNS[n][1] for n in names)  # each run's pre-training overrides
  c.model_seeds = tuple(RUNS[n][2] for n in names)  # each run's model seeds, comma-separated
  c.sentences = 2000  # validation sentences read
  if variant == "paper":
    c.results_dir = "results/attention_reach/paper"
    c.runs = "runs/mlm_flatness_paper"
    c.size = "paper"
  elif variant == "test":
    c.results_dir = "runs/attention_reach_test"
    c.runs = "runs/attention_reach_test/runs"
    c.size = "test"
    c.data = ""
    c.files, c.run_labels, c.pretrain, c.model_seeds = ("test",), ("hmm_adamw",), ("",), ("0",)
    c.sentences = 40
  return c
