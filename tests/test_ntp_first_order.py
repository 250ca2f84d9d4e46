"""The matrix-free first-order NTP-SVM against Clarabel and dense references."""
import numpy as np
import pytest

from el_jax.ntp import data as data_lib
from el_jax.ntp import geometry


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


@pytest.mark.parametrize("m,d,V,s,seed", [(4, 7, 5, 2, 0), (4, 7, 5, 2, 1), (12, 15, 8, 3, 2),
                                          (20, 30, 10, 6, 3)])
def test_first_order_matches_clarabel(m, d, V, s, seed):
  ds = data_lib.random_instance(m, d, V, s, seed=seed)
  S = ds.P > 0
  ref = geometry.ntp_svm(ds.H, ds.P, method="clarabel")
  res = geometry.ntp_svm(ds.H, ds.P, method="first_order", polish=False)
  assert res.separable and res.method == "first_order" and res.status == "Solved"
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
  pol = geometry.ntp_svm(ds.H, ds.P, method="first_order")
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


@pytest.mark.parametrize("seed", [0, 1])
def test_first_order_certifies_non_separable(seed):
  ds = data_lib.random_instance(20, 2, 6, 3, seed=seed)
  res = geometry.ntp_svm(ds.H, ds.P, method="first_order")
  assert not res.separable and res.method == "first_order"
  assert geometry.check_infeasibility_certificate(ds.H, ds.P, res.certificate) <= 1e-6
