"""The bidirectional LSTM of seed 002's HMM experiments (el_jax.core.models.lstm, preset "bilstm"):
its forward pass against an independent NumPy LSTM, padding, both sides, mixed precision and the
probe tools at its width (its end-to-end MLM training and its neighbour lookup: tests/test_mlm.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from el_jax.core.models import decoder


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _numpy_lstm(x_TxD, wi_Dx4H, wh_Hx4H, b_4H):
  """Textbook LSTM over one sequence (gates i, f, g, o in this order), zero initial state."""
  h4 = wh_Hx4H.shape[1]
  hsz = h4 // 4
  h, c, out = np.zeros(hsz), np.zeros(hsz), []
  for x in x_TxD:
    z = x @ wi_Dx4H + h @ wh_Hx4H + b_4H
    i, f, g, o = _sigmoid(z[:hsz]), _sigmoid(z[hsz:2 * hsz]), np.tanh(z[2 * hsz:3 * hsz]), \
        _sigmoid(z[3 * hsz:])
    c = f * c + i * g
    h = o * np.tanh(c)
    out.append(h)
  return np.array(out)


def _numpy_bilstm_logits(p, tokens_BxT, lengths_B):
  """Logits at each row's real positions, in float64; padding is never read."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), nnx.to_pure_dict(p))
  emb = p["embed"]["embedding"]
  out = []
  for toks, n in zip(tokens_BxT, lengths_B):
    x = emb[toks[:n]]
    for i in range(len(p["layers"])):
      layer = p["layers"][i]

      def run(rnn, seq):
        cell = rnn["cell"]
        return _numpy_lstm(seq, cell["dense_i"]["kernel"], cell["dense_h"]["kernel"],
                           cell["dense_h"]["bias"])
      fwd = run(layer["forward_rnn"], x)
      bwd = run(layer["backward_rnn"], x[::-1])[::-1]  # starts at the last real word
      x = np.concatenate([fwd, bwd], axis=-1)
    out.append(x @ p["unembed"]["kernel"] + p["unembed"]["bias"])
  return out


def _perturb(params, scale=0.3, seed=1):
  """The parameters plus noise (zero biases at init would leave the bias path untested)."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape, x.dtype)
                                   for x, k in zip(leaves, keys)])


def test_bilstm_matches_numpy_and_never_reads_padding():
  cfg = decoder.preset("bilstm", vocab_size=9, num_layers=2, embed_dim=6, max_len=7, doc_mask=True)
  graphdef, params = decoder.init(cfg, 0)
  params = _perturb(params)
  rng = np.random.default_rng(0)
  lengths = np.array([7, 4, 1])
  tokens = rng.integers(0, 9, size=(3, 7)).astype(np.int32)
  seg = (np.arange(7)[None] < lengths[:, None]).astype(np.int32)
  logits = np.asarray(decoder.apply(graphdef, params, jnp.asarray(tokens), jnp.asarray(seg)))
  want = _numpy_bilstm_logits(params, tokens, lengths)
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(logits[b, :n], want[b], rtol=2e-5, atol=2e-5)
  # Other padding tokens: the logits at the real positions do not move.
  other = np.where(seg > 0, tokens, (tokens + 3) % 9).astype(np.int32)
  again = np.asarray(decoder.apply(graphdef, params, jnp.asarray(other), jnp.asarray(seg)))
  for b, n in enumerate(lengths):
    np.testing.assert_array_equal(again[b, :n], logits[b, :n])
  # features: the last layer's [forward; backward] states, 2H wide; positions_P picks columns.
  feats = decoder.features(graphdef, params, jnp.asarray(tokens), jnp.asarray(seg))
  assert feats.shape == (3, 7, 12)
  at = decoder.apply(graphdef, params, jnp.asarray(tokens), jnp.asarray(seg),
                     np.array([1, 3]))
  np.testing.assert_allclose(np.asarray(at), logits[:, [1, 3]], rtol=1e-6, atol=1e-6)


def test_bilstm_reads_both_sides():
  """The logits at t depend on a word before t and on a word after t."""
  cfg = decoder.preset("bilstm", vocab_size=9, num_layers=1, embed_dim=4, max_len=5, doc_mask=True)
  graphdef, params = decoder.init(cfg, 0)
  tokens = jnp.array([[1, 2, 3, 4, 5]], jnp.int32)
  seg = jnp.ones_like(tokens)
  base = decoder.apply(graphdef, params, tokens, seg)[0, 2]
  for t in (0, 4):
    moved = decoder.apply(graphdef, params, tokens.at[0, t].set(8), seg)[0, 2]
    assert float(jnp.max(jnp.abs(moved - base))) > 1e-6, t


def test_bilstm_config_errors():
  with pytest.raises(ValueError, match="doc_mask=True needs segment_ids"):
    cfg = decoder.preset("bilstm", vocab_size=5, num_layers=1, embed_dim=4, max_len=3,
                         doc_mask=True)
    graphdef, params = decoder.init(cfg, 0)
    decoder.apply(graphdef, params, jnp.zeros((1, 3), jnp.int32))
  with pytest.raises(ValueError, match="arch='gru'; allowed"):
    decoder.DecoderConfig(vocab_size=5, arch="gru")
  # No attention: a head count that does not divide the width is not an error.
  decoder.preset("bilstm", vocab_size=5, num_heads=3, embed_dim=4)


def test_growth_refuses_the_bilstm():
  from el_jax.core.models import growth
  cfg = decoder.preset("bilstm", vocab_size=5, num_layers=1, embed_dim=4, max_len=3)
  _, params = decoder.init(cfg, 0)
  with pytest.raises(ValueError, match="arch='bilstm'"):
    growth.deepen(cfg, params, num_layers=2)


def test_bilstm_mixed_precision_is_close_to_float32():
  kw = dict(vocab_size=9, num_layers=2, embed_dim=8, max_len=5, doc_mask=True)
  g32, params = decoder.init(decoder.preset("bilstm", **kw), 0)
  g16, _ = decoder.init(decoder.preset("bilstm", dtype="bfloat16", **kw), 0)
  tokens = jnp.array([[1, 2, 3, 4, 5]], jnp.int32)
  seg = jnp.ones_like(tokens)
  full = decoder.apply(g32, params, tokens, seg)
  mixed = decoder.apply(g16, params, tokens, seg)
  assert mixed.dtype == jnp.float32
  err = float(jnp.max(jnp.abs(mixed - full)))
  assert 0 < err < 0.02 * float(jnp.max(jnp.abs(full))), err  # bf16 rounding, not another model


def test_probe_tools_read_the_bilstms_2h_features():
  """encode and fine_tune take their width from the model (2H here, not embed_dim)."""
  from el_jax.core import probe
  cfg = decoder.preset("bilstm", vocab_size=6, num_layers=1, embed_dim=4, max_len=5,
                       doc_mask=True)
  graphdef, params = decoder.init(cfg, 0)
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, 6, (12, 5)).astype(np.int32)
  seg = np.ones_like(tokens)
  seg[0, 3:] = 0
  x = probe.encode(graphdef, params, tokens, seg, batch_size=5)
  want = np.asarray(decoder.features(graphdef, params, jnp.asarray(tokens), jnp.asarray(seg)))
  want = np.where(seg[:, :, None] > 0, want, 0.0).reshape(12, 5 * 8)
  np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-6)
  split = (tokens, seg, (tokens[:, 0] % 2).astype(np.int32))
  out = probe.fine_tune(graphdef, params, split, split, split, 2, seeds=(0,), epochs=1,
                        batch_size=4, warmup_steps=1)
  assert 0.0 <= out["test_acc_mean"] <= 1.0
