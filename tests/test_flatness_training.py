"""Averaging over batches, sharding over the mesh, and the training-loop hook."""
import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.flatten_util import ravel_pytree

from el_jax.core import flatness as fl


def seq_logits(p, b):
  h = jnp.tanh(b["x"] @ p["w1"] + p["b1"][None, None])
  return h @ p["w2"]


def logits_fn(p, b):
  return seq_logits(p, b), b["mask"]


def loss_fn(p, b):
  logits, mask = logits_fn(p, b)
  logp = jax.nn.log_softmax(logits)
  ce = -jnp.take_along_axis(logp, b["y"][..., None], axis=-1)[..., 0]
  return jnp.sum(ce * mask) / jnp.sum(mask)


def problem(num_batches=3, batch=8, seed=0):
  r = np.random.default_rng(seed)
  p = {"w1": r.normal(size=(3, 4)), "b1": r.normal(size=4), "w2": r.normal(size=(4, 5))}
  batches = [{"x": r.normal(size=(batch, 2, 3)), "y": r.integers(0, 5, (batch, 2)),
              "mask": np.ones((batch, 2))} for _ in range(num_batches)]
  return jax.tree.map(jnp.asarray, p), batches


def test_over_batches_equals_loss_on_all_data():
  with jax.enable_x64(True):
    p, batches = problem()
    res = fl.hessian_trace_over_batches(loss_fn, p, batches, key=jax.random.key(0),
                                        method="exact")
    # Equal-size batches: the mean of batch losses is the loss on all the data.
    allb = jax.tree.map(lambda *x: np.concatenate(x), *batches)
    flat, unravel = ravel_pytree(p)
    h = np.asarray(jax.jit(jax.hessian(lambda f, b: loss_fn(unravel(f), b)))(flat, allb))
    np.testing.assert_allclose(res.estimate, np.trace(h), rtol=1e-10)
    assert res.num_batches == 3 and res.num_examples == 24 and len(res.per_batch) == 3
    assert res.batch_stderr > 0
    # Iterators work too, and num_batches limits how much is taken.
    two = fl.hessian_trace_over_batches(loss_fn, p, iter(batches), key=jax.random.key(0),
                                        method="exact", num_batches=2)
    np.testing.assert_allclose(two.estimate, np.mean(res.per_batch[:2]), rtol=1e-10)
    assert two.num_examples == 16


def test_sharded_over_mesh_matches_unsharded():
  assert jax.device_count() == 8
  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  p, batches = problem()
  key = jax.random.key(1)
  a = fl.hessian_trace_over_batches(loss_fn, p, batches, key=key, num_probes=4)
  b = fl.hessian_trace_over_batches(loss_fn, p, batches, key=key, num_probes=4, mesh=mesh)
  np.testing.assert_allclose(b.estimate, a.estimate, rtol=1e-4)
  np.testing.assert_allclose(b.per_batch, a.per_batch, rtol=1e-4)


def test_fisher_over_batches_weights_by_positions():
  with jax.enable_x64(True):
    p, batches = problem(num_batches=2, batch=4)
    batches[1]["mask"][:, 0] = 0.0  # second batch predicts half as many positions
    key = jax.random.key(2)
    r = fl.fisher_trace_over_batches(logits_fn, p, batches, key=key, num_samples=3)
    np.testing.assert_allclose(r.estimate, (8 * r.per_batch[0] + 4 * r.per_batch[1]) / 12,
                               rtol=1e-12)
    assert r.num_positions == 12


def test_measure_during_training_and_plot(tmp_path):
  p, batches = problem()
  cfg = ml_collections.ConfigDict(dict(every=10, method="hutchinson", num_probes=4,
                                       num_batches=2, fisher_samples=2, lanczos_steps=5))
  m = fl.measure_during_training(cfg, loss_fn=loss_fn, logits_fn=logits_fn, params=p,
                                 batches=batches, key=jax.random.key(0))
  rows = [dict(step=s, loss=1.0 / s, **m) for s in (10, 20)]
  for k in ("hessian_trace", "hessian_trace_stderr", "fisher_trace", "fisher_trace_stderr",
            "top_eigenvalue"):
    assert np.isfinite(m[k]), k
  assert m["flatness_num_examples"] == 16
  json.dumps(rows)  # plain floats, ready for metrics.jsonl
  # A Ritz value never exceeds the largest eigenvalue of the (batch-averaged) Hessian.
  allb = jax.tree.map(lambda *x: np.concatenate(x), *batches[:2])
  flat, unravel = ravel_pytree(p)
  h = np.asarray(jax.jit(jax.hessian(lambda f, b: loss_fn(unravel(f), b)))(flat, allb))
  assert m["top_eigenvalue"] <= np.linalg.eigvalsh(h).max() * (1 + 1e-4)
  path = fl.plot_flatness(rows, str(tmp_path / "flat.png"))
  assert (tmp_path / "flat.png").stat().st_size > 1000 and path
