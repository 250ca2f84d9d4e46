"""Losses against independent float64 NumPy formulas, plus stability checks."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from el_jax.core import losses

VOCABS = (2, 5, 26)
E_LOSSES = ("ce", "e1", "e2", "e3")  # the baselines: tests/test_losses_baselines.py


def _np_loss(name, f, k, lam=1.0, b=1.0):
  """Reference for one token: explicit loops over the competitors c != k."""
  f = np.asarray(f, np.float64)
  v = f.shape[0]
  ce = np.log(np.sum(np.exp(f - f.max()))) + f.max() - f[k]
  margins = [f[k] - f[c] for c in range(v) if c != k]
  if name == "ce":
    return ce
  if name == "e1":
    return ce + lam * np.log(1.0 + sum(m * m for m in margins) / (v - 1))
  if name == "e2":
    mu = sum(margins) / (v - 1)
    return ce + lam * sum((m - mu) ** 2 for m in margins) / (v - 1)
  if name == "e3":
    return sum((f[c] - (b if c == k else -b)) ** 2 for c in range(v))
  raise AssertionError(name)


def _np_batch(name, f, k, **hp):
  out = np.zeros(k.shape)
  for idx in np.ndindex(k.shape):
    out[idx] = _np_loss(name, f[idx], k[idx], **hp)
  return out


def _data(v, seed=0, scale=3.0):
  rng = np.random.default_rng(seed)
  f = (scale * rng.standard_normal((3, 4, v))).astype(np.float32)
  k = rng.integers(0, v, size=(3, 4)).astype(np.int32)
  return f, k


@pytest.mark.parametrize("v", VOCABS)
@pytest.mark.parametrize("name,hp", [("ce", {}), ("e1", {"lam": 1.7}),
                                     ("e2", {"lam": 0.6}), ("e3", {"b": 2.5})])
def test_matches_numpy_reference(name, hp, v):
  f, k = _data(v, seed=v)
  got = losses.get_loss(name, **hp)(f, k)
  assert got.shape == (3, 4) and got.dtype == jnp.float32
  np.testing.assert_allclose(got, _np_batch(name, f, k, **hp), rtol=2e-5,
                             atol=2e-5)


def test_defaults_are_one():
  f, k = _data(5)
  for name, hp in [("e1", "lam"), ("e2", "lam"), ("e3", "b")]:
    np.testing.assert_allclose(losses.get_loss(name)(f, k),
                               losses.get_loss(name, **{hp: 1.0})(f, k))


@pytest.mark.parametrize("v", VOCABS)
def test_ce_matches_optax(v):
  f, k = _data(v, seed=10 + v)
  np.testing.assert_allclose(
      losses.get_loss("ce")(f, k),
      optax.softmax_cross_entropy_with_integer_labels(f, k), rtol=1e-5,
      atol=1e-6)


def test_e2_variance_equals_competitor_logit_variance():
  f, k = _data(26, seed=3)
  e2 = losses.get_loss("e2", lam=1.0)(f, k) - losses.get_loss("ce")(f, k)
  comp = np.stack([np.var(np.delete(f[i], k[i])) for i in np.ndindex(k.shape)])
  np.testing.assert_allclose(np.ravel(e2), comp, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["ce", "e1", "e2"])
def test_shift_invariant(name):
  f, k = _data(26, seed=4)
  fn = losses.get_loss(name)
  np.testing.assert_allclose(fn(f + 7.25, k), fn(f, k), rtol=1e-4, atol=1e-4)


def test_e3_not_shift_invariant_and_zero_at_target():
  f, k = _data(5, seed=5)
  fn = losses.get_loss("e3", b=1.5)
  assert np.all(np.abs(np.asarray(fn(f + 1.0, k) - fn(f, k))) > 1e-3)
  target = np.where(np.arange(5) == k[..., None], 1.5, -1.5).astype(np.float32)
  np.testing.assert_array_equal(fn(target, k), np.zeros((3, 4)))
  assert np.all(np.asarray(fn(target + 0.1, k)) > 0)


@pytest.mark.parametrize("name", list(losses.LOSSES))
def test_finite_values_and_grads_at_large_logits(name):
  rng = np.random.default_rng(6)
  f = np.float32(1e4) * np.sign(rng.standard_normal((3, 4, 26))).astype(
      np.float32)
  f[0, 0] = 1e4  # all logits equal: zero variance, zero margins
  f[0, 1] = np.linspace(-1e4, 1e4, 26)
  k = rng.integers(0, 26, size=(3, 4)).astype(np.int32)
  fn = losses.get_loss(name)
  for logits in (jnp.asarray(f), jnp.asarray(f, jnp.bfloat16),
                 jnp.asarray(f / 1e4 * 3, jnp.bfloat16)):
    val = fn(logits, k)
    grad = jax.grad(lambda x: jnp.mean(fn(x, k)))(logits)
    assert val.dtype == jnp.float32
    assert np.all(np.isfinite(val)), (name, logits.dtype)
    assert np.all(np.isfinite(np.asarray(grad, np.float32))), (name,
                                                                logits.dtype)


def test_e2_variance_precise_at_large_offset():
  # Margins ~2e4 that differ by 1: E[x^2] - E[x]^2 loses every digit in
  # float32 here (E[x^2] ~ 4e8); the centred formula gets Var = 2/3. A large
  # lam keeps the rounding of the ~2e4 CE term out of the comparison.
  f = np.array([[-1e4, 1e4, 1e4 + 1, 1e4 + 2]], np.float32)
  k = np.array([0], np.int32)
  reg = losses.get_loss("e2", lam=1e3)(f, k) - losses.get_loss("ce")(f, k)
  np.testing.assert_allclose(reg, [1e3 * 2 / 3], rtol=1e-4)


def test_bfloat16_matches_float32_of_same_values():
  f, k = _data(26, seed=7)
  fb = jnp.asarray(f, jnp.bfloat16)
  for name in losses.LOSSES:
    fn = losses.get_loss(name)
    np.testing.assert_allclose(fn(fb, k), fn(jnp.asarray(fb, jnp.float32), k),
                               rtol=1e-6)


def test_bad_names_and_hparams():
  with pytest.raises(ValueError, match=r"'ce', .*'e1', 'e2', 'e3'"):
    losses.get_loss("hinge")
  with pytest.raises(ValueError, match="lam must be .*>= 0"):
    losses.get_loss("e1", lam=-0.5)
  with pytest.raises(ValueError, match="lam must be .*>= 0"):
    losses.get_loss("e2", lam=float("nan"))
  with pytest.raises(ValueError, match="b must be .*> 0"):
    losses.get_loss("e3", b=0.0)
  with pytest.raises(ValueError, match="unexpected.*lam"):
    losses.get_loss("ce", lam=2)
  with pytest.raises(ValueError, match="unexpected.*'b'"):
    losses.get_loss("e1", b=2)
  with pytest.raises(ValueError, match="labels shape"):
    losses.get_loss("ce")(np.zeros((3, 5), np.float32), np.zeros(4, np.int32))


def test_get_loss_from_config_passes_only_relevant_hparams():
  f, k = _data(5, seed=8)
  for make in (dict, ml_collections.ConfigDict):
    for name in E_LOSSES:
      cfg = make({"name": name, "e1": {"lam": 3.0}, "e2": {"lam": 3.0}, "e3": {"b": 2.0}})
      hp = {"ce": {}, "e1": {"lam": 3.0}, "e2": {"lam": 3.0},
            "e3": {"b": 2.0}}[name]
      np.testing.assert_allclose(losses.get_loss_from_config(cfg)(f, k),
                                 _np_batch(name, f, k, **hp), rtol=2e-5,
                                 atol=2e-5)
  with pytest.raises(ValueError, match="valid names"):
    losses.get_loss_from_config({"name": "nope", "e1": {"lam": 1.0}})
  # Missing fields fall back to the loss's defaults.
  np.testing.assert_allclose(
      losses.get_loss_from_config({"name": "e3"})(f, k),
      _np_batch("e3", f, k, b=1.0), rtol=2e-5)
  # lam = 0 is allowed and gives plain CE.
  np.testing.assert_allclose(
      losses.get_loss_from_config({"name": "e1", "e1": {"lam": 0.0}, "e3": {"b": 9.0}})(f, k),
      losses.get_loss("ce")(f, k), rtol=1e-6)


def test_losses_jit_under_strict_rank_promotion():
  f, k = _data(26, seed=9)
  for name in E_LOSSES:
    fn = jax.jit(losses.get_loss(name))
    np.testing.assert_allclose(fn(f, k), _np_batch(name, f, k), rtol=2e-5,
                               atol=2e-5)


def test_reduce_loss():
  l = np.array([[1.0, 2.0], [3.0, 40.0]], np.float32)
  m = np.array([[1.0, 1.0], [1.0, 0.0]], np.float32)
  np.testing.assert_allclose(losses.reduce_loss(l, m), 2.0)
  assert float(losses.reduce_loss(l, np.zeros_like(m))) == 0.0


def _np_margin_stats(f, k, w):
  margins, weights = [], []
  for idx in np.ndindex(k.shape):
    comp = max(f[idx][c] for c in range(f.shape[-1]) if c != k[idx])
    margins.append(float(f[idx][k[idx]]) - float(comp))
    weights.append(float(w[idx]))
  m, w = np.array(margins), np.array(weights)
  mean = np.sum(m * w) / np.sum(w)
  return {
      "margin_mean": mean,
      "margin_min": m[w > 0].min(),
      "fitted_frac": np.sum((m > 0) * w) / np.sum(w),
      "margin_std": np.sqrt(np.sum((m - mean) ** 2 * w) / np.sum(w)),
  }


def test_margin_stats_against_numpy():
  f, k = _data(5, seed=11)
  f[0, 0] += 20 * np.eye(5, dtype=np.float32)[k[0, 0]]  # one sure fit
  mask = np.ones((3, 4), np.float32)
  mask[1] = 0.0
  mask[0, 0] = 0.0  # hide the largest margin so the mask matters for mean/max
  for w in (np.ones((3, 4), np.float32), mask):
    got = losses.margin_stats(f, k, None if w.all() else w)
    want = _np_margin_stats(f, k, w)
    assert set(got) == set(want)
    for key in want:
      assert got[key].dtype == jnp.float32 and got[key].shape == ()
      np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5,
                                 err_msg=key)
  full = losses.margin_stats(f, k)
  masked = losses.margin_stats(f, k, mask)
  assert float(full["margin_mean"]) != pytest.approx(
      float(masked["margin_mean"]))


def test_margin_stats_all_zero_mask_gives_zeros():
  f, k = _data(5, seed=12)
  got = losses.margin_stats(f, k, np.zeros((3, 4), np.float32))
  for key, val in got.items():
    assert float(val) == 0.0, key
