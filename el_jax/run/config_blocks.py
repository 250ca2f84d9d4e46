"""The config blocks every `configs/<experiment>.py` shares: loss, optimizer, loop fields, flatness.

  from el_jax.run import config_blocks as blocks
  c.loss = blocks.loss()
  c.optim = blocks.optim(lr=1e-3, warmup_steps=200, decay="cosine")
  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 64  # the task's own fields first
  blocks.loop(c.train, num_steps=3000, log_every=50, eval_every=500, checkpoint_every=1000)
  c.flatness = blocks.flatness()

One comment per field, here, once. A config sets only what differs from these defaults; the
fields and their order are those the configs had when each wrote its blocks out (so
config.json files and result rows written before still compare equal).
"""
import ml_collections


# Each loss's hyperparameters, under the loss: (loss, ((field, default, comment), ...)). The
# loss in use is `loss.name`; the blocks of the others are inert (`el_jax.run.config.inert_keys`),
# so changing an unused loss's value is no config difference. Defaults are el_jax's values
# before the blocks were split (so configs and result rows written before compare equal).
LOSS_HPARAMS = (
    ("e1", (("lam", 1.0, "margin-shrinking weight (>= 0)"),)),
    ("e2", (("lam", 1.0, "margin-variance weight (>= 0)"),)),
    ("e3", (("b", 1.0, "target logit magnitude (> 0)"),)),
    ("label_smoothing", (("eps", 0.1, "mass spread uniformly over the V classes, in [0, 1)"),)),
    ("z_loss", (("coef", 1e-4, "weight of (logsumexp f)^2 (>= 0)"),)),
    ("spherical_z", (("a", 1.0, "softplus sharpness a (> 0)"), ("b", 1.0, "offset (any real)"))),
    ("focal", (("gamma", 2.0, "exponent on (1 - p_k) (>= 0)"),)),
    ("dice", (("alpha", 1.0, "self-adjusting exponent on (1 - p_k) (>= 0)"),
              ("gamma", 2.0, "smoothing (> 0)"))),
    ("gce", (("q", 0.7, "exponent q in (0, 1] (q -> 0 is CE, q = 1 is MAE / 2)"),)),
    ("spectral_decoupling", (("lam", 1.0, "(lam / 2) ||f||^2 weight (>= 0)"),)),
)
# The "reweight" reduction's fields, under `loss.reweight` (inert while `loss.reduction` is "mean").
REWEIGHT_FIELDS = (
    ("strategy", "linupper", "weight shape: \"linupper\" | \"quadratic\" | \"extremes\""),
    ("r", 1.0, "temperature r (> 0; KL strength towards uniform weights)"),
)


def _block(fields):
  c = ml_collections.ConfigDict()
  for k, default, _ in fields:
    c[k] = default
  return c


def loss():
  """The `loss` block: the loss by name, the reduction, and under each loss its own
  hyperparameters (`loss.e1.lam`, `loss.focal.gamma`, ...: LOSS_HPARAMS); those of a loss
  other than `loss.name` are inert (`el_jax.run.config.inert_keys`)."""
  c = ml_collections.ConfigDict()
  c.name = "ce"  # "ce" | "e1" | "e2" | "e3" | baselines: see el_jax.core.losses.LOSSES
  c.reduction = "mean"  # over the batch's scored tokens: "mean" | "reweight" (seed 001, loss-based)
  for name, fields in LOSS_HPARAMS:  # loss.<name>.<field>: the comments of LOSS_HPARAMS
    c[name] = _block(fields)
  c.reweight = _block(REWEIGHT_FIELDS)  # loss.reweight.strategy / .r: REWEIGHT_FIELDS
  return c


OPTIM_DEFAULTS = (
    ("name", "adamw"),  # "adamw" | "adam" | "sgd"
    ("lr", 1e-4),  # peak learning rate
    ("warmup_steps", 0),  # linear warmup steps (0 = none)
    ("decay", "constant"),  # after warmup: "constant" | "cosine" | "linear" | "wsd"
    ("final_lr_frac", 0.0),  # cosine / linear / wsd decay end, as a fraction of lr
    ("decay_frac", 0.1),  # wsd: fraction of train.num_steps taken by the final linear decay, in (0, 1]
    ("weight_decay", 0.0),  # AdamW decoupled weight decay
    ("b1", 0.9),  # Adam beta1
    ("b2", 0.999),  # Adam beta2
    ("eps", 1e-8),  # Adam epsilon
    ("momentum", 0.0),  # SGD momentum (0 = plain SGD; unused by adam / adamw)
    ("grad_clip", 1.0),  # global-norm gradient clipping (0 = off)
)


def optim(**values):
  """The `optim` block (el_jax.core.optim): the defaults of OPTIM_DEFAULTS with `values` set; an
  unknown name is a ValueError."""
  unknown = sorted(set(values) - {k for k, _ in OPTIM_DEFAULTS})
  if unknown:
    raise ValueError(f"optim fields {unknown} do not exist; fields: {[k for k, _ in OPTIM_DEFAULTS]}")
  c = ml_collections.ConfigDict()
  for k, default in OPTIM_DEFAULTS:
    c[k] = values.get(k, default)
  return c


def loop(train, *, num_steps, log_every, eval_every, checkpoint_every, keep_checkpoints=None,
         init_from=None):
  """Adds the loop's fields to a config's `train` block (after the task's own fields):
  `keep_checkpoints` / `init_from` only where given (configs that offer them)."""
  train.num_steps = num_steps  # optimizer steps
  train.log_every = log_every  # steps between training-metric rows
  train.eval_every = eval_every  # steps between evaluations (0 = end only)
  train.checkpoint_every = checkpoint_every  # steps between orbax checkpoints (0 = none: a killed run starts again)
  train.stop_at_step = 0  # stop (resumably) after this step, 0 = run to num_steps
  train.vmap_seeds = False  # True: train all seeds as one stacked, jitted program (el_jax.run.seeds)
  train.vmap_seeds_impl = "auto"  # its step: "vmap" | "map" (lax.map over seeds) | "auto" (map on CPU, else vmap)
  train.cpu_dots = "xla"  # matmuls on CPU: "xla" (XLA's choice, YNNPACK in jax 0.10.2; committed results) | "eigen" (Eigen: other rounding) | "auto" (per CPU kind, step.CPU_KINDS: docs/bench.md)
  train.attention_blocks = 1  # causal attention in this many query blocks, each against the keys up to its end (1 = one einsum, committed results; 4: fewer FLOPs, faster on CPU: docs/bench.md; other rounding)
  train.tensorboard = True  # write TensorBoard events of the metrics rows under <workdir>/tb (el_jax.infra.tensorboard; False: none)
  if keep_checkpoints is not None:
    train.keep_checkpoints = keep_checkpoints  # newest checkpoints kept (0 = all: measure flatness / probes along training)
  if init_from is not None:
    train.init_from = init_from  # workdir of a run of the same model whose newest parameters start this one ("" = random init)
  return train


def flatness():
  """The `flatness` block: Hessian / Fisher measurements during training (el_jax.core.flatness)."""
  c = ml_collections.ConfigDict()
  c.every = 0  # steps between Hessian / Fisher measurements (0 = off)
  c.method = "hutchinson"  # "hutchinson" | "hutch++" | "exact"
  c.num_probes = 8  # Hessian probes per batch
  c.num_batches = 4  # fixed training batches averaged over
  c.fisher_samples = 4  # label draws from the model per batch
  c.lanczos_steps = 0  # Lanczos steps for the top eigenvalue (0 = skip)
  return c


def adversarial(arg, task):
  """The `adversarial` block of seed 002's adversarial pretraining (Table 1; el_jax.core.adversarial):
  MLM loss - weight * D2 loss, off by default; `task` the downstream task of the term ("A" on the
  PCFG, "10" on the HMM), `arg` the variant."""
  c = ml_collections.ConfigDict()
  c.enabled = False  # add the meta-learning term (False = plain MLM pretraining)
  c.weight = 1.0  # weight of the D2 squared loss subtracted from the MLM loss (>= 0)
  c.ridge = 8000.0  # ridge of the closed-form head on D1 (> 0; raw probe features)
  c.d1_size = 256  # |D1|: downstream training examples the head is fitted on per step
  c.d2_size = 256  # |D2|: disjoint examples whose squared loss is maximised per step
  c.task = task  # downstream task of the term: PCFG "A" | "B"; HMM "1".."data.length" (task-k)
  c.num_train = 80_000  # downstream training set D1, D2 are drawn from (downstream.pcfg_task / hmm_task)
  c.data_seed = 0  # seed of that training set and of the D1 / D2 draws
  if arg == "cpu":
    c.weight = 0.3  # experiments/adversarial_pretraining/ chooses it on valid
    c.ridge = 1000.0  # ~0.7 x the mean squared feature norm at init (PCFG cpu encoder, 16 x 128)
    c.d1_size, c.d2_size = 32, 16
    c.num_train = 4000  # the probe's training set in the experiments
  elif arg == "test":
    c.ridge = 10.0
    c.d1_size, c.d2_size = 8, 8
    c.num_train = 64
  return c


def mlm(arg, language, *, num_layers, num_heads, embed_dim, mlp_dim):
  """The whole config of masked-LM pretraining on a synthetic language (seed 002; the `mlm`
  task), `paper` / `cpu` / `test` variant `arg`, with the paper-size model given; the
  language's own `data` fields (`configs/pcfg_mlm.py`, `configs/hmm_mlm.py`) come on top."""
  c = ml_collections.ConfigDict()
  c.task = "mlm"  # experiment dispatched by el_jax.main
  c.seeds = (0,)  # model initialisations, all on the same fixed corpus
  c.num_devices = 0  # devices on the `data` mesh axis (0 = all local devices)
  c.progress = True  # show a progress bar

  c.data = ml_collections.ConfigDict()
  c.data.language = language  # "pcfg" (configs/pcfg_mlm.py) | "hmm" (configs/hmm_mlm.py)
  c.data.max_len_tokens = 16  # T: tokens per row
  c.data.num_train = 4_000_000  # fixed training sentences (the paper's count is lost; our choice)
  c.data.num_valid = 10_000  # fixed validation sentences with exact conditionals (choose hyperparameters here)
  c.data.num_test = 10_000  # fixed test sentences with exact conditionals
  c.data.data_seed = 0  # seed of the sampled corpus and of the fixed evaluation masks
  c.data.masking = "one"  # "one" (paper Sec. 3's setup: one position a sentence) | "bert" (15%, 80/10/10: the reference repo's)
  c.data.cache_dir = ""  # folder of the cached corpus ("" = $EL_JAX_CACHE/mlm or ~/.cache/el_jax/mlm)

  c.model = ml_collections.ConfigDict()
  c.model.preset = "encoder"  # "encoder" (BERT-style: learned positions, pre-LN, tied) | "bilstm"
  c.model.num_layers = num_layers  # transformer blocks
  c.model.num_heads = num_heads  # attention heads
  c.model.embed_dim = embed_dim  # residual width (d-model)
  c.model.mlp_dim = mlp_dim  # MLP hidden width (d-inter; 0 = 4 * embed_dim)
  c.model.doc_mask = True  # segment ids: the sentence never attends to its padding
  c.model.dtype = "float32"  # compute dtype: "float32" | "bfloat16"
  # std of the transformer's normal initialisation (GPT-2's 0.02, every committed result's). On
  # the sharp HMM 0.02 holds the cpu encoder on the block plateau and 0.1 takes it off
  # (docs/results/seed002_flatness.md); the bilstm has its own (must stay 0.02).
  c.model.init_std = 0.02  # std of the transformer's normal initialisation (see above)

  c.loss = loss()
  # The academic-budget recipe (App. A.3): AdamW lr 1e-3, 6% warmup then linear decay; the
  # betas, epsilon and weight decay are that recipe's (assumed). Fig. 3 continues with SGD.
  c.optim = optim(lr=1e-3, warmup_steps=1800, decay="linear", weight_decay=0.01, b2=0.98,
                  eps=1e-6)

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 4096  # sentences per step (the paper's)
  # train.num_steps: the paper's "more than 30K steps"
  loop(c.train, num_steps=30_000, log_every=100, eval_every=1000, checkpoint_every=1000,
       keep_checkpoints=2, init_from="")
  c.train.eval_batch_size = 1024  # sentences per evaluation call
  c.train.eval_train_sentences = 10_000  # training sentences evaluated (the first ones)

  c.flatness = flatness()

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
    c.progress = False
  return c
