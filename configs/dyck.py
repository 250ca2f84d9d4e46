r"""The Dyck model of seed 002, Sec. 6, trained by SGD from random initialisation (the `dyck` task).

Run (CPU, about a minute per seed; float64, so JAX's 64-bit mode must be on):

  JAX_ENABLE_X64=1 python -m el_jax.main --config=configs/dyck.py:cpu --workdir=runs/dyck
  JAX_ENABLE_X64=1 python -m el_jax.main --config=configs/dyck.py:cpu --workdir=runs/dyck_noise \
      --config.data.label_noise=0.5

experiments/dyck_flatness/ trains these runs (plain SGD and the label-noise arm, seeds
0-2) through an `el_jax.run.grid.Grid` and measures the exact Tr(H), the top Hessian eigenvalue,
the cancellation ratio and the downstream error on the checkpoints.

The setting (`el_jax.core.tasks.dyck`, `el_jax.core.models.dyck_net`, `el_jax.core.data.dyck`): sentences
uniform over the strings of length T with as many ( as ), one uniformly masked token; the
one-attention-layer + ReLU-MLP model on the +-position encoding; minibatches drawn with
replacement from the exact pre-training population (N = C(T, T/2) * T inputs).

The loss is the model's own squared loss 1/2 mean (f - y)^2 (`dyck_net.loss_fn`): the
model outputs one number f, not logits, so none of el_jax.core.losses' per-token losses applies.
`loss.name = "squared"` says so (the `dyck` task refuses any other name, and its step
computes the loss; the blocks of the other losses that `config_blocks.loss()` carries are
never read). The optimizer is plain SGD (no momentum, constant learning rate, no gradient
clipping: `optim.grad_clip = 0`).

Variants:
  paper  the same as cpu: the paper gives no numbers for this setting and no training
         experiment on it, and every quantity here is exact at any T (data.length).
  cpu    T = 8 (N = 560 inputs), 32 neurons, W_V init std 0.1, SGD lr 0.1, batch 32,
         40k steps (long after the loss converges), seeds 0-2, float64.
  test   T = 4, 4 neurons, 30 steps, float32 (no 64-bit mode needed); seconds, for tests.

Expected (cpu; results/dyck_flatness/, docs/results/seed002_flatness.md): the population
loss falls to 6.4e-6 .. 9.2e-6 (seeds 0-2) after 40k steps of plain SGD, and to
4.0e-4 .. 1.4e-3 with data.label_noise=0.5; the exact Tr(H) there is 7.2 .. 10.6 (plain)
and 3.3 .. 3.7 (label noise), far above the count solution's 0.707.
"""
import ml_collections

from el_jax.run import config_blocks as blocks

VARIANTS = ("paper", "cpu", "test")


def get_config(arg="cpu"):
  arg = arg or "cpu"
  if arg not in VARIANTS:
    raise ValueError(f"unknown dyck variant {arg!r}; valid variants: {VARIANTS}")
  c = ml_collections.ConfigDict()
  c.task = "dyck"  # experiment dispatched by el_jax.main (el_jax.core.tasks.dyck)
  c.seeds = (0, 1, 2)  # model initialisations (and minibatch streams: jax.random.key(10_000 + seed))
  c.num_devices = 1  # devices on the `data` mesh axis: one, the model is tiny (0 = all local devices)
  c.progress = True  # show a progress bar

  c.data = ml_collections.ConfigDict()
  c.data.length = 8  # T: tokens per sentence (even); N = C(T, T/2) * T pre-training inputs
  c.data.nested = False  # True: Dyck-1 (prefix condition) instead of the paper's balanced language
  c.data.label_noise = 0.0  # targets y +- label_noise (Rademacher) in training batches (0 = plain SGD)

  c.model = ml_collections.ConfigDict()
  c.model.width = 32  # m: neurons of the ReLU MLP
  c.model.value_std = 0.1  # init std of W_V (W_Q, W_K: 1/sqrt(2T); out: 1/sqrt(m))
  c.model.dtype = "float64"  # "float64" (needs JAX_ENABLE_X64=1) | "float32" (must match JAX's 64-bit mode)

  c.loss = blocks.loss()
  c.loss.name = "squared"  # dyck_net.loss_fn, 1/2 mean (f - y)^2: the only loss of this task

  c.optim = blocks.optim(name="sgd", lr=0.1, grad_clip=0.0)

  c.train = ml_collections.ConfigDict()
  c.train.batch_size = 32  # inputs per step, drawn uniformly with replacement from the population
  blocks.loop(c.train, num_steps=40_000, keep_checkpoints=0, log_every=1000, eval_every=0,
              checkpoint_every=1000)
  c.train.eval_batch_size = 4096  # inputs per evaluation call (the evaluation is exact over all N)

  c.flatness = blocks.flatness()  # keep flatness.every = 0: the loop's hook measures a decoder's CE

  if arg == "test":
    c.seeds = (0,)
    c.data.length = 4
    c.model.width = 4
    c.model.dtype = "float32"
    c.train.num_steps = 30
    c.train.log_every = 10
    c.train.checkpoint_every = 10
    c.progress = False
  return c
