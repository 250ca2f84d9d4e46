"""Function-preserving growth keeps logits identical (decoder and a post-LN encoder)."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from el_jax.core.models import decoder
from el_jax.core.models import growth


@functools.partial(jax.jit, static_argnums=0)
def apply(graphdef, params, tokens):
  return decoder.apply(graphdef, params, tokens)


def perturbed(params, seed, scale=0.3):
  """Random non-trivial values everywhere (LayerNorm scales and biases too)."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(treedef, [x + scale * jax.random.normal(k, x.shape, x.dtype)
                                      for k, x in zip(keys, leaves)])


CFGS = {
    "neox": decoder.preset("gpt_neox", vocab_size=11, num_layers=2, num_heads=2, embed_dim=8,
                           mlp_dim=16, max_len=12),
    "gpt2": decoder.preset("gpt2", vocab_size=11, num_layers=2, num_heads=2, embed_dim=8,
                           mlp_dim=16, max_len=12),
}


@pytest.mark.parametrize("name", sorted(CFGS))
def test_grow_keeps_logits(name):
  cfg = CFGS[name]
  graphdef, params = decoder.init(cfg, 0)
  params = perturbed(params, 1)
  tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (3, 10))
  logits = apply(graphdef, params, tokens)
  target = dataclasses.replace(cfg, embed_dim=24, num_heads=6, mlp_dim=32, num_layers=4)
  big_cfg, big = growth.grow(cfg, params, target)
  assert big_cfg == target
  big_graphdef, fresh = decoder.init(big_cfg, 0)
  assert jax.tree.map(jnp.shape, big) == jax.tree.map(jnp.shape, fresh)
  big_logits = apply(big_graphdef, big, tokens)
  np.testing.assert_allclose(big_logits, logits, atol=1e-5, rtol=0)
  # The growth is not a no-op: a random model of the big shape differs.
  assert np.max(np.abs(apply(big_graphdef, perturbed(fresh, 2), tokens) - logits)) > 1e-2
  if name != "neox":
    return
  # Widening alone and deepening alone also preserve the logits.
  w_cfg, w = growth.widen(cfg, params, factor=2, mlp_factor=1)
  np.testing.assert_allclose(apply(decoder.init(w_cfg, 0)[0], w, tokens), logits, atol=1e-5)
  d_cfg, d = growth.deepen(cfg, params, num_layers=5)
  np.testing.assert_allclose(apply(decoder.init(d_cfg, 0)[0], d, tokens), logits, atol=1e-5)


def test_growth_needs_each_rule():
  """Undoing the 1/r input rescaling or the tied-norm rule breaks the logits."""
  cfg = CFGS["gpt2"]
  graphdef, params = decoder.init(cfg, 0)
  params = perturbed(params, 3)
  tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, (2, 9))
  logits = apply(graphdef, params, tokens)
  big_cfg, big = growth.widen(cfg, params, factor=2)
  big_graphdef = decoder.init(big_cfg, 0)[0]
  np.testing.assert_allclose(apply(big_graphdef, big, tokens), logits, atol=1e-5)
  for path in [("ln_f", "scale"), ("blocks", 0, "mlp", "fc_in", "kernel")]:
    pure = nnx.to_pure_dict(big)
    node = pure
    for k in path[:-1]:
      node = node[k]
    node[path[-1]] = node[path[-1]] * 2
    bad = decoder.init(big_cfg, 0)[1]
    nnx.replace_by_pure_dict(bad, pure)
    assert np.max(np.abs(apply(big_graphdef, bad, tokens) - logits)) > 1e-3, path


def test_grow_bad_input():
  cfg = CFGS["neox"]
  _, params = decoder.init(cfg, 0)
  with pytest.raises(ValueError, match="multiple"):
    growth.grow(cfg, params, dataclasses.replace(cfg, embed_dim=12, num_heads=3))
  with pytest.raises(ValueError, match="num_heads"):
    growth.grow(cfg, params, dataclasses.replace(cfg, embed_dim=16, num_heads=2))
  with pytest.raises(ValueError, match="other fields"):
    growth.grow(cfg, params, dataclasses.replace(cfg, vocab_size=12))
  with pytest.raises(ValueError, match="num_layers"):
    growth.deepen(cfg, params, num_layers=1)


# A BERT-style post-LN encoder written directly on a pure dict, with separate
# q/k/v, an embedding LayerNorm and bidirectional attention: the generic
# `widen_tree` / `deepen_tree` serve it through its own role map.


def _ln(x, p):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / jnp.sqrt(var + 1e-12) * p["scale"] + p["bias"]


def encoder_apply(p, tokens, num_heads):
  x = _ln(p["embed"][tokens] + p["pos"][None, :tokens.shape[1]], p["emb_ln"])
  b, t, d = x.shape
  for i in range(len(p["blocks"])):
    blk = p["blocks"][i]
    q, k, v = (
        (x @ blk[n]["kernel"] + blk[n]["bias"]).reshape(b, t, num_heads, -1) for n in "qkv")
    s = jnp.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(q.shape[-1])
    y = jnp.einsum("bhqs,bshk->bqhk", jax.nn.softmax(s, -1), v).reshape(b, t, d)
    x = _ln(x + y @ blk["o"]["kernel"] + blk["o"]["bias"], blk["ln1"])
    h = jax.nn.gelu(x @ blk["fc_in"]["kernel"] + blk["fc_in"]["bias"])
    x = _ln(x + h @ blk["fc_out"]["kernel"] + blk["fc_out"]["bias"], blk["ln2"])
  return x @ p["embed"].T  # tied output layer, as in seed 002


def test_generic_growth_on_post_ln_encoder():
  jax.config.update("jax_numpy_rank_promotion", "allow")  # compact NumPy-style reference
  try:
    r = np.random.default_rng(4)
    v, d, h, m = 7, 6, 2, 10
    lin = lambda i, o: {"kernel": jnp.asarray(r.normal(size=(i, o))), "bias": jnp.asarray(r.normal(size=o))}
    ln = lambda: {"scale": jnp.asarray(1 + 0.3 * r.normal(size=d)), "bias": jnp.asarray(r.normal(size=d))}
    p = {"embed": jnp.asarray(r.normal(size=(v, d))), "pos": jnp.asarray(r.normal(size=(8, d))),
         "emb_ln": ln(),
         "blocks": {0: {"q": lin(d, d), "k": lin(d, d), "v": lin(d, d), "o": lin(d, d),
                        "ln1": ln(), "fc_in": lin(d, m), "fc_out": lin(m, d), "ln2": ln()}}}
    roles = {}
    for path in growth._paths(p):
      name, leaf = path[-2] if len(path) > 1 else path[0], path[-1]
      roles[path] = {
          ("q", "kernel"): growth.HEADS_IN_KERNEL, ("k", "kernel"): growth.HEADS_IN_KERNEL,
          ("v", "kernel"): growth.HEADS_IN_KERNEL, ("q", "bias"): growth.HEADS_IN_BIAS,
          ("k", "bias"): growth.HEADS_IN_BIAS, ("v", "bias"): growth.HEADS_IN_BIAS,
          ("o", "kernel"): growth.HEADS_OUT_KERNEL, ("fc_in", "kernel"): growth.MLP_IN_KERNEL,
          ("fc_in", "bias"): growth.MLP_IN_BIAS, ("fc_out", "kernel"): growth.MLP_OUT_KERNEL,
      }.get((name, leaf), growth.STREAM)
    # Tied output layer reads the last post-LN stream: its norm plays ln_f's role.
    roles[("blocks", 0, "ln2", "scale")] = roles[("blocks", 0, "ln2", "bias")] = growth.STREAM
    tokens = r.integers(0, v, (2, 5))
    with jax.enable_x64(True):
      p = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), p)
      ref = encoder_apply(p, tokens, h)
      big = growth.widen_tree(p, roles, r=3, r_mlp=2, num_heads=h, num_qkv=1)
      # Tied output: logits = x' E'^T = r x E^T, the one place needing the / r.
      out = encoder_apply(big, tokens, 3 * h) / 3
      np.testing.assert_allclose(out, ref, atol=1e-10)
      # Post-LN blocks renormalise the stream, so an appended zero block is not the
      # identity there: deepening is exact for pre-LN models only (documented).
      deep = growth.deepen_tree(p, num_new=1)
      assert np.max(np.abs(encoder_apply(deep, tokens, h) - ref)) > 1e-3
  finally:
    jax.config.update("jax_numpy_rank_promotion", "raise")
