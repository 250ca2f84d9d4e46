r"""Path-star graphs G(d, l) (seed 000 section 5.1, Table 1; Bachmann & Nagarajan 2024).

Run (any G(d, l): set data.degree / data.path_len):

  python -m el_jax.main --config=configs/path_star.py:cpu --workdir=runs/ps_ce
  python -m el_jax.main --config=configs/path_star.py:cpu --workdir=runs/ps_e1 \
      --config.loss.name=e1 --config.loss.lam=1 --config.optim.warmup_steps=1000
  python -m el_jax.main --config=configs/path_star.py:paper --config.data.degree=5 \
      --config.data.test_file=../shared/data/path_star/deg_{degree}_path_{path_len}_nodes_{num_nodes}_test_20000.txt \
      --workdir=runs/ps_g53_ce

Variants:
  paper  GPT-mini (gpt2 preset, 6 layers x 384 x 6 heads), 200k train / 20k test graphs,
         AdamW lr 1e-4, batch 256, 100 warmup steps then constant (the reference's schedule),
         5 seeds. Paper Table 1 (greedy exact match on the test set): G(2,3) CE 0.289
         (0.123, 0.472), E1 + warmup 0.655 (0.486, 0.976); G(5,3) CE 0.001 (0.000, 0.005),
         E1 + warmup 0.117 (0.094, 0.139).
  cpu    the CPU version of Table 1 (`python experiments/path_star_table1.py --size=cpu`:
         CE, CE + 1000 warmup, E1 + 1000 warmup, 30 runs): 2 x 128 model, batch 32, 2500
         steps, 50k graphs. Expected (measured, seeds 0-4): every run at the Clever-Hans 1/d,
         no significant difference: G(2,3) 0.498 / 0.498 / 0.498, G(5,3) 0.198 / 0.198 / 0.202
         test exact match (results/path_star_table1/table1.json).
  test   tiny, seconds; used by the unit tests.

Variants of the task itself: data.variant = "teacher_forced" | "teacherless" | "reverse".
"""
import ml_collections

VARIANTS = ("paper", "cpu", "test")


def get_config(arg="cpu"):
  arg = arg or "cpu"
  if arg not in VARIANTS:
    raise ValueError(f"unknown path_star variant {arg!r}; valid variants: {VARIANTS}")
  c = ml_collections.ConfigDict()
  c.task = "path_star"  # experiment dispatched by el_jax.main
  c.seeds = (0, 1, 2, 3, 4)  # model initialisations, all on the same fixed dataset
  c.num_devices = 0  # devices on the `data` mesh axis (0 = all local devices)
  c.progress = True  # show a progress bar

  c.data = ml_collections.ConfigDict()
  c.data.degree = 2  # d: arms leaving the source (goal candidates)
  c.data.path_len = 3  # l: nodes on the source-goal path (each arm has l - 1 nodes)
  c.data.num_nodes = 50  # N: node ids 0..N-1 (vocabulary N + 4)
  c.data.variant = "teacher_forced"  # "teacher_forced" | "teacherless" ($ inputs) | "reverse"
  c.data.num_train = 200_000  # generated training graphs (fixed for all model seeds)
  c.data.num_valid = 2000  # generated validation graphs (own seed stream; choose hyperparameters here)
  c.data.num_test = 20_000  # test graphs (generated, or the first ones of test_file; 0 = all)
  c.data.test_file = ""  # reference-format test file; {degree} {path_len} {num_nodes} are filled in ("" = generate)
  c.data.data_seed = 0  # seed of the generated graphs
  c.data.pipeline = "memory"  # training batches: "memory" (in-memory arrays) | "grain" (TFDS array_record files + grain loader, el_jax.data.loader)

  c.model = ml_collections.ConfigDict()
  c.model.preset = "gpt2"  # nanoGPT-style: learned positions, pre-LN, tied embeddings
  c.model.num_layers = 6  # transformer blocks
  c.model.num_heads = 6  # attention heads
  c.model.embed_dim = 384  # residual width
  c.model.mlp_dim = 0  # MLP hidden width (0 = 4 * embed_dim)
  c.model.doc_mask = False  # one graph per row: nothing to mask
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
  c.optim.name = "adamw"  # "adamw" | "adam" | "sgd"
  c.optim.lr = 1e-4  # peak learning rate (the reference's)
  c.optim.warmup_steps = 100  # linear warmup steps (the reference's 100; E1 and its CE control use 1000)
  c.optim.decay = "constant"  # after warmup: "constant" | "cosine" | "linear" | "wsd"
  c.optim.final_lr_frac = 0.0  # cosine / linear / wsd decay end, as a fraction of lr
  c.optim.decay_frac = 0.1  # wsd: fraction of train.num_steps taken by the final linear decay, in (0, 1]
  c.optim.weight_decay = 0.0  # AdamW decoupled weight decay (inferred: not stated in the paper)
  c.optim.b1 = 0.9  # Adam beta1
  c.optim.b2 = 0.999  # Adam beta2
  c.optim.eps = 1e-8  # Adam epsilon
  c.optim.momentum = 0.0  # SGD momentum (0 = plain SGD)
  c.optim.grad_clip = 1.0  # global-norm gradient clipping (0 = off)

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 256  # graphs per step
  c.train.num_steps = 100_000  # optimizer steps (128 epochs of 781 steps; the reference allows up to 500 epochs)
  c.train.log_every = 100  # steps between training-metric rows
  c.train.eval_every = 5000  # steps between greedy-decoding evaluations (0 = end only)
  c.train.checkpoint_every = 5000  # steps between orbax checkpoints
  c.train.eval_batch_size = 2000  # graphs per evaluation call
  c.train.eval_train_graphs = 2000  # training graphs evaluated (the first ones)
  c.train.stop_at_step = 0  # stop (resumably) after this step, 0 = run to num_steps
  c.train.vmap_seeds = False  # True: train all seeds as one stacked, jitted program (el_jax.seeds)
  c.train.vmap_seeds_impl = "auto"  # its step: "vmap" | "map" (lax.map over seeds) | "auto" (map on CPU, else vmap)
  c.train.cpu_dots = "xla"  # matmuls on CPU: "xla" (XLA's choice, YNNPACK in jax 0.10.2; committed results) | "eigen" (Eigen, faster on small models: docs/bench.md; other rounding)

  c.flatness = ml_collections.ConfigDict()
  c.flatness.every = 0  # steps between Hessian / Fisher measurements (0 = off)
  c.flatness.method = "hutchinson"  # "hutchinson" | "hutch++" | "exact"
  c.flatness.num_probes = 8  # Hessian probes per batch
  c.flatness.num_batches = 4  # fixed training batches averaged over
  c.flatness.fisher_samples = 4  # label draws from the model per batch
  c.flatness.lanczos_steps = 0  # Lanczos steps for the top eigenvalue (0 = skip)

  if arg == "cpu":
    # Sized so that Table 1 (2 graphs x 2 losses x 5 seeds) takes <= 30 min on 2 cores:
    # per graph, a step of 32 graphs costs 0.6-0.7x one of 64 or 128 on this CPU
    # (G(5,3): 0.72 vs 1.27 vs 1.04 ms per graph); greedy evaluation of the 20k test graphs is a large part
    # of a short run, so it happens once, at the end.
    c.data.num_train = 50_000
    c.model.num_layers, c.model.num_heads, c.model.embed_dim = 2, 4, 128
    c.optim.lr = 1e-3
    c.train.batch_size = 32
    c.train.num_steps = 2500
    c.train.log_every = 25
    c.train.eval_every = 0
    c.train.checkpoint_every = 500
  elif arg == "test":
    c.seeds = (0,)
    c.data.num_nodes = 12
    c.data.num_train, c.data.num_valid, c.data.num_test = 64, 24, 40
    c.model.num_layers, c.model.num_heads, c.model.embed_dim = 2, 2, 16
    c.optim.lr = 3e-3
    c.optim.warmup_steps = 0
    c.train.batch_size = 16
    c.train.num_steps = 8
    c.train.log_every = 2
    c.train.eval_every = 4
    c.train.checkpoint_every = 4
    c.train.eval_batch_size = 16
    c.train.eval_train_graphs = 32
    c.progress = False
  return c
