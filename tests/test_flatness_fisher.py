"""Fisher-trace estimators against the exact Gauss-Newton trace from Jacobians (float64)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from el_jax.core import flatness as fl

B, T, D, H, V = 4, 3, 3, 5, 4


def seq_logits(p, b):
  # cumsum mixes positions, so one sequence's positions share activations.
  h = jnp.tanh(jnp.cumsum(b["x"], axis=1) @ p["w1"] + p["b1"][None, None])
  return h @ p["w2"] + p["b2"][None, None]


def logits_fn(p, b):
  return seq_logits(p, b), b["mask"]


def plain_logits_fn(p, b):
  return seq_logits(p, b)


def problem(seed=0, batch=B):
  r = np.random.default_rng(seed)
  p = {"w1": r.normal(size=(D, H)), "b1": r.normal(size=H),
       "w2": 1.5 * r.normal(size=(H, V)), "b2": r.normal(size=V)}
  mask = (r.uniform(size=(batch, T)) < 0.7).astype(np.float64)
  mask[:, -1] = 1.0
  b = {"x": r.normal(size=(batch, T, D)), "mask": mask}
  return jax.tree.map(jnp.asarray, p), jax.tree.map(jnp.asarray, b)


def exact_fisher(p, b, labels=None):
  """(1/N) sum_i m_i tr(J_i^T (diag p_i - p_i p_i^T) J_i), or the empirical Fisher
  (1/N) sum_i m_i ||J_i^T (e_{y_i} - p_i)||^2 when true labels are given."""
  flat, unravel = ravel_pytree(p)
  j = np.asarray(jax.jacrev(lambda f: seq_logits(unravel(f), b))(flat)).reshape(-1, V, flat.size)
  logits = np.asarray(seq_logits(p, b)).reshape(-1, V)
  probs = np.exp(logits - logits.max(1, keepdims=True))
  probs /= probs.sum(1, keepdims=True)
  mask = np.asarray(b["mask"]).reshape(-1)
  total = 0.0
  for i in range(len(mask)):
    if labels is None:
      m = np.diag(probs[i]) - np.outer(probs[i], probs[i])
      total += mask[i] * np.trace(j[i].T @ m @ j[i])
    else:
      g = j[i].T @ (np.eye(V)[labels.reshape(-1)[i]] - probs[i])
      total += mask[i] * g @ g
  return total / mask.sum()


@pytest.mark.parametrize("estimator,probe", [("per_example", "labels"), ("single", "labels"),
                                             ("per_example", "rademacher")])
def test_fisher_unbiased_against_exact(estimator, probe):
  with jax.enable_x64(True):
    p, b = problem()
    exact = exact_fisher(p, b)
    for seed in range(3):
      r = fl.fisher_trace(logits_fn, p, b, key=jax.random.key(seed), num_samples=48,
                          estimator=estimator, probe=probe)
      assert abs(r.estimate - exact) < 4 * r.stderr, (seed, r, exact)
      assert r.num_positions == float(np.asarray(b["mask"]).sum())
      assert r.num_examples == B


def test_fisher_regressions_factor_n_and_sampled_labels():
  with jax.enable_x64(True):
    p, b = problem(1)
    n = float(np.asarray(b["mask"]).sum())
    exact = exact_fisher(p, b)
    r = fl.fisher_trace(logits_fn, p, b, key=jax.random.key(5), num_samples=48)
    assert abs(r.estimate - exact) < 4 * r.stderr
    # Missing factor N: off by N; the estimate must be nowhere near exact / N.
    assert abs(r.estimate - exact / n) > 6 * r.stderr and 0.5 < r.estimate / exact < 2
    # Tr F of a *mean* loss does not grow with the data: the same batch twice
    # gives the same trace (a missing or doubled N would not).
    b2 = jax.tree.map(lambda x: jnp.concatenate([x, x]), b)
    r2 = fl.fisher_trace(logits_fn, p, b2, key=jax.random.key(6), num_samples=48)
    assert abs(r2.estimate - exact) < 4 * r2.stderr and r2.num_positions == 2 * n
    # True labels instead of sampled ones (the empirical Fisher): with labels the
    # model finds unlikely, that trace is far from the model Fisher.
    logits = np.asarray(seq_logits(p, b))
    labels = logits.argmin(-1)
    emp = exact_fisher(p, b, labels)
    assert emp > exact + 6 * r.stderr, (emp, exact, r.stderr)
    b_lab = dict(b, y=jnp.asarray(labels))
    r3 = fl.fisher_trace(logits_fn, p, b_lab, key=jax.random.key(5), num_samples=48)
    assert r3.estimate == r.estimate  # labels in the batch are never used


def test_per_example_has_lower_variance_and_mask_default():
  with jax.enable_x64(True):
    p, b = problem(2, batch=24)
    b = dict(b, mask=jnp.ones((24, T)))
    key = jax.random.key(7)
    pe = fl.fisher_trace(logits_fn, p, b, key=key, num_samples=48)
    sg = fl.fisher_trace(logits_fn, p, b, key=key, num_samples=48, estimator="single")
    assert pe.stderr < sg.stderr, (pe, sg)
    # logits without a mask = every position predicted.
    plain = fl.fisher_trace(plain_logits_fn, p, b, key=key, num_samples=48)
    np.testing.assert_allclose(plain.estimate, pe.estimate, rtol=1e-12)


def test_fisher_bad_input():
  p, b = problem()
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="num_samples"):
    fl.fisher_trace(logits_fn, p, b, key=key, num_samples=0)
  with pytest.raises(ValueError, match="probe"):
    fl.fisher_trace(logits_fn, p, b, key=key, num_samples=2, probe="true_labels")
  with pytest.raises(ValueError, match="estimator"):
    fl.fisher_trace(logits_fn, p, b, key=key, num_samples=2, estimator="empirical")
  with pytest.raises(ValueError, match="mask shape"):
    fl.fisher_trace(lambda p, b: (seq_logits(p, b), b["mask"][:, :2]), p, b, key=key,
                    num_samples=2)
  noisy = lambda p, b: seq_logits(p, b) + np.random.default_rng().normal()
  with pytest.raises(ValueError, match="not deterministic"):
    fl.fisher_trace(noisy, p, b, key=key, num_samples=2)
