"""Trace of the Fisher / Gauss-Newton matrix of the mean cross-entropy.

For the loss L = (1/N) sum_i CE(logits_i, y_i) over N predicted positions,
  F = (1/N) sum_i E_{y ~ p_theta(.|x_i)} g_i(y) g_i(y)^T,  g_i(y) = grad log p_theta(y|x_i),
which for softmax outputs equals the Gauss-Newton matrix
(1/N) sum_i J_i^T (diag p_i - p_i p_i^T) J_i, and near a minimum Tr(H) ~ Tr(F)
(seed 002, App. B.1). Labels are sampled from the model: the true labels give
the empirical Fisher, a different matrix. Positions are sampled independently
and teacher-forced, so E[g_i . g_j] = 0 for i != j and
  single-gradient:  N ||(1/N) sum_i g_i||^2 = (1/N) ||sum_i g_i||^2
  per-example:      (1/N) sum_b ||sum_{i in b} g_i||^2
are both unbiased; the per-example form drops the cross-example terms and has
lower variance. Forgetting the factor N is the classic bug (off by N).

The cotangent of sum_i m_i log p(y_i|x_i) with respect to the logits is
m_i (onehot(y_i) - p_i), so one forward pass (`jax.vjp`) serves every draw and
each draw costs one backward pass.
"""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import el_jax.core.flatness._util as _util

ESTIMATORS = ("per_example", "single")
PROBES = ("labels", "rademacher")


@dataclasses.dataclass(frozen=True)
class FisherResult:
  """A Fisher-trace measurement.

  Attributes:
    estimate: tr(F) of the mean cross-entropy over all predicted positions.
    stderr: Monte-Carlo standard error over label draws, given the data (nan
      for num_samples=1).
    estimator: "per_example" | "single".
    probe: "labels" (sampled from the model) | "rademacher".
    num_samples: label draws per batch.
    num_batches: batches averaged over (weighted by predicted positions).
    num_examples: examples that went in.
    num_positions: predicted positions N that went in (mask sum).
    batch_stderr: spread of per-batch estimates / sqrt(num_batches) (nan for 1).
    per_batch: per-batch estimates.
  """
  estimate: float
  stderr: float
  estimator: str
  probe: str
  num_samples: int
  num_batches: int
  num_examples: int
  num_positions: float
  batch_stderr: float = math.nan
  per_batch: tuple = ()


def split_logits(out):
  """logits_fn output -> (logits [..., V], float mask [...])."""
  if isinstance(out, (tuple, list)):
    logits, mask = out
  else:
    logits, mask = out, None
  if mask is None:
    mask = jnp.ones(logits.shape[:-1], logits.dtype)
  return logits, jnp.asarray(mask).astype(logits.dtype)


def _draws(logits_fn, params, batch, key, num_samples, chunk, probe):
  """(||sum_i m_i g_i||^2 per draw [S], N) for one batch."""

  def f(p):
    return split_logits(logits_fn(p, batch))

  logits, vjp_fn, mask = jax.vjp(f, params, has_aux=True)
  probs = jax.nn.softmax(logits, axis=-1)
  v = logits.shape[-1]

  def draw(k):
    if probe == "labels":
      y = jax.random.categorical(k, jax.lax.stop_gradient(logits), axis=-1)
      cot = jax.nn.one_hot(y, v, dtype=logits.dtype) - probs
    else:  # L z with L L^T = diag(p) - p p^T, L = diag(sqrt p) - p sqrt(p)^T
      z = jax.random.rademacher(k, logits.shape, dtype=logits.dtype)
      sz = jnp.sqrt(probs) * z
      cot = sz - probs * jnp.sum(sz, axis=-1, keepdims=True)
    g = vjp_fn(mask[..., None] * cot)[0]
    return _util.tree_vdot(g, g)

  keys = jax.random.split(key, num_samples)
  if not chunk or chunk >= num_samples:
    sq_s = jax.vmap(draw)(keys)  # no loop: residuals stay outside a while body
  else:
    sq_s = jax.lax.map(draw, keys, batch_size=chunk)
  return sq_s, jnp.sum(mask)


def _single(logits_fn, params, batch, key, num_samples, chunk, probe):
  sq_s, n = _draws(logits_fn, params, batch, key, num_samples, chunk, probe)
  return sq_s / n, n


def _per_example(logits_fn, params, batch, key, num_samples, chunk, probe):
  b = jax.tree.leaves(batch)[0].shape[0]

  def one(xs):
    ex, k = xs
    return _draws(logits_fn, params, _util.add_batch_axis(ex), k, num_samples, None, probe)

  sq_bxs, n_b = jax.lax.map(one, (batch, jax.random.split(key, b)),
                            batch_size=min(chunk or b, b))
  n = jnp.sum(n_b)
  return jnp.sum(sq_bxs, axis=0) / n, n


_IMPLS = {"single": _single, "per_example": _per_example}


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _fisher_stacked(logits_fn, estimator, num_samples, chunk, probe, params, stacked, key):
  k = jax.tree.leaves(stacked)[0].shape[0]
  impl = _IMPLS[estimator]
  one = lambda xs: impl(logits_fn, params, xs[0], xs[1], num_samples, chunk, probe)
  return jax.lax.map(one, (stacked, jax.random.split(key, k)))


def _validate(logits_fn, params, batch, num_samples, estimator, probe, validate):
  if estimator not in ESTIMATORS:
    raise ValueError(f"unknown Fisher estimator {estimator!r}; valid: {ESTIMATORS}")
  if probe not in PROBES:
    raise ValueError(f"unknown Fisher probe {probe!r}; valid: {PROBES}")
  _util.check_positive("num_samples", num_samples)
  if validate:
    _util.check_deterministic(logits_fn, params, batch, name="logits_fn")
  out = jax.eval_shape(logits_fn, params, batch)
  logits = out[0] if isinstance(out, (tuple, list)) else out
  if len(getattr(logits, "shape", ())) < 1:
    raise ValueError("logits_fn must return logits [..., V] or (logits [..., V], mask [...])")
  if isinstance(out, (tuple, list)) and out[1] is not None and out[1].shape != logits.shape[:-1]:
    raise ValueError(f"mask shape {out[1].shape} must equal logits.shape[:-1] = "
                     f"{logits.shape[:-1]}")
  if estimator == "per_example":
    sizes = {x.shape[0] if np.ndim(x) else None for x in jax.tree.leaves(batch)}
    if len(sizes) != 1 or None in sizes:
      raise ValueError("estimator='per_example' needs every batch leaf to have the same "
                       f"leading batch dimension; got {sizes}")


def fisher_trace_over_batches(logits_fn, params, batches, *, key, num_samples,
                              estimator="per_example", probe="labels", num_batches=None,
                              chunk_size=None, mesh=None, validate=True):
  """tr(F) of the mean cross-entropy over all predicted positions of several batches.

  Args:
    logits_fn: pure, hashable `logits_fn(params, batch)` returning logits
      [..., V] (every position predicted) or (logits, float mask [...]).
    params: parameter pytree.
    batches: list or iterator of same-structure batch pytrees.
    key: PRNG key.
    num_samples: label draws per batch (>= 2 for a standard error).
    estimator: "per_example" (default, lower variance) or "single" (one
      gradient of the whole batch per draw, cheapest).
    probe: "labels" (default): labels sampled from the model, the estimator
      of seed 002 (B.1); near saturation it is heavy-tailed (rare unlikely
      labels carry large gradients, so a few draws can all give ~0 and a
      stderr of ~0). "rademacher": the cotangent L z with L L^T =
      diag(p) - p p^T and Rademacher z over positions x classes, the same
      expectation without the rare-label tail.
    num_batches: take at most this many batches.
    chunk_size: examples ("per_example") or draws ("single") vmapped at once.
    mesh: optional mesh with a "data" axis over which the batch is split.
    validate: check shapes and determinism first.

  Returns:
    FisherResult.
  """
  stacked, k = _util.stack_batches(batches, num_batches)
  _validate(logits_fn, params, _util.first(stacked), num_samples, estimator, probe, validate)
  if mesh is not None:
    stacked, params = _util.shard_stacked(stacked, params, mesh)
  est_kxs, n_k = jax.device_get(_fisher_stacked(
      logits_fn, estimator, num_samples, chunk_size, probe, params, stacked, key))
  est_kxs, n_k = np.asarray(est_kxs, np.float64), np.asarray(n_k, np.float64)
  if np.any(n_k <= 0):
    raise ValueError("a batch has no predicted positions (mask sums to 0)")
  w_k = n_k / n_k.sum()
  est_k = est_kxs.mean(1)
  se2_k = est_kxs.var(1, ddof=1) / num_samples if num_samples > 1 else np.full(k, np.nan)
  return FisherResult(
      estimate=float(np.sum(w_k * est_k)),
      stderr=float(np.sqrt(np.sum(w_k**2 * se2_k))),
      estimator=estimator,
      probe=probe,
      num_samples=num_samples,
      num_batches=k,
      num_examples=_util.num_examples(stacked),
      num_positions=float(n_k.sum()),
      batch_stderr=float(est_k.std(ddof=1) / np.sqrt(k)) if k > 1 else math.nan,
      per_batch=tuple(float(x) for x in est_k))


def fisher_trace(logits_fn, params, batch, *, key, num_samples, estimator="per_example",
                 probe="labels", chunk_size=None, validate=True):
  """tr(F) of the mean cross-entropy on one batch, labels sampled from the model.

  See `fisher_trace_over_batches` for the arguments.
  """
  return fisher_trace_over_batches(logits_fn, params, [batch], key=key,
                                   num_samples=num_samples, estimator=estimator, probe=probe,
                                   chunk_size=chunk_size, validate=validate)
