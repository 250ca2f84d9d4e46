r"""Masked-LM pretraining on the LM-sampled language (seed 002, Sec. 3.1; App. A.1).

Sentences of a decoder restricted to its K most frequent tokens, with exact conditionals
(el_jax.core.data.lm_language: what "top-K" means here, the sampler and the cost). Run (CPU;
the generator is the small GPT-2 that experiments/label_copy/ pretrains, or make it
with the two commands of configs/text_lm.py):

  python -m el_jax.main --config=configs/lm_mlm.py:cpu --workdir=runs/lm_mlm

Variants:
  paper  the paper samples from OPT-125M, which el_jax cannot load; give the released
         GPT-2 124M (the nearest model it loads: --config.data.generator=/path/to/gpt2,
         its config.json and model.safetensors), K = 2000, 24 tokens. Model: Table 3's
         768 x 12 layers, 12 heads, MLP 3072 encoder (the paper's sizes for this language
         are not given; our choice), the academic-budget AdamW recipe of configs/pcfg_mlm.py,
         batch 4096, 30k steps, 4M training sentences (the paper's count was lost from the
         seed's text). The exact conditionals of the 30k evaluated sentences cost
         2000 forward passes of 24 tokens each (~2.5e17 FLOP, ~2 h on an H100): an
         accelerator's job.
         Paper (OPT): optimal loss 1.865.
  cpu    the small GPT-2 of experiments/label_copy/ (2 x 128, GPT-2's vocabulary),
         K = 200 (model vocabulary 202, as the PCFG's), 24 tokens; Table 3's 128 x 4
         layers encoder, batch 64, 3000 steps (configs/pcfg_mlm.py's cpu recipe), 100k
         training sentences, 1000 valid / 1000 test / 1000 training sentences evaluated.
         Corpus cost, measured with a random GPT-2 of that shape (CPU time, cached after
         the first run): token frequencies 25 s, sampling ~2 min, the exact conditionals
         (3000 x 200 passes of 24 tokens) ~5 min.
  test   "tiny-random" (a random 2 x 32 GPT-2 of 64 tokens made in memory), K = 16,
         6 tokens, a tiny model; seconds; the unit tests.

Expected (test, seed 0; measured on the shared 2-core CPU, load average ~3-6): the corpus
(512 + 64 + 64 sentences, conditionals at 128 masks) builds in 1.8 s, the whole command
takes 11 s; valid gap (mlm_loss - true_entropy) 1.15 -> 0.77 nats and KL 1.16 -> 0.73 in
30 steps (unigram model: 0.81 / 0.80), test optimal loss (mean true entropy) 1.731. The
cpu variant was not run here: its generator is made by the label-copy experiment's
pretraining (configs/text_lm.py:cpu).
"""
from el_jax.run import config_blocks as blocks

VARIANTS = ("paper", "cpu", "test")

# The small GPT-2 that experiments/label_copy/ pretrains and exports (runs/label_copy/small_gpt2).
SMALL_GPT2 = "runs/label_copy/small_gpt2"


def get_config(arg="cpu"):
  arg = arg or "cpu"
  if arg not in VARIANTS:
    raise ValueError(f"unknown lm_mlm variant {arg!r}; valid variants: {VARIANTS}")
  c = blocks.mlm(arg, "lm", num_layers=12, num_heads=12, embed_dim=768, mlp_dim=3072)
  c.data.generator = ""  # Hugging Face GPT-2 checkpoint directory that generates the language ("tiny-random": a random tiny GPT-2 made in memory; "" = give one)
  c.data.top_k = 2000  # K: the generator may emit only its K most frequent tokens (the paper's 2000)
  c.data.top_k_by = "generator"  # "most frequent": "generator" (expected count in its own unrestricted sentences) | "id" (the K smallest ids: OPT's frequency-sorted vocabulary)
  c.data.top_k_samples = 4096  # unrestricted sentences whose next-token distributions measure that frequency
  c.data.top_k_seed = 0  # seed of those sentences
  c.data.length = 24  # n: tokens per sentence (the paper's; <= data.max_len_tokens)
  c.data.bos_id = -1  # the generator's start token (-1 = its last id, GPT-2's <|endoftext|>)
  c.data.sample_batch = 1024  # sentences per jitted sampling call (the corpus does not depend on it)
  c.data.cond_batch = 512  # candidate sentences per jitted forward pass of the exact conditionals (memory)
  c.data.max_len_tokens = 24  # T: tokens per row (= data.length: no padding)
  if arg == "cpu":
    c.data.generator = SMALL_GPT2
    c.data.top_k = 200
    c.data.top_k_samples = 1024  # the full 50k-word unembedding per token is the CPU's cost
    c.data.num_valid, c.data.num_test = 1000, 1000
    c.data.cond_batch = 1024
    c.train.eval_train_sentences = 1000
  elif arg == "test":
    c.data.generator = "tiny-random"
    c.data.top_k = 16
    c.data.top_k_samples = 256
    c.data.length = c.data.max_len_tokens = 6
    c.data.sample_batch = 64  # one compiled sampling shape for every split
    c.data.cond_batch = 256
  return c
