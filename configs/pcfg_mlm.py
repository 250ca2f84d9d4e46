r"""Masked-LM pretraining on the paper's PCFG (seed 002, Sec. 3; App. A.1, A.3).

Run (CPU, ~5 min per seed; the corpus is built once, 1.5 s, and cached):

  python -m el_jax.main --config=configs/pcfg_mlm.py:cpu --workdir=runs/pcfg_mlm

Variants:
  paper  Table 1's 235M BERT (16 layers x 1024, 16 heads, MLP 4096; ~201M here, where the
         vocabulary is 202 words instead of BERT's 30k WordPiece), AdamW lr 1e-3 with 6%
         warmup then linear decay (the academic-budget recipe), batch 4096, 30k steps.
         The corpus size was lost from the seed's text: 4M training sentences is our
         choice. Paper: pretraining loss 3.204 (AdamW) against an optimum of 3.196; our
         exact optimum for this grammar is ~4.19 nats (el_jax.core.data.pcfg explains the gap).
         `sweep()` gives the other sizes of Table 3.
  cpu    Table 3's 128 x 4 layers, 2 heads, MLP 512 encoder (0.82M parameters), batch 64,
         3000 steps, lr 1e-3 with 200 warmup steps then cosine decay to 1e-4, 100k training
         sentences, 2k valid / 2k test.
  test   tiny, seconds; used by the unit tests.

Adversarial pretraining (Table 1; `el_jax.core.adversarial`): --config.adversarial.enabled=True
adds the meta-learning term; experiments/adversarial_pretraining/ runs Tables 1-2.

Expected (cpu, seed 0; measured on the shared 2-core CPU, results are deterministic):
valid gap (mlm_loss - true_entropy) 0.288 and KL 0.281 nats after 3000 steps (1.17 at
initialisation; test gap 0.244, KL 0.286), against 0.80 / 0.78 for the unigram model
(summary.json `unigram`); test optimal loss (mean true entropy) 4.160; valid accuracy
0.107 (the exact conditional's argmax: 0.132). Wall time 4 min 46 s (load average ~1.5;
12.5 min under a load average of 6-7). `valid_gap.png` plots the valid gap and KL.
"""
from el_jax.core.data import PCFG_GRAMMAR
from el_jax.run import config_blocks as blocks

VARIANTS = ("paper", "cpu", "test")

# The paper's grammar, shipped with el_jax (el_jax/core/data/resources/pcfg/rule_deep_mlm.txt).
GRAMMAR = PCFG_GRAMMAR


def get_config(arg="cpu"):
  arg = arg or "cpu"
  if arg not in VARIANTS:
    raise ValueError(f"unknown pcfg_mlm variant {arg!r}; valid variants: {VARIANTS}")
  c = blocks.mlm(arg, "pcfg", num_layers=16, num_heads=16, embed_dim=1024, mlp_dim=4096)
  c.data.grammar = GRAMMAR  # rule file `LHS RHS... prob` (default: the paper's, shipped in el_jax/core/data/resources/pcfg/)

  # Adversarial pretraining (Table 1; el_jax.core.adversarial): MLM loss - weight * D2 loss.
  c.adversarial = blocks.adversarial(arg, "A")  # off unless adversarial.enabled; term on task A
  return c


def sweep(add):
  """The transformer sizes of Table 3 (d-model / heads / layers / d-inter), on the paper variant."""
  for d, h, n, m in ((64, 1, 1, 256), (128, 2, 4, 512), (192, 3, 5, 768), (256, 4, 6, 1024),
                     (512, 8, 8, 2048), (768, 12, 12, 3072), (1024, 16, 16, 4096),
                     (1280, 20, 20, 5120), (1536, 24, 24, 6144)):
    add(**{"model.embed_dim": d, "model.num_heads": h, "model.num_layers": n, "model.mlp_dim": m})
