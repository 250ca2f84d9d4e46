"""Exact Hessian-vector products by forward-over-reverse differentiation.

`hvp` is `jax.jvp` of `jax.grad`: one HVP costs about two gradients. When
several products share one point, `jax.linearize` of the gradient does the
primal forward and backward pass once and every further tangent costs only the
linear part, so a vmapped batch of probes costs ~1.4x a gradient per probe.
Params and batch are always arguments of the jitted code: closing over them
would let XLA constant-fold the model and would also give wrong timings.
"""
import functools

import jax

from el_jax.flatness import _util


def grad_at(loss_fn, batch):
  return lambda p: jax.grad(loss_fn)(p, batch)


def linearized_hvp(loss_fn, params, batch):
  """Returns the linear map v -> H v at (params, batch), to be used inside a trace."""
  _, f_jvp = jax.linearize(grad_at(loss_fn, batch), params)
  return f_jvp


def map_probes(f, vs, chunk_size):
  """Applies `f` to each probe of the stacked pytree `vs`, `chunk_size` at a time (vmapped)."""
  p = jax.tree.leaves(vs)[0].shape[0]
  if not chunk_size or chunk_size >= p:
    return jax.vmap(f)(vs)  # no loop: residuals stay outside a while body
  return jax.lax.map(f, vs, batch_size=chunk_size)


@functools.partial(jax.jit, static_argnums=0)
def _hvp(loss_fn, params, batch, v):
  return jax.jvp(grad_at(loss_fn, batch), (params,), (v,))[1]


@functools.partial(jax.jit, static_argnums=(0, 4))
def _batched_hvp(loss_fn, params, batch, vs, chunk_size):
  return map_probes(linearized_hvp(loss_fn, params, batch), vs, chunk_size)


def hvp(loss_fn, params, batch, v, *, validate=True):
  """Hessian-vector product H(params; batch) @ v.

  Args:
    loss_fn: pure `loss_fn(params, batch) -> scalar`, hashable (jit-static).
    params: parameter pytree.
    batch: batch pytree.
    v: pytree with the structure and shapes of `params`.
    validate: check that `loss_fn` is scalar and deterministic first.

  Returns:
    H v, a pytree like `params`.
  """
  if validate:
    _util.check_deterministic(loss_fn, params, batch)
    _util.check_scalar_loss(loss_fn, params, batch)
  if jax.tree.structure(v) != jax.tree.structure(params) or any(
      a.shape != b.shape for a, b in zip(jax.tree.leaves(v), jax.tree.leaves(params))):
    raise ValueError("v must be a pytree with the structure and shapes of params")
  return _hvp(loss_fn, params, batch, v)


def batched_hvp(loss_fn, params, batch, vs, *, chunk_size=None, validate=True):
  """H @ v_i for probes stacked on a leading axis of every leaf of `vs`.

  One `jax.linearize` serves all probes; `chunk_size` probes are vmapped at a
  time (None: all at once) to bound memory.
  """
  if validate:
    _util.check_deterministic(loss_fn, params, batch)
    _util.check_scalar_loss(loss_fn, params, batch)
  return _batched_hvp(loss_fn, params, batch, vs, chunk_size)
