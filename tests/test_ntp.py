"""el_jax.core.ntp against independent NumPy/SciPy computations (dense constraint matrices, SLSQP)."""
import itertools
import json

import numpy as np
import pytest
from scipy import optimize, special, stats

from el_jax.core.ntp import data as data_lib
from el_jax.core.ntp import dynamics
from el_jax.core.ntp import geometry
from el_jax.run import config as config_lib


# ----------------------------------------------------------------------------
# Independent references: dense matrices over vec(W) (row-major [V, d]).


def dense_rows(H, S, pairs):
  """Rows vec((e_a - e_b) h_j^T) for (j, a, b) in pairs."""
  V, d = S.shape[1], H.shape[1]
  A = np.zeros((len(pairs), V * d))
  for r, (j, a, b) in enumerate(pairs):
    E = np.zeros((V, d))
    E[a] += H[j]
    E[b] -= H[j]
    A[r] = E.ravel()
  return A


def all_support_pairs(S):
  return [(j, z, z2) for j in range(S.shape[0]) for z, z2 in
          itertools.permutations(np.flatnonzero(S[j]), 2)]


def all_margin_pairs(S):
  return [(j, z, v) for j in range(S.shape[0]) for z in np.flatnonzero(S[j])
          for v in np.flatnonzero(~S[j])]


def scipy_svm(H, S):
  """NTP-SVM in the paper's pairwise form, by SLSQP (a different method and formulation)."""
  V, d = S.shape[1], H.shape[1]
  # SLSQP needs linearly independent equalities: first support token vs the rest.
  Aeq = dense_rows(H, S, [(j, np.flatnonzero(S[j])[0], z) for j in range(S.shape[0])
                          for z in np.flatnonzero(S[j])[1:]])
  Ain = dense_rows(H, S, all_margin_pairs(S))
  cons = [dict(type="ineq", fun=lambda x: Ain @ x - 1, jac=lambda x: Ain)]
  if len(Aeq):
    cons.append(dict(type="eq", fun=lambda x: Aeq @ x, jac=lambda x: Aeq))
  x0 = np.linalg.lstsq(Ain, np.ones(len(Ain)), rcond=None)[0]
  r = optimize.minimize(lambda x: x @ x, x0, jac=lambda x: 2 * x, constraints=cons,
                        method="SLSQP", options=dict(ftol=1e-14, maxiter=1000))
  assert r.success, r.message
  return r.x.reshape(V, d)


def small_instance(seed, m=4, d=7, V=5, s=2):
  return data_lib.random_instance(m, d, V, s, seed=seed)


# ----------------------------------------------------------------------------
# Entropy, CE, W*, F.


def test_entropy_matches_scipy():
  ds = data_lib.random_instance(6, 3, 8, 4, seed=1, n_samples=100)
  ref = sum(p * stats.entropy(ds.P[j][ds.P[j] > 0]) for j, p in enumerate(ds.pi))
  assert geometry.entropy(ds.P, ds.pi) == pytest.approx(ref, rel=1e-12)
  assert geometry.entropy(ds.P) == pytest.approx(np.mean([stats.entropy(r) for r in ds.P]))


def test_cross_entropy_and_gap_match_numpy():
  ds = data_lib.random_instance(5, 3, 6, 3, seed=2, n_samples=50)
  W = np.random.default_rng(0).normal(size=(6, 3))
  L = ds.H @ W.T
  ref = -np.sum(ds.pi[:, None] * ds.P * (L - special.logsumexp(L, axis=1, keepdims=True)))
  assert geometry.cross_entropy(W, ds.H, ds.P, ds.pi) == pytest.approx(ref, rel=1e-12)
  import jax
  with jax.enable_x64(True):
    ce = float(dynamics.cross_entropy(W, ds.H, ds.P, ds.pi))
    gap = float(dynamics.entropy_gap(W, ds.H, ds.P, ds.pi))
  assert ce == pytest.approx(ref, rel=1e-12)
  assert gap == pytest.approx(ref - geometry.entropy(ds.P, ds.pi), rel=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_w_star_solves_every_log_odds_equation_and_is_min_norm(seed):
  ds = data_lib.random_instance(5, 8, 6, 3, seed=seed)
  S = ds.P > 0
  assert geometry.is_entropy_compatible(ds.H, ds.P)
  Ws = geometry.log_odds_solution(ds.H, ds.P)
  pairs = all_support_pairs(S)
  A = dense_rows(ds.H, S, pairs)
  b = np.array([np.log(ds.P[j, z] / ds.P[j, z2]) for j, z, z2 in pairs])
  np.testing.assert_allclose(A @ Ws.ravel(), b, atol=1e-10)
  # Minimum-norm solution = lstsq on the dense system; it lies in F = rowspace(A).
  np.testing.assert_allclose(Ws.ravel(), np.linalg.lstsq(A, b, rcond=None)[0], atol=1e-10)
  PF = np.linalg.pinv(A) @ A
  np.testing.assert_allclose(PF @ Ws.ravel(), Ws.ravel(), atol=1e-10)


def test_projector_matches_dense_pinv():
  ds = data_lib.random_instance(4, 3, 5, 3, seed=3)
  S = ds.P > 0
  A = dense_rows(ds.H, S, all_support_pairs(S))
  PF = np.linalg.pinv(A) @ A
  pr = geometry.projector(ds.H, ds.P)
  assert pr.dim == np.linalg.matrix_rank(A)
  W = np.random.default_rng(1).normal(size=(5, 3))
  np.testing.assert_allclose(pr.onto_f(W).ravel(), PF @ W.ravel(), atol=1e-10)
  np.testing.assert_allclose(pr.onto_f_perp(W).ravel(), W.ravel() - PF @ W.ravel(), atol=1e-10)
  # The JAX projector used inside training is the same map.
  prob = dynamics.targets(data_lib.fig1_instance(14))
  W2 = np.random.default_rng(2).normal(size=(5, 2))
  import jax
  with jax.enable_x64(True):
    got = np.asarray(dynamics.project_f(W2, prob.H, prob.f_j, prob.f_C, prob.f_pinv))
  np.testing.assert_allclose(got, geometry.projector(prob.H, prob.P).onto_f(W2), atol=1e-10)


def test_incompatible_instance_is_reported():
  # Two contexts with the same embedding but different log-odds: no W fits both.
  H = np.array([[1.0, 0.0], [1.0, 0.0]])
  P = np.array([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0]])
  assert not geometry.is_entropy_compatible(H, P)
  with pytest.raises(ValueError, match="not NTP_H-compatible"):
    geometry.log_odds_solution(H, P)


# ----------------------------------------------------------------------------
# NTP-SVM.


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_w_mm_constraints_orthogonality_and_scipy(seed):
  ds = small_instance(seed)
  S = ds.P > 0
  res = geometry.ntp_svm(ds.H, ds.P)
  assert res.separable and res.polished  # the exact active-set solve was accepted
  W = res.W
  Ain = dense_rows(ds.H, S, all_margin_pairs(S))
  assert (Ain @ W.ravel()).min() >= 1 - 1e-9
  Aeq = dense_rows(ds.H, S, all_support_pairs(S))
  np.testing.assert_allclose(Aeq @ W.ravel(), 0, atol=1e-9)
  PF = np.linalg.pinv(Aeq) @ Aeq
  assert np.linalg.norm(PF @ W.ravel()) <= 1e-9 * np.linalg.norm(W)
  ref = scipy_svm(ds.H, S)
  np.testing.assert_allclose(W, ref, atol=1e-5 * np.linalg.norm(ref))
  assert res.margin == pytest.approx(1 / np.linalg.norm(ref), rel=1e-6)
  # The active set is where the pairwise constraints are tight.
  L = ds.H @ W.T
  tight = np.zeros_like(S)
  for j, z, v in all_margin_pairs(S):
    tight[j, v] |= abs(L[j, z] - L[j, v] - 1) < 1e-6
  np.testing.assert_array_equal(res.active, tight)


def test_one_hot_reduces_to_multiclass_svm():
  rng = np.random.default_rng(5)
  m, d, V = 6, 4, 3
  H = rng.normal(size=(m, d))
  y = np.array([0, 1, 2, 0, 1, 2])
  P = np.eye(V)[y]
  pr = geometry.projector(H, P)
  assert pr.dim == 0  # F = {0}
  np.testing.assert_array_equal(geometry.log_odds_solution(H, P), 0)
  res = geometry.ntp_svm(H, P)
  assert res.separable
  # Classic hard-margin multiclass SVM: min ||W||^2 s.t. (w_y - w_v) . h_j >= 1.
  rows = []
  for j in range(m):
    for v in range(V):
      if v != y[j]:
        E = np.zeros((V, d))
        E[y[j]], E[v] = H[j], -H[j]
        rows.append(E.ravel())
  A = np.array(rows)
  r = optimize.minimize(lambda x: x @ x, np.linalg.lstsq(A, np.ones(len(A)), rcond=None)[0],
                        jac=lambda x: 2 * x, method="SLSQP", options=dict(ftol=1e-14),
                        constraints=[dict(type="ineq", fun=lambda x: A @ x - 1, jac=lambda x: A)])
  np.testing.assert_allclose(res.W.ravel(), r.x, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_non_separable_instance_with_certificate(seed):
  ds = data_lib.random_instance(20, 2, 6, 3, seed=seed)
  sep, Y = geometry.is_ntp_separable(ds.H, ds.P)
  assert not sep
  S = ds.P > 0
  # Independent Farkas check: sum_jv Y_jv ((W h_j)_v - c_j) = 0 identically,
  # yet the constraints force it <= -sum_off Y < 0.
  assert Y[~S].min() >= -1e-9 and Y[~S].sum() == pytest.approx(1.0)
  np.testing.assert_allclose(Y.T @ ds.H, 0, atol=1e-6)
  np.testing.assert_allclose(Y.sum(1), 0, atol=1e-6)


def test_separable_when_d_exceeds_m():
  # The paper's Lemma 1: d > m with full-rank H gives compatibility and separability.
  for seed in range(3):
    ds = data_lib.random_instance(8, 9, 6, 3, seed=seed)
    assert geometry.is_entropy_compatible(ds.H, ds.P)
    sep, W = geometry.is_ntp_separable(ds.H, ds.P)
    assert sep and W.shape == (6, 9)


def test_all_full_supports_need_no_margin():
  ds = data_lib.random_instance(3, 4, 3, 3, seed=0)
  res = geometry.ntp_svm(ds.H, ds.P)
  assert res.separable and not np.any(res.W)


# ----------------------------------------------------------------------------
# Training.


def numpy_grad(W, H, P, pi):
  L = H @ W.T
  Q = np.exp(L - special.logsumexp(L, axis=1, keepdims=True))
  return ((Q - P) * pi[:, None]).T @ H


def test_optimizer_steps_match_numpy():
  ds = data_lib.random_instance(4, 5, 6, 3, seed=4, n_samples=40)
  prob = dynamics.targets(ds)
  W0 = np.random.default_rng(0).normal(size=(6, 5))
  g = numpy_grad(W0, ds.H, ds.P, ds.pi)
  W1, _ = dynamics.train(prob, "gd", lr=0.3, steps=1, log_every=1, W0=W0)
  np.testing.assert_allclose(W1, W0 - 0.3 * g, atol=1e-12)
  W1, _ = dynamics.train(prob, "ngd", lr=0.3, steps=1, log_every=1, W0=W0)
  np.testing.assert_allclose(W1, W0 - 0.3 * g / np.linalg.norm(g), atol=1e-12)
  # Adam's first step is lr * sign(g) up to eps (bias correction makes m/sqrt(v) = g/|g|).
  W1, _ = dynamics.train(prob, "adam", lr=0.3, steps=1, log_every=1, W0=W0)
  np.testing.assert_allclose(W1, W0 - 0.3 * g / (np.abs(g) + 1e-8), atol=1e-9)


def test_recorded_metrics_match_numpy():
  ds = data_lib.random_instance(4, 5, 6, 3, seed=4, n_samples=40)
  prob = dynamics.targets(ds)
  W, h = dynamics.train(prob, "gd", lr=0.5, steps=50, log_every=25)
  assert list(h["step"]) == [0, 25, 50]
  Hs = geometry.entropy(ds.P, ds.pi)
  cos = lambda a, b: np.sum(a * b) / np.linalg.norm(a) / np.linalg.norm(b)
  assert h["gap"][-1] == pytest.approx(geometry.cross_entropy(W, ds.H, ds.P, ds.pi) - Hs, rel=1e-8)
  assert h["norm"][-1] == pytest.approx(np.linalg.norm(W), rel=1e-10)
  assert h["cos_mm"][-1] == pytest.approx(cos(W, prob.W_mm), rel=1e-10)
  assert h["cos_diff"][-1] == pytest.approx(cos(W - prob.W_star, prob.W_mm), rel=1e-10)
  S = ds.P > 0
  A = dense_rows(ds.H, S, all_support_pairs(S))
  PFW = (np.linalg.pinv(A) @ A @ W.ravel()).reshape(W.shape)
  assert h["dist_f"][-1] == pytest.approx(np.linalg.norm(PFW - prob.W_star), rel=1e-8)
  assert h["gap"][0] == pytest.approx(np.log(6) - Hs, rel=1e-10)  # W0 = 0: uniform q


def test_gd_on_fig1_reaches_the_paper_limits():
  cfg = config_lib.get_config("ntp_linear", "fig1")
  from el_jax.run import ntp_train as train_lib
  prob = dynamics.targets(train_lib.build_data(cfg))
  _, h = dynamics.train(prob, "gd", lr=cfg.lr.gd, steps=cfg.steps, log_every=cfg.log_every)
  assert h["cos_mm"][-1] > 0.99
  assert h["gap"][-1] < 1e-3
  assert h["dist_f"][-1] < 0.05
  assert np.all(np.diff(h["norm"]) > 0)  # ||W_k|| keeps growing


def test_regularization_path_matches_scipy():
  prob = dynamics.targets(data_lib.fig1_instance(14))
  B = 2.0
  W, ms = dynamics.regularization_path(prob, np.array([B]), steps=3000)
  ce = lambda x: geometry.cross_entropy(x.reshape(5, 2), prob.H, prob.P, prob.pi)
  r = optimize.minimize(ce, np.full(10, 0.1), method="SLSQP", options=dict(ftol=1e-14),
                        constraints=[dict(type="ineq", fun=lambda x: B * B - x @ x)])
  assert ms["gap"][0] + geometry.entropy(prob.P, prob.pi) == pytest.approx(r.fun, abs=1e-7)
  np.testing.assert_allclose(W[0].ravel(), r.x, atol=1e-3)


# ----------------------------------------------------------------------------
# Data: sequences, text, bad input.


def test_from_sequences_counts():
  seqs = [[0, 1, 2, 0, 1, 3], [0, 1, 2]]
  ds = data_lib.from_sequences(seqs, 2, data_lib.one_hot_embedding, vocab_size=5)
  ctx = [tuple(c) for c in ds.contexts]
  assert ctx == [(0, 1), (1, 2), (2, 0)]
  np.testing.assert_allclose(ds.P[0], [0, 0, 2 / 3, 1 / 3, 0])
  np.testing.assert_allclose(ds.P[1], [1, 0, 0, 0, 0])
  np.testing.assert_allclose(ds.pi, [3 / 5, 1 / 5, 1 / 5])
  np.testing.assert_array_equal(ds.H, np.eye(3))
  emb = data_lib.token_concat_embedding(np.arange(10.0).reshape(5, 2))
  np.testing.assert_array_equal(emb(np.array([[0, 1]])), [[0, 1, 2, 3]])


def test_text_instance_from_a_tiny_slice(tmp_path):
  from el_jax.core.ntp import text
  p = tmp_path / "kjv.jsonl"
  verses = ["In the beginning God created the heaven and the earth.",
            "And the earth was without form, and void.",
            "And God said, Let there be light: and there was light."]
  p.write_text("\n".join(json.dumps({"citation": f"G 1:{i}", "text": v})
                         for i, v in enumerate(verses)))
  ds = text.kjv_instance(1, data_lib.one_hot_embedding, vocab_size=6, max_contexts=4, path=p)
  assert ds.vocab[0] == "<unk>" and ds.vocab[1] == "and" and ds.V == 6
  np.testing.assert_allclose(ds.P.sum(1), 1)
  j = [ds.vocab[c[0]] for c in ds.contexts].index("the")
  nxt = {ds.vocab[v]: p for v, p in enumerate(ds.P[j]) if p > 0}
  # "the" is followed by beginning(unk), heaven(unk), earth, earth.
  assert nxt == pytest.approx({"<unk>": 0.5, "earth": 0.5})


@pytest.mark.parametrize("H,P,pi,msg", [
    (np.ones((2, 2)), [[0.5, 0.4], [0.5, 0.5]], None, "row 0 of P sums to 0.9"),
    (np.ones((2, 2)), [[1.5, -0.5], [0.5, 0.5]], None, "row 0, column 1"),
    (np.ones((2, 2)), [[0.5, 0.5], [np.nan, 0.5]], None, "NaN entry at row 1"),
    (np.ones((3, 2)), [[0.5, 0.5], [0.5, 0.5]], None, "H has m = 3 rows but P has 2"),
    (np.ones((2, 0)), [[0.5, 0.5], [0.5, 0.5]], None, "d = 0"),
    (np.ones((2, 2)), [[0.5, 0.5], [0.5, 0.5]], [1.0], "pi must be"),
    (np.ones(2), [[1.0]], None, "H must be"),
])
def test_bad_input_names_the_problem(H, P, pi, msg):
  fns = [lambda: data_lib.from_arrays(H, P, pi)]
  if pi is None:
    fns += [lambda: geometry.ntp_svm(H, P), lambda: geometry.is_entropy_compatible(H, P)]
  for fn in fns:
    with pytest.raises(ValueError, match=msg):
      fn()


def test_configs_and_cli(tmp_path):
  ntp_linear = config_lib.load_config_module("ntp_linear")
  for v in ntp_linear.VARIANTS:
    assert ntp_linear.get_config(v).task == "ntp_linear"
  with pytest.raises(ValueError, match="fig1, appendix, text, test"):
    ntp_linear.get_config("nope")
  from el_jax import main
  summ = main.main(["prog", "--config=configs/ntp_linear.py:test", f"--workdir={tmp_path}"])
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 2000 // 100 + 1 and json.loads(lines[-1])["step"] == 2000
  got = json.loads((tmp_path / "summary.json").read_text())
  assert got["instance"]["separable"] and got["runs"]["gd"]["gap"] == summ["runs"]["gd"]["gap"]
  for f in ("fig1.png", "convergence.png", "reg_path.png"):
    assert (tmp_path / f).stat().st_size > 1000
