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
`ntp_svm` for why. Above `AUTO_MAX_DUAL` dual variables the dense dual does
not fit and `ntp_svm` switches to a matrix-free FISTA on the same dual written
in the coefficients Y of W = Y^T H (`_svm_coefficient_fista`), whose
iteration count does not grow with V; the earlier FISTA in the multipliers
(`_DualOperator`, `_svm_first_order`) stays as `method="first_order_lam"`.
"""
import dataclasses
import time
from typing import Optional

import numpy as np
from scipy import linalg
from scipy import sparse
from scipy.sparse import linalg as sparse_linalg

from el_jax.infra import extras
from el_jax.core.ntp import data as data_lib

# Relative eigenvalue cut-off of the Gram matrices: directions below it count
# as outside the span (rank decisions for F and W*).
RANK_RTOL = 1e-10
# Relative residual above which the log-odds equations count as inconsistent.
COMPAT_RTOL = 1e-7


def entropy(P, pi=None):
  """H = -sum_j pi_j sum_{z in S_j} p_jz log p_jz, the lower bound of the NTP CE.

  P and pi are checked like everywhere else (`data_lib.validate_distributions`):
  NaN or infinite entries, negative entries, rows of P or a pi that do not sum
  to 1 are a ValueError, not a meaningless number.
  """
  P, pi = data_lib.validate_distributions(P, pi)
  plogp = np.where(P > 0, P * np.log(np.where(P > 0, P, 1.0)), 0.0)
  return float(-(pi * plogp.sum(axis=1)).sum())


def cross_entropy(W, H, P, pi=None):
  """CE(W) = -sum_j pi_j sum_z p_jz log softmax(W h_j)_z (NumPy, float64)."""
  H, P, pi = data_lib.validate(H, P, pi)
  L = H @ _check_W(W, P.shape[1], H.shape[1]).T
  L = L - L.max(axis=1, keepdims=True)
  logq = L - np.log(np.exp(L).sum(axis=1, keepdims=True))
  return float(-(pi * (P * logq).sum(axis=1)).sum())


def _check_W(W, V, d, name="W"):
  """W as float64 `[V, d]`; ValueError for another shape (no silent broadcast) or NaN/inf."""
  W = np.asarray(W, dtype=np.float64)
  if W.shape != (V, d):
    raise ValueError(f"{name} must be [V, d] = [{V}, {d}]; got shape {W.shape}")
  bad = np.argwhere(~np.isfinite(W))
  if bad.size:
    raise ValueError(f"{name} has a non-finite entry at row {bad[0][0]}, column {bad[0][1]}")
  return W


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


def diff_matrix(a, b, V, *, as_sparse=False):
  """C `[R, V]` with row r = e_a[r] - e_b[r], the token part of the rows (e_a - e_b) h_j^T.

  The Gram matrix of such rows is (C C^T) * K[j][:, j] with K = H H^T.
  `as_sparse`: a CSR matrix instead of a dense array. Token ids outside
  [0, V) are a ValueError (a negative id would silently wrap around).
  """
  a, b = np.asarray(a), np.asarray(b)
  if a.ndim != 1 or a.shape != b.shape:
    raise ValueError(f"a and b must be 1-D of one length; got shapes {a.shape} and {b.shape}")
  if a.size and not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer)):
    raise ValueError(f"a and b must be integer token ids; got dtypes {a.dtype} and {b.dtype}")
  for name, x in (("a", a), ("b", b)):
    bad = np.flatnonzero((x < 0) | (x >= V))
    if bad.size:
      raise ValueError(f"{name}[{bad[0]}] = {x[bad[0]]} is not a token id in [0, V = {V})")
  R = len(a)
  if as_sparse:
    r = np.arange(R)
    return sparse.csr_matrix((np.r_[np.ones(R), -np.ones(R)], (np.r_[r, r], np.r_[a, b])),
                             shape=(R, V))
  C = np.zeros((R, V))
  C[np.arange(R), a] += 1.0
  C[np.arange(R), b] -= 1.0
  return C


def _diff_system(H, j, a, b, rhs, V):
  C = diff_matrix(a, b, V)
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


def _psd_solve(G, rhs):
  """G^+ rhs for a PSD Gram matrix G.

  One Cholesky solve when well conditioned (the test of `_psd_pinv`, without
  forming the inverse: ~3x fewer flops), else the eigh pseudo-inverse.
  """
  gmax = max(float(np.diag(G).max()), 1e-300)
  try:
    c, low = linalg.cho_factor(G, lower=True, check_finite=False)
    if np.diag(c).min() ** 2 > 1e3 * RANK_RTOL * gmax:
      return linalg.cho_solve((c, low), rhs, check_finite=False)
  except linalg.LinAlgError:
    pass
  return _psd_pinv(G)[0] @ rhs


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
  kept so `el_jax.core.ntp.dynamics` can apply the same map inside `lax.scan`.
  """
  H: np.ndarray
  sys: DiffSystem
  V: int

  @property
  def dim(self):
    return self.sys.rank

  def onto_f(self, W):
    W = _check_W(W, self.V, self.H.shape[1])
    y = self.sys.pinv @ _apply_rows(self.sys, self.H, W)
    return _apply_rows_t(self.sys, self.H, y, self.V)

  def onto_f_perp(self, W):
    return _check_W(W, self.V, self.H.shape[1]) - self.onto_f(W)


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
    solve_time: seconds spent in the solver (Clarabel, or the whole
      first-order solve including its setup).
    method: "clarabel", "first_order" or "first_order_lam" (see `ntp_svm`).
    iterations: first-order iterations (0 for Clarabel).
    gap: first-order relative duality gap (P - D) / P at the returned W
      (0 for Clarabel, whose tolerance is `tol`).
    raw_min_constraint: first-order min constraint before the final
      rescaling W <- W / min constraint (nan for Clarabel).
    solver_gap: the first-order solver's certified relative duality gap at
      its last iterate, before any polish (`gap` is 0 once polished; nan for
      Clarabel).
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
  method: str = "clarabel"
  iterations: int = 0
  gap: float = 0.0
  raw_min_constraint: float = np.nan
  solver_gap: float = np.nan


def _constraint_stats(W, H, S):
  L = H @ W.T
  Ls = np.where(S, L, np.nan)
  lo_in, hi_in = np.nanmin(Ls, axis=1), np.nanmax(Ls, axis=1)
  out = np.where(S, -np.inf, L).max(axis=1)
  eq = float(np.max(hi_in - lo_in))
  has_out = ~S.all(axis=1)
  ineq = float(np.min((lo_in - out)[has_out])) if has_out.any() else np.inf
  return ineq, eq, L


# Rounds of `_polish` that drop inequalities whose multiplier has the wrong
# sign and add violated ones before it gives up (returns None).
POLISH_ROUNDS = 5


def _polish(H, S, W0, tol, candidates=None):
  """Exact W_mm from the active set of an approximate solution, or None.

  At the optimum W_mm is the minimum-norm solution of the equalities plus the
  tight inequalities written as equations, which is again a system of rows
  (e_a - e_b) h_j^T: solving it through the Gram matrix gives constraints and
  orthogonality to F at machine precision instead of the solver's 1e-8.

  The guess (slack <= tol at W0, among `candidates` `[m, V]` if given) may
  hold a constraint that is slack at the optimum. The system's solution is
  then feasible and only slightly longer than W_mm, so feasibility does not
  certify it: a feasible W with ||W|| = (1 + 1e-6) ||W_mm|| can be 1.4e-3 *
  ||W_mm|| away from it (strong convexity). It is W_mm iff it is also dual
  feasible (KKT): W = sum_r y_r (e_a - e_b) h_j^T with y_r <= 0 on every
  inequality row, whose constraint reads (e_v - e_z0)^T W h_j <= -1. Rows with
  y_r > 0 are dropped, constraints the solution violates (a guess that missed
  a tight one) are added, and the system is solved again, at most
  POLISH_ROUNDS times; W is returned only when it is primal and dual feasible.
  """
  L = H @ W0.T
  z0 = np.argmax(S, axis=1)  # anchor: the first token of S_j
  c = np.where(S, L, 0.0).sum(1) / S.sum(1)
  ej, ez = np.nonzero(S & (np.arange(S.shape[1])[None, :] != z0[:, None]))
  tight = ~S & (L >= c[:, None] - 1 - tol)
  if candidates is not None:
    tight &= candidates
  ij, iv = np.nonzero(tight)
  js, a = np.r_[ej, ij], np.r_[ez, iv]
  rhs = np.r_[np.zeros(len(ej)), -np.ones(len(ij))]
  V = S.shape[1]
  for _ in range(POLISH_ROUNDS):
    if not len(js):
      return None
    sys = DiffSystem(js, a, z0[js], rhs, None, 0)
    C = diff_matrix(a, z0[js], V)
    y = _psd_solve((C @ C.T) * (H[js] @ H[js].T), rhs)
    W = _apply_rows_t(sys, H, y, V)
    wrong = (rhs < 0) & (y > 1e-9 * max(float(np.abs(y).max()), 1e-300))
    L = H @ W.T
    vj, vv = np.nonzero(~S & (L > L[np.arange(len(z0)), z0][:, None] - 1 + 1e-9))
    if not wrong.any() and not len(vj):
      break
    keep = ~wrong
    js, a, rhs = np.r_[js[keep], vj], np.r_[a[keep], vv], np.r_[rhs[keep], -np.ones(len(vj))]
  else:
    return None
  res = float(np.linalg.norm(_apply_rows(sys, H, W) - sys.rhs))
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
  Cf = diff_matrix(sysf.a, sysf.b, V)
  Cg = diff_matrix(z0[jg], vg, V)
  K = H @ H.T
  Ggg = (Cg @ Cg.T) * K[jg][:, jg]
  B = (Cf @ Cg.T) * K[sysf.j][:, jg]
  M = Ggg - B.T @ (sysf.pinv @ B)
  gsys = DiffSystem(jg, z0[jg], vg, np.ones(len(jg)), None, 0)
  return (M + M.T) / 2, sysf, gsys, B


# ---------------------------------------------------------------------------
# Matrix-free first-order solver of the same dual, for sizes where the dense
# n x n Hessian of `_svm_dual` does not fit.

# Above this dual size n (or F-rank R) `method="auto"` uses the first-order solver.
AUTO_MAX_DUAL = 3000


class _DualOperator:
  """lam -> constraint values of W(lam) = P_Fperp G^T lam, without forming M.

  Everything lives in logit space: W = Y^T H for a coefficient matrix Y
  `[m, V]`, so the logits are L = H W^T = K Y with K = H H^T and ||W||^2 =
  <Y, K Y>. G^T lam is Y_g = e_z0 rowsum(Lam) - Lam (Lam `[m, V]`, zero on the
  supports); the F-component is A_f^T mu with mu = G_ff^{-1} A_f W (one
  Cholesky solve of the R x R Gram of F's rows) and its logits are a sparse
  product. One call costs one m x m x V product (sparse once few
  multipliers are positive, as near the optimum), and the constraint
  values (M lam) come out as g_jv = L_{j z0_j} - L_jv.
  """

  def __init__(self, H, S):
    m, V = S.shape
    self.S, self.off = S, ~S
    P1 = S.astype(np.float64) / S.sum(1, keepdims=True)
    self.z0 = np.array([np.flatnonzero(S[j])[np.argmax(P1[j, S[j]])] for j in range(m)])
    self.K = H @ H.T
    fj, fa, fb = [], [], []
    for j in range(m):
      for z in np.flatnonzero(S[j]):
        if z != self.z0[j]:
          fj.append(j), fa.append(z), fb.append(self.z0[j])
    self.fj, self.fa, self.fb = (np.asarray(x, np.int64) for x in (fj, fa, fb))
    R = len(self.fj)
    self.R = R
    if R:
      Cf = diff_matrix(self.fa, self.fb, V, as_sparse=True)
      self.CfT = Cf.T.tocsr()
      self.Kf = self.K[self.fj]  # [R, m]
      G = (Cf @ Cf.T).toarray() * self.Kf[:, self.fj]
      gmax = max(float(np.diag(G).max()), 1e-300)
      self.cho = None
      try:
        c = linalg.cho_factor(G, lower=True, check_finite=False)
        if np.diag(c[0]).min() ** 2 > 1e3 * RANK_RTOL * gmax:
          self.cho = c
      except linalg.LinAlgError:
        pass
      self.pinv = None if self.cho is not None else _psd_pinv(G)[0]

  def _mu(self, L):
    rf = L[self.fj, self.fa] - L[self.fj, self.fb]
    if self.cho is not None:
      return linalg.cho_solve(self.cho, rf, check_finite=False)
    return self.pinv @ rf

  def coefficients(self, Lam):
    """(Y, L): W(lam) = Y^T H and its logits L = K Y."""
    m = Lam.shape[0]
    Y = -Lam
    Y[np.arange(m), self.z0] += Lam.sum(1)
    if np.count_nonzero(Y) < 0.1 * Y.size:  # late iterates are sparse: m * nnz flops
      L = np.asarray((sparse.csc_matrix(Y).T @ self.K).T)
    else:
      L = self.K @ Y
    if self.R:
      mu = self._mu(L)
      L -= (self.CfT @ (self.Kf * mu[:, None])).T
      np.add.at(Y, (self.fj, self.fa), -mu)
      np.add.at(Y, (self.fj, self.fb), mu)
    return Y, L

  def __call__(self, Lam):
    """M lam as an `[m, V]` matrix (zero on the supports)."""
    _, L = self.coefficients(Lam)
    g = L[np.arange(L.shape[0]), self.z0][:, None] - L
    return np.where(self.off, g, 0.0)


def _dual_gap(lam, g, off):
  """(relative duality gap, min constraint, ||W||^2) at lam with M lam = g.

  Dual value D = 1^T lam - ||W||^2 / 2 <= ||W_mm||^2 / 2 <= P = ||W||^2 /
  (2 min g^2), the objective of the feasible rescaled W / min g.
  """
  a = float(np.vdot(lam, g))
  gmin = float(np.where(off, g, np.inf).min())
  return _dual_gap_from(float(lam.sum()), a, gmin) + (a,)


def _dual_gap_from(lam_sum, a, gmin):
  """(relative gap, gmin) of `_dual_gap` from sum(lam), a = ||W||^2 and min g."""
  D = lam_sum - a / 2
  if gmin <= 0 or a <= 0:
    return np.inf, gmin
  P = a / (2 * gmin**2)
  return (P - D) / P, gmin


def _svm_first_order(H, S, tol, max_iter, max_time, power_iters=30, seed=0):
  """FISTA with gradient restarts and a backtracked step on the NTP-SVM dual.

  Returns (lam `[m, V]`, op, info dict). Stops when the relative duality gap
  (see `_dual_gap`) is <= tol; since the primal is 1-strongly convex,
  ||W/min g - W_mm||^2 <= 2 (P - D), i.e. a relative W error <= sqrt(tol).
  """
  t_start = time.perf_counter()
  op = _DualOperator(H, S)
  off = op.off
  # Lipschitz constant lambda_max(M) by power iteration (an underestimate, so
  # the step is also backtracked below).
  x = np.where(off, np.random.default_rng(seed).random(S.shape), 0.0)
  lip = 1.0
  for _ in range(power_iters):
    y = op(x)
    lip = float(np.sqrt(np.sum(y * y) / np.sum(x * x)))
    x = y / max(np.linalg.norm(y), 1e-300)
  lip *= 1.05
  # Start at the best multiple of the all-ones vector.
  ones = off.astype(np.float64)
  g1 = op(ones)
  # (Guarded: 1^T M 1 ~ 0 means the all-ones ray is nearly a Farkas ray.)
  c = off.sum() / max(float(np.sum(ones * g1)), 1e-6 * lip * off.sum(), 1e-300)
  lam, g = ones * c, g1 * c
  lam_cap = 1e8 * max(float(lam.sum()), 1.0)
  y, gy, t = lam, g, 1.0
  it, restarts, rel, gmin = 0, 0, np.inf, -np.inf
  while it < max_iter:
    it += 1
    lam_new = np.where(off, np.maximum(y - (gy - 1.0) / lip, 0.0), 0.0)
    g_new = op(lam_new)
    dd = lam_new - y
    nd = float(np.sum(dd * dd))
    dMd = float(np.sum(dd * (g_new - gy)))
    if nd > 0 and dMd > lip * nd * (1 + 1e-9):  # step too long: back off and retry
      lip = max(2 * lip, 1.05 * dMd / nd)
      continue
    if np.sum((gy - 1.0) * (lam_new - lam)) > 0:  # gradient restart
      t, restarts = 1.0, restarts + 1
    t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
    beta = (t - 1) / t_new
    y = lam_new + beta * (lam_new - lam)
    gy = g_new + beta * (g_new - g)
    lam, g, t = lam_new, g_new, t_new
    rel, gmin, _ = _dual_gap(lam, g, off)
    if rel <= tol or time.perf_counter() - t_start > max_time:
      break
    if not lam.sum() < lam_cap:  # dual unbounded (not separable): stop before overflow
      break
  info = dict(iterations=it, restarts=restarts, gap=rel, raw_min_constraint=gmin, lipschitz=lip,
              converged=bool(rel <= tol))
  return lam, op, info


# ---------------------------------------------------------------------------
# The default first-order solver: the same dual in coefficient space, where
# its conditioning does not grow with V.

# F's R x R Gram is solved by conjugate gradients (sparse, matrix-free) when R
# is at least this large and at most `F_CG_MAX_DENSITY` of its entries are
# nonzero; otherwise by a dense Cholesky, as in `_DualOperator`.
F_CG_MIN_RANK = 1000
# Largest fraction of nonzero entries of F's Gram for the sparse CG path.
F_CG_MAX_DENSITY = 0.1
# Relative residual at which CG on F's Gram stops (equalities then hold to
# ~1e-12 of their violation before the projection).
F_CG_RTOL = 1e-12
# CG iterations on F's Gram before it falls back to the dense factorisation.
F_CG_MAX_ITER = 500
# The coefficient-space solver certifies its iterate (F-projection, gap)
# every max(1, floor(CHECK_FRACTION * iteration)) iterations: at most ~10%
# iterations past the first certifiable one, and O(log) certificates when a
# certificate (a dense R x R solve at R = 5000) costs ~20 iterations.
CHECK_FRACTION = 0.1


class _FGram:
  """mu = G^{-1} r for the Gram matrix G of F's rows (e_z - e_z0_j) h_j^T.

  G = (C C^T) * K[fj][:, fj] is R x R, R = sum_j (|S_j| - 1). Two rows
  interact only through a shared token, so for large V it is sparse and, on
  the benchmark instances, well conditioned: CG with a Jacobi preconditioner
  (warm-started at the previous mu) solves it in tens of sparse products,
  where the dense Cholesky of `_DualOperator` costs R^3 / 3 flops (seconds at
  R = 5000). Small or dense G, or a CG that does not converge (ill
  conditioned or rank-deficient G), use the dense Cholesky, or the eigh
  pseudo-inverse of `_psd_pinv` when G is singular.
  """

  def __init__(self, K, fj, fa, fb, V):
    self.R = R = len(fj)
    self.K, self.fj, self.fa, self.fb = K, fj, fa, fb
    self.cho = self.pinv = None
    self.mode = "none"  # no F rows (every |S_j| = 1): nothing to project
    # Rows sharing token t give count_t^2 entries of C C^T: its density, up to
    # pairs that share both tokens, without forming it.
    count = np.bincount(np.r_[fa, fb], minlength=V).astype(np.float64)
    if R >= F_CG_MIN_RANK and float(count @ count) <= F_CG_MAX_DENSITY * R * R:
      self.mode = "cg"
      C = diff_matrix(fa, fb, V, as_sparse=True)
      CC = (C @ C.T).tocoo()
      self.G = sparse.csr_matrix((CC.data * K[fj[CC.row], fj[CC.col]], (CC.row, CC.col)),
                                 shape=(R, R))
      diag = self.G.diagonal()
      self.jacobi = sparse.diags(1.0 / np.maximum(diag, 1e-300 + RANK_RTOL * diag.max()))
      self.mu = np.zeros(R)
    elif R:
      Cd = diff_matrix(fa, fb, V)  # dense products: faster than densifying CC when it is dense
      G = Cd @ Cd.T
      G *= K[np.ix_(fj, fj)]
      self._factor(G)

  def _factor(self, G):
    self.mode = "dense"
    gmax = max(float(np.diag(G).max()), 1e-300)
    try:
      c = linalg.cho_factor(G, lower=True, check_finite=False)
      if np.diag(c[0]).min() ** 2 > 1e3 * RANK_RTOL * gmax:
        self.cho = c
    except linalg.LinAlgError:
      pass
    if self.cho is None:
      self.pinv = _psd_pinv(G)[0]

  def solve(self, r):
    if self.mode == "cg":
      mu, info = sparse_linalg.cg(self.G, r, x0=self.mu, rtol=F_CG_RTOL, atol=0.0,
                                  maxiter=F_CG_MAX_ITER, M=self.jacobi)
      if info == 0:
        self.mu = mu
        return mu
      self._factor(self.G.toarray())  # CG stalled: fall back to the exact factorisation
    if self.cho is not None:
      return linalg.cho_solve(self.cho, r, check_finite=False)
    return self.pinv @ r

  def correction(self, L):
    """dY (sparse `[m, V]`) with P_Fperp(Y^T H) = (Y + dY)^T H, given the logits L = K Y."""
    mu = self.solve(L[self.fj, self.fa] - L[self.fj, self.fb])
    return sparse.csr_matrix((np.r_[-mu, mu], (np.r_[self.fj, self.fj], np.r_[self.fa, self.fb])),
                             shape=L.shape)  # duplicate (j, z0_j) entries are summed


def _project_rows(A, cap, tau, out, work):
  """Rows of A projected onto {y : sum(y) = 0, y <= cap}, written to `out`; returns tau.

  The projection of a row a is y = min(a - tau, cap) with tau the root of
  phi(tau) = sum_v min(a_v - tau, cap_v), which is concave and decreasing
  (slope -#{v : a_v - tau < cap_v}, at most -|S_j| since cap = +inf on S_j).
  So a Newton step from any tau lands where phi <= 0, the following steps
  decrease tau monotonically (the free set {a_v - tau < cap_v} shrinks), and
  the step is exact, the mean of a over the free set, once that set stops
  changing. `tau` (the previous call's roots) warm-starts it: near
  convergence one or two steps. `work` is a pair of boolean `A`-shaped
  buffers (fresh 8 MB arrays cost more than the arithmetic at m = V = 1000).
  """
  free, new = work
  np.less(np.subtract(A, tau[:, None], out=out), cap, out=free)
  for _ in range(A.shape[1] + 1):  # each step drops at least one entry or stops
    tau = np.multiply(A, free, out=out).sum(1) / np.count_nonzero(free, axis=1)
    np.less(np.subtract(A, tau[:, None], out=out), cap, out=new)
    if np.array_equal(new, free):
      break
    free, new = new, free
  np.minimum(out, cap, out=out)
  return tau


def _svm_coefficient_fista(H, S, tol, max_iter, max_time, power_iters=30, seed=0, cert_tol=1e-9,
                           lip_scale=0.25):
  """FISTA on the NTP-SVM dual in coefficient space (`method="first_order"`).

  With W = Y^T H (Y `[m, V]`), logits K Y (K = H H^T) and ||W||^2 = <Y, K Y>,
  the Lagrange dual of the NTP-SVM is

      min_Y  1/2 <Y, K Y> + sum_{j, v not in S_j} Y_jv
      s.t.   every row of Y sums to 0 and Y_jv <= 0 for v not in S_j,

  where lam = -Y off the supports are the margin multipliers and the support
  entries carry the equalities' multipliers (Y_jz0 = sum lam_j - sum mu_j).
  `_svm_dual` and `_svm_first_order` eliminate the row sums through the anchor
  z0_j, which adds the rank-one term (V - |S_j|) K_jj per context and makes the
  iteration count grow with V. Here the row sums stay constraints: the
  Hessian is K (x) I_V, whose curvature on the sparse optimal face is that of
  K over a token's few active contexts, and the feasible set is a product
  over rows with an exact projection (`_project_rows`). Rows are scaled by
  1/sqrt(K_jj) (Y = D Yt leaves every row's constraint set unchanged), a
  Jacobi preconditioner for embeddings of unequal norms. Gradient restarts
  and the backtracked step are those of `_svm_first_order`.

  Iterates are certified (every max(1, floor(CHECK_FRACTION * k)) at
  iteration k) exactly as in `_svm_first_order`: lam gives W(lam) =
  P_Fperp(Y^T H) (the F-part of Y^T H does not change the projection, so
  this is the W of the lam-space dual; `_FGram` applies it), its constraint
  values g and the relative duality gap of `_dual_gap`; the solve stops at
  the first certified gap <= tol. Returns (lam `[m, V]`, Yc, info) with
  W(lam) = Yc^T H. A dual ray (no separating W) stops the solve once
  ||W(lam)||_F / (sum(lam) max(1, |H|_max)) <= cert_tol, which bounds the
  Farkas residual of -Yc / sum(lam).

  The first step is 1 / (lip_scale * 1.05 * lambda_max(Kt)): differences of
  iterates are sparse per token, and on them the curvature is about half of
  lambda_max (at m = V = 1000 the backtracking settles at 0.5 lambda_max;
  starting there took 43 iterations against 64 from lambda_max). A step that
  is too long is detected and halved, as in `_svm_first_order`.
  """
  t_start = time.perf_counter()
  m, V = S.shape
  off = ~S
  K = H @ H.T
  kd = np.diag(K)
  dsc = 1.0 / np.sqrt(np.maximum(kd, 1e-12 * max(float(kd.max()), 1e-300)))
  Kt = K * np.outer(dsc, dsc)
  c = np.where(off, dsc[:, None], 0.0)  # the linear term in scaled coordinates
  lam_of = -c  # lam = lam_of * Y (unscaled and zero on the supports)
  cap = np.where(S, np.inf, 0.0)
  s_flat = np.flatnonzero(S)
  z0 = np.argmax(S, axis=1)  # the anchor: the first token of S_j, as in `_DualOperator`
  fj, fz = np.nonzero(S & (np.arange(V)[None, :] != z0[:, None]))
  fgram = _FGram(K, fj, fz, z0[fj], V)
  h_scale = max(1.0, float(np.abs(H).max()))
  # Lipschitz constant lambda_max(Kt) by power iteration (also backtracked below).
  x = np.random.default_rng(seed).random(m)
  for _ in range(power_iters):
    y = Kt @ x
    lip = float(np.linalg.norm(y) / np.linalg.norm(x))
    x = y / max(np.linalg.norm(y), 1e-300)
  lip = 1.05 * max(lip, 1e-300) * lip_scale
  # [m, V] buffers, reused: allocating them anew each iteration doubled its cost.
  Y, KY, Z, KZ, Yn, KYn, grad, dd, lam, L = (np.empty((m, V)) for _ in range(10))
  work = (np.empty((m, V), bool), np.empty((m, V), bool))
  # Start at the best multiple of the first projected-gradient step from 0.
  tau = _project_rows(c * (-1 / lip), cap, np.zeros(m), Y, work)
  np.matmul(Kt, Y, out=KY)
  curv, slope = float(np.vdot(Y, KY)), float(np.vdot(c, Y))
  scale = -slope / max(curv, 1e-6 * lip * float(np.vdot(Y, Y)), 1e-300)
  Y *= scale
  KY *= scale
  lam_cap = 1e8 * max(float(np.vdot(lam_of, Y)), 1.0)

  def certify():
    """(rel gap, min constraint, ||W(lam)||^2, dY) at Y; fills lam and g (in L)."""
    np.multiply(lam_of, Y, out=lam)
    np.divide(KY, dsc[:, None], out=L)  # logits of Y^T H (unscaled)
    dY = None
    if fgram.R:
      dY = fgram.correction(L)
      np.add(L, (dY.T @ K).T, out=L)  # logits of P_Fperp(Y^T H)
    g = np.subtract(L[np.arange(m), z0][:, None], L, out=L)
    a = float(np.vdot(lam, g))
    g.flat[s_flat] = np.inf
    return _dual_gap_from(float(lam.sum()), a, float(g.min())) + (a, dY)

  np.copyto(Z, Y)
  np.copyto(KZ, KY)
  t, it, restarts, infeasible = 1.0, 0, 0, False
  (rel, gmin, a, dY), fresh = certify(), True
  while it < max_iter and not (fresh and rel <= tol):
    it += 1
    np.add(KZ, c, out=grad)
    np.multiply(grad, -1 / lip, out=dd)
    dd += Z
    tau = _project_rows(dd, cap, tau, Yn, work)
    np.matmul(Kt, Yn, out=KYn)
    np.subtract(Yn, Z, out=dd)
    nd = float(np.vdot(dd, dd))
    dKd = float(np.vdot(dd, KYn) - np.vdot(dd, KZ))
    if nd > 0 and dKd > lip * nd * (1 + 1e-9):  # step too long: back off and retry
      lip = max(2 * lip, 1.05 * dKd / nd)
      continue
    step = np.subtract(Yn, Y, out=dd)
    if np.vdot(grad, step) > 0:  # gradient restart
      t, restarts = 1.0, restarts + 1
    t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
    beta = (t - 1) / t_new
    step *= beta
    np.add(Yn, step, out=Z)
    np.subtract(KYn, KY, out=KZ)
    KZ *= beta
    KZ += KYn
    Y, Yn, KY, KYn, t, fresh = Yn, Y, KYn, KY, t_new, False
    out_of_time = time.perf_counter() - t_start > max_time
    if it % max(1, int(CHECK_FRACTION * it)) and not out_of_time:
      continue
    (rel, gmin, a, dY), fresh = certify(), True
    lsum = float(lam.sum())
    if out_of_time:
      break
    if gmin <= 0 and np.sqrt(max(a, 0.0)) <= cert_tol * h_scale * lsum:
      infeasible = True  # W(lam) / sum(lam) ~ 0: a Farkas ray
      break
    if not lsum < lam_cap:  # dual unbounded (not separable): stop before overflow
      infeasible = True
      break
  if not fresh:  # stopped at max_iter between certificates
    rel, gmin, a, dY = certify()
  Yc = Y * dsc[:, None]
  if dY is not None:
    dY = dY.tocoo()
    np.add.at(Yc, (dY.row, dY.col), dY.data)
  info = dict(iterations=it, restarts=restarts, gap=rel, raw_min_constraint=gmin, lipschitz=lip,
              converged=bool(rel <= tol), infeasible=infeasible, f_solver=fgram.mode)
  return lam, Yc, info


def ntp_svm(H, P, *, tol=None, polish=True, active_tol=1e-6, method="auto",
            max_iter=20000, max_time=np.inf):
  """W_mm = argmin ||W||_F s.t. W in F-perp and (e_z - e_v)^T W h_j >= 1.

  `method`: "clarabel" (exact interior point on the dense dual), "first_order"
  (matrix-free FISTA on the same dual in coefficient space,
  `_svm_coefficient_fista`), "first_order_lam" (the earlier FISTA in the
  multipliers lam, `_svm_first_order`, whose iteration count grows with V;
  kept for comparison) or "auto" (Clarabel unless the dual size n or F's rank
  R exceeds `AUTO_MAX_DUAL`, then "first_order"). `tol`: the solver
  tolerance, default 1e-9 for Clarabel and a relative duality gap of 1e-6 for
  the first-order solvers (relative error of W <= 1e-3). `max_iter`,
  `max_time` (seconds) bound a first-order solve; if they stop it before
  `tol` the result is still feasible (rescaled) and `gap` says how far it is.

  Solved with Clarabel (interior point, Rust; cvxpy's default QP solver) on
  the dual QP of `_svm_dual`, called directly rather than through cvxpy
  because canonicalisation would cost more than the solve at the paper's
  sizes. The iterate is then polished on its active set (see `_polish`). If
  the dual is unbounded (Clarabel: DualInfeasible) its ray is turned into a
  Farkas certificate that `check_infeasibility_certificate` verifies.
  """
  if method not in ("auto", "clarabel", "first_order", "first_order_lam"):
    raise ValueError(f"unknown method {method!r}; valid: auto, clarabel, first_order, "
                     "first_order_lam")
  H, P, _ = data_lib.validate(H, P)
  S = P > 0
  m, d = H.shape
  V = S.shape[1]
  if S.all():
    z = np.zeros((m, V))
    return SVMResult(True, np.zeros((V, d)), np.inf, np.inf, 0.0, ~S, z, None, 0.0,
                     "NoConstraints", False, 0.0)
  if method == "auto":
    n, R = int((~S).sum()), int(S.sum() - m)
    method = "first_order" if max(n, R) > AUTO_MAX_DUAL else "clarabel"
  if method in ("first_order", "first_order_lam"):
    return _ntp_svm_first_order(H, S, 1e-6 if tol is None else tol, max_iter, max_time,
                                polish, active_tol, method)
  clarabel = extras.require("clarabel", "the NTP-SVM's interior-point solver (method='clarabel')")
  tol = 1e-9 if tol is None else tol
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


def _ntp_svm_first_order(H, S, tol, max_iter, max_time, polish, active_tol, method):
  m, V = S.shape
  t0 = time.perf_counter()
  if method == "first_order":
    lam, Y, info = _svm_coefficient_fista(H, S, tol, max_iter, max_time)
  else:
    lam, op, info = _svm_first_order(H, S, tol, max_iter, max_time)
    Y, _ = op.coefficients(lam)
  R = int(S.sum() - m)  # rows of F (its Gram is part of the active-set solve)
  dt = time.perf_counter() - t0
  gmin = info["raw_min_constraint"]
  if not gmin > 0:
    # Unbounded dual: W(lam) / sum(lam) -> 0 gives a Farkas certificate.
    cert = -Y / max(float(lam.sum()), 1e-300)
    res = check_infeasibility_certificate(H, S / S.sum(1, keepdims=True), cert)
    if res <= 1e-6:
      return SVMResult(False, None, 0.0, np.nan, np.nan, None, None, cert, res, "DualInfeasible",
                       False, dt, method, info["iterations"], np.inf, gmin, np.inf)
    raise RuntimeError(f"first-order NTP-SVM: no feasible W after {info['iterations']} iterations"
                       f" (min constraint {gmin:.3g}) and no certificate (residual {res:.3g})")
  W = (Y.T @ H) / gmin  # rescaled so that every constraint holds
  status = "Solved" if info["converged"] else "MaxIterations"
  polished = False
  if polish and info["converged"]:
    _, _, L = _constraint_stats(W, H, S)
    c = np.where(S, L, 0).sum(1) / S.sum(1)
    cand = lam > 0  # the dual iterate's support: where the projection did not clip
    n_act = int((cand & (L >= c[:, None] - 1 - 10 * np.sqrt(tol))).sum())
    if R + n_act <= AUTO_MAX_DUAL:  # the active-set solve is dense in its size
      Wp = _polish(H, S, W, 10 * np.sqrt(tol), cand)
      if Wp is not None:
        W, polished = Wp, True
  ineq, eq, L = _constraint_stats(W, H, S)
  c = np.where(S, L, 0).sum(1) / S.sum(1)
  active = (~S) & (L >= c[:, None] - 1 - active_tol)
  return SVMResult(True, W, float(1.0 / np.linalg.norm(W)), ineq, eq, active, lam, None, 0.0,
                   status, polished, dt, method, info["iterations"],
                   0.0 if polished else info["gap"], gmin, info["gap"])


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
  if Y.shape != P.shape:
    raise ValueError(f"certificate Y must be [m, V] = {list(P.shape)}; got shape {Y.shape}")
  bad = np.argwhere(~np.isfinite(Y))
  if bad.size:
    raise ValueError(f"certificate Y has a non-finite entry at row {bad[0][0]}, "
                     f"column {bad[0][1]}")
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
