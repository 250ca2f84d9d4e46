"""Trace of the Hessian: Hutchinson, Hutch++ and the exact sum over a basis.

Hutchinson: tr(H) = E[v^T H v] for probes with E[v v^T] = I (Rademacher by
default: for a diagonal H every Rademacher probe is exact, and the variance
2 sum_{i != j} H_ij^2 is never worse than Gaussian's). By default each v^T H v
comes from forward-over-forward differentiation (`hvp_ops.quadratic_form`,
no backward pass, the cheapest probe). With `per_layer=True` each probe is a
full HVP instead and the per-layer traces use the same probes:
E[v_l^T (H v)_l] = tr(H_ll), so the per-layer values add up to the total probe
by probe. Both give the same estimate up to float rounding.

Hutch++ (Meyer et al. 2021) spends a third of the matvecs on a sketch Q of the
top eigenspace, a third on tr(Q^T H Q) and the rest on Hutchinson for the
deflated (I - QQ^T) H (I - QQ^T). Its per-layer split uses
  H_ii = 2 (Q (HQ)^T)_ii - (Q T Q^T)_ii + (P H P)_ii,  T = Q^T H Q, P = I - QQ^T,
which sums to tr(T) + tr(PHP) over all i and is unbiased layer by layer.

Exact: sum_i e_i^T H e_i over the flattened parameters, in vmapped chunks.
"""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import el_jax.core.flatness._util as _util
from el_jax.core.models import decoder
import el_jax.core.flatness.hvp_ops as hvp_lib

METHODS = ("hutchinson", "hutch++", "exact")
DISTRIBUTIONS = ("rademacher", "gaussian")
MAX_EXACT_PARAMS = 200_000


@dataclasses.dataclass(frozen=True)
class TraceResult:
  """A Hessian-trace measurement.

  Attributes:
    estimate: tr(H) of the loss averaged over the batches.
    stderr: Monte-Carlo standard error given the data (0 for "exact"; for
      "hutch++" that of its Hutchinson residual, given the sketch).
    per_layer: parameter path -> its block's trace; values add up to `estimate`.
      Empty for "hutchinson" unless it was called with `per_layer=True`.
    method: "hutchinson" | "hutch++" | "exact".
    num_matvecs: Hessian-vector products (or quadratic forms v^T H v) per batch.
    num_batches: batches averaged over.
    num_examples: examples that went in (batches x leading batch dim).
    batch_stderr: spread of the per-batch estimates / sqrt(num_batches): data
      subsampling plus probe noise (nan for one batch).
    per_batch: the per-batch estimates.
  """
  estimate: float
  stderr: float
  per_layer: dict
  method: str
  num_matvecs: int
  num_batches: int
  num_examples: int
  batch_stderr: float = math.nan
  per_batch: tuple = ()


def _flat_matvec(loss_fn, params, batch):
  _, unravel = ravel_pytree(params)
  f = hvp_lib.linearized_hvp(loss_fn, params, batch)
  return lambda x: ravel_pytree(f(unravel(x)))[0]


def _segment_sums(x_n, params):
  return jnp.stack([jnp.sum(x_n[a:b]) for _, a, b in _util.leaf_slices(params)])


def _mc(samples):
  """Mean and squared standard error of the mean of 1-d samples."""
  p = samples.shape[0]
  se2 = jnp.var(samples, ddof=1) / p if p > 1 else jnp.asarray(jnp.nan, samples.dtype)
  return jnp.mean(samples), se2


def _hutchinson(loss_fn, params, batch, key, num_probes, distribution, chunk, per_layer):
  vs = _util.random_like(key, params, num_probes, distribution)
  if not per_layer:  # v^T H v alone: forward-over-forward, no H v
    q_p = hvp_lib.map_probes(
        functools.partial(hvp_lib.quadratic_form, loss_fn, params, batch), vs, chunk)
    est, se2 = _mc(q_p)
    return est, se2, jnp.zeros((0,), q_p.dtype)
  hvs = hvp_lib.map_probes(hvp_lib.linearized_hvp(loss_fn, params, batch), vs, chunk)
  per_LxP = jnp.stack(_util.stacked_leaf_dots(vs, hvs))
  est, se2 = _mc(per_LxP.sum(0))
  return est, se2, per_LxP.mean(1)


def _random_rows(key, num, n, dtype, distribution):
  if distribution == "rademacher":
    return jax.random.rademacher(key, (num, n), dtype=dtype)
  return jax.random.normal(key, (num, n), dtype=dtype)


def _hutchpp(loss_fn, params, batch, key, num_probes, distribution, chunk, per_layer):
  del per_layer  # the split costs nothing extra here: always computed
  flat, _ = ravel_pytree(params)
  n, dt = flat.shape[0], flat.dtype
  mv = _flat_matvec(loss_fn, params, batch)
  mvs = lambda x_kxn: jax.lax.map(mv, x_kxn, batch_size=min(chunk or x_kxn.shape[0], x_kxn.shape[0]))
  k = num_probes // 3
  r = num_probes - 2 * k
  k_sketch, k_res = jax.random.split(key)
  q_nxk, _ = jnp.linalg.qr(mvs(_random_rows(k_sketch, k, n, dt, distribution)).T)
  hq_nxk = mvs(q_nxk.T).T
  t_kxk = q_nxk.T @ hq_nxk
  low_n = 2 * jnp.sum(q_nxk * hq_nxk, axis=1) - jnp.sum((q_nxk @ t_kxk) * q_nxk, axis=1)
  g_rxn = _random_rows(k_res, r, n, dt, distribution)
  pg_rxn = g_rxn - (g_rxn @ q_nxk) @ q_nxk.T
  res_rxn = pg_rxn * mvs(pg_rxn)
  res_mean, se2 = _mc(res_rxn.sum(1))
  est = jnp.trace(t_kxk) + res_mean
  return est, se2, _segment_sums(low_n + res_rxn.mean(0), params)


def _exact(loss_fn, params, batch, key, num_probes, distribution, chunk, per_layer):
  del key, num_probes, distribution, per_layer  # the split is always computed
  flat, _ = ravel_pytree(params)
  n = flat.shape[0]
  mv = _flat_matvec(loss_fn, params, batch)
  c = min(chunk or 128, n)
  ids = jnp.arange(-(-n // c) * c).reshape(-1, c)
  cols = jnp.arange(n)

  def diag_chunk(ids_c):
    e_cxn = (ids_c[:, None] == cols[None, :]).astype(flat.dtype)
    he_cxn = jax.vmap(mv)(e_cxn)
    d = jnp.take_along_axis(he_cxn, jnp.minimum(ids_c, n - 1)[:, None], axis=1)[:, 0]
    return jnp.where(ids_c < n, d, 0)

  diag_n = jax.lax.map(diag_chunk, ids).reshape(-1)[:n]
  return jnp.sum(diag_n), jnp.zeros((), flat.dtype), _segment_sums(diag_n, params)


_IMPLS = {"hutchinson": _hutchinson, "hutch++": _hutchpp, "exact": _exact}


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4, 5))
def _trace_stacked(loss_fn, method, num_probes, distribution, chunk, per_layer, params, stacked,
                   key):
  """Per-batch (estimate, se^2, per-leaf [0 leaves if not computed]) over a stack of batches."""
  k = jax.tree.leaves(stacked)[0].shape[0]
  impl = _IMPLS[method]
  one = lambda xs: impl(loss_fn, params, xs[0], xs[1], num_probes, distribution, chunk, per_layer)
  return jax.lax.map(one, (stacked, jax.random.split(key, k)))


def _validate(loss_fn, params, batch, method, num_probes, distribution, validate, max_exact,
              per_layer):
  if not isinstance(per_layer, (bool, np.bool_)):
    raise ValueError(f"per_layer must be True or False, got {per_layer!r}")
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; valid methods: {METHODS}")
  if distribution not in DISTRIBUTIONS:
    raise ValueError(f"unknown probe distribution {distribution!r}; valid: {DISTRIBUTIONS}")
  if method != "exact":
    _util.check_positive("num_probes", num_probes)
    if method == "hutch++" and num_probes < 3:
      raise ValueError(f"hutch++ needs num_probes >= 3 (sketch, projection, residual), "
                       f"got {num_probes}")
  elif decoder.num_params(params) > max_exact:
    raise ValueError(f"method='exact' costs one HVP per parameter; this model has "
                     f"{decoder.num_params(params)} > max_exact_params={max_exact}")
  if validate:
    _util.check_deterministic(loss_fn, params, batch)
    _util.check_scalar_loss(loss_fn, params, batch)


def _num_matvecs(method, num_probes, params):
  return decoder.num_params(params) if method == "exact" else num_probes


def hessian_trace_over_batches(loss_fn, params, batches, *, key, num_probes=None,
                               method="hutchinson", distribution="rademacher",
                               num_batches=None, chunk_size=None, mesh=None,
                               validate=True, max_exact_params=MAX_EXACT_PARAMS,
                               per_layer=False):
  """tr(H) of the loss averaged over several batches (a scan over the batches).

  Each batch gets its own probes, so `batch_stderr` measures data subsampling
  and probe noise together; `stderr` is the probe noise alone.

  Args:
    loss_fn: pure, hashable `loss_fn(params, batch) -> scalar`.
    params: parameter pytree.
    batches: list or iterator of same-structure batch pytrees.
    key: PRNG key; the result is a deterministic function of it.
    num_probes: Hessian-vector products per batch (ignored by "exact").
    method: "hutchinson" | "hutch++" | "exact".
    distribution: probe distribution, "rademacher" or "gaussian".
    num_batches: take at most this many batches from `batches`.
    chunk_size: probes (or basis vectors) vmapped at once; None = all.
    mesh: optional `jax.sharding.Mesh` with a "data" axis: the batch dimension
      is split over it, params replicated.
    validate: check the loss is scalar and deterministic first.
    max_exact_params: refuse "exact" above this many parameters.
    per_layer: "hutchinson" only: also split the trace by parameter leaf. Each
      probe is then a full HVP (~2x a gradient) instead of a forward-over-
      forward v^T H v (~1.75x in FLOPs); "hutch++" and "exact" always split.

  Returns:
    TraceResult.
  """
  stacked, k = _util.stack_batches(batches, num_batches)
  first = _util.first(stacked)
  _validate(loss_fn, params, first, method, num_probes, distribution, validate, max_exact_params,
            per_layer)
  if mesh is not None:
    stacked, params = _util.shard_stacked(stacked, params, mesh)
  est_k, se2_k, per_kxl = jax.device_get(_trace_stacked(
      loss_fn, method, num_probes if method != "exact" else 0, distribution, chunk_size,
      bool(per_layer), params, stacked, key))
  est_k, se2_k, per_kxl = (np.asarray(x, np.float64) for x in (est_k, se2_k, per_kxl))
  names = _util.leaf_names(params)
  return TraceResult(
      estimate=float(est_k.mean()),
      stderr=float(np.sqrt(se2_k.sum()) / k),
      per_layer=({n: float(v) for n, v in zip(names, per_kxl.mean(0))}
                 if per_kxl.shape[1] else {}),
      method=method,
      num_matvecs=_num_matvecs(method, num_probes, params),
      num_batches=k,
      num_examples=_util.num_examples(stacked),
      batch_stderr=float(est_k.std(ddof=1) / np.sqrt(k)) if k > 1 else math.nan,
      per_batch=tuple(float(x) for x in est_k))


def hessian_trace(loss_fn, params, batch, *, key, num_probes=None, method="hutchinson",
                  distribution="rademacher", chunk_size=None, validate=True,
                  max_exact_params=MAX_EXACT_PARAMS, per_layer=False):
  """tr(H) of `loss_fn` at `params` on one batch.

  Args:
    loss_fn: pure, hashable `loss_fn(params, batch) -> scalar`.
    params: parameter pytree.
    batch: batch pytree (argument of the jitted code, never closed over).
    key: PRNG key.
    num_probes: Hessian-vector products ("hutchinson": probes; "hutch++": total
      matvecs, >= 3; ignored by "exact").
    method: "hutchinson" | "hutch++" | "exact".
    distribution: "rademacher" (default) | "gaussian".
    chunk_size: probes vmapped over one linearisation at a time (None: all).
    validate: check the loss is scalar and deterministic first.
    max_exact_params: refuse "exact" above this many parameters.
    per_layer: "hutchinson" only: also split by parameter leaf (each probe a
      full HVP, dearer); "hutch++" and "exact" always split.

  Returns:
    TraceResult with `estimate`, `stderr` (0 for exact) and `per_layer`.
  """
  return hessian_trace_over_batches(
      loss_fn, params, [batch], key=key, num_probes=num_probes, method=method,
      distribution=distribution, chunk_size=chunk_size, validate=validate,
      max_exact_params=max_exact_params, per_layer=per_layer)
