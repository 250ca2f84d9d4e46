r"""Masked-token regression on the Dyck-type language of seed 002 Sec. 6: a `Task` of el_jax.run.train.

  JAX_ENABLE_X64=1 python -m el_jax.main --config=configs/dyck.py:cpu --workdir=runs/dyck

Data (`el_jax.core.data.dyck`, `el_jax.core.models.dyck_net.pretraining_data`): the whole
pre-training population of the one-bracket-type language of length T = `data.length`
(`data.nested`: Dyck-1 instead of the paper's balanced variant), every (sentence, masked
position) pair, equally likely, as the +-position encoding z [N, T, 2T] and the target
y = p(() - p()) = +-1 of the exact conditional. Nothing is sampled to build it.

Training batches (`batch`): step i of model seed s draws `train.batch_size` inputs
uniformly with replacement from the population and adds `data.label_noise` x Rademacher
to their targets, from the key stream `el_jax.core.models.dyck_net.train_chunk` uses: key_0 =
jax.random.key(10_000 + s), (key_{i+1}, k_idx, k_noise) = split(key_i, 3), the indices
randint(k_idx, [B], 0, N), the signs rademacher(k_noise, [B]). So this task trains exactly
what a loop of `train_chunk` trains (tests/test_dyck_task.py). A batch is {"z": [B, T, 2T], "y": [B]} (the model's inputs, not
the token layout of `el_jax.core.tasks.base`: the task's own step reads it).

Model and objective (`Task.own_model`): `el_jax.core.models.dyck_net`, one attention layer and
a ReLU MLP with a scalar output f (`model.width` neurons, init `dyck_net.init` with
`model.value_std`), and its squared loss 1/2 mean_batch (f - y)^2 (`dyck_net.loss_fn`):
not a per-token loss on logits, so not one of `el_jax.core.losses`. The config says so with
`loss.name = "squared"` (`LOSS_NAME`; the other loss blocks of `config_blocks.loss()` are
never read), and the step is this module's `train_step`. `model.dtype` is "float64" (what
the experiment measures in) or "float32"; JAX's 64-bit mode is one switch for the whole
process, so it must match it (JAX_ENABLE_X64=1 for float64), and a mismatch is refused.

Evaluation: one set, `train` (the pre-training population; valid and test would be the
same finite population), exactly:
  loss           1/2 E (f - y)^2 over all N inputs, noiseless targets (the population loss)
  max_abs_error  max |f - y| over the inputs (< 1: every masked token predicted by sign)
  n              N, the number of (sentence, mask) inputs
"""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from el_jax.core.data import dyck
from el_jax.core.models import dyck_net
from el_jax.core.tasks import base

LOSS_NAME = "squared"  # config.loss.name of this task: dyck_net.loss_fn, 1/2 mean (f - y)^2
DTYPES = ("float64", "float32")
KEY_OFFSET = 10_000  # the minibatch key stream of model seed s starts at jax.random.key(10_000 + s)
DRAW_CHUNK = 1000  # steps of minibatch draws computed at once (one jitted scan)


def x64_enabled():
  """Whether JAX computes in 64 bits by default (JAX_ENABLE_X64, `jax.enable_x64`)."""
  return jnp.result_type(float) == jnp.float64


@functools.lru_cache(maxsize=4)
def _population(length, nested, x64):
  """(z [N, T, 2T], y [N]) host arrays of the whole pre-training population (read-only)."""
  data = dyck_net.pretraining_data(dyck.Language(length, nested=nested))
  z, y = np.asarray(data["z"]), np.asarray(data["y"])
  z.flags.writeable = y.flags.writeable = False
  return z, y


@functools.partial(jax.jit, static_argnames=("num_steps", "batch_size", "num_inputs", "dtype"))
def draws(key, *, num_steps, batch_size, num_inputs, dtype):
  """The minibatch draws of `num_steps` steps from `key`, as `dyck_net.train_chunk` draws them:
  (key after them, indices [num_steps, B], Rademacher signs [num_steps, B] of `dtype`)."""
  def step(k, _):
    k, ki, kn = jax.random.split(k, 3)
    return k, (jax.random.randint(ki, (batch_size,), 0, num_inputs),
               jax.random.rademacher(kn, (batch_size,), dtype))

  key, (idx, sign) = jax.lax.scan(step, key, None, length=num_steps)
  return key, idx, sign


def train_step(graphdef, loss_fn, tx, groups, state, batch, positions=None, reduce_fn=None):
  """One optimizer step of `dyck_net.loss_fn` on a batch {"z", "y"}: the step of
  `dyck_net.train_chunk`, with the signature of `el_jax.core.step.train_step` (graphdef,
  loss_fn, groups, positions and reduce_fn are the decoder's and unused). Metrics: loss
  (of the batch, before the update), grad_norm, update_norm, param_norm (after it)."""
  del graphdef, loss_fn, groups, positions, reduce_fn
  loss, grads = jax.value_and_grad(dyck_net.loss_fn)(state["params"], batch)
  updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
  params = optax.apply_updates(state["params"], updates)
  metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads),
             "update_norm": optax.tree.norm(updates), "param_norm": optax.tree.norm(params)}
  return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, metrics


def _number(section, fields, name, lo):
  v = fields.get(name)
  if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
      or not np.isfinite(v) or v < lo:
    raise ValueError(f"{section}.{name}={v!r} must be a finite number >= {lo:g}")


class DyckTask(base.BatchSizeRows, base.Task):
  """The Dyck model of seed 002 Sec. 6 on its exact pre-training population (module docstring)."""

  own_model = True
  resumable_fields = frozenset({"train.eval_batch_size"})

  @classmethod
  def validate_config(cls, config):
    d, m, t = config.data, config.model, config.train
    length = d.get("length")
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 2 \
        or length % 2:
      raise ValueError(f"data.length={length!r} must be an even integer >= 2 (tokens per "
                       f"sentence)")
    if not isinstance(d.get("nested"), bool):
      raise ValueError(f"data.nested={d.get('nested')!r} must be True (Dyck-1) or False (the "
                       f"paper's balanced language)")
    _number("data", d, "label_noise", 0)
    base.check_int("model", m, "width", 1, " (neurons)")
    _number("model", m, "value_std", 0)
    dtype = m.get("dtype")
    if dtype not in DTYPES:
      raise ValueError(f"model.dtype={dtype!r} must be one of {DTYPES}")
    if (dtype == "float64") != x64_enabled():
      raise ValueError(
          f"model.dtype={dtype!r} but JAX's 64-bit mode is {'on' if x64_enabled() else 'off'} "
          f"(one switch for the whole process): "
          + ("start Python with JAX_ENABLE_X64=1 (or call jax.config.update('jax_enable_x64', "
             "True) before anything else)" if dtype == "float64" else
             "run without JAX_ENABLE_X64") + f", or set model.dtype="
          f"{'float32' if dtype == 'float64' else 'float64'!r}")
    if m.get("pretrained", ""):
      raise ValueError(f"model.pretrained={m.pretrained!r}: the Dyck model has no pretrained "
                       f"checkpoints; set it to ''")
    loss = config.loss
    if loss.get("name") != LOSS_NAME:
      raise ValueError(f"loss.name={loss.get('name')!r}: the dyck task trains its model's own "
                       f"squared loss 1/2 mean (f - y)^2 (el_jax.core.models.dyck_net.loss_fn); set "
                       f"loss.name={LOSS_NAME!r}")
    if loss.get("reduction", "mean") != "mean":
      raise ValueError(f"loss.reduction={loss.reduction!r}: the dyck task's loss is the plain "
                       f"mean over the batch; set loss.reduction='mean'")
    flat = config.get("flatness")
    if flat is not None and flat.get("every", 0):
      raise ValueError(f"flatness.every={flat.every}: the loop's flatness hook measures a "
                       f"decoder's CE, not the Dyck model; set it to 0 (experiments/"
                       f"dyck_flatness/ measures the exact Tr(H) of the saved checkpoints)")
    base.check_int("train", t, "batch_size", 1, " (inputs per step, drawn with replacement)")
    base.check_int("train", t, "eval_batch_size", 1, " (inputs per evaluation call)")

  def __init__(self, config):
    self.config = config
    d = config.data
    self.length, self.label_noise = int(d.length), float(d.label_noise)
    self.language = dyck.Language(self.length, nested=bool(d.nested))
    self.z, self.y = _population(self.length, bool(d.nested), x64_enabled())
    self._population = {"z": self.z, "y": self.y}
    self._streams = {}  # model seed -> [chunk index, key after that chunk, (indices, signs)]

  # --- the model -----------------------------------------------------------------

  def init_params(self, seed):
    """`dyck_net.init(jax.random.key(seed), T, model.width, value_std=model.value_std)`."""
    m = self.config.model
    return dyck_net.init(jax.random.key(seed), self.length, int(m.width),
                         value_std=float(m.value_std))

  def step_fn(self):
    return train_step

  # --- data ----------------------------------------------------------------------

  @property
  def vocab_size(self):
    return 3  # "(", ")" and the mask

  @property
  def context_len(self):
    return self.length

  @property
  def num_train(self):
    return len(self.y)

  @property
  def examples_per_step(self):
    # Inputs are drawn with replacement, so a batch may exceed the population; an "epoch"
    # (the log's epoch column) is then one step.
    return min(self.config.train.batch_size, self.num_train)

  def splits(self):
    return {name: self._population for name in base.SPLITS}

  def eval_sets(self):
    return (("train", self._population),)

  def _chunk(self, seed, c):
    """(indices, signs) [DRAW_CHUNK, B] of the steps of chunk `c` of model seed `seed`: the
    key stream is followed from step 0 (or from the chunk before, the usual case)."""
    s = self._streams.get(seed)
    if s is None or s[0] > c:
      s = [-1, jax.random.key(KEY_OFFSET + seed), None]
    while s[0] < c:
      s[1], idx, sign = draws(s[1], num_steps=DRAW_CHUNK,
                              batch_size=int(self.config.train.batch_size),
                              num_inputs=self.num_train, dtype=self.y.dtype)
      s[0], s[2] = s[0] + 1, (np.asarray(idx), np.asarray(sign))
    self._streams[seed] = s
    return s[2]

  def batch(self, seed, step):
    idx, sign = self._chunk(seed, step // DRAW_CHUNK)
    i = step % DRAW_CHUNK
    return {"z": self.z[idx[i]], "y": self.y[idx[i]] + self.label_noise * sign[i]}

  # --- evaluation ----------------------------------------------------------------

  def decode_fn(self, graphdef):
    """f(params, z) -> the model's outputs f_theta(z) [B] (`dyck_net.apply`)."""
    del graphdef  # the task's own model has none
    return dyck_net.apply

  def evaluate(self, evaluator, params, dataset):
    """The exact population loss (module docstring)."""
    f = base.map_padded(lambda z: evaluator.decode(params, evaluator.put(z)), (dataset["z"],),
                        self.config.train.eval_batch_size, evaluator.num_devices)
    r = np.asarray(f, np.float64) - np.asarray(dataset["y"], np.float64)
    return {"loss": float(0.5 * np.mean(r * r)), "max_abs_error": float(np.max(np.abs(r))),
            "n": int(r.size)}

  # --- reporting -------------------------------------------------------------------

  def summary_fields(self):
    return {"language": repr(self.language), "num_inputs": self.num_train}

  def write_plots(self, rows, workdir):
    from el_jax.infra import plots  # matplotlib only when training for real
    plots.metric_over_steps({"dyck": rows}, "loss", os.path.join(workdir, "loss.png"),
                            kind="train", ylabel="minibatch loss 1/2 (f - y)^2", log=True)
