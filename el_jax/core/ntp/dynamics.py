"""Training the linear NTP decoder W in JAX: GD, normalised GD, Adam, and the regularisation path.

Each run is one `lax.scan` over logging chunks (an inner `fori_loop` of
`log_every` steps), so nothing comes back to the host until the end. The
recorded metrics are those of the paper's Fig. 1:

  gap       CE(W_k) - H, computed as sum_j pi_j KL(p_j || softmax(W_k h_j))
            so it stays accurate far below the float eps of CE itself;
  norm      ||W_k||_F (grows without bound under separability);
  cos_mm    cos(W_k, W_mm) (-> 1);
  cos_diff  cos(W_k - W*, W_mm) (-> 1, faster: W* is the finite part);
  dist_f    ||P_F(W_k) - W*||_F (-> 0).
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from el_jax.core.ntp import data as data_lib
from el_jax.core.ntp import geometry

OPTIMIZERS = ("gd", "ngd", "adam")
METRICS = ("gap", "norm", "cos_mm", "cos_diff", "dist_f")


@dataclasses.dataclass(frozen=True)
class Problem:
  """Arrays one training run needs; `targets` builds it once per instance."""
  H: np.ndarray
  P: np.ndarray
  pi: np.ndarray
  entropy: float
  W_star: np.ndarray
  W_mm: np.ndarray
  f_j: np.ndarray  # [R] context of each F row
  f_C: np.ndarray  # [R, V] e_a - e_b of each F row
  f_pinv: np.ndarray  # [R, R] pseudo-inverse of the F Gram matrix


def targets(data: data_lib.NTPData, svm=None) -> Problem:
  """Problem with W* and W_mm; raises ValueError unless compatible and separable."""
  W_star = geometry.log_odds_solution(data.H, data.P)
  svm = svm or geometry.ntp_svm(data.H, data.P)
  if not svm.separable:
    raise ValueError("instance is not NTP-separable: W_mm does not exist "
                     f"(certificate residual {svm.certificate_residual:.2g})")
  sys = geometry.log_odds_system(data.H, data.P)
  return Problem(data.H, data.P, data.pi, geometry.entropy(data.P, data.pi),
                 W_star, svm.W, sys.j, geometry.diff_matrix(sys.a, sys.b, data.V), sys.pinv)


def cross_entropy(W, H, P, pi):
  """CE(W) = -sum_j pi_j sum_z p_jz log softmax(W h_j)_z."""
  logq = jax.nn.log_softmax(H @ W.T, axis=-1)
  return -jnp.sum(pi[:, None] * P * logq)


def entropy_gap(W, H, P, pi):
  """CE(W) - H as sum_j pi_j KL(p_j || q_j): no cancellation between two O(1) numbers."""
  logq = jax.nn.log_softmax(H @ W.T, axis=-1)
  logp = jnp.log(jnp.where(P > 0, P, 1.0))
  return jnp.sum(pi[:, None] * jnp.where(P > 0, P * (logp - logq), 0.0))


def project_f(W, H, f_j, f_C, f_pinv):
  """P_F(W) = A^T (A A^T)^+ A vec(W), A the rows (e_a - e_b) h_j^T of F."""
  if f_j.shape[0] == 0:
    return jnp.zeros_like(W)
  L = H @ W.T  # [m, V]
  aw = jnp.sum(L[f_j] * f_C, axis=1)
  y = f_pinv @ aw
  return f_C.T @ (H[f_j] * y[:, None])


def _cos(A, B):
  return jnp.sum(A * B) / (jnp.linalg.norm(A) * jnp.linalg.norm(B) + 1e-300)


def metrics(W, arrs):
  H, P, pi, W_star, W_mm, f_j, f_C, f_pinv = arrs
  return dict(gap=entropy_gap(W, H, P, pi), norm=jnp.linalg.norm(W),
              cos_mm=_cos(W, W_mm), cos_diff=_cos(W - W_star, W_mm),
              dist_f=jnp.linalg.norm(project_f(W, H, f_j, f_C, f_pinv) - W_star))


def check_count(name, value, minimum=1, why=""):
  """`value` as an int >= `minimum`; ValueError naming `name` otherwise (bools are not counts)."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f"{name}={value!r} must be an integer >= {minimum}"
                     + (f" ({why})" if why else ""))
  return int(value)


def check_lr(name, lr):
  """`lr` as a float; ValueError unless it is a finite number > 0 (a negative step ascends)."""
  try:
    if isinstance(lr, (bool, str, bytes)) or np.ndim(lr):
      raise TypeError
    x = float(lr)
  except (TypeError, ValueError):
    raise ValueError(f"{name}={lr!r} must be a finite number > 0") from None
  if not (np.isfinite(x) and x > 0):
    why = " (a negative step runs gradient ascent)" if x < 0 else ""
    raise ValueError(f"{name}={x!r} must be a finite number > 0{why}")
  return x


def _make_opt(name, lr):
  if name == "gd":
    return optax.sgd(lr)
  if name == "ngd":
    # W <- W - lr g / ||g||: the step length stays lr although ||g|| -> 0.
    return optax.stateless(lambda g, _: jax.tree.map(
        lambda x: -lr * x / (jnp.linalg.norm(x) + 1e-300), g))
  if name == "adam":
    return optax.adam(lr)
  raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")


@functools.partial(jax.jit, static_argnames=("opt_name", "n_log", "log_every"))
def _run(W0, arrs, lr, *, opt_name, n_log, log_every):
  H, P, pi = arrs[:3]
  opt = _make_opt(opt_name, lr)
  grad = jax.grad(cross_entropy)

  def step(_, carry):
    W, st = carry
    upd, st = opt.update(grad(W, H, P, pi), st, W)
    return optax.apply_updates(W, upd), st

  def chunk(carry, _):
    carry = jax.lax.fori_loop(0, log_every, step, carry)
    return carry, metrics(carry[0], arrs)

  (W, _), hist = jax.lax.scan(chunk, (W0, opt.init(W0)), None, length=n_log)
  return W, metrics(W0, arrs), hist


def train(prob: Problem, optimizer="gd", lr=0.5, steps=1000, log_every=10, W0=None,
          x64=True):
  """Runs `optimizer` for `steps` iterations from W0 (zeros by default).

  Returns (W_final as NumPy, history dict: `step` plus every METRICS entry as
  NumPy arrays at steps 0, log_every, 2*log_every, ...). `x64` runs in
  float64 (our default: CE - H goes below float32 resolution within the
  paper's iteration counts).
  """
  if optimizer not in OPTIMIZERS:
    raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
  lr = check_lr("lr", lr)
  steps = check_count("steps", steps)
  log_every = check_count("log_every", log_every)
  if steps % log_every:
    raise ValueError(f"steps = {steps} must be a multiple of log_every = {log_every}")
  with jax.enable_x64(x64):
    dt = jnp.float64 if x64 else jnp.float32
    arrs = tuple(jnp.asarray(x, dt) for x in (prob.H, prob.P, prob.pi, prob.W_star,
                                             prob.W_mm)) + (
        jnp.asarray(prob.f_j), jnp.asarray(prob.f_C, dt), jnp.asarray(prob.f_pinv, dt))
    W0 = jnp.zeros(prob.W_mm.shape, dt) if W0 is None else jnp.asarray(W0, dt)
    W, m0, hist = _run(W0, arrs, jnp.asarray(lr, dt), opt_name=optimizer,
                       n_log=steps // log_every, log_every=log_every)
    out = {k: np.concatenate([[float(m0[k])], np.asarray(hist[k], np.float64)]) for k in METRICS}
    out["step"] = np.arange(0, steps + 1, log_every)
    return np.asarray(W, np.float64), out


def smoothness(prob: Problem):
  """L = lambda_max(sum_j pi_j h_j h_j^T) / 2 bounds the CE Hessian (softmax Hessian <= I/2)."""
  return 0.5 * float(np.linalg.eigvalsh((prob.H * prob.pi[:, None]).T @ prob.H).max())


@functools.partial(jax.jit, static_argnames=("steps",))
def _path(Bs, arrs, step_size, *, steps):
  H, P, pi = arrs[:3]
  grad = jax.grad(cross_entropy)

  def proj(W, B):
    return W * jnp.minimum(1.0, B / (jnp.linalg.norm(W) + 1e-300))

  def solve(B):
    # FISTA (accelerated projected gradient) on the ball ||W|| <= B.
    def body(carry, _):
      W, Y, t = carry
      Wn = proj(Y - step_size * grad(Y, H, P, pi), B)
      tn = (1 + jnp.sqrt(1 + 4 * t * t)) / 2
      return (Wn, Wn + ((t - 1) / tn) * (Wn - W), tn), None
    W0 = jnp.zeros(arrs[4].shape, H.dtype)
    (W, _, _), _ = jax.lax.scan(body, (W0, W0, jnp.ones((), H.dtype)), None, length=steps)
    return W, metrics(W, arrs)

  return jax.lax.map(solve, Bs)


def regularization_path(prob: Problem, Bs, steps=3000, x64=True):
  """W_B = argmin_{||W|| <= B} CE(W) for each B (FISTA, step 1/L).

  Returns (W_B `[nB, V, d]`, dict of METRICS arrays over B). The paper's
  result: W_B / B -> W_mm / ||W_mm|| and CE(W_B) -> H as B grows.
  """
  steps = check_count("steps", steps)
  Bs = np.asarray(Bs, np.float64)
  if Bs.ndim != 1 or not Bs.size:
    raise ValueError(f"Bs must be a non-empty 1-D array of norm bounds; got shape {Bs.shape}")
  bad = np.flatnonzero(~(np.isfinite(Bs) & (Bs > 0)))
  if bad.size:
    raise ValueError(f"norm bound Bs[{bad[0]}] = {Bs[bad[0]]} must be a finite number > 0")
  with jax.enable_x64(x64):
    dt = jnp.float64 if x64 else jnp.float32
    arrs = tuple(jnp.asarray(x, dt) for x in (prob.H, prob.P, prob.pi, prob.W_star,
                                             prob.W_mm)) + (
        jnp.asarray(prob.f_j), jnp.asarray(prob.f_C, dt), jnp.asarray(prob.f_pinv, dt))
    W, ms = _path(jnp.asarray(Bs, dt), arrs, jnp.asarray(1.0 / smoothness(prob), dt),
                  steps=steps)
    return np.asarray(W, np.float64), {k: np.asarray(v, np.float64) for k, v in ms.items()}
