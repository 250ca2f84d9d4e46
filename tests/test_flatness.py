"""HVP and Hessian-trace estimators against jax.hessian (float64) and NumPy quadratics."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.extend import core as jex_core
from jax.flatten_util import ravel_pytree

from el_jax.core import flatness as fl
from el_jax.core.flatness import _util as flat_util
from el_jax.core.flatness import hvp_ops


def mlp_logits(p, x):
  h = jnp.tanh(x @ p["l1"]["w"] + p["l1"]["b"][None])
  return h @ p["l2"]["w"] + p["l2"]["b"][None]


def mlp_loss(p, b):
  logp = jax.nn.log_softmax(mlp_logits(p, b["x"]))
  return -jnp.mean(jnp.take_along_axis(logp, b["y"][:, None], axis=1))


def quad_loss(p, b):
  """0.5 x^T A x over the concatenated leaves: the Hessian is A (symmetrised)."""
  x = jnp.concatenate([p["a"], p["b"].reshape(-1)])
  return 0.5 * x @ (b["A"] @ x)


def mlp_problem(seed=0):
  r = np.random.default_rng(seed)
  p = {"l1": {"w": r.normal(size=(3, 4)), "b": r.normal(size=4)},
       "l2": {"w": r.normal(size=(4, 3)), "b": r.normal(size=3)}}
  b = {"x": r.normal(size=(6, 3)), "y": r.integers(0, 3, 6)}
  return jax.tree.map(jnp.asarray, p), jax.tree.map(jnp.asarray, b)


def dense_hessian(loss_fn, p, b):
  flat, unravel = ravel_pytree(p)
  return np.asarray(jax.jit(jax.hessian(lambda f, b: loss_fn(unravel(f), b)))(flat, b))


def quad_problem(eigs, seed=0, rotate=True, split=10):
  r = np.random.default_rng(seed)
  n = len(eigs)
  q = np.linalg.qr(r.normal(size=(n, n)))[0] if rotate else np.eye(n)
  a = (q * np.asarray(eigs)[None]) @ q.T
  a = 0.5 * (a + a.T)
  p = {"a": jnp.asarray(r.normal(size=split)), "b": jnp.asarray(r.normal(size=(n - split,)))}
  return p, {"A": jnp.asarray(a)}, a


def test_hvp_and_exact_trace_match_jax_hessian_mlp():
  with jax.enable_x64(True):
    p, b = mlp_problem()
    h = dense_hessian(mlp_loss, p, b)
    flat, unravel = ravel_pytree(p)
    v = np.random.default_rng(1).normal(size=flat.shape)
    hv = ravel_pytree(fl.hvp(mlp_loss, p, b, unravel(jnp.asarray(v))))[0]
    np.testing.assert_allclose(hv, h @ v, rtol=1e-10, atol=1e-12)
    vs = np.random.default_rng(2).normal(size=(5,) + flat.shape)
    hvs = fl.batched_hvp(mlp_loss, p, b, jax.vmap(unravel)(jnp.asarray(vs)), chunk_size=2)
    np.testing.assert_allclose(jax.vmap(lambda t: ravel_pytree(t)[0])(hvs), vs @ h,
                               rtol=1e-10, atol=1e-12)
    res = fl.hessian_trace(mlp_loss, p, b, key=jax.random.key(0), method="exact", chunk_size=7)
    assert res.stderr == 0
    np.testing.assert_allclose(res.estimate, np.trace(h), rtol=1e-10)
    # Per-layer: trace of each diagonal block, from the dense Hessian.
    start = 0
    for name, leaf in zip(["l1/b", "l1/w", "l2/b", "l2/w"], jax.tree.leaves(p)):
      stop = start + leaf.size
      np.testing.assert_allclose(res.per_layer[name], np.trace(h[start:stop, start:stop]),
                                 rtol=1e-10, atol=1e-12)
      start = stop
    np.testing.assert_allclose(sum(res.per_layer.values()), res.estimate, rtol=1e-12)


def test_hvp_symmetric():
  with jax.enable_x64(True):
    p, b = mlp_problem(3)
    _, unravel = ravel_pytree(p)
    r = np.random.default_rng(4)
    u, v = (unravel(jnp.asarray(r.normal(size=ravel_pytree(p)[0].shape))) for _ in range(2))
    uhv = float(sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(u), jax.tree.leaves(fl.hvp(mlp_loss, p, b, v)))))
    vhu = float(sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(v), jax.tree.leaves(fl.hvp(mlp_loss, p, b, u)))))
    assert abs(uhv - vhu) <= 1e-10 * max(1.0, abs(uhv))


def test_tiny_decoder_float64():
  from el_jax.core.models import decoder
  cfg = decoder.DecoderConfig(vocab_size=5, num_layers=1, num_heads=2, embed_dim=4, mlp_dim=4,
                              max_len=4, position="learned", parallel_residual=False,
                              tie_embeddings=True)
  with jax.enable_x64(True):
    graphdef, params = decoder.init(cfg, 0)
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64) + 0.3 * jnp.asarray(
        np.random.default_rng(x.size).normal(size=x.shape)), params)
    tokens = np.random.default_rng(5).integers(0, 5, (2, 4))

    def loss_fn(p, tok):
      logits = decoder.apply(graphdef, p, tok[:, :-1])
      logp = jax.nn.log_softmax(logits.astype(jnp.float64))
      return -jnp.mean(jnp.take_along_axis(logp, tok[:, 1:, None], axis=-1))

    h = dense_hessian(loss_fn, params, tokens)
    flat, unravel = ravel_pytree(params)
    v = np.random.default_rng(6).normal(size=flat.shape)
    hv = ravel_pytree(fl.hvp(loss_fn, params, tokens, unravel(jnp.asarray(v))))[0]
    # The decoder computes attention and logits in float32 (its compute dtype),
    # so agreement is to float32 rounding, not float64.
    scale = np.abs(h).max() * np.abs(v).sum()
    assert np.max(np.abs(hv - h @ v)) <= 1e-5 * scale
    res = fl.hessian_trace(loss_fn, params, tokens, key=jax.random.key(0), method="exact",
                           chunk_size=64)
    np.testing.assert_allclose(res.estimate, np.trace(h), rtol=1e-4, atol=1e-5 * np.abs(h).max())
    np.testing.assert_allclose(sum(res.per_layer.values()), res.estimate, rtol=1e-9)
    assert len(res.per_layer) == len(jax.tree.leaves(params))


def test_rademacher_exact_on_diagonal():
  with jax.enable_x64(True):
    eigs = np.linspace(-2.0, 5.0, 30)
    p, b, a = quad_problem(eigs, rotate=False)
    res = fl.hessian_trace(quad_loss, p, b, key=jax.random.key(0), num_probes=4, per_layer=True)
    np.testing.assert_allclose(res.estimate, np.trace(a), rtol=1e-12)
    assert res.stderr < 1e-12
    np.testing.assert_allclose(res.per_layer["a"], np.trace(a[:10, :10]), rtol=1e-12)
    fast = fl.hessian_trace(quad_loss, p, b, key=jax.random.key(0), num_probes=4)
    np.testing.assert_allclose(fast.estimate, np.trace(a), rtol=1e-12)
    assert fast.stderr < 1e-12 and fast.per_layer == {}
    # Gaussian probes are not exact on a diagonal: the option really changes the probes.
    g = fl.hessian_trace(quad_loss, p, b, key=jax.random.key(0), num_probes=4,
                         distribution="gaussian")
    assert abs(g.estimate - np.trace(a)) > 1e-3 and g.stderr > 1e-3


@pytest.mark.parametrize("distribution", ["rademacher", "gaussian"])
def test_hutchinson_unbiased_within_4_stderr(distribution):
  with jax.enable_x64(True):
    eigs = np.random.default_rng(7).uniform(-1.0, 3.0, 40)
    p, b, a = quad_problem(eigs, seed=1)
    for seed in range(4):
      res = fl.hessian_trace(quad_loss, p, b, key=jax.random.key(seed), num_probes=24,
                             distribution=distribution, per_layer=True)
      assert abs(res.estimate - np.trace(a)) < 4 * res.stderr, (seed, res, np.trace(a))
      np.testing.assert_allclose(sum(res.per_layer.values()), res.estimate, rtol=1e-10)
    # Pooled over the seeds the stderr is honest: the z-scores are not all tiny either.


def test_hutchpp_beats_hutchinson_on_decaying_spectrum():
  with jax.enable_x64(True):
    n = 100
    eigs = 1.0 / np.arange(1, n + 1) ** 2
    p, b, a = quad_problem(eigs, seed=2)
    err_h, err_pp = [], []
    for seed in range(6):
      k = jax.random.key(seed)
      h = fl.hessian_trace(quad_loss, p, b, key=k, num_probes=30)
      pp = fl.hessian_trace(quad_loss, p, b, key=k, num_probes=30, method="hutch++")
      err_h.append(abs(h.estimate - np.trace(a)))
      err_pp.append(abs(pp.estimate - np.trace(a)))
      np.testing.assert_allclose(sum(pp.per_layer.values()), pp.estimate, rtol=1e-10)
    assert np.mean(err_pp) < 0.2 * np.mean(err_h), (err_pp, err_h)
    # Hutch++'s per-layer split is unbiased for the block traces: with the sketch
    # capturing most of the mass it is close to numpy's block trace.
    np.testing.assert_allclose(pp.per_layer["a"], np.trace(a[:10, :10]), atol=0.05)


def test_hutchpp_exact_when_sketch_spans_everything():
  with jax.enable_x64(True):
    eigs = np.array([3.0, -1.0, 0.5, 2.0, 1.0, 0.25])
    p, b, a = quad_problem(eigs, seed=3, split=2)
    res = fl.hessian_trace(quad_loss, p, b, key=jax.random.key(0), num_probes=21,
                           method="hutch++")
    np.testing.assert_allclose(res.estimate, np.trace(a), rtol=1e-10)
    np.testing.assert_allclose(res.per_layer["a"], np.trace(a[:2, :2]), rtol=1e-9)


def test_quadratic_forms_match_numpy_hessian_mlp():
  with jax.enable_x64(True):
    p, b = mlp_problem(5)
    h = dense_hessian(mlp_loss, p, b)
    _, unravel = ravel_pytree(p)
    vs = np.random.default_rng(8).normal(size=(5, h.shape[0]))
    for chunk in (None, 2):
      q = fl.batched_quadratic_form(mlp_loss, p, b, jax.vmap(unravel)(jnp.asarray(vs)),
                                    chunk_size=chunk)
      np.testing.assert_allclose(q, np.einsum("pi,ij,pj->p", vs, h, vs), rtol=1e-10)


def test_fast_hutchinson_equals_per_probe_hvps_float32():
  # The default Hutchinson path (forward-over-forward v^T H v, probes vmapped
  # over one primal forward) against one separate forward-over-reverse HVP per
  # probe, in float32 on a small copy-task-style decoder (gpt_neox: rotary,
  # parallel residual, untied) with a masked mean CE.
  from el_jax.core.models import decoder
  cfg = decoder.preset("gpt_neox", vocab_size=7, num_layers=1, num_heads=2, embed_dim=8,
                       mlp_dim=8, max_len=6)
  graphdef, params = decoder.init(cfg, 0)
  r = np.random.default_rng(9)
  params = jax.tree.map(lambda x: x + jnp.asarray(0.3 * r.normal(size=x.shape), x.dtype), params)
  batch = {"tokens": jnp.asarray(r.integers(0, 7, (3, 6))),
           "mask": jnp.asarray((r.uniform(size=(3, 5)) < 0.6).astype(np.float32))}

  def loss_fn(p, b):
    logp = jax.nn.log_softmax(decoder.apply(graphdef, p, b["tokens"][:, :-1]))
    ce = -jnp.take_along_axis(logp, b["tokens"][:, 1:, None], axis=-1)[..., 0]
    return jnp.sum(ce * b["mask"]) / jnp.sum(b["mask"])

  # The probes hessian_trace draws for its only batch (key split per batch).
  key = jax.random.key(3)
  vs = jax.jit(flat_util.random_like, static_argnums=(2, 3))(
      jax.random.split(key, 1)[0], params, 6, "rademacher")
  ref = np.array([float(flat_util.tree_vdot(v, fl.hvp(loss_fn, params, batch, v, validate=False)))
                  for v in (jax.tree.map(lambda x, i=i: x[i], vs) for i in range(6))])
  assert np.all(np.abs(ref) > 1e-2 * np.abs(ref).max())  # no near-cancelled probe
  q = fl.batched_quadratic_form(loss_fn, params, batch, vs, validate=False)
  np.testing.assert_allclose(q, ref, rtol=1e-5)
  fast = fl.hessian_trace(loss_fn, params, batch, key=key, num_probes=6)
  np.testing.assert_allclose(fast.estimate, np.mean(ref), rtol=1e-5)
  np.testing.assert_allclose(fast.stderr, np.std(ref, ddof=1) / np.sqrt(6), rtol=1e-4)
  assert fast.per_layer == {} and fast.num_matvecs == 6

  # Cost: with the duplicated first-order work merged, a probe costs the
  # primal matmul plus 4 per dense matmul (V x, W x', V x', W x'') and 5 per
  # attention product, 5 * 5 + 6 * 2 = 37 dots for this one-block model
  # (dense: qkv, out, mlp in/out, unembedding; attention: q k^T, p v). The
  # plain nested jvp has more.
  def num_dots(f):
    def count(jaxpr):
      return sum((e.primitive.name == "dot_general") + sum(
          count(sub) for sub in jex_core.jaxprs_in_params(e.params)) for e in jaxpr.eqns)
    return count(jax.make_jaxpr(f)(params, batch, params).jaxpr)

  assert num_dots(functools.partial(hvp_ops.quadratic_form, loss_fn)) == 37
  assert num_dots(functools.partial(hvp_ops._second_directional, loss_fn)) > 37


def test_bad_inputs():
  p, b = mlp_problem()
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="scalar"):
    fl.hessian_trace(lambda p, b: mlp_logits(p, b["x"]), p, b, key=key, num_probes=2)
  with pytest.raises(ValueError, match="num_probes"):
    fl.hessian_trace(mlp_loss, p, b, key=key, num_probes=0)
  with pytest.raises(ValueError, match="num_probes"):
    fl.hessian_trace(mlp_loss, p, b, key=key)
  with pytest.raises(ValueError, match="unknown method"):
    fl.hessian_trace(mlp_loss, p, b, key=key, num_probes=2, method="hutchinsonn")
  with pytest.raises(ValueError, match="hutch\\+\\+ needs"):
    fl.hessian_trace(mlp_loss, p, b, key=key, num_probes=2, method="hutch++")
  with pytest.raises(ValueError, match="distribution"):
    fl.hessian_trace(mlp_loss, p, b, key=key, num_probes=2, distribution="uniform")
  with pytest.raises(ValueError, match="max_exact_params"):
    fl.hessian_trace(mlp_loss, p, b, key=key, method="exact", max_exact_params=10)
  with pytest.raises(ValueError, match="per_layer must be True or False"):
    fl.hessian_trace(mlp_loss, p, b, key=key, num_probes=2, per_layer="yes")
  with pytest.raises(ValueError, match="one leading probe axis"):
    fl.batched_quadratic_form(mlp_loss, p, b, p)  # probes without the probe axis

  # Dropout left on: a stateful NNX module advances its RNG on every call.
  model = nnx.Sequential(nnx.Linear(3, 3, rngs=nnx.Rngs(0)),
                         nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=1)))

  def dropout_loss(params, batch):
    del params
    return jnp.mean(model(batch["x"].astype(jnp.float32)) ** 2)

  with pytest.raises(ValueError, match="not deterministic"):
    fl.hessian_trace(dropout_loss, p, b, key=key, num_probes=2)
  with pytest.raises(ValueError, match="not deterministic"):
    fl.lanczos(dropout_loss, p, b, key=key, num_steps=3)
