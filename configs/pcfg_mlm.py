r"""Masked-LM pretraining on the paper's PCFG (seed 002, Sec. 3; App. A.1, A.3).

Run (CPU, ~5 min per seed; the corpus is built once, 1.5 s, and cached):

  python -m el_jax.main --config=configs/pcfg_mlm.py:cpu --workdir=runs/pcfg_mlm

Variants:
  paper  Table 1's 235M BERT (16 layers x 1024, 16 heads, MLP 4096; ~201M here, where the
         vocabulary is 202 words instead of BERT's 30k WordPiece), AdamW lr 1e-3 with 6%
         warmup then linear decay (the academic-budget recipe), batch 4096, 30k steps.
         The corpus size was lost from the seed's text: 4M training sentences is our
         choice. Paper: pretraining loss 3.204 (AdamW) against an optimum of 3.196; our
         exact optimum for this grammar is ~4.19 nats (el_jax.data.pcfg explains the gap).
         `sweep()` gives the other sizes of Table 3.
  cpu    Table 3's 128 x 4 layers, 2 heads, MLP 512 encoder (0.82M parameters), batch 64,
         3000 steps, lr 1e-3 with 200 warmup steps then cosine decay to 1e-4, 100k training
         sentences, 2k valid / 2k test.
  test   tiny, seconds; used by the unit tests.

Adversarial pretraining (Table 1; `el_jax.adversarial`): --config.adversarial.enabled=True
adds the meta-learning term; experiments/adversarial_pretraining.py runs Tables 1-2.

Expected (cpu, seed 0; measured on the shared 2-core CPU, results are deterministic):
valid gap (mlm_loss - true_entropy) 0.288 and KL 0.281 nats after 3000 steps (1.17 at
initialisation; test gap 0.244, KL 0.286), against 0.80 / 0.78 for the unigram model
(summary.json `unigram`); test optimal loss (mean true entropy) 4.160; valid accuracy
0.107 (the exact conditional's argmax: 0.132). Wall time 4 min 46 s (load average ~1.5;
12.5 min under a load average of 6-7). `valid_gap.png` plots the valid gap and KL.
"""
import os

import ml_collections

VARIANTS = ("paper", "cpu", "test")

# The paper's grammar, in the shared folder next to the repository.
GRAMMAR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "shared", "data", "pcfg", "rule_deep_mlm.txt")


def get_config(arg="cpu"):
  arg = arg or "cpu"
  if arg not in VARIANTS:
    raise ValueError(f"unknown pcfg_mlm variant {arg!r}; valid variants: {VARIANTS}")
  c = ml_collections.ConfigDict()
  c.task = "mlm"  # experiment dispatched by el_jax.main
  c.seeds = (0,)  # model initialisations, all on the same fixed corpus
  c.num_devices = 0  # devices on the `data` mesh axis (0 = all local devices)
  c.progress = True  # show a progress bar

  c.data = ml_collections.ConfigDict()
  c.data.language = "pcfg"  # "pcfg" | "hmm" (configs/hmm_mlm.py)
  c.data.grammar = GRAMMAR  # rule file `LHS RHS... prob` (default: ../shared/data/pcfg/rule_deep_mlm.txt)
  c.data.max_len_tokens = 16  # T: tokens per row (this grammar's sentences have 2..16 words)
  c.data.num_train = 4_000_000  # fixed training sentences (the paper's count is lost; our choice)
  c.data.num_valid = 10_000  # fixed validation sentences with exact conditionals (choose hyperparameters here)
  c.data.num_test = 10_000  # fixed test sentences with exact conditionals
  c.data.data_seed = 0  # seed of the sampled corpus and of the fixed evaluation masks
  c.data.masking = "one"  # "one" (the paper: one uniform position per sentence) | "bert" (15%, 80/10/10)
  c.data.cache_dir = ""  # folder of the cached corpus ("" = $EL_JAX_CACHE/mlm or ~/.cache/el_jax/mlm)

  c.model = ml_collections.ConfigDict()
  c.model.preset = "encoder"  # bidirectional, learned positions, pre-LN, tied embeddings
  c.model.num_layers = 16  # transformer blocks
  c.model.num_heads = 16  # attention heads
  c.model.embed_dim = 1024  # residual width (d-model)
  c.model.mlp_dim = 4096  # MLP hidden width (d-inter; 0 = 4 * embed_dim)
  c.model.doc_mask = True  # segment ids: the sentence never attends to its padding
  c.model.dtype = "float32"  # compute dtype: "float32" | "bfloat16"

  c.loss = ml_collections.ConfigDict()
  c.loss.name = "ce"  # "ce" | "e1" | "e2" | "e3" | baselines: see el_jax.losses.LOSSES
  c.loss.lam = 1.0  # E1 / E2 margin-shrinking weight; spectral_decoupling (lam / 2) ||f||^2 (>= 0)
  c.loss.b = 1.0  # E3 target logit magnitude (> 0); spherical_z offset (any real)
  c.loss.eps = 0.1  # label_smoothing: mass spread uniformly over the V classes, in [0, 1)
  c.loss.coef = 1e-4  # z_loss: weight of (logsumexp f)^2 (>= 0)
  c.loss.a = 1.0  # spherical_z: softplus sharpness a (> 0)
  c.loss.gamma = 2.0  # focal: exponent on (1 - p_k) (>= 0); dice: smoothing (> 0)
  c.loss.alpha = 1.0  # dice: self-adjusting exponent on (1 - p_k) (>= 0)
  c.loss.q = 0.7  # gce: exponent q in (0, 1] (q -> 0 is CE, q = 1 is MAE / 2)
  c.loss.reduction = "mean"  # over the batch's scored tokens: "mean" | "reweight" (seed 001, loss-based)
  c.loss.reweight_strategy = "linupper"  # "reweight" shape: "linupper" | "quadratic" | "extremes"
  c.loss.reweight_r = 1.0  # "reweight" temperature r (> 0; KL strength towards uniform weights)

  c.optim = ml_collections.ConfigDict()
  c.optim.name = "adamw"  # "adamw" | "adam" | "sgd" (Fig. 3: SGD, warmup then constant 1e-3)
  c.optim.lr = 1e-3  # peak learning rate (App. A.3)
  c.optim.warmup_steps = 1800  # linear warmup steps (6% of train.num_steps, App. A.3)
  c.optim.decay = "linear"  # after warmup: "constant" | "cosine" | "linear" | "wsd" (academic-budget recipe)
  c.optim.final_lr_frac = 0.0  # cosine / linear / wsd decay end, as a fraction of lr
  c.optim.decay_frac = 0.1  # wsd: fraction of train.num_steps taken by the final linear decay, in (0, 1]
  c.optim.weight_decay = 0.01  # AdamW decoupled weight decay (academic-budget recipe; assumed)
  c.optim.b1 = 0.9  # Adam beta1
  c.optim.b2 = 0.98  # Adam beta2 (academic-budget recipe; assumed)
  c.optim.eps = 1e-6  # Adam epsilon (academic-budget recipe; assumed)
  c.optim.momentum = 0.0  # SGD momentum (0 = plain SGD)
  c.optim.grad_clip = 1.0  # global-norm gradient clipping (0 = off)

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 4096  # sentences per step (the paper's)
  c.train.num_steps = 30_000  # optimizer steps (the paper: "more than 30K steps")
  c.train.log_every = 100  # steps between training-metric rows
  c.train.eval_every = 1000  # steps between evaluations against the exact conditionals (0 = end only)
  c.train.checkpoint_every = 1000  # steps between orbax checkpoints
  c.train.eval_batch_size = 1024  # sentences per evaluation call
  c.train.eval_train_sentences = 10_000  # training sentences evaluated (the first ones)
  c.train.stop_at_step = 0  # stop (resumably) after this step, 0 = run to num_steps
  c.train.vmap_seeds = False  # True: train all seeds as one stacked, jitted program (el_jax.seeds)
  c.train.vmap_seeds_impl = "auto"  # its step: "vmap" | "map" (lax.map over seeds) | "auto" (map on CPU, else vmap)
  c.train.cpu_dots = "xla"  # matmuls on CPU: "xla" (XLA's choice, YNNPACK in jax 0.10.2; committed results) | "eigen" (Eigen, faster on small models: docs/bench.md; other rounding)
  c.train.keep_checkpoints = 2  # newest checkpoints kept (0 = all: measure flatness / probes along training)
  c.train.init_from = ""  # workdir of a run of the same model whose newest parameters start this one ("" = random init)

  c.flatness = ml_collections.ConfigDict()
  c.flatness.every = 0  # steps between Hessian / Fisher measurements (0 = off)
  c.flatness.method = "hutchinson"  # "hutchinson" | "hutch++" | "exact"
  c.flatness.num_probes = 8  # Hessian probes per batch
  c.flatness.num_batches = 4  # fixed training batches averaged over
  c.flatness.fisher_samples = 4  # label draws from the model per batch
  c.flatness.lanczos_steps = 0  # Lanczos steps for the top eigenvalue (0 = skip)

  # Adversarial pretraining (Table 1; el_jax.adversarial): MLM loss - weight * D2 loss.
  c.adversarial = ml_collections.ConfigDict()
  c.adversarial.enabled = False  # add the meta-learning term (False = plain MLM pretraining)
  c.adversarial.weight = 1.0  # weight of the D2 squared loss subtracted from the MLM loss (>= 0)
  c.adversarial.ridge = 8000.0  # ridge of the closed-form head on D1 (> 0; raw probe features)
  c.adversarial.d1_size = 256  # |D1|: downstream training examples the head is fitted on per step
  c.adversarial.d2_size = 256  # |D2|: disjoint examples whose squared loss is maximised per step
  c.adversarial.task = "A"  # downstream task of the term: "A" | "B"
  c.adversarial.num_train = 80_000  # downstream training set D1, D2 are drawn from (pcfg_task)
  c.adversarial.data_seed = 0  # seed of that training set and of the D1 / D2 draws

  if arg == "cpu":
    c.data.num_train = 100_000
    c.data.num_valid, c.data.num_test = 2000, 2000
    c.model.num_layers, c.model.num_heads, c.model.embed_dim, c.model.mlp_dim = 4, 2, 128, 512
    c.optim.warmup_steps = 200
    c.optim.decay = "cosine"
    c.optim.final_lr_frac = 0.1
    c.train.batch_size = 64
    c.train.num_steps = 3000
    c.train.log_every = 50
    c.train.eval_every = 500
    c.train.checkpoint_every = 1000
    c.train.eval_batch_size = 1000
    c.train.eval_train_sentences = 2000
    c.adversarial.weight = 0.3  # experiments/adversarial_pretraining.py chooses it on valid
    c.adversarial.ridge = 1000.0  # ~0.7 x the mean squared feature norm at init (16 x 128)
    c.adversarial.d1_size, c.adversarial.d2_size = 32, 16
    c.adversarial.num_train = 4000  # the probe's training set in the experiments
  elif arg == "test":
    c.data.num_train, c.data.num_valid, c.data.num_test = 512, 64, 64
    c.model.num_layers, c.model.num_heads, c.model.embed_dim, c.model.mlp_dim = 2, 2, 32, 64
    c.optim.lr = 3e-3
    c.optim.warmup_steps = 0
    c.optim.decay = "constant"
    c.train.batch_size = 32
    c.train.num_steps = 30
    c.train.log_every = 10
    c.train.eval_every = 30  # evaluations at steps 0 and 30
    c.train.checkpoint_every = 30
    c.train.eval_batch_size = 32
    c.train.eval_train_sentences = 64
    c.adversarial.ridge = 10.0
    c.adversarial.d1_size, c.adversarial.d2_size = 8, 8
    c.adversarial.num_train = 64
    c.progress = False
  return c


def sweep(add):
  """The transformer sizes of Table 3 (d-model / heads / layers / d-inter), on the paper variant."""
  for d, h, n, m in ((64, 1, 1, 256), (128, 2, 4, 512), (192, 3, 5, 768), (256, 4, 6, 1024),
                     (512, 8, 8, 2048), (768, 12, 12, 3072), (1024, 16, 16, 4096),
                     (1280, 20, 20, 5120), (1536, 24, 24, 6144)):
    add(**{"model.embed_dim": d, "model.num_heads": h, "model.num_layers": n, "model.mlp_dim": m})
