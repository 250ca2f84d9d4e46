"""The matrix-free first-order NTP-SVM against Clarabel and dense references.

`method="first_order"` is the coefficient-space FISTA (`_svm_coefficient_fista`),
`"first_order_lam"` the earlier FISTA in the multipliers; both must certify the same
relative duality gap and agree with Clarabel.
"""
import numpy as np
import pytest
from scipy import optimize

from el_jax.core.ntp import data as data_lib
from el_jax.core.ntp import geometry


def dense_rows(H, S, pairs):
  """Rows vec((e_a - e_b) h_j^T) for (j, a, b) in pairs (as in test_ntp.py)."""
  A = np.zeros((len(pairs), S.shape[1] * H.shape[1]))
  for r, (j, a, b) in enumerate(pairs):
    E = np.zeros((S.shape[1], H.shape[1]))
    E[a] += H[j]
    E[b] -= H[j]
    A[r] = E.ravel()
  return A


def support_pairs(S):
  return [(j, z, z2) for j in range(S.shape[0]) for z in np.flatnonzero(S[j])
          for z2 in np.flatnonzero(S[j]) if z != z2]


def margin_pairs(S):
  return [(j, z, v) for j in range(S.shape[0]) for z in np.flatnonzero(S[j])
          for v in np.flatnonzero(~S[j])]


def test_operator_is_the_dense_dual_hessian():
  ds = data_lib.random_instance(6, 8, 7, 3, seed=4)
  S = ds.P > 0
  M, _, gsys, _ = geometry._svm_dual(ds.H, S)
  op = geometry._DualOperator(ds.H, S)
  lam = np.random.default_rng(0).random(len(gsys.j))
  Lam = np.zeros(S.shape)
  Lam[gsys.j, gsys.b] = lam
  np.testing.assert_allclose(op(Lam)[gsys.j, gsys.b], M @ lam, rtol=1e-10,
                             atol=1e-10 * np.abs(M).max())


@pytest.mark.parametrize("method", ["first_order", "first_order_lam"])
@pytest.mark.parametrize("m,d,V,s,seed", [(4, 7, 5, 2, 0), (4, 7, 5, 2, 1), (12, 15, 8, 3, 2),
                                          (20, 30, 10, 6, 3), (15, 20, 30, 1, 0)])
def test_first_order_matches_clarabel(m, d, V, s, seed, method):
  ds = data_lib.random_instance(m, d, V, s, seed=seed)
  S = ds.P > 0
  ref = geometry.ntp_svm(ds.H, ds.P, method="clarabel")
  res = geometry.ntp_svm(ds.H, ds.P, method=method, polish=False)
  assert res.separable and res.method == method and res.status == "Solved"
  assert 0 < res.iterations < 20000 and res.gap <= 1e-6 and not res.polished
  np.testing.assert_allclose(res.W, ref.W, atol=1e-3 * np.linalg.norm(ref.W))
  assert res.margin == pytest.approx(ref.margin, rel=1e-3)
  # Rescaled to feasibility: every margin constraint holds, and W is in F-perp.
  Ain = dense_rows(ds.H, S, margin_pairs(S))
  assert (Ain @ res.W.ravel()).min() >= 1 - 1e-9
  assert res.min_constraint == pytest.approx(1.0, abs=1e-9)
  assert res.raw_min_constraint >= 1 - 1e-3
  Aeq = dense_rows(ds.H, S, support_pairs(S))
  np.testing.assert_allclose(Aeq @ res.W.ravel(), 0, atol=1e-9 * np.linalg.norm(res.W))
  # Polishing on the first-order active set gives back the exact W_mm.
  pol = geometry.ntp_svm(ds.H, ds.P, method=method)
  assert pol.polished and pol.gap == 0.0
  np.testing.assert_allclose(pol.W, ref.W, atol=1e-8 * np.linalg.norm(ref.W))


def test_auto_switches_to_first_order_above_the_dense_limit(monkeypatch):
  ds = data_lib.random_instance(10, 12, 8, 3, seed=5)
  assert geometry.ntp_svm(ds.H, ds.P).method == "clarabel"
  ref = geometry.ntp_svm(ds.H, ds.P)
  monkeypatch.setattr(geometry, "AUTO_MAX_DUAL", 20)
  res = geometry.ntp_svm(ds.H, ds.P)
  assert res.method == "first_order"
  np.testing.assert_allclose(res.W, ref.W, atol=1e-3 * np.linalg.norm(ref.W))


def test_first_order_max_iter_still_feasible():
  ds = data_lib.random_instance(20, 30, 10, 3, seed=6)
  res = geometry.ntp_svm(ds.H, ds.P, method="first_order", max_iter=5)
  assert res.iterations == 5 and res.status == "MaxIterations" and res.gap > 1e-6
  assert res.min_constraint >= 1 - 1e-9  # rescaled even when stopped early
  with pytest.raises(ValueError, match="unknown method"):
    geometry.ntp_svm(ds.H, ds.P, method="newton")


@pytest.mark.parametrize("method", ["first_order", "first_order_lam"])
@pytest.mark.parametrize("seed", [0, 1])
def test_first_order_certifies_non_separable(seed, method):
  ds = data_lib.random_instance(20, 2, 6, 3, seed=seed)
  res = geometry.ntp_svm(ds.H, ds.P, method=method)
  assert not res.separable and res.method == method
  assert geometry.check_infeasibility_certificate(ds.H, ds.P, res.certificate) <= 1e-6


@pytest.fixture(scope="module")
def wide():
  """m = 6, V = 100, |S_j| = 4: n = 576 dual variables, and Clarabel's exact W_mm."""
  ds = data_lib.random_instance(6, 10, 100, 4, seed=0)
  ref = geometry.ntp_svm(ds.H, ds.P, method="clarabel")
  assert ref.polished  # the exact active-set solution
  return ds, ref


@pytest.mark.parametrize("f_path", ["dense", "cg"])
def test_coefficient_solver_above_the_switch_agrees_with_clarabel(monkeypatch, wide, f_path):
  """"auto" takes the first-order path once the switch is below n; it matches Clarabel."""
  ds, ref = wide
  S = ds.P > 0
  nrm = np.linalg.norm(ref.W)
  if f_path == "cg":  # F's 18 x 18 Gram by conjugate gradients instead of Cholesky
    monkeypatch.setattr(geometry, "F_CG_MIN_RANK", 1)
    monkeypatch.setattr(geometry, "F_CG_MAX_DENSITY", 1.0)
  # Polished on its active set (18 + 214 rows, below the dense limit): Clarabel's W_mm.
  pol = geometry.ntp_svm(ds.H, ds.P, method="first_order")
  assert pol.polished and pol.gap == 0.0
  np.testing.assert_allclose(pol.W, ref.W, atol=1e-10 * nrm)
  assert geometry._svm_coefficient_fista(ds.H, S, 1e-6, 20000, np.inf)[2]["f_solver"] == f_path
  monkeypatch.setattr(geometry, "AUTO_MAX_DUAL", 500)
  res = geometry.ntp_svm(ds.H, ds.P, polish=False)
  assert res.method == "first_order" and res.status == "Solved" and 0 < res.gap <= 1e-6
  # The certified gap bounds the norm (relative error <= gap / 2) and, by strong
  # convexity, the distance: ||W - W_mm||^2 <= 2 (P - D) = gap ||W||^2 / gmin^2.
  assert abs(np.linalg.norm(res.W) / nrm - 1) <= res.gap / 2 + 1e-9
  assert np.linalg.norm(res.W - ref.W) <= np.sqrt(res.gap) * np.linalg.norm(res.W) + 1e-9 * nrm
  Ain = dense_rows(ds.H, S, margin_pairs(S))
  assert (Ain @ res.W.ravel()).min() >= 1 - 1e-9
  Aeq = dense_rows(ds.H, S, support_pairs(S))
  np.testing.assert_allclose(Aeq @ res.W.ravel(), 0, atol=1e-9 * nrm)
  # At gap 1e-12 the same bound puts W within ~1.4e-6 of Clarabel's.
  tight = geometry.ntp_svm(ds.H, ds.P, polish=False, tol=1e-12)
  assert tight.gap <= 1e-12
  assert np.linalg.norm(tight.W - ref.W) <= 1.5e-6 * nrm


def test_coefficient_solver_iterations_do_not_grow_with_V():
  """The lam-space dual gains eigenvalues ~ (V - |S_j|) K_jj; the coefficient-space one does not."""
  its = {}
  for V in (50, 500):
    ds = data_lib.random_instance(20, 30, V, 6, seed=3)
    for method in ("first_order", "first_order_lam"):
      r = geometry.ntp_svm(ds.H, ds.P, method=method, polish=False)
      assert r.status == "Solved" and r.gap <= 1e-6
      its[method, V] = r.iterations
  assert its["first_order", 500] <= 1.5 * its["first_order", 50]
  assert its["first_order_lam", 500] >= 2 * its["first_order_lam", 50]
  assert its["first_order_lam", 500] >= 3 * its["first_order", 500]


def test_project_rows_is_the_euclidean_projection():
  """Against a root of sum(min(a - tau, cap)) found by brentq, and the obtuse-angle test."""
  rng = np.random.default_rng(0)
  m, V = 7, 12
  S = rng.random((m, V)) < 0.3
  S[np.arange(m), rng.integers(0, V, m)] = True  # every row has a support token
  cap = np.where(S, np.inf, 0.0)
  A = rng.normal(size=(m, V)) * 3
  for tau0 in (np.zeros(m), rng.normal(size=m) * 10):  # any warm start
    Y = np.empty((m, V))
    work = (np.empty((m, V), bool), np.empty((m, V), bool))
    geometry._project_rows(A, cap, tau0, Y, work)
    for j in range(m):
      phi = lambda t: np.minimum(A[j] - t, cap[j]).sum()
      tau = optimize.brentq(phi, A[j].min() - 1, A[j].max() + 1, xtol=1e-14)
      np.testing.assert_allclose(Y[j], np.minimum(A[j] - tau, cap[j]), atol=1e-12)
    np.testing.assert_allclose(Y.sum(1), 0, atol=1e-12)
    assert (Y[~S] <= 0).all()
    # Projection onto a convex set: <a - y, z - y> <= 0 for every feasible z.
    for _ in range(20):
      Z = np.where(S, rng.normal(size=(m, V)), -rng.random((m, V)))
      Z[S] -= np.repeat(Z.sum(1) / S.sum(1), S.sum(1))  # rows sum to 0
      assert (((A - Y) * (Z - Y)).sum(1) <= 1e-10).all()


def test_polish_drops_constraints_that_are_slack_at_the_optimum(wide):
  """A guess with slack constraints as equalities is feasible but not W_mm; KKT repairs it."""
  ds, ref = wide
  S = ds.P > 0
  L = ds.H @ ref.W.T
  slack = (L[np.arange(ds.m), np.argmax(S, axis=1)][:, None] - L - 1)[~S]
  assert ((slack > 1e-6) & (slack <= 0.3)).sum() >= 5  # the guess below holds these
  Wp = geometry._polish(ds.H, S, ref.W, 0.3)
  np.testing.assert_allclose(Wp, ref.W, atol=1e-10 * np.linalg.norm(ref.W))
