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
not fit and `ntp_svm` switches to a matrix-free FISTA on the same dual
(`_DualOperator`, `_svm_first_order`).
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
  kept so `el_jax.ntp.dynamics` can apply the same map inside `lax.scan`.
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
    method: "clarabel" or "first_order".
    iterations: first-order iterations (0 for Clarabel).
    gap: first-order relative duality gap (P - D) / P at the returned W
      (0 for Clarabel, whose tolerance is `tol`).
    raw_min_constraint: first-order min constraint before the final
      rescaling W <- W / min constraint (nan for Clarabel).
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
  a = float(np.sum(lam * g))
  gmin = float(g[off].min())
  D = float(lam.sum()) - a / 2
  if gmin <= 0 or a <= 0:
    return np.inf, gmin, a
  P = a / (2 * gmin**2)
  return (P - D) / P, gmin, a


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


def ntp_svm(H, P, *, tol=None, polish=True, active_tol=1e-6, method="auto",
            max_iter=20000, max_time=np.inf):
  """W_mm = argmin ||W||_F s.t. W in F-perp and (e_z - e_v)^T W h_j >= 1.

  `method`: "clarabel" (exact interior point on the dense dual), "first_order"
  (matrix-free FISTA on the same dual, `_svm_first_order`) or "auto" (Clarabel
  unless the dual size n or F's rank R exceeds `AUTO_MAX_DUAL`). `tol`: the
  solver tolerance, default 1e-9 for Clarabel and a relative duality gap of
  1e-6 for first_order (relative error of W <= 1e-3). `max_iter`, `max_time`
  (seconds) bound the first-order solve; if they stop it before `tol` the
  result is still feasible (rescaled) and `gap` says how far it is.

  Solved with Clarabel (interior point, Rust; cvxpy's default QP solver) on
  the dual QP of `_svm_dual`, called directly rather than through cvxpy
  because canonicalisation would cost more than the solve at the paper's
  sizes. The iterate is then polished on its active set (see `_polish`). If
  the dual is unbounded (Clarabel: DualInfeasible) its ray is turned into a
  Farkas certificate that `check_infeasibility_certificate` verifies.
  """
  import clarabel

  if method not in ("auto", "clarabel", "first_order"):
    raise ValueError(f"unknown method {method!r}; valid: auto, clarabel, first_order")
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
  if method == "first_order":
    return _ntp_svm_first_order(H, S, 1e-6 if tol is None else tol, max_iter, max_time,
                                polish, active_tol)
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


def _ntp_svm_first_order(H, S, tol, max_iter, max_time, polish, active_tol):
  m, V = S.shape
  t0 = time.perf_counter()
  lam, op, info = _svm_first_order(H, S, tol, max_iter, max_time)
  Y, _ = op.coefficients(lam)
  dt = time.perf_counter() - t0
  gmin = info["raw_min_constraint"]
  if not gmin > 0:
    # Unbounded dual: W(lam) / sum(lam) -> 0 gives a Farkas certificate.
    cert = -Y / max(float(lam.sum()), 1e-300)
    res = check_infeasibility_certificate(H, S / S.sum(1, keepdims=True), cert)
    if res <= 1e-6:
      return SVMResult(False, None, 0.0, np.nan, np.nan, None, None, cert, res, "DualInfeasible",
                       False, dt, "first_order", info["iterations"], np.inf, gmin)
    raise RuntimeError(f"first-order NTP-SVM: no feasible W after {info['iterations']} iterations"
                       f" (min constraint {gmin:.3g}) and no certificate (residual {res:.3g})")
  W = (Y.T @ H) / gmin  # rescaled so that every constraint holds
  status = "Solved" if info["converged"] else "MaxIterations"
  polished = False
  if polish and info["converged"]:
    _, _, L = _constraint_stats(W, H, S)
    c = np.where(S, L, 0).sum(1) / S.sum(1)
    n_act = int(((~S) & (L >= c[:, None] - 1 - 10 * np.sqrt(tol))).sum())
    if op.R + n_act <= AUTO_MAX_DUAL:  # the active-set solve is dense in its size
      Wp = _polish(H, S, W, 10 * np.sqrt(tol))
      if Wp is not None:
        W, polished = Wp, True
  ineq, eq, L = _constraint_stats(W, H, S)
  c = np.where(S, L, 0).sum(1) / S.sum(1)
  active = (~S) & (L >= c[:, None] - 1 - active_tol)
  return SVMResult(True, W, float(1.0 / np.linalg.norm(W)), ineq, eq, active, lam, None, 0.0,
                   status, polished, dt, "first_order", info["iterations"],
                   0.0 if polished else info["gap"], gmin)


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
