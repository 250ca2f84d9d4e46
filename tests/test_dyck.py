"""Dyck languages (seed 002, Sec. 6): counting, sampler and MLM conditionals against brute
force; the one-layer model against NumPy; the two constructed solutions of Theorem 6.1."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats

from el_jax.core import flatness
from el_jax.core.data import dyck
from el_jax.core.models import dyck_net as dn

VARIANTS = [(1, False), (1, True), (2, True)]


def _valid(s, k, nested):
  """Independent validity check: a Python stack (or a counter for the balanced variant)."""
  if not nested:
    return sum(1 if t == 0 else -1 for t in s) == 0
  stack = []
  for t in s:
    if t % 2 == 0:
      stack.append(t // 2)
    elif not stack or stack.pop() != t // 2:
      return False
  return not stack


def _brute(n, k, nested):
  return [s for s in itertools.product(range(2 * k), repeat=n) if _valid(s, k, nested)]


# ----------------------------------------------------------------------------
# Counting and enumeration


@pytest.mark.parametrize("k,nested", VARIANTS)
@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_counts_and_enumeration_match_brute_force(n, k, nested):
  lang = dyck.Language(n, k, nested)
  brute = _brute(n, k, nested)
  assert lang.num_sentences == len(brute)
  np.testing.assert_array_equal(lang.all_sentences(), np.array(sorted(brute)))
  assert lang.is_valid(np.array(brute)).all()
  every = np.array(list(itertools.product(range(2 * k), repeat=n)))
  np.testing.assert_array_equal(lang.is_valid(every),
                                [_valid(s, k, nested) for s in every])
  # num_completions(r, state) = the number of valid strings extending each prefix.
  for l in range(n + 1):
    for pref in itertools.product(range(2 * k), repeat=l):
      ext = sum(1 for s in brute if s[:l] == pref)
      state = _prefix_state(pref, nested)
      if state is None:
        assert ext == 0
      else:
        assert lang.num_completions(n - l, state) == ext, (pref, state)


def _prefix_state(pref, nested):
  """Depth (nested) or balance of a prefix; None if it already broke the nesting."""
  if not nested:
    return sum(1 if t % 2 == 0 else -1 for t in pref)
  stack = []
  for t in pref:
    if t % 2 == 0:
      stack.append(t // 2)
    elif not stack or stack.pop() != t // 2:
      return None
  return len(stack)


@pytest.mark.parametrize("m", [1, 5, 10, 20])
def test_closed_forms(m):
  n = 2 * m
  assert dyck.Language(n).num_sentences == math.comb(n, m)
  assert dyck.Language(n, nested=True).num_sentences == dyck.catalan(m)
  assert dyck.Language(n, 2, True).num_sentences == dyck.catalan(m) * 2 ** m


# ----------------------------------------------------------------------------
# Sampler


@pytest.mark.parametrize("n,k,nested", [(6, 1, False), (6, 1, True), (4, 2, True),
                                        (6, 2, True)])
def test_sampler_is_uniform_chi_square(n, k, nested):
  lang = dyck.Language(n, k, nested)
  x = lang.sample(20_000, seed=3)
  assert lang.is_valid(x).all()
  sents = lang.all_sentences()
  index = {tuple(s): i for i, s in enumerate(sents)}
  counts = np.bincount([index[tuple(s)] for s in x], minlength=len(sents))
  p = scipy.stats.chisquare(counts).pvalue
  assert p > 1e-3, (counts, p)


def test_sample_masked_positions_uniform_and_targets():
  lang = dyck.Language(8)
  masked, pos, tgt = lang.sample_masked(16_000, seed=1)
  assert (masked[np.arange(len(pos)), pos] == lang.mask_id).all()
  assert ((masked == lang.mask_id).sum(1) == 1).all()
  assert scipy.stats.chisquare(np.bincount(pos, minlength=8)).pvalue > 1e-3
  filled = masked.copy()
  filled[np.arange(len(pos)), pos] = tgt
  assert lang.is_valid(filled).all()


# ----------------------------------------------------------------------------
# MLM conditional


@pytest.mark.parametrize("k,nested", VARIANTS)
@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_mlm_conditional_matches_enumeration(n, k, nested):
  lang = dyck.Language(n, k, nested)
  brute = set(_brute(n, k, nested))
  sents = sorted(brute)[::max(1, len(brute) // 40)]
  rows, positions, want = [], [], []
  for s in sents:
    for i in range(n):
      agree = np.array([float(s[:i] + (c,) + s[i + 1:] in brute) for c in range(2 * k)])
      x = list(s)
      x[i] = lang.mask_id
      rows.append(x)
      positions.append(i)
      want.append(agree / agree.sum())
  got = lang.mlm_conditional_batch(np.array(rows), np.array(positions))
  np.testing.assert_allclose(got, np.array(want), atol=0)
  # One sentence at a time; the token at the position is ignored.
  s = sents[-1]
  for i in range(n):
    np.testing.assert_allclose(lang.mlm_conditional(np.array(s), i), want[-n + i])


# ----------------------------------------------------------------------------
# Downstream label


def test_mismatches_against_a_loop():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 3, (200, 10))  # brackets and masks (num_types=1)
  for l in (None, 0, 1, 5, 10):
    want = [sum({0: 1, 1: -1, 2: 0}[int(t)] for t in row[:(10 if l is None else l)])
            for row in x]
    np.testing.assert_array_equal(dyck.mismatches(x, prefix_len=l), want)
  x2 = rng.integers(0, 5, (50, 6))
  want = [sum(0 if t == 4 else (1 if t % 2 == 0 else -1) for t in row) for row in x2]
  np.testing.assert_array_equal(dyck.mismatches(x2, num_types=2), want)
  assert dyck.mismatches(np.array([0, 0, 1])) == 1


def test_mismatches_recovers_the_masked_token():
  lang = dyck.Language(10)
  masked, pos, tgt = lang.sample_masked(500, seed=2)
  tau = lang.mismatches(masked)
  np.testing.assert_array_equal(tau, np.where(tgt == 0, -1, 1))
  x = lang.all_downstream()
  np.testing.assert_array_equal(lang.mismatches(x) == 0, lang.is_valid(x))


# ----------------------------------------------------------------------------
# Model


def _np_forward(params, tokens):
  """Independent NumPy model: the encoding and forward pass written out with loops."""
  q, k, v, a = (np.asarray(params[n], np.float64) for n in dn.LEAVES)
  b, t = tokens.shape
  out = np.zeros(b)
  for r in range(b):
    z = np.zeros((t, 2 * t))
    for i, tok in enumerate(tokens[r]):
      if tok == 2:
        z[i, t + i] = 1.0
      else:
        z[i, i] = 1.0 if tok == 0 else -1.0
    s = np.array([(q @ z[0]) @ (k @ z[i]) for i in range(t)])
    alpha = np.exp(s - s.max())
    alpha /= alpha.sum()
    h = sum(alpha[i] * z[i] for i in range(t))
    out[r] = a @ np.maximum(v @ h, 0.0)
  return out


def test_forward_matches_numpy():
  with jax.enable_x64(True):
    lang = dyck.Language(6)
    masked, _, _ = lang.sample_masked(30, seed=0)
    params = dn.init(jax.random.key(0), 6, 7, qk_std=1.0)
    got = np.asarray(dn.apply(params, dn.encode(masked)))
    np.testing.assert_allclose(got, _np_forward(params, masked), rtol=1e-12, atol=1e-12)
    x = lang.downstream_sample(30, seed=1)
    z = dn.encode(x)
    np.testing.assert_allclose(np.asarray(dn.apply(params, z)), _np_forward(params, x),
                               rtol=1e-12, atol=1e-12)
    # Encoding: orthonormal rows, and tau = 1^T (sum_i z_i)[:T] on downstream strings.
    zz = np.asarray(z)
    np.testing.assert_allclose(np.einsum("btd,bsd->bts", zz, zz),
                               np.broadcast_to(np.eye(6), (30, 6, 6)), atol=0)
    np.testing.assert_array_equal(zz.sum(1)[:, :6].sum(1), lang.mismatches(x))


def test_pretraining_targets_are_the_exact_conditional():
  lang = dyck.Language(6)
  data = dn.pretraining_data(lang)
  assert len(data["y"]) == lang.num_sentences * 6
  cond = lang.mlm_conditional_batch(data["tokens"], data["positions"])
  np.testing.assert_array_equal(np.asarray(data["y"]), cond[:, 0] - cond[:, 1])
  np.testing.assert_array_equal(np.abs(np.asarray(data["y"])), 1.0)


# ----------------------------------------------------------------------------
# The two solutions of Theorem 6.1


@pytest.mark.parametrize("t", [4, 8])
def test_count_solution_zero_loss_and_trace_bound(t):
  with jax.enable_x64(True):
    data = dn.pretraining_data(dyck.Language(t))
    batch = dn.model_batch(data)
    for width in ((2, 5) if t == 4 else (2,)):
      p = dn.count_solution(t, width)
      assert float(dn.loss_fn(p, batch)) < 1e-28
      c = dn.cancellation(p, data)
      assert c["ratio"] == pytest.approx(1.0) and c["active_per_input"] == pytest.approx(1.0)
      # Zero neurons add nothing; the trace is the seed's lower bound 2 / sqrt(T).
      assert sum(dn.gauss_newton_trace(p, data).values()) == pytest.approx(
          dn.trace_lower_bound(t), rel=1e-10)
    assert dn.trace_lower_bound(t) == pytest.approx(2 / np.sqrt(t))
    if t > 4:
      return
    # Exact Hessian trace = beta^2 / T^2 + T / beta^2 (one active neuron of value beta / T
    # per input, ||h||^2 = 1 / T), minimal, = 2 / sqrt(T), at beta = T^(3/4).
    for beta in (1.0, t ** 0.75, 3.0):
      p = dn.count_solution(t, 2, scale=beta)
      got = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(0),
                                   method="exact", validate=False).estimate
      assert got == pytest.approx(beta ** 2 / t ** 2 + t / beta ** 2, rel=1e-10)
      assert got >= dn.trace_lower_bound(t) * (1 - 1e-12)


def test_random_feature_solution_zero_loss_and_sharper():
  with jax.enable_x64(True):
    t = 4
    data = dn.pretraining_data(dyck.Language(t))
    batch = dn.model_batch(data)
    n_inputs = len(data["y"])  # 24
    p = dn.random_feature_solution(t, 2 * n_inputs, data, seed=0)
    assert float(dn.loss_fn(p, batch)) < 1e-20
    # Too few random features cannot interpolate the 24 inputs.
    assert float(dn.loss_fn(dn.random_feature_solution(t, 3, data, seed=0), batch)) > 1e-3
    exact = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(0),
                                   method="exact", validate=False).estimate
    gn = dn.gauss_newton_trace(p, data)
    assert sum(gn.values()) == pytest.approx(exact, rel=1e-8)   # Lemma D.4 at zero loss
    # NumPy: E ||relu(W_V h)||^2 + E sum_j a_j^2 1[w_j^T h > 0] ||h||^2 (uniform attention).
    h = np.asarray(data["z"]).mean(1)
    pre = h @ np.asarray(p["value"]).T
    a = np.asarray(p["out"])
    want = np.mean(np.sum(np.maximum(pre, 0) ** 2, 1)) + np.mean(
        ((pre > 0) * a[None, :] ** 2).sum(1) * (h * h).sum(1))
    assert exact == pytest.approx(want, rel=1e-8)
    q, c = dn.flattest_rescaling(p, data)
    assert float(dn.loss_fn(q, batch)) < 1e-20
    gq = dn.gauss_newton_trace(q, data)
    assert gq["out"] == pytest.approx(gq["value"], rel=1e-8)
    assert sum(gq.values()) == pytest.approx(2 * np.sqrt(gn["out"] * gn["value"]), rel=1e-8)
    # The theorem: any zero-loss solution is at least as sharp as the count solution; this one
    # has cancelling neurons, so strictly sharper.
    assert sum(gq.values()) > dn.trace_lower_bound(t) * 1.05
    assert dn.cancellation(q, data)["ratio"] > 1.05


def test_count_solution_downstream_error_is_q_to_the_n():
  with jax.enable_x64(True):
    t = 8
    lang = dyck.Language(t)
    ds = dn.downstream_data(lang)
    phi = np.asarray(dn.features(dn.count_solution(t), ds["z"]))
    # Both signs of tau in the training set: the minimum-norm head is exact.
    idx = [int(np.argmax(ds["tau"] > 0)), int(np.argmax(ds["tau"] < 0))]
    b = dn.probe_fit(phi[idx], ds["tau"][idx])
    np.testing.assert_allclose(phi @ b, ds["tau"], atol=1e-10)
    q = (1 + np.mean(ds["tau"] == 0)) / 2
    res = dn.sample_complexity(phi, ds["tau"], [1, 2, 4, 8], draws=400, seed=0)
    for n, r in res.items():
      se = r["std"] / np.sqrt(400)
      assert abs(r["mean"] - q ** n) < 4 * se + 1e-12, (n, r["mean"], q ** n, se)


def test_probe_fit_against_closed_forms():
  rng = np.random.default_rng(0)
  phi, y = rng.normal(size=(5, 12)), rng.normal(size=5)
  np.testing.assert_allclose(dn.probe_fit(phi, y), np.linalg.pinv(phi) @ y, atol=1e-10)
  lam = 0.3 * np.mean(np.sum(phi ** 2, 1))
  want = np.linalg.solve(phi.T @ phi + lam * np.eye(12), phi.T @ y)
  np.testing.assert_allclose(dn.probe_fit(phi, y, ridge=0.3), want, atol=1e-10)
  # Relative ridge: rescaling the features rescales the head inversely, predictions unchanged.
  np.testing.assert_allclose(dn.probe_fit(7 * phi, y, ridge=0.3), want / 7, atol=1e-10)


def test_sgd_is_stuck_at_zero_loss_and_label_noise_moves_it():
  with jax.enable_x64(True):
    data = dn.pretraining_data(dyck.Language(4))
    batch = dn.model_batch(data)
    opt = optax.sgd(0.5)
    run = lambda p, key, noise=0.0: dn.train_chunk(
        p, opt.init(p), jax.random.key(key), batch, optimizer=opt, batch_size=4,
        num_steps=25, label_noise=noise)[0]
    p0 = dn.count_solution(4, 3)
    p = run(p0, 0)
    for name in dn.LEAVES:  # every per-example gradient is zero at an interpolating point
      np.testing.assert_allclose(np.asarray(p[name]), np.asarray(p0[name]), atol=1e-12)
    p = run(p0, 0, noise=0.5)
    assert float(jnp.abs(p["value"] - p0["value"]).max()) > 1e-3
    # From a random init the loss goes down.
    r = dn.init(jax.random.key(1), 4, 3, value_std=0.3)
    start = float(dn.loss_fn(r, batch))
    for i in range(12):
      r = run(r, 10 + i)
    assert float(dn.loss_fn(r, batch)) < 0.1 * start


# ----------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("kwargs,match", [
    ({"length": 7}, "even"), ({"length": 0}, ">= 2"), ({"length": 2.0}, "integer"),
    ({"length": 4, "num_types": 3}, "num_types"),
    ({"length": 4, "num_types": 2, "nested": False}, "num_types=1 only"),
    ({"length": 4, "nested": "yes"}, "nested"),
])
def test_language_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    dyck.Language(**kwargs)


def test_data_errors():
  lang = dyck.Language(4)
  with pytest.raises(ValueError, match="not a token id; allowed: 0..1"):
    lang.is_valid(np.array([0, 1, 2, 1]))
  with pytest.raises(ValueError, match=r"shape \[n\] or \[B, n\] with n = 4"):
    lang.is_valid(np.array([0, 1]))
  with pytest.raises(ValueError, match="integer token ids"):
    lang.is_valid(np.array([0.0, 1, 0, 1]))
  with pytest.raises(ValueError, match="out of range 0..3"):
    lang.mlm_conditional(np.array([2, 1, 0, 1]), 4)
  with pytest.raises(ValueError, match="mask outside position"):
    lang.mlm_conditional(np.array([2, 2, 0, 1]), 0)
  with pytest.raises(ValueError, match="no token at position 0 makes a valid"):
    lang.mlm_conditional(np.array([2, 0, 0, 0]), 0)
  with pytest.raises(ValueError, match="mlm_conditional_batch"):
    lang.mlm_conditional(np.array([[2, 0, 1, 1]]), 0)
  with pytest.raises(ValueError, match="positions must have shape"):
    lang.mask(np.array([[0, 1, 0, 1]]), np.array([0, 1]))
  with pytest.raises(ValueError, match="num must be an integer >= 0"):
    lang.sample(-1)
  with pytest.raises(ValueError, match="MAX_ENUMERATE"):
    dyck.Language(40).all_sentences()
  with pytest.raises(ValueError, match="prefix_len must be <="):
    dyck.mismatches(np.array([0, 1]), prefix_len=3)
  with pytest.raises(ValueError, match="allowed: 0..2"):
    dyck.mismatches(np.array([0, 3]))


def test_model_errors():
  with pytest.raises(ValueError, match="allowed: 0 '\\(', 1 '\\)', 2 mask"):
    dn.encode(np.array([[0, 3]]))
  with pytest.raises(ValueError, match="num_types=1"):
    dn.pretraining_data(dyck.Language(4, 2, True))
  with pytest.raises(ValueError, match="width must be an integer >= 2"):
    dn.count_solution(4, 1)
  with pytest.raises(ValueError, match="even integer"):
    dn.count_solution(5)
  with pytest.raises(ValueError, match="keys"):
    dn.check_params({"value": 1})
  with pytest.raises(ValueError, match="ridge"):
    dn.probe_fit(np.ones((2, 3)), np.ones(2), ridge=-1)
  with pytest.raises(ValueError, match=r"phi \[N, M\] and y \[N\]"):
    dn.probe_fit(np.ones((2, 3)), np.ones(3))
  with pytest.raises(ValueError, match="c must be"):
    dn.rescale(dn.count_solution(4), 0.0)
