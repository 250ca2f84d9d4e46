"""Pytree and validation helpers shared by the flatness estimators."""
import functools

import jax
import jax.numpy as jnp
import numpy as np



def leaf_names(tree):
  """'/'-joined key paths of the leaves of `tree`, in `jax.tree.leaves` order."""
  paths = jax.tree_util.tree_flatten_with_path(tree)[0]
  return [jax.tree_util.keystr(p, simple=True, separator="/") for p, _ in paths]


def leaf_slices(tree):
  """(name, start, stop) of each leaf inside `ravel_pytree(tree)`."""
  out, start = [], 0
  for name, x in zip(leaf_names(tree), jax.tree.leaves(tree)):
    size = int(np.prod(np.shape(x), dtype=np.int64))
    out.append((name, start, start + size))
    start += size
  return out


def tree_vdot(a, b):
  return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def stacked_leaf_dots(a, b):
  """Per-leaf dot products of two pytrees stacked on a leading axis P -> [P] each."""
  return [jnp.sum((x * y).reshape(x.shape[0], -1), axis=1)
          for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))]


def random_like(key, tree, num, distribution):
  """`num` random pytrees like `tree`, stacked on a leading axis."""
  leaves, treedef = jax.tree.flatten(tree)
  keys = jax.random.split(key, len(leaves))
  out = []
  for k, x in zip(keys, leaves):
    shape = (num,) + tuple(x.shape)
    if distribution == "rademacher":
      out.append(jax.random.rademacher(k, shape, dtype=x.dtype))
    elif distribution == "gaussian":
      out.append(jax.random.normal(k, shape, dtype=x.dtype))
    else:
      raise ValueError(f"unknown probe distribution {distribution!r}; "
                       "valid: 'rademacher', 'gaussian'")
  return jax.tree.unflatten(treedef, out)


def check_positive(name, value):
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
    raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def check_scalar_loss(loss_fn, params, batch):
  out = jax.eval_shape(loss_fn, params, batch)
  if not hasattr(out, "shape") or out.shape != ():
    shape = getattr(out, "shape", type(out).__name__)
    raise ValueError(f"loss_fn(params, batch) must return a scalar, got shape {shape}; "
                     "reduce the per-token losses (e.g. take the mean) inside loss_fn")
  if not jnp.issubdtype(out.dtype, jnp.floating):
    raise ValueError(f"loss_fn must return a floating scalar, got dtype {out.dtype}")


@functools.partial(jax.jit, static_argnums=0)
def _twice(fn, params, batch):
  return fn(params, batch), fn(params, batch)


def check_deterministic(fn, params, batch, *, name="loss_fn"):
  """Traces `fn` twice in one jitted call; different outputs mean randomness is on.

  Host-side randomness differs between the two traces; a stateful NNX RNG
  (dropout with `rngs` still attached) cannot even be traced, and both are
  reported as the same mistake. Every matvec of an estimator must apply the
  same operator, so such a model cannot be measured.
  """
  try:
    a, b = _twice(fn, params, batch)
  except Exception as e:  # pylint: disable=broad-except
    if "trace level" in str(e) or isinstance(e, jax.errors.UnexpectedTracerError):
      raise ValueError(
          f"{name} is not deterministic: it mutates RNG state while evaluated ({e}). "
          f"{_HINT}") from e
    raise
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if not np.array_equal(x, y, equal_nan=True):
      raise ValueError(
          f"{name} is not deterministic: two evaluations on the same params and batch "
          f"differ (max |diff| = {float(np.max(np.abs(x - y))):.3g}). {_HINT}")


_HINT = ("Turn dropout and any other randomness off (deterministic=True / eval mode) "
         "before measuring flatness.")


def stack_batches(batches, num_batches=None):
  """List or iterator of same-structure batches -> pytree stacked on axis 0."""
  if isinstance(batches, (list, tuple)):
    items = list(batches[:num_batches] if num_batches else batches)
  else:
    items = []
    for b in batches:
      items.append(b)
      if num_batches and len(items) >= num_batches:
        break
  if not items:
    raise ValueError("no batches given")
  structs = {jax.tree.structure(b) for b in items}
  if len(structs) != 1:
    raise ValueError("all batches must have the same pytree structure")
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *items), len(items)


def num_examples(stacked):
  """Examples in a stacked batch pytree: K * (leading dim of the first leaf)."""
  x = jax.tree.leaves(stacked)[0]
  return int(x.shape[0] * (x.shape[1] if x.ndim > 1 else 1))


def shard_stacked(stacked, params, mesh, axis="data"):
  """Places stacked batches [K, B, ...] split over `axis` on B; params replicated."""
  from jax.sharding import NamedSharding, PartitionSpec as P
  b = jax.tree.leaves(stacked)[0].shape[1]
  n = mesh.shape[axis]
  if b % n:
    raise ValueError(f"batch size {b} is not divisible by mesh axis {axis!r} of size {n}")
  data = NamedSharding(mesh, P(None, axis))
  stacked = jax.tree.map(lambda x: jax.device_put(x, data), stacked)
  params = jax.device_put(params, NamedSharding(mesh, P()))
  return stacked, params


def first(stacked):
  return jax.tree.map(lambda x: x[0], stacked)


def add_batch_axis(batch):
  return jax.tree.map(lambda x: jnp.asarray(x)[None], batch)
