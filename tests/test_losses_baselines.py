"""Baseline losses of seed 001, loss-based token reweighting and the WSD schedule.

Every formula is checked against an independent float64 NumPy computation
(explicit per-token / per-step loops) of the definition in the module
docstrings; JAX computes in float32, so values are compared with rtol = atol =
2e-5 and gradients with rtol = 1e-4, atol = 1e-5 (finite differences: 2e-4).
"""
import functools
import importlib.util
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from el_jax.core import losses
from el_jax.core.models import decoder
from el_jax.core import optim
from el_jax.core import step as step_lib
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

BASELINES = ("label_smoothing", "z_loss", "spherical_z", "focal", "dice", "gce",
             "spectral_decoupling")
# Non-default hyperparameters, so that a value ignored or swapped shows up.
HPARAMS = {
    "label_smoothing": {"eps": 0.3},
    "z_loss": {"coef": 0.05},
    "spherical_z": {"a": 0.7, "b": -0.4},
    "focal": {"gamma": 1.5},
    "dice": {"alpha": 0.6, "gamma": 0.3},
    "gce": {"q": 0.4},
    "spectral_decoupling": {"lam": 0.3},
}
VOCABS = (2, 5, 26)
RTOL = ATOL = 2e-5


def _np_loss(name, f, k, **hp):
  """Reference for one token, float64, straight from the definition."""
  f = np.asarray(f, np.float64)
  v = f.shape[0]
  mx = f.max()
  lse = mx + math.log(sum(math.exp(x - mx) for x in f))
  p = [math.exp(x - lse) for x in f]
  log_p = [x - lse for x in f]
  pk = p[k]
  if name == "label_smoothing":
    eps = hp.get("eps", 0.1)
    return -(1 - eps) * log_p[k] - eps / v * sum(log_p)
  if name == "z_loss":
    return -log_p[k] + hp.get("coef", 1e-4) * lse ** 2
  if name == "spherical_z":
    a, b = hp.get("a", 1.0), hp.get("b", 1.0)
    mean = sum(f) / v
    std = math.sqrt(sum((x - mean) ** 2 for x in f) / v)
    z_k = (f[k] - mean) / (std + 1e-6)
    return np.logaddexp(0.0, a * (b - z_k)) / a  # softplus
  if name == "focal":
    return -(1 - pk) ** hp.get("gamma", 2.0) * log_p[k]
  if name == "dice":
    alpha, gamma = hp.get("alpha", 1.0), hp.get("gamma", 1.0)
    wp = (1 - pk) ** alpha * pk
    return 1 - (2 * wp + gamma) / (wp + 1 + gamma)
  if name == "gce":
    q = hp.get("q", 0.7)
    return (1 - pk ** q) / q
  if name == "spectral_decoupling":
    return -log_p[k] + hp.get("lam", 1.0) / 2 * sum(x * x for x in f)
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


# ----------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("v", VOCABS)
@pytest.mark.parametrize("name", BASELINES)
def test_matches_numpy_reference(name, v):
  f, k = _data(v, seed=100 + v)
  for hp in ({}, HPARAMS[name]):  # the defaults and other values
    got = losses.get_loss(name, **hp)(f, k)
    assert got.shape == (3, 4) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, _np_batch(name, f, k, **hp), rtol=RTOL, atol=ATOL,
                               err_msg=f"{name} {hp}")


@pytest.mark.parametrize("name,hp", [
    ("label_smoothing", {"eps": 0.0}), ("z_loss", {"coef": 0.0}), ("focal", {"gamma": 0.0}),
    ("spectral_decoupling", {"lam": 0.0})])
def test_reduces_to_cross_entropy(name, hp):
  f, k = _data(5, seed=2)
  np.testing.assert_allclose(losses.get_loss(name, **hp)(f, k), losses.get_loss("ce")(f, k),
                             rtol=1e-6, atol=1e-6)


def test_gce_q1_is_one_minus_p_and_dice_alpha0_is_plain_dice():
  f, k = _data(5, seed=3)
  p_k = np.take_along_axis(np.asarray(jax.nn.softmax(f, axis=-1)), k[..., None], -1)[..., 0]
  np.testing.assert_allclose(losses.get_loss("gce", q=1.0)(f, k), 1 - p_k, rtol=1e-5,
                             atol=1e-6)
  want = 1 - (2 * p_k + 0.5) / (p_k + 1.5)
  np.testing.assert_allclose(losses.get_loss("dice", alpha=0.0, gamma=0.5)(f, k), want,
                             rtol=1e-5, atol=1e-6)


def test_spherical_z_is_shift_and_scale_invariant():
  f, k = _data(26, seed=4)
  fn = losses.get_loss("spherical_z", a=2.0, b=0.5)
  np.testing.assert_allclose(fn(3.0 * f + 7.25, k), fn(f, k), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------
# Gradients


def _np_softmax(f):
  e = np.exp(f - f.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def _grad_of_sum(name, hp, f, k):
  """d sum(loss) / d logits, jitted (so the losses also trace under jit and strict rank
  promotion)."""
  fn = losses.get_loss(name, **hp)
  return np.asarray(jax.jit(jax.grad(lambda x: jnp.sum(fn(x, k))))(jnp.asarray(f)))


def test_gradients_against_numpy_analytic():
  f, k = _data(7, seed=5)
  f64 = f.astype(np.float64)
  p = _np_softmax(f64)
  y = np.eye(7)[k]
  lse = np.log(np.exp(f64 - f64.max(-1, keepdims=True)).sum(-1, keepdims=True)) + f64.max(
      -1, keepdims=True)
  want = {
      "label_smoothing": p - (0.7 * y + 0.3 / 7),  # eps = 0.3
      "z_loss": p - y + 2 * 0.05 * lse * p,  # coef = 0.05
      "spectral_decoupling": p - y + 0.3 * f64,  # lam = 0.3
  }
  for name, g in want.items():
    np.testing.assert_allclose(_grad_of_sum(name, HPARAMS[name], f, k), g, rtol=1e-4,
                               atol=1e-5, err_msg=name)


@pytest.mark.parametrize("name", ["spherical_z", "focal", "dice", "gce"])
def test_gradients_against_finite_differences(name):
  f, k = _data(5, seed=6, scale=2.0)
  f, k = f[0], k[0]  # 4 tokens
  hp = HPARAMS[name]
  got = _grad_of_sum(name, hp, f, k)
  h = 1e-5
  fd = np.zeros(f.shape)
  for t in range(f.shape[0]):
    for c in range(f.shape[1]):
      up, dn = f[t].astype(np.float64), f[t].astype(np.float64)
      up[c] += h
      dn[c] -= h
      fd[t, c] = (_np_loss(name, up, k[t], **hp) - _np_loss(name, dn, k[t], **hp)) / (2 * h)
  np.testing.assert_allclose(got, fd, rtol=2e-4, atol=2e-5)


# ----------------------------------------------------------------------------
# Stability


EXTREME_HPARAMS = {
    "label_smoothing": [{"eps": 0.0}, {"eps": 0.99}],
    "z_loss": [{"coef": 1.0}],
    "spherical_z": [{"a": 1e-3, "b": -50.0}, {"a": 50.0, "b": 50.0}],
    "focal": [{"gamma": 0.0}, {"gamma": 5.0}],
    "dice": [{"alpha": 0.0, "gamma": 1e-3}, {"alpha": 3.0, "gamma": 10.0}],
    "gce": [{"q": 1e-3}, {"q": 1.0}],
    "spectral_decoupling": [{"lam": 10.0}],
}


@pytest.mark.parametrize("name", BASELINES)
def test_finite_values_and_grads_at_large_logits(name):
  rng = np.random.default_rng(7)
  f = np.float32(1e4) * np.sign(rng.standard_normal((3, 4, 26))).astype(np.float32)
  f[0, 0] = 1e4  # all logits equal: zero variance (spherical_z's epsilon)
  f[0, 1] = np.linspace(-1e4, 1e4, 26)
  f[0, 2] = -1e4
  f[0, 2, 3] = 1e4  # one sure class: p_k rounds to 1 or 0
  k = rng.integers(0, 26, size=(3, 4)).astype(np.int32)
  k[0, 2] = 3
  k[0, 3] = -1  # a padding label
  for hp in [{}, *EXTREME_HPARAMS[name]]:
    fn = losses.get_loss(name, **hp)
    for logits in (jnp.asarray(f), jnp.asarray(f, jnp.bfloat16)):
      val = fn(logits, k)
      grad = jax.grad(lambda x: jnp.mean(fn(x, k)))(logits)
      assert val.dtype == jnp.float32
      assert np.all(np.isfinite(val)), (name, hp, logits.dtype)
      assert np.all(np.isfinite(np.asarray(grad, np.float32))), (name, hp, logits.dtype)


def test_spherical_z_at_equal_logits_is_softplus_ab():
  f = np.full((2, 6), 1e4, np.float32)
  f[1] = -3.0
  k = np.array([2, 5], np.int32)
  got = losses.get_loss("spherical_z", a=0.5, b=2.0)(f, k)
  np.testing.assert_allclose(got, [np.logaddexp(0, 1.0) / 0.5] * 2, rtol=1e-6)


# ----------------------------------------------------------------------------
# Hyperparameter checks


BAD = [
    ("label_smoothing", "eps", 1.0, "in [0, 1)"), ("label_smoothing", "eps", -0.1, "in [0, 1)"),
    ("z_loss", "coef", -1e-3, ">= 0"), ("z_loss", "coef", float("inf"), ">= 0"),
    ("spherical_z", "a", 0.0, "> 0"), ("spherical_z", "b", float("nan"), "any real"),
    ("spherical_z", "b", float("-inf"), "any real"), ("focal", "gamma", -0.5, ">= 0"),
    ("dice", "gamma", 0.0, "> 0"), ("dice", "alpha", -1.0, ">= 0"),
    ("gce", "q", 0.0, "in (0, 1]"), ("gce", "q", 1.5, "in (0, 1]"), ("gce", "q", "x", "in (0, 1]"),
    ("spectral_decoupling", "lam", -2.0, ">= 0"), ("e3", "b", -1.0, "> 0"),
]


@pytest.mark.parametrize("name,hp,value,allowed", BAD,
                         ids=[f"{n}-{h}={v}" for n, h, v, _ in BAD])
def test_bad_hyperparameter_is_refused_naming_it(name, hp, value, allowed):
  with pytest.raises(ValueError) as e:
    losses.get_loss(name, **{hp: value})
  msg = str(e.value)
  assert msg.startswith(f"{hp} must be a finite number") and allowed in msg, msg
  cfg = {"name": name, name: {hp: value}}
  with pytest.raises(ValueError, match=rf"^loss\.{name}\.{hp} must be"):
    losses.validate_config(cfg)


def test_per_loss_ranges():
  f, k = _data(5, seed=8)
  # spherical_z's b may be negative (e3's may not); focal's gamma may be 0 (dice's may not).
  assert np.all(np.isfinite(losses.get_loss("spherical_z", b=-3.0)(f, k)))
  assert np.all(np.isfinite(losses.get_loss("focal", gamma=0.0)(f, k)))


def test_foreign_hyperparameter_is_refused():
  with pytest.raises(ValueError, match=r"'focal' takes hyperparameters \['gamma'\].*'q'"):
    losses.get_loss("focal", q=0.5)
  with pytest.raises(ValueError, match=r"unexpected \['lam'\]"):
    losses.get_loss("z_loss", lam=1.0)
  with pytest.raises(ValueError, match=r"unexpected \['coef'\]"):
    losses.get_loss("spectral_decoupling", coef=1.0)


def test_unknown_name_lists_every_loss():
  with pytest.raises(ValueError) as e:
    losses.validate_config({"name": "hinge"})
  for name in losses.LOSSES:
    assert repr(name) in str(e.value)


def test_from_config_passes_only_own_hyperparameters():
  f, k = _data(26, seed=9)
  base = config_lib.get_config("copy_task", "test").loss
  for name in BASELINES:
    cfg = base.copy_and_resolve_references()
    cfg.name = name
    cfg[name].update(HPARAMS[name])
    np.testing.assert_allclose(losses.get_loss_from_config(cfg)(f, k),
                               _np_batch(name, f, k, **HPARAMS[name]), rtol=RTOL, atol=ATOL,
                               err_msg=name)


# ----------------------------------------------------------------------------
# Loss-based reweighting (seed 001: Sow et al. 2025, Algorithm 1)


def _np_weights(l, m, strategy, r):
  """Per-token weights: normalise the masked losses to [-1, 1], apply the strategy,
  softmax with temperature r, scale to sum(m)."""
  l, m = np.asarray(l, np.float64).ravel(), np.asarray(m, np.float64).ravel()
  on = [i for i in range(l.size) if m[i] > 0]
  lo, hi = min(l[i] for i in on), max(l[i] for i in on)
  den = max(hi - lo, 1e-6)
  shape = {"linupper": lambda h: min(h + 1, 1), "quadratic": lambda h: 1 - h * h,
           "extremes": abs}[strategy]
  e = np.zeros(l.size)
  for i in on:
    e[i] = math.exp(shape(2 * (l[i] - lo) / den - 1) / r)
  return e * m.sum() / sum(m[i] * e[i] for i in on)


def _batch(seed=0, frac_mask=False):
  rng = np.random.default_rng(seed)
  l = rng.exponential(2.0, size=(4, 6)).astype(np.float32)
  m = (rng.random((4, 6)) < 0.7).astype(np.float32)
  if frac_mask:
    m *= rng.choice([0.5, 1.0, 2.0], size=m.shape).astype(np.float32)
  return l, m


@pytest.mark.parametrize("strategy", losses.REWEIGHT_STRATEGIES)
@pytest.mark.parametrize("r", [0.3, 4.0])
@pytest.mark.parametrize("frac_mask", [False, True], ids=["01_mask", "weighted_mask"])
def test_reweight_against_numpy(strategy, r, frac_mask):
  l, m = _batch(seed=int(r * 10), frac_mask=frac_mask)
  want_w = _np_weights(l, m, strategy, r).reshape(l.shape)
  got_w = losses.reweight_weights(l, m, strategy=strategy, r=r)
  np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.sum(np.asarray(got_w) * m), m.sum(), rtol=1e-5)
  want = np.sum(m * want_w * l) / m.sum()
  hp = {"reweight_strategy": strategy, "reweight_r": r}
  np.testing.assert_allclose(losses.reduce(l, m, "reweight", **hp), want, rtol=1e-5)


def test_reweight_weights_are_constants_of_the_gradient():
  l, m = _batch(seed=3)
  fn = losses.get_reduction("reweight", reweight_strategy="linupper", reweight_r=0.5)
  grad = jax.jit(jax.grad(fn))(jnp.asarray(l), m)
  want = m * _np_weights(l, m, "linupper", 0.5).reshape(l.shape) / m.sum()
  np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-7)


def test_reweight_shapes_and_limits():
  l, m = _batch(seed=4)
  on = m > 0
  w = np.asarray(losses.reweight_weights(l, m, strategy="linupper"))
  assert np.all(w[~on] == 0)
  # linupper: non-decreasing in the loss, and flat (the maximum) above the midpoint.
  order = np.argsort(l[on])
  assert np.all(np.diff(w[on][order]) >= -1e-6)
  mid = 0.5 * (l[on].min() + l[on].max())
  np.testing.assert_allclose(w[on][l[on] >= mid], w[on].max(), rtol=1e-6)
  # r -> infinity: uniform weights (the plain mean).
  np.testing.assert_allclose(losses.reweight_weights(l, m, r=1e7)[on], 1.0, rtol=1e-5)
  # Equal losses: equal weights; an empty mask: zero weights and a zero objective.
  np.testing.assert_allclose(losses.reweight_weights(np.full_like(l, 2.5), m)[on], 1.0,
                             rtol=1e-6)
  empty = np.zeros_like(m)
  assert np.all(np.asarray(losses.reweight_weights(l, empty)) == 0)
  assert float(losses.reduce(l, empty, "reweight")) == 0.0
  # Huge losses outside the mask change nothing.
  far = np.where(on, l, 1e30).astype(np.float32)
  np.testing.assert_allclose(losses.reweight_weights(far, m, strategy="extremes"),
                             losses.reweight_weights(l, m, strategy="extremes"), rtol=1e-6)


def test_mean_reduction_is_the_old_masked_mean():
  l, m = _batch(seed=5)
  got = losses.reduce(l, m)
  np.testing.assert_array_equal(got, step_lib.masked_mean(jnp.asarray(l), jnp.asarray(m)))
  np.testing.assert_array_equal(got, losses.reduce_loss(l, m))
  np.testing.assert_allclose(got, np.sum(l * m) / np.sum(m), rtol=1e-6)
  assert losses.get_reduction_from_config({"name": "ce"}) is losses.get_reduction("mean")


def test_bad_reduction_values():
  with pytest.raises(ValueError, match=r"loss.reduction='sum'; allowed: \['mean', 'reweight'\]"):
    losses.validate_config({"name": "ce", "reduction": "sum"})
  with pytest.raises(ValueError, match=r"loss.reweight.strategy='mid'; allowed: \['linupper'"):
    losses.validate_config({"name": "ce", "reduction": "reweight",
                            "reweight": {"strategy": "mid"}})
  with pytest.raises(ValueError, match=r"loss.reweight.r must be a finite number > 0, got 0.0"):
    losses.validate_config({"name": "ce", "reduction": "reweight", "reweight": {"r": 0.0}})
  with pytest.raises(ValueError, match=r"loss.reweight_r is now loss.reweight.r"):
    losses.validate_config({"name": "ce", "reduction": "reweight", "reweight_r": 0.0})
  with pytest.raises(ValueError, match=r"'mean' takes hyperparameters \[\], got unexpected"):
    losses.get_reduction("mean", reweight_r=1.0)
  with pytest.raises(ValueError, match="mask shape"):
    losses.reweight_weights(np.zeros((2, 3)), np.zeros((3, 2)))


def test_train_step_objective_is_the_reduction(monkeypatch):
  """train_step on a bigram "model" (logits = W[inputs]): its loss is reduce(per-token loss,
  loss_mask), its update the gradient of sum(m * w * l) / sum(m) with w held constant.

  ("mean" is not passed on by the Trainer, so train_step keeps its own masked mean for it:
  the golden one-step test of tests/test_train.py pins that.)
  """
  monkeypatch.setattr(decoder, "apply", lambda graphdef, params, inputs, seg, positions=None:
                      params["w"][inputs])
  rng = np.random.default_rng(6)
  v = 7
  w0 = rng.standard_normal((v, v)).astype(np.float32)
  batch = {"inputs": rng.integers(0, v, (4, 5)).astype(np.int32),
           "segment_ids": np.ones((4, 5), np.int32),
           "targets": rng.integers(0, v, (4, 5)).astype(np.int32),
           "loss_mask": (rng.random((4, 5)) < 0.7).astype(np.float32)}
  loss_fn = losses.get_loss("focal", gamma=1.5)
  tx = optax.sgd(0.5)
  state = {"params": {"w": jnp.asarray(w0)}, "opt_state": tx.init({"w": jnp.asarray(w0)}),
           "step": jnp.zeros((), jnp.int32)}
  hp = {"reweight_strategy": "quadratic", "reweight_r": 0.5}
  step = jax.jit(functools.partial(step_lib.train_step, None, loss_fn, tx, (),
                                   reduce_fn=losses.get_reduction("reweight", **hp)))
  new_state, metrics = step(state, batch)
  per_tok = np.asarray(loss_fn(w0[batch["inputs"]], batch["targets"]), np.float64)
  m = batch["loss_mask"]
  c = m * _np_weights(per_tok, m, "quadratic", 0.5).reshape(m.shape) / m.sum()
  np.testing.assert_allclose(metrics["loss"], np.sum(c * per_tok), rtol=1e-5)
  assert abs(float(metrics["loss"]) - np.sum(m * per_tok) / m.sum()) > 1e-3  # not the mean
  grad = jax.grad(lambda w: jnp.sum(c * loss_fn(w[batch["inputs"]], batch["targets"])))(w0)
  np.testing.assert_allclose(new_state["params"]["w"], w0 - 0.5 * np.asarray(grad), rtol=1e-5,
                             atol=1e-6)


def test_trainer_passes_the_configs_reduction():
  for reduction, passed in (("mean", False), ("reweight", True)):
    setup = setup_lib.Setup(config_lib.get_config("copy_task", "test", {
        "loss.reduction": reduction, "num_devices": 1}))
    keywords = setup_lib.Trainer(setup).step.__wrapped__.keywords
    assert ("reduce_fn" in keywords) == passed, reduction
    if passed:
      assert keywords["reduce_fn"] is setup.reduce_fn


# ----------------------------------------------------------------------------
# Warmup-stable-decay schedule


def _np_wsd(t, lr, warmup, num_steps, decay_frac, final_frac):
  """Linear warmup from lr/warmup, lr, then linear to lr*final_frac over the last
  round(decay_frac*num_steps) steps (at least 1; cut to the steps after warmup)."""
  n_dec = max(min(max(round(decay_frac * num_steps), 1), num_steps - warmup), 1)
  start = max(num_steps - n_dec, warmup)
  if t < warmup:
    return lr / warmup + (lr - lr / warmup) * t / warmup
  if t < start:
    return lr
  return lr + (lr * final_frac - lr) * min(t - start, n_dec) / n_dec


@pytest.mark.parametrize("warmup,num_steps,decay_frac,final", [
    (3, 20, 0.25, 0.1), (0, 20, 0.25, 0.0), (4, 17, 0.3, 0.2), (2, 10, 1.0, 0.0),
    (8, 10, 0.5, 0.1), (0, 1, 0.1, 0.5), (5, 40, 0.01, 0.0)])
def test_wsd_schedule_against_numpy(warmup, num_steps, decay_frac, final):
  cfg = config_lib.get_config("copy_task", "test").optim
  cfg.update(dict(lr=0.5, warmup_steps=warmup, decay="wsd", decay_frac=decay_frac,
                  final_lr_frac=final))
  schedule = optim.make_schedule(cfg, num_steps)
  for t in range(num_steps + 5):
    want = _np_wsd(t, 0.5, warmup, num_steps, decay_frac, final)
    assert float(schedule(t)) == pytest.approx(want, rel=1e-6, abs=1e-7), t


def test_wsd_with_full_decay_is_the_linear_schedule():
  cfg = config_lib.get_config("copy_task", "test").optim
  cfg.update(dict(lr=1.0, warmup_steps=3, final_lr_frac=0.1, decay_frac=1.0))
  wsd = optim.make_schedule(dict_update(cfg, decay="wsd"), 15)
  lin = optim.make_schedule(dict_update(cfg, decay="linear"), 15)
  for t in range(18):
    assert float(wsd(t)) == pytest.approx(float(lin(t)), rel=1e-6), t


def dict_update(cfg, **kw):
  out = cfg.copy_and_resolve_references()
  out.update(kw)
  return out


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5, float("nan")])
def test_bad_decay_frac(value):
  cfg = config_lib.get_config("copy_task", "test").optim
  cfg.decay_frac = value
  with pytest.raises(ValueError, match=r"optim.decay_frac=.* must be in \(0, 1\]"):
    optim.validate_config(cfg)
  cfg.decay = "wsd"
  with pytest.raises(ValueError, match=r"optim.decay_frac"):
    optim.make_optimizer(cfg, 10)


def test_unknown_decay_lists_wsd():
  cfg = config_lib.get_config("copy_task", "test").optim
  cfg.decay = "step"
  with pytest.raises(ValueError, match="'wsd'"):
    optim.validate_config(cfg)


# ----------------------------------------------------------------------------
# Configs


CONFIGS = ("copy_task", "path_star", "pcfg_mlm", "hmm_mlm")
# Each loss's block (its own hyperparameters) and the reduction's.
LOSS_BLOCKS = {"e1", "e2", "e3", "label_smoothing", "z_loss", "spherical_z", "focal", "dice", "gce",
               "spectral_decoupling", "reweight"}


def _variants(name):
  path = os.path.join(os.path.dirname(__file__), "..", "configs", f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"_cfg_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.VARIANTS


@pytest.mark.parametrize("name", CONFIGS)
def test_configs_carry_and_validate_every_loss(name):
  for variant in _variants(name):
    config = config_lib.get_config(name, variant)
    assert LOSS_BLOCKS | {"name", "reduction"} <= set(config.loss), (name, variant)
    assert "decay_frac" in config.optim, (name, variant)
    losses.validate_config(config.loss)
    optim.validate_config(config.optim)
    for loss in losses.LOSSES:  # a sweep switches the loss by name alone
      for reduction in losses.REDUCTIONS:
        losses.validate_config({**config.loss.to_dict(), "name": loss, "reduction": reduction})
    optim.make_schedule(dict_update(config.optim, decay="wsd"), config.train.num_steps)
