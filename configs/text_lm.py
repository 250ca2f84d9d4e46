r"""Pretraining a small GPT-2 on the offline texts (the model label copy fine-tunes).

Run (CPU) and export it in the Hugging Face layout that `model.pretrained` reads:

  python -m el_jax.main --config=configs/text_lm.py:cpu --workdir=runs/label_copy/text_lm
  python -m el_jax.tools.export_gpt2 --export_run=runs/label_copy/text_lm \
      --config=configs/text_lm.py:cpu --out=runs/label_copy/small_gpt2

`experiments/label_copy/` (its `pretrain` variant) does both. The texts are every distinct
KJV verse and Shakespeare sentence except those in any split of the label-copy `cpu` variant
(for both corpora), GPT-2 BPE tokens packed into rows of 64 (el_jax.core.tasks.text_lm).

Variants:
  cpu   2 x 128 gpt2 preset (the size of configs/label_copy.py:cpu, so its `model.pretrained`
        fits), context 64, batch 16 rows, 800 steps of AdamW lr 1e-3 with 80 warmup steps
        and cosine decay: 0.8M tokens, about 0.4 epochs of the ~2M training tokens (on the
        shared 2-core CPU a step over GPT-2's 50,257-word unembedding takes seconds; a
        small, briefly pretrained model, not GPT-2).
  test  tiny, seconds; used by the unit tests.

Expected (cpu, seed 0): see the label-copy section of the README (valid CE and perplexity
of the run `experiments/label_copy/` made; results/label_copy/table.json "pretraining").
"""
import ml_collections

from el_jax.run import config_blocks as blocks

VARIANTS = ("cpu", "test")


def get_config(arg="cpu"):
  arg = arg or "cpu"
  if arg not in VARIANTS:
    raise ValueError(f"unknown text_lm variant {arg!r}; valid variants: {VARIANTS}")
  c = ml_collections.ConfigDict()
  c.task = "text_lm"  # experiment dispatched by el_jax.main
  c.seeds = (0,)  # model initialisations
  c.num_devices = 0  # devices on the `data` mesh axis (0 = all local devices)
  c.progress = True  # show a progress bar

  c.data = ml_collections.ConfigDict()
  c.data.corpora = ("kjv", "shakespeare")  # texts (el_jax.core.data.texts.CORPORA), concatenated
  c.data.exclude_label_copy = "cpu"  # leave out every sentence of this configs/label_copy.py variant's splits ("" = none)
  c.data.max_sentences = 0  # keep only the first sentences (after the exclusion; 0 = all)
  c.data.context_len = 64  # tokens per row (the model's positions)
  c.data.num_valid = 128  # validation rows
  c.data.num_test = 128  # test rows
  c.data.data_seed = 0  # seed of the sentence order
  c.data.cache_dir = ""  # folder of the cached rows ("" = $EL_JAX_CACHE/text_lm or ~/.cache/el_jax/text_lm)

  c.model = ml_collections.ConfigDict()
  c.model.preset = "gpt2"  # GPT-2: learned positions, sequential residual, tied embeddings
  c.model.num_layers = 2  # transformer blocks
  c.model.num_heads = 4  # attention heads
  c.model.embed_dim = 128  # residual width
  c.model.mlp_dim = 0  # MLP hidden width (0 = 4 * embed_dim)
  c.model.doc_mask = False  # GPT-2 packing: rows cross sentence boundaries at <|endoftext|>
  c.model.dtype = "float32"  # compute dtype: "float32" | "bfloat16"
  c.model.pretrained = ""  # Hugging Face GPT-2 checkpoint directory to continue from ("" = random init; "{seed}" in it = one per model seed)

  c.loss = ml_collections.ConfigDict()
  c.loss.name = "ce"  # pretraining objective (see el_jax.core.losses.LOSSES)
  c.loss.reduction = "mean"  # over every token of the batch

  c.optim = blocks.optim(
      lr=1e-3,  # peak learning rate
      warmup_steps=80,  # linear warmup steps
      decay="cosine",  # after warmup: "constant" | "cosine" | "linear" | "wsd"
      final_lr_frac=0.1,  # cosine end, as a fraction of lr
      weight_decay=0.01,  # AdamW decoupled weight decay
      b2=0.98)  # Adam beta2

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 16  # rows per step
  # train.num_steps: optimizer steps
  blocks.loop(c.train, num_steps=800, log_every=25, eval_every=0,
              checkpoint_every=200, keep_checkpoints=2, init_from="")
  c.train.eval_batch_size = 64  # rows per evaluation call
  c.train.eval_train_examples = 128  # training rows evaluated (the first ones)

  c.flatness = blocks.flatness()

  if arg == "test":
    c.data.exclude_label_copy = "test"
    c.data.max_sentences = 3000
    c.data.context_len = 16
    c.data.num_valid, c.data.num_test = 8, 8
    c.model.num_layers, c.model.num_heads, c.model.embed_dim = 1, 2, 16
    c.optim.warmup_steps = 2
    c.train.batch_size = 8
    c.train.num_steps = 6
    c.train.log_every = 2
    c.train.eval_every = 0
    c.train.checkpoint_every = 3
    c.train.eval_batch_size = 8
    c.train.eval_train_examples = 8
    c.progress = False
  return c
