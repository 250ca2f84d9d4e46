"""Exact Hessian-vector products and quadratic forms v^T H v.

`hvp` is `jax.jvp` of `jax.grad` (forward-over-reverse). When several products
share one point, `jax.linearize` of the gradient does the primal forward and
backward pass once and every further tangent costs only the linear part. That
part is about twice the gradient: each matmul of the gradient (forward x W,
backward g W^T and g^T x) gets two tangent terms, so a vmapped batch of HVPs
costs ~2x a gradient per probe (XLA cost analysis: 2.09x the FLOPs on the
copy-task model, el_jax/tools/flatness_bench.py).

Hutchinson's total needs only the scalars v^T H v, the second derivative of
L(params + t v) at t = 0. `quadratic_form` gets it by forward-over-forward
differentiation: no backward pass, and under `jax.vmap` over probes the
primal forward runs once for all of them. Per matmul y = W x a probe then
needs V x + W x' (first order) and 2 V x' + W x'' (second order): 4 matmuls
against the gradient's 3. Nested `jax.jvp` computes the first-order tangents
twice, though (once as the inner tangent, once as the outer tangent of the
primal), and XLA's common-subexpression pass removes only part of that (89 of
108 dots stay on the copy-task model: 1.8x the gradient's FLOPs per probe).
`quadratic_form` therefore evaluates the nested jvp through its jaxpr with
identical equations computed once (`_eval_merged`): 69 dots, the count above,
and 1.37x the gradient's FLOPs per probe.

Params and batch are always arguments of the jitted code: closing over them
would let XLA constant-fold the model and would also give wrong timings.
"""
import functools

import jax
import jax.extend.core as jex_core
import numpy as np

import el_jax.core.flatness._util as _util


def grad_at(loss_fn, batch):
  return lambda p: jax.grad(loss_fn)(p, batch)


def linearized_hvp(loss_fn, params, batch):
  """Returns the linear map v -> H v at (params, batch), to be used inside a trace."""
  _, f_jvp = jax.linearize(grad_at(loss_fn, batch), params)
  return f_jvp


def _second_directional(loss_fn, params, batch, v):
  def directional(p):
    return jax.jvp(lambda q: loss_fn(q, batch), (p,), (v,))[1]
  return jax.jvp(directional, (params,), (v,))[1]


def quadratic_form(loss_fn, params, batch, v):
  """v^T H(params; batch) v by forward-over-forward differentiation (two nested jvps).

  Traceable (use it inside jit / vmap); the nested jvp is evaluated with its
  duplicated first-order work merged (see the module docstring).
  """
  closed = jax.make_jaxpr(functools.partial(_second_directional, loss_fn))(params, batch, v)
  return _eval_merged(closed, *jax.tree.leaves((params, batch, v)))[0]


# Equations that are inlined (their bodies join the merge): calls, and custom-jvp
# functions, whose rule is no longer needed once differentiation is done.
_INLINED = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "remat", "checkpoint")


def _plain(x):
  """Whether a parameter value can key the merge: hashable data, no jaxprs, arrays or functions."""
  if isinstance(x, (jex_core.Jaxpr, jex_core.ClosedJaxpr, np.ndarray, jax.Array)) or callable(x):
    return False
  if isinstance(x, (tuple, list, frozenset)):
    return all(_plain(y) for y in x)
  try:
    hash(x)
  except TypeError:
    return False
  return True


def _eval_merged(closed, *args):
  """Evaluates a closed jaxpr, computing structurally identical equations once.

  Two equations are merged when they apply the same primitive with equal
  parameters to the same values (literals compare by value). Equations with
  effects, or with parameters that cannot be compared safely (sub-jaxprs,
  arrays, functions), are always evaluated. Calls are inlined first so that
  duplicates inside them meet. The result equals plain evaluation: merged
  equations are pure and receive identical inputs.
  """
  cache, alive = {}, []

  def key(eqn, vals):
    if eqn.effects or not all(_plain(p) for p in eqn.params.values()):
      return None
    ins = tuple(("literal", repr(a.val), str(a.aval)) if isinstance(a, jex_core.Literal)
                else id(x) for a, x in zip(eqn.invars, vals))
    return eqn.primitive, tuple(sorted(eqn.params.items())), ins

  def run(jaxpr, consts, args):
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    read = lambda a: a.val if isinstance(a, jex_core.Literal) else env[a]
    for eqn in jaxpr.eqns:
      vals = [read(a) for a in eqn.invars]
      sub = (eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
             if eqn.primitive.name in _INLINED else None)
      if isinstance(sub, jex_core.ClosedJaxpr):
        outs = run(sub.jaxpr, sub.consts, vals)
      elif isinstance(sub, jex_core.Jaxpr):
        outs = run(sub, [], vals)
      else:
        k = key(eqn, vals)
        if k is not None and k in cache:
          outs = cache[k]
        else:
          with eqn.ctx.manager:
            outs = eqn.primitive.bind(*vals, **eqn.primitive.get_bind_params(eqn.params))
          outs = list(outs) if eqn.primitive.multiple_results else [outs]
          alive.append(outs)  # keeps every value alive, so no id() is reused
          if k is not None:
            cache[k] = outs
      env.update(zip(eqn.outvars, outs))
    return [read(a) for a in jaxpr.outvars]

  return run(closed.jaxpr, closed.consts, list(args))


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


@functools.partial(jax.jit, static_argnums=(0, 4))
def _batched_quadratic_form(loss_fn, params, batch, vs, chunk_size):
  return map_probes(functools.partial(quadratic_form, loss_fn, params, batch), vs, chunk_size)


def _check_like_params(v, params, name):
  if jax.tree.structure(v) != jax.tree.structure(params) or any(
      a.shape != b.shape for a, b in zip(jax.tree.leaves(v), jax.tree.leaves(params))):
    raise ValueError(f"{name} must be a pytree with the structure and shapes of params")


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
  _check_like_params(v, params, "v")
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


def batched_quadratic_form(loss_fn, params, batch, vs, *, chunk_size=None, validate=True):
  """v_i^T H v_i for probes stacked on a leading axis of every leaf of `vs`.

  Forward-over-forward (no backward pass; the primal forward is shared by the
  probes of a chunk); `chunk_size` probes are vmapped at a time (None: all at
  once; smaller chunks bound memory but repeat the primal forward per chunk).
  Equal to `vdot(v_i, batched_hvp(...)[i])` up to float rounding, at less
  cost, but it gives no H v_i (so no per-layer split).

  Returns:
    Array [num_probes].
  """
  if validate:
    _util.check_deterministic(loss_fn, params, batch)
    _util.check_scalar_loss(loss_fn, params, batch)
  leads = {tuple(np.shape(x))[:1] for x in jax.tree.leaves(vs)}
  if jax.tree.structure(vs) != jax.tree.structure(params) or len(leads) != 1 or any(
      np.shape(a)[1:] != np.shape(b) for a, b in zip(jax.tree.leaves(vs), jax.tree.leaves(params))):
    raise ValueError("vs must be a pytree like params with one leading probe axis on every "
                     "leaf (shape (num_probes,) + the param's shape)")
  return _batched_quadratic_form(loss_fn, params, batch, vs, chunk_size)
