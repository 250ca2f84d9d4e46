"""Entropy bound, NTP_H-compatibility, the subspace F, W*, NTP-separability and the NTP-SVM.

Seed 003 definitions, with S_j = supp(p_j) and W of shape `[V, d]`:

* NTP_H-compatible: some W has (e_z - e_z')^T W h_j = log(p_jz / p_jz') for
  all j and z, z' in S_j. We write one equation per z in S_j against an anchor
  z0_j in S_j (the other pairs follow by subtraction).
* F = span{(e_z - e_z') h_j^T}; W* is the minimum-Frobenius-norm solution of
  the equations, which is the unique solution inside F.
* NTP-separable: some W has (e_z - e_z')^T W h_j = 0 (W in F-perp) and
  (e_z - e_v)^T W h_j >= 1 for z in S_j, v not in S_j.
* NTP-SVM: W_mm = argmin ||W||_F subject to those constraints.

Every matrix on F is handled through its Gram matrix (size R = sum_j
(|S_j| - 1)) rather than the dense `[R, V*d]` constraint matrix, so text
instances with V*d ~ 1e5 stay cheap. The SVM goes to Clarabel directly; see
`ntp_svm` for why.
"""
import dataclasses
import time
from typing import Optional

import numpy as np
from scipy import linalg
from scipy import sparse

from el_jax.ntp import data as data_lib

# Relative eigenvalue cut-off of the Gram matrices: directions below it count
# as outside the span (rank decisions for F and W*).
RANK_RTOL = 1e-10
# Relative residual above which the log-odds equations count as inconsistent.
COMPAT_RTOL = 1e-7


def entropy(P, pi=None):
  """H = -sum_j pi_j sum_{z in S_j} p_jz log p_jz, the lower bound of the NTP CE."""
  P = np.asarray(P, dtype=np.float64)
  pi = np.full(P.shape[0], 1.0 / P.shape[0]) if pi is None else np.asarray(pi, np.float64)
  plogp = np.where(P > 0, P * np.log(np.where(P > 0, P, 1.0)), 0.0)
  return float(-(pi * plogp.sum(axis=1)).sum())


def cross_entropy(W, H, P, pi=None):
  """CE(W) = -sum_j pi_j sum_z p_jz log softmax(W h_j)_z (NumPy, float64)."""
  H, P, pi = data_lib.validate(H, P, pi)
  L = H @ np.asarray(W, np.float64).T
  L = L - L.max(axis=1, keepdims=True)
  logq = L - np.log(np.exp(L).sum(axis=1, keepdims=True))
  return float(-(pi * (P * logq).sum(axis=1)).sum())


@dataclasses.dataclass(frozen=True)
class DiffSystem:
  """Rows (e_a[r] - e_b[r]) h_{j[r]}^T of a linear system <row_r, W> = rhs[r].

  The Gram matrix of the rows is (C C^T) * K[j][:, j] with C = e_a - e_b and
  K = H H^T; `pinv` is its pseudo-inverse and `rank` the dimension of the
  span of the rows (F, for the log-odds rows).
  """
  j: np.ndarray  # [R] context of each row
  a: np.ndarray  # [R] token with coefficient +1
  b: np.ndarray  # [R] token with coefficient -1
  rhs: np.ndarray  # [R]
  pinv: np.ndarray  # [R, R]
  rank: int


def _diff_system(H, j, a, b, rhs, V):
  C = np.zeros((len(j), V))
  C[np.arange(len(j)), a] += 1.0
  C[np.arange(len(j)), b] -= 1.0
  G = (C @ C.T) * (H[j] @ H[j].T)
  if len(j) == 0:
    return DiffSystem(j, a, b, rhs, np.zeros((0, 0)), 0)
  pinv, rank = _psd_pinv(G)
  return DiffSystem(j, a, b, rhs, pinv, rank)


def _psd_pinv(G):
  """(G^+, rank) of a PSD Gram matrix: Cholesky when well conditioned, else eigh.

  Cholesky costs ~n^3/3 flops against ~9n^3 for eigh with vectors, which is
  most of the NTP-SVM time at m = 500; eigh is the fallback that makes rank
  decisions (tiny pivots or a failed factorisation) reliable.
  """
  gmax = max(float(np.diag(G).max()), 1e-300)
  try:
    c, low = linalg.cho_factor(G, lower=True, check_finite=False)
    if np.diag(c).min() ** 2 > 1e3 * RANK_RTOL * gmax:
      return linalg.cho_solve((c, low), np.eye(len(G)), check_finite=False), len(G)
  except linalg.LinAlgError:
    pass
  lam, U = np.linalg.eigh(G)
  keep = lam > RANK_RTOL * max(lam.max(), 1e-300)
  Uk = U[:, keep]
  return (Uk / lam[keep]) @ Uk.T, int(keep.sum())


def _apply_rows(sys, H, W):
  """A vec(W): the value of every row functional at W."""
  L = H @ W.T
  return L[sys.j, sys.a] - L[sys.j, sys.b]


def _apply_rows_t(sys, H, y, V):
  """A^T y as a `[V, d]` matrix."""
  W = np.zeros((V, H.shape[1]))
  Hy = H[sys.j] * y[:, None]
  np.add.at(W, sys.a, Hy)
  np.add.at(W, sys.b, -Hy)
  return W


def _min_norm(sys, H, V):
  """Minimum-norm W solving the rows (least squares if inconsistent) and the residual."""
  y = sys.pinv @ sys.rhs
  W = _apply_rows_t(sys, H, y, V)
  return W, float(np.linalg.norm(_apply_rows(sys, H, W) - sys.rhs))


def log_odds_system(H, P, pi=None):
  """The log-odds equations against the anchor z0_j = the most likely token of S_j."""
  H, P, pi = data_lib.validate(H, P, pi)
  js, zs, z0s, rhs = [], [], [], []
  for jj in range(P.shape[0]):
    S = np.flatnonzero(P[jj] > 0)
    z0 = S[np.argmax(P[jj, S])]
    for z in S[S != z0]:
      js.append(jj)
      zs.append(z)
      z0s.append(z0)
      rhs.append(np.log(P[jj, z] / P[jj, z0]))
  ar = lambda x, t: np.asarray(x, dtype=t)
  return _diff_system(H, ar(js, np.int64), ar(zs, np.int64), ar(z0s, np.int64),
                      ar(rhs, np.float64), P.shape[1])


def is_entropy_compatible(H, P, *, return_residual=False):
  """Whether some W attains every log-odds equation (then inf CE = H is reachable in F + F-perp)."""
  H, P, _ = data_lib.validate(H, P)
  sys = log_odds_system(H, P)
  _, res = _min_norm(sys, H, P.shape[1])
  ok = res <= COMPAT_RTOL * max(1.0, float(np.linalg.norm(sys.rhs)))
  return (ok, res) if return_residual else ok


def log_odds_solution(H, P, *, check=True):
  """W*: the minimum-norm solution of the log-odds equations, the unique one in F.

  Raises ValueError if the equations are inconsistent (not NTP_H-compatible)
  and `check`; with `check=False` returns the least-squares minimum-norm W.
  """
  H, P, _ = data_lib.validate(H, P)
  sys = log_odds_system(H, P)
  W, res = _min_norm(sys, H, P.shape[1])
  if check and res > COMPAT_RTOL * max(1.0, float(np.linalg.norm(sys.rhs))):
    raise ValueError(f"not NTP_H-compatible: the log-odds equations leave residual {res:.3g}")
  return W


@dataclasses.dataclass(frozen=True)
class Projector:
  """Orthogonal projector onto F (and its complement) for `[V, d]` matrices.

  P_F(W) = A^T (A A^T)^+ A vec(W) with A the log-odds rows; the arrays are
  kept so `el_jax.ntp.optim` can apply the same map inside `lax.scan`.
  """
  H: np.ndarray
  sys: DiffSystem
  V: int

  @property
  def dim(self):
    return self.sys.rank

  def onto_f(self, W):
    y = self.sys.pinv @ _apply_rows(self.sys, self.H, np.asarray(W, np.float64))
    return _apply_rows_t(self.sys, self.H, y, self.V)

  def onto_f_perp(self, W):
    return np.asarray(W, np.float64) - self.onto_f(W)


def projector(H, P):
  """The projector onto F = span{(e_z - e_z') h_j^T : z, z' in S_j}."""
  H, P, _ = data_lib.validate(H, P)
  return Projector(H, log_odds_system(H, P), P.shape[1])


# ---------------------------------------------------------------------------
# NTP-separability and the NTP-SVM.


@dataclasses.dataclass
class SVMResult:
  """Outcome of the NTP-SVM.

  Attributes:
    separable: whether the constraints are feasible.
    W: `[V, d]` W_mm (None if not separable).
    margin: 1 / ||W_mm||_F, the NTP margin of the unit-norm direction.
    min_constraint: min over j, z in S_j, v not in S_j of (e_z - e_v)^T W h_j
      (1 at the optimum).
    max_equality_violation: max |(e_z - e_z')^T W h_j| over supports.
    active: `[m, V]` bool, v not in S_j whose constraint is tight.
    dual: `[m, V]` multipliers of the logit constraints (see `ntp_svm`).
    certificate: if not separable, a Farkas certificate Y `[m, V]` with
      Y^T H = 0, Y.sum(1) = 0, Y >= 0 off the supports, sum off supports = 1.
    certificate_residual: max violation of those certificate conditions.
    status: the solver's status string; `polished`: whether the exact
      active-set solve replaced the interior-point iterate.
    solve_time: seconds spent in Clarabel.
  """
  separable: bool
  W: Optional[np.ndarray]
  margin: float
  min_constraint: float
  max_equality_violation: float
  active: Optional[np.ndarray]
  dual: Optional[np.ndarray]
  certificate: Optional[np.ndarray]
  certificate_residual: float
  status: str
  polished: bool
  solve_time: float


def _constraint_stats(W, H, S):
  L = H @ W.T
  Ls = np.where(S, L, np.nan)
  lo_in, hi_in = np.nanmin(Ls, axis=1), np.nanmax(Ls, axis=1)
  out = np.where(S, -np.inf, L).max(axis=1)
  eq = float(np.max(hi_in - lo_in))
  has_out = ~S.all(axis=1)
  ineq = float(np.min((lo_in - out)[has_out])) if has_out.any() else np.inf
  return ineq, eq, L


def _polish(H, S, W0, tol):
  """Exact W_mm from the active set of an approximate solution, or None.

  At the optimum W_mm is the minimum-norm solution of the equalities plus the
  tight inequalities written as equations, which is again a system of rows
  (e_a - e_b) h_j^T: solving it through the Gram matrix gives constraints and
  orthogonality to F at machine precision instead of the solver's 1e-8.
  """
  m, V = S.shape
  L = H @ W0.T
  js, a, b, rhs = [], [], [], []
  for j in range(m):
    Sj = np.flatnonzero(S[j])
    z0 = Sj[0]
    c = L[j, Sj].mean()
    for z in Sj[1:]:
      js.append(j), a.append(z), b.append(z0), rhs.append(0.0)
    for v in np.flatnonzero(~S[j]):
      if L[j, v] >= c - 1 - tol:
        js.append(j), a.append(v), b.append(z0), rhs.append(-1.0)
  sys = _diff_system(H, np.asarray(js, np.int64), np.asarray(a, np.int64),
                     np.asarray(b, np.int64), np.asarray(rhs, np.float64), V)
  W, res = _min_norm(sys, H, V)
  ineq, eq, _ = _constraint_stats(W, H, S)
  if res > 1e-9 or ineq < 1 - 1e-9 or eq > 1e-9:
    return None
  if np.linalg.norm(W) > np.linalg.norm(W0) * (1 + 1e-6):
    return None
  return W


def _svm_dual(H, S):
  """The NTP-SVM dual: min_{lam >= 0} 1/2 lam^T M lam - 1^T lam.

  Each off-support pair (j, v) gives a row g_i = (e_z0 - e_v) h_j^T (z0 an
  anchor of S_j; the equalities make every in-support logit equal, so one
  anchor suffices). Projecting the g_i onto F-perp eliminates the equalities:
  M = Gram(P_Fperp g) = G_gg - B^T G_ff^+ B, and W_mm = sum_i lam_i P_Fperp g_i.
  M is n x n with n = sum_j (V - |S_j|), much smaller than the primal's
  V*d + m variables, and its KKT system has no fill-in problem.
  """
  m, V = S.shape
  P1 = S.astype(np.float64) / S.sum(1, keepdims=True)
  sysf = log_odds_system(H, P1)  # rows of F (rhs unused)
  z0 = np.array([np.flatnonzero(S[j])[np.argmax(P1[j, S[j]])] for j in range(m)])
  jg, vg = np.nonzero(~S)
  Cf = np.zeros((len(sysf.j), V))
  Cf[np.arange(len(sysf.j)), sysf.a] += 1
  Cf[np.arange(len(sysf.j)), sysf.b] -= 1
  Cg = np.zeros((len(jg), V))
  Cg[np.arange(len(jg)), z0[jg]] += 1
  Cg[np.arange(len(jg)), vg] -= 1
  K = H @ H.T
  Ggg = (Cg @ Cg.T) * K[jg][:, jg]
  B = (Cf @ Cg.T) * K[sysf.j][:, jg]
  M = Ggg - B.T @ (sysf.pinv @ B)
  gsys = DiffSystem(jg, z0[jg], vg, np.ones(len(jg)), None, 0)
  return (M + M.T) / 2, sysf, gsys, B


def ntp_svm(H, P, *, tol=1e-9, polish=True, active_tol=1e-6):
  """W_mm = argmin ||W||_F s.t. W in F-perp and (e_z - e_v)^T W h_j >= 1.

  Solved with Clarabel (interior point, Rust; cvxpy's default QP solver) on
  the dual QP of `_svm_dual`, called directly rather than through cvxpy
  because canonicalisation would cost more than the solve at the paper's
  sizes. The iterate is then polished on its active set (see `_polish`). If
  the dual is unbounded (Clarabel: DualInfeasible) its ray is turned into a
  Farkas certificate that `check_infeasibility_certificate` verifies.
  """
  import clarabel

  H, P, _ = data_lib.validate(H, P)
  S = P > 0
  m, d = H.shape
  V = S.shape[1]
  if S.all():
    z = np.zeros((m, V))
    return SVMResult(True, np.zeros((V, d)), np.inf, np.inf, 0.0, ~S, z, None, 0.0,
                     "NoConstraints", False, 0.0)
  M, sysf, gsys, B = _svm_dual(H, S)
  n = M.shape[0]
  settings = clarabel.DefaultSettings()
  settings.verbose = False
  settings.tol_gap_abs = settings.tol_gap_rel = tol
  settings.tol_feas = tol
  t0 = time.perf_counter()
  sol = clarabel.DefaultSolver(sparse.triu(sparse.csc_matrix(M)).tocsc(), -np.ones(n),
                               -sparse.eye(n, format="csc"), np.zeros(n),
                               [clarabel.NonnegativeConeT(n)], settings).solve()
  dt = time.perf_counter() - t0
  status = str(sol.status).split(".")[-1]
  lam = np.maximum(np.asarray(sol.x), 0.0)
  dual = np.zeros((m, V))
  dual[gsys.j, gsys.b] = lam
  if "DualInfeasible" in status:
    # sum_i lam_i g_i = A_f^T mu lies in F; Y collects both sides (see
    # check_infeasibility_certificate for why that proves infeasibility).
    mu = sysf.pinv @ (B @ lam)
    Y = np.zeros((m, V))
    np.add.at(Y, (gsys.j, gsys.b), lam)
    np.add.at(Y, (gsys.j, gsys.a), -lam)
    np.add.at(Y, (sysf.j, sysf.a), mu)
    np.add.at(Y, (sysf.j, sysf.b), -mu)
    return SVMResult(False, None, 0.0, np.nan, np.nan, None, None, Y,
                     check_infeasibility_certificate(H, P, Y), status, False, dt)
  if status not in ("Solved", "AlmostSolved"):
    raise RuntimeError(f"Clarabel returned status {status} on the NTP-SVM dual")
  Wg = _apply_rows_t(gsys, H, lam, V)
  W = Wg - _apply_rows_t(sysf, H, sysf.pinv @ _apply_rows(sysf, H, Wg), V)
  polished = False
  if polish:
    Wp = _polish(H, S, W, active_tol)
    if Wp is not None:
      W, polished = Wp, True
  ineq, eq, L = _constraint_stats(W, H, S)
  c = np.where(S, L, 0).sum(1) / S.sum(1)
  active = (~S) & (L >= c[:, None] - 1 - active_tol)
  return SVMResult(True, W, float(1.0 / np.linalg.norm(W)) if np.any(W) else np.inf,
                   ineq, eq, active, dual, None, 0.0, status, polished, dt)


def check_infeasibility_certificate(H, P, Y):
  """Max violation of the Farkas conditions proving that no separating W exists.

  If Y^T H = 0, every row of Y sums to 0, Y >= 0 off the supports and
  sum_{j, v not in S_j} Y_jv > 0, then summing Y_jv * ((W h_j)_v - c_j) over
  the constraints gives 0 on the left and <= -sum Y_off < 0 on the right, so
  the constraints are inconsistent. Y is normalised to sum_off Y = 1 here.
  """
  H, P, _ = data_lib.validate(H, P)
  S = P > 0
  Y = np.asarray(Y, np.float64)
  s = Y[~S].sum()
  if s <= 0:
    return np.inf
  Y = Y / s
  scale = max(1.0, float(np.abs(H).max()))
  return float(max(np.abs(Y.T @ H).max() / scale, np.abs(Y.sum(1)).max(),
                   max(0.0, -Y[~S].min()) if (~S).any() else 0.0))


def is_ntp_separable(H, P, *, cert_tol=1e-6):
  """(separable, certificate): W_mm (a feasible W) or a verified Farkas certificate Y.

  A certificate whose residual exceeds `cert_tol` raises RuntimeError rather
  than answer "not separable" on numerical noise.
  """
  res = ntp_svm(H, P)
  if res.separable:
    return True, res.W
  if not res.certificate_residual <= cert_tol:
    raise RuntimeError(f"infeasibility certificate residual {res.certificate_residual:.3g}"
                       f" > {cert_tol}: separability undecided")
  return False, res.certificate
