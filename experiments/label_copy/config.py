r"""Seed 000, Table 2 at CPU size: label copying on natural text, CE against E1 + warmup.

  python -m el_jax.experiment --config=experiments/label_copy/config.py:cpu

1. Pretrains the small GPT-2 (`configs/text_lm.py:cpu`: 2 x 128, GPT-2 BPE, on every KJV verse
   and Shakespeare sentence outside the label-copy `cpu` splits) in runs/label_copy/text_lm
   and writes it in the Hugging Face layout to runs/label_copy/small_gpt2 (which
   experiments/loss_baselines, scale_trends and mlm_convergence also fine-tune from or sample
   with; the `pretrain` variant does only this step).
2. Trains `configs/label_copy.py:cpu` (2 x 128, 4,000 / 500 / 500 sentences of <= 48 tokens,
   half easy) on both texts, fine-tuned from that model and from scratch, with CE and with E1
   (lam = 1, the paper's section-5 value) + linear warmup over the first half of the 400 steps
   (the copy-task demo's choice, not tuned here), model seeds 0-4, on the same fixed splits:
   one `el_jax.run.grid.Grid`, each run in runs/label_copy/<text>_<start>_<loss>, its rows in
   results/label_copy/table.json.

Wall time: about 2 h on the 2-core development machine (the committed rows predate el_jax's
record of the CPU): the pretraining 45 min, the 8 fine-tuning runs 55-450 s a seed. Expected:
CE does not fail (test EM 0.96-1.00 on every run), E1 + warmup - CE +0.005 (KJV) and -0.032
(Shakespeare) fine-tuned, no difference significant; the paper's CE 0.863 / 0.703 and E1 +
warmup 0.981 / 0.766 (a pretrained GPT-2 of unstated size) do not come out.

Variants:
  cpu       the above.
  pretrain  only step 1 (the small GPT-2 the other experiments read).
  paper     our reading of the paper's setting: `configs/label_copy.py:paper` (GPT-2 small,
            every verse, 5,000 steps, E1's warmup 1000 steps) fine-tuned from a real GPT-2
            checkpoint, which must be given: --config.gpt2=/path/to/gpt2 (config.json and
            model.safetensors from huggingface.co/gpt2). Not run (no checkpoint here).
  test      `configs/label_copy.py:test` from scratch on KJV, seeds 0, 1, 8 steps: seconds,
            under runs/ (set starts to ("pretrained", "scratch") to pretrain the test-size
            GPT-2 too).
"""
import ml_collections

VARIANTS = ("cpu", "pretrain", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/label_copy"  # table.json, table.png, analysis.json
  c.runs_dir = "runs/label_copy"  # run folders, text_lm/ (the pretraining) and small_gpt2/ (its export)
  c.size = "cpu"  # variant of configs/label_copy.py every fine-tuning run trains
  c.pretrain_variant = "cpu"  # variant of configs/text_lm.py that pretrains the small GPT-2
  c.pretrain_overrides = ()  # extra "key=value" overrides of that pretraining config
  c.gpt2 = ""  # a Hugging Face GPT-2 folder to fine-tune from instead of the small GPT-2 ("" = pretrain it)
  c.pretrain_only = False  # True: only pretrain and export the small GPT-2
  c.steps = 400  # fine-tuning steps of every run (0 = the config's train.num_steps)
  c.e1_warmup_steps = 200  # E1's linear warmup steps (half of `steps`, the copy-task demo's choice)
  c.seeds = (0, 1, 2, 3, 4)  # model seeds of every run
  c.texts = ("kjv", "shakespeare")  # data.corpus of the runs
  c.starts = ("pretrained", "scratch")  # fine-tuned from the GPT-2, and from a random init
  c.only = ()  # train only these runs (<text>_<start>_<loss>); the table is written when all are there
  if variant == "pretrain":
    c.pretrain_only = True
  elif variant == "paper":
    c.results_dir = "results/label_copy_paper"
    c.runs_dir = "runs/label_copy_paper"
    c.size = "paper"
    c.pretrain_variant = ""
    c.steps = 0
    c.e1_warmup_steps = 1000
    c.starts = ("pretrained",)
  elif variant == "test":
    c.results_dir = "runs/label_copy_test"
    c.runs_dir = "runs/label_copy_test"
    c.size = "test"
    c.pretrain_variant = "test"
    c.pretrain_overrides = ("model.num_layers=2", "data.context_len=48")  # fits configs/label_copy.py:test
    c.steps = 8
    c.e1_warmup_steps = 4
    c.seeds = (0, 1)
    c.texts = ("kjv",)
    c.starts = ("scratch",)
  return c
