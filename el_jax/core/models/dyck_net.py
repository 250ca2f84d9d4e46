r"""The one-layer transformer of seed 002, Sec. 6 / Theorem 6.1, and its two solutions.

  from el_jax.core.data import dyck
  from el_jax.core.models import dyck_net as dn
  lang = dyck.Language(8)
  data = dn.pretraining_data(lang)          # every (sentence, mask) pair: z [N, T, 2T], y [N]
  p1 = dn.count_solution(8)                 # 2 neurons: the transferable solution
  p2 = dn.random_feature_solution(8, 600, data, seed=0)   # memorises with random features
  dn.loss_fn(p1, data), dn.loss_fn(p2, data)              # both ~0 (the MLM optimum)

What the seed says, and what is assumed where its symbols were lost:

Encoding (the "+-position encoding"). Token i of a length-T sentence is
z_i in R^{2T}: e_i for "(", -e_i for ")" and e_{T+i} for the mask ("a
one-hot vector in dimension 2T where the index of the nonzero element
encodes the position and the sign encodes the bracket"; the mask goes to
the second half, "the last T coordinates indicate the position of the
mask"). The z_i of one sentence are orthonormal. Only one bracket type fits
this code, so the model takes `dyck.Language(T, num_types=1)` data.

Model. theta = (W_Q, W_K in R^{2T x 2T}, W_V in R^{m x 2T}, a in R^m):
    alpha = softmax_i((W_Q z_1)^T (W_K z_i)),   h = sum_i alpha_i z_i,
    f_theta(x) = a^T relu(W_V h),
one attention head read at the first token ("we use the output of the first
token"), then a ReLU MLP with a scalar output. Assumed: no 1/sqrt(d)
scaling of the scores, no biases, W_Q and W_K square.

Loss. The squared loss to the target y = E[s | rest], s = +1 for "(" and -1
for ")" (the sign code of the input), computed from the exact conditional
`Language.mlm_conditional_batch`; it is +-1 here (the conditional is
one-hot), so the minimum pre-training loss is 0. Assumed: the loss is
    L(theta) = 1/2 E (f_theta(x) - y)^2,
the 1/2 making the seed's Lemma D.4 exact: at zero loss tr(H) = E||grad f||^2.
(Without the 1/2 every trace below doubles.) The population is finite: all
C(T, T/2) sentences times T mask positions, equally likely
(`pretraining_data`), so losses and traces here are exact expectations.

Solution (1), `count_solution`: W_Q = W_K = 0 (uniform attention, h =
(1/T) sum_i z_i), two neurons w_1 = beta [1_T; 0_T], w_2 = -w_1 and
a = (-T/beta, T/beta): relu(w_1^T h) = beta relu(tau)/T with tau the
mismatch count of the masked sentence, so f = -tau = y exactly. With
beta = T^(3/4) (the AM-GM optimum) its trace is the seed's lower bound
(Lemma D.1, as reconstructed):
    tr(H) >= E[ ||grad_a f||^2 + ||grad_W_V f||^2 ] >= 2 E[|y| ||h||] >= 2 / sqrt(T),
the last step since ||h||^2 = sum_i alpha_i^2 >= 1/T. Extra zero neurons
change neither f nor the trace.

Solution (2), `random_feature_solution`: W_Q = W_K = 0, W_V with i.i.d.
N(0, std^2) entries (std = 1 assumed; the seed's variance is unreadable), a
the minimum-norm least-squares fit of y on the features relu(W_V h) over
the whole pre-training population (exact interpolation once m >= N, the
number of (sentence, mask) inputs: the seed's Theorem D.6 "m sufficiently
large"). Its trace depends on the scale c of (c W_V, a / c), which keeps f;
`flattest_rescaling` picks the c of least trace, so the comparison with (1)
is not an artefact of the scale.

Downstream (Theorem 6.1): features relu(W_V h(x)) of downstream strings (no
mask; h from the model's own attention), a linear head b of minimum norm
fitted by least squares (`probe_fit`, the seed's "minimizer of downstream
training loss ... subject to minimal norm"; `ridge` > 0 for ridge) to
tau(x), error = the exact population MSE over all 2^T strings divided by
Var(tau) = T (`sample_complexity`). For (1) the head b = (T/beta, -T/beta)
is exact as soon as the training set holds one string with tau > 0 and one
with tau < 0, so its expected relative error after n draws is q^n with
q = (1 + P(tau = 0)) / 2 (tested).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from el_jax.core.data import dyck

LEAVES = ("query", "key", "value", "out")


def _check_length(length):
  if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 2 \
      or length % 2:
    raise ValueError(f"length must be an even integer >= 2, got {length!r}")
  return int(length)


def _check_width(width, minimum=1):
  if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < minimum:
    raise ValueError(f"width must be an integer >= {minimum}, got {width!r}")
  return int(width)


def check_params(params):
  """Validates the parameter pytree; returns (length T, width m)."""
  if not isinstance(params, dict) or set(params) != set(LEAVES):
    got = sorted(params) if isinstance(params, dict) else type(params).__name__
    raise ValueError(f"params must be a dict with keys {LEAVES}, got {got}")
  q, k, v, a = (np.shape(params[n]) for n in LEAVES)
  if len(q) != 2 or q[0] != q[1] or q[0] % 2 or k != q:
    raise ValueError(f"query and key must both be [2T, 2T], got {q} and {k}")
  d = q[0]
  if len(v) != 2 or v[1] != d or a != (v[0],):
    raise ValueError(f"value must be [m, 2T={d}] and out [m], got {v} and {a}")
  return d // 2, v[0]


# ----------------------------------------------------------------------------
# Encoding and forward pass


def encode(tokens, length=None):
  """The +-position encoding: tokens [B, T] (0 "(", 1 ")", 2 mask) -> z [B, T, 2T] float32.

  Accepts NumPy or JAX integer arrays (traceable); `length` defaults to the last axis.
  """
  x = jnp.asarray(tokens)
  if not jnp.issubdtype(x.dtype, jnp.integer) or x.ndim != 2:
    raise ValueError(f"tokens must be integer ids of shape [B, T], got {x.dtype} {x.shape}")
  t = x.shape[1] if length is None else _check_length(length)
  if x.shape[1] != t:
    raise ValueError(f"tokens have length {x.shape[1]}, expected {t}")
  if not isinstance(x, jax.core.Tracer):
    bad = np.argwhere((np.asarray(x) < 0) | (np.asarray(x) > 2))
    if len(bad):
      i = tuple(int(j) for j in bad[0])
      raise ValueError(f"tokens{list(i)} = {int(x[i])} is not a token of the one-type "
                       f"language; allowed: 0 '(', 1 ')', 2 mask")
  pos = jnp.arange(t)
  idx = jnp.where(x == 2, t + pos[None, :], pos[None, :])
  sign = jnp.where(x == 1, -1.0, 1.0)
  onehot = jax.nn.one_hot(idx, 2 * t, dtype=jnp.result_type(float))
  return onehot * sign[:, :, None]


def attend(params, z_BxTxD):
  """The attention output h [B, 2T] (query from the first token) and weights [B, T]."""
  q_BxD = z_BxTxD[:, 0, :] @ params["query"].T
  k_BxTxD = jnp.einsum("btd,ed->bte", z_BxTxD, params["key"])
  alpha_BxT = jax.nn.softmax(jnp.einsum("bd,btd->bt", q_BxD, k_BxTxD), axis=-1)
  return jnp.einsum("bt,btd->bd", alpha_BxT, z_BxTxD), alpha_BxT


def features(params, z_BxTxD):
  """The MLP's hidden activations relu(W_V h): [B, m] (what the downstream head reads)."""
  h_BxD, _ = attend(params, z_BxTxD)
  return jax.nn.relu(h_BxD @ params["value"].T)


def apply(params, z_BxTxD):
  """f_theta(x): [B]."""
  return features(params, z_BxTxD) @ params["out"]


def loss_fn(params, batch):
  """1/2 mean (f - y)^2 over batch = {"z": [B, T, 2T], "y": [B]} (optional "w": [B]
  example weights that sum to 1)."""
  r = apply(params, batch["z"]) - batch["y"]
  if "w" in batch:
    return 0.5 * jnp.sum(batch["w"] * r * r)
  return 0.5 * jnp.mean(r * r)


def pretraining_data(lang):
  """The whole pre-training population of `lang` (one bracket type): every (sentence,
  mask position) pair, equally likely. Returns {"z", "y"} with y = p(() - p()) from the
  exact conditional, plus "tokens" and "positions" (NumPy)."""
  if not isinstance(lang, dyck.Language) or lang.num_types != 1:
    raise ValueError(f"the +-position encoding needs a dyck.Language with num_types=1, got "
                     f"{lang!r}")
  masked, pos, _ = lang.all_masked()
  cond = lang.mlm_conditional_batch(masked, pos)
  y = cond[:, 0] - cond[:, 1]
  return {"z": encode(masked), "y": jnp.asarray(y, jnp.result_type(float)),
          "tokens": masked, "positions": pos}


def downstream_data(lang):
  """Every downstream string (uniform distribution): {"z", "tau", "tokens"}."""
  if not isinstance(lang, dyck.Language) or lang.num_types != 1:
    raise ValueError(f"the +-position encoding needs a dyck.Language with num_types=1, got "
                     f"{lang!r}")
  x = lang.all_downstream()
  return {"z": encode(x), "tau": lang.mismatches(x).astype(np.float64), "tokens": x}


def model_batch(data):
  """The jit-able part of `pretraining_data` (drops the NumPy fields)."""
  return {"z": data["z"], "y": data["y"]}


# ----------------------------------------------------------------------------
# Parameters


def init(key, length, width, *, qk_std=None, value_std=1.0, out_std=None):
  """Random parameters: N(0, std^2) entries; defaults qk_std = 1/sqrt(2T),
  out_std = 1/sqrt(m). Traceable (`key` may be traced), and the same numbers under jit as
  eagerly."""
  t, m = _check_length(length), _check_width(width)
  d = 2 * t
  qk_std = 1.0 / np.sqrt(d) if qk_std is None else qk_std
  out_std = 1.0 / np.sqrt(m) if out_std is None else out_std
  for name, s in (("qk_std", qk_std), ("value_std", value_std), ("out_std", out_std)):
    if not np.isfinite(s) or s < 0:
      raise ValueError(f"{name} must be a finite number >= 0, got {s!r}")
  kq, kk, kv, ka = jax.random.split(key, 4)
  f = jnp.result_type(float)

  def normal(k, shape):
    # The barrier keeps XLA from folding the std into the normal sampler's own constants
    # when this runs under jit (el_jax.run.setup.Trainer jits the init): without it a jitted
    # init differed from an eager one in the last bit of some entries.
    return jax.lax.optimization_barrier(jax.random.normal(k, shape, f))

  return {"query": qk_std * normal(kq, (d, d)), "key": qk_std * normal(kk, (d, d)),
          "value": value_std * normal(kv, (m, d)), "out": out_std * normal(ka, (m,))}


def count_solution(length, width=2, scale=None):
  """Solution (1): uniform attention and the two neurons +-beta [1_T; 0], a = (-T, T)/beta
  (beta = T^(3/4) by default, the trace-minimising scale); zero neurons pad to `width`."""
  t = _check_length(length)
  m = _check_width(width, 2)
  beta = t ** 0.75 if scale is None else float(scale)
  if not np.isfinite(beta) or beta <= 0:
    raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
  d = 2 * t
  value = np.zeros((m, d))
  value[0, :t], value[1, :t] = beta, -beta
  out = np.zeros(m)
  out[0], out[1] = -t / beta, t / beta
  f = jnp.result_type(float)
  return {"query": jnp.zeros((d, d), f), "key": jnp.zeros((d, d), f),
          "value": jnp.asarray(value, f), "out": jnp.asarray(out, f)}


def random_feature_solution(length, width, data, seed=0, std=1.0):
  """Solution (2): uniform attention, W_V i.i.d. N(0, std^2) (seeded), a the minimum-norm
  least-squares fit (float64) of data["y"] on relu(W_V h) over data["z"]."""
  t, m = _check_length(length), _check_width(width)
  d = 2 * t
  value = np.random.default_rng(seed).normal(0.0, std, (m, d))
  z = np.asarray(data["z"], np.float64)
  if z.ndim != 3 or z.shape[1:] != (t, d):
    raise ValueError(f"data['z'] must be [N, {t}, {d}], got {z.shape}")
  h = z.mean(1)
  phi = np.maximum(h @ value.T, 0.0)
  a = np.linalg.lstsq(phi, np.asarray(data["y"], np.float64), rcond=None)[0]
  f = jnp.result_type(float)
  return {"query": jnp.zeros((d, d), f), "key": jnp.zeros((d, d), f),
          "value": jnp.asarray(value, f), "out": jnp.asarray(a, f)}


def rescale(params, c):
  """(c W_V, a / c): the same function (relu is positively homogeneous)."""
  c = float(c)
  if not np.isfinite(c) or c <= 0:
    raise ValueError(f"c must be a finite number > 0, got {c!r}")
  return {**params, "value": params["value"] * c, "out": params["out"] / c}


@jax.jit
def _per_leaf_sq_grad(params, z_BxTxD):
  g = jax.vmap(jax.grad(lambda p, z: apply(p, z[None])[0]), in_axes=(None, 0))(params, z_BxTxD)
  return {k: jnp.mean(jnp.sum(v.reshape(v.shape[0], -1) ** 2, axis=1)) for k, v in g.items()}


def gauss_newton_trace(params, data):
  """E||grad_theta f||^2 per leaf (dict) over data["z"]: tr(H) of `loss_fn` at a point of
  zero loss (Lemma D.4), the Gauss-Newton part elsewhere."""
  check_params(params)
  return {k: float(v) for k, v in _per_leaf_sq_grad(params, data["z"]).items()}


def flattest_rescaling(params, data):
  """`rescale(params, c*)` with c* = (B / A)^(1/4) minimising the Gauss-Newton trace
  G + c^2 A + B / c^2 (A: the out leaf, B: the value leaf; G unchanged); returns
  (params, c*)."""
  g = gauss_newton_trace(params, data)
  if g["out"] <= 0 or g["value"] <= 0:
    raise ValueError("no active neuron on the data: the rescaling is undefined")
  c = (g["value"] / g["out"]) ** 0.25
  return rescale(params, c), c


def cancellation(params, data):
  """E sum_j |a_j| relu(w_j^T h) / E |f| over data["z"] (>= 1; 1 iff no two active
  neurons ever have output weights of opposite signs: the seed's eq. (8) equality),
  and the mean number of active neurons per input."""
  phi = np.asarray(features(params, data["z"]), np.float64)
  a = np.asarray(params["out"], np.float64)
  f = phi @ a
  return {"ratio": float(np.mean(phi @ np.abs(a)) / max(np.mean(np.abs(f)), 1e-300)),
          "active_per_input": float(np.mean(np.sum((phi > 0) & (a != 0)[None, :], 1)))}


def trace_lower_bound(length):
  """The seed's Lemma D.1 bound (as reconstructed) for 1/2 squared loss and +-1 targets:
  2 / sqrt(T), attained by `count_solution`."""
  return 2.0 / np.sqrt(_check_length(length))


# ----------------------------------------------------------------------------
# Downstream: minimum-norm linear head on the features


def probe_fit(phi_NxM, y_N, ridge=0.0):
  """Linear head b [M]: minimum-norm least squares (ridge = 0) or ridge regression with
  penalty ridge * mean_i ||phi_i||^2 ||b||^2 (relative, so rescaling the features
  changes nothing)."""
  phi, y = np.asarray(phi_NxM, np.float64), np.asarray(y_N, np.float64)
  if phi.ndim != 2 or y.shape != (phi.shape[0],):
    raise ValueError(f"need phi [N, M] and y [N], got {phi.shape} and {y.shape}")
  if not np.isfinite(ridge) or ridge < 0:
    raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
  if ridge == 0:
    return np.linalg.lstsq(phi, y, rcond=None)[0]
  # Dual form (N is small): b = phi^T (phi phi^T + lam I)^-1 y.
  gram = phi @ phi.T
  lam = ridge * max(float(np.mean(np.diag(gram))), np.finfo(np.float64).tiny)
  return phi.T @ np.linalg.solve(gram + lam * np.eye(len(y)), y)


def sample_complexity(phi_all, tau_all, sizes, draws=20, seed=0, ridge=0.0):
  """Downstream error against the number of training examples.

  Each draw takes n strings i.i.d. from the population (the rows of phi_all,
  equally likely: the uniform downstream distribution when phi_all covers all
  2^T strings), fits `probe_fit`, and measures the exact population MSE over all
  rows divided by Var(tau). Returns {n: {"mean", "std", "draws": [...]}}.
  """
  phi, tau = np.asarray(phi_all, np.float64), np.asarray(tau_all, np.float64)
  var = np.var(tau)
  if var <= 0:
    raise ValueError("tau_all is constant; the relative error is undefined")
  rng = np.random.default_rng(seed)
  out = {}
  for n in sizes:
    n = _check_width(n)
    errs = []
    for _ in range(_check_width(draws)):
      idx = rng.integers(0, len(tau), n)
      b = probe_fit(phi[idx], tau[idx], ridge)
      errs.append(float(np.mean((phi @ b - tau) ** 2) / var))
    out[n] = {"mean": float(np.mean(errs)), "std": float(np.std(errs, ddof=1)) if draws > 1
              else 0.0, "draws": errs}
  return out


# ----------------------------------------------------------------------------
# Training


@functools.partial(jax.jit, static_argnames=("optimizer", "batch_size", "num_steps"))
def train_chunk(params, opt_state, key, data, *, optimizer, batch_size, num_steps,
                label_noise=0.0):
  """`num_steps` minibatch steps on the population data = {"z", "y"}: each step draws
  `batch_size` examples uniformly with replacement (the pre-training distribution);
  optional label noise y + label_noise * Rademacher. Returns (params, opt_state, key,
  mean minibatch loss)."""
  n = data["y"].shape[0]

  def step(carry, _):
    p, s, k = carry
    k, ki, kn = jax.random.split(k, 3)
    idx = jax.random.randint(ki, (batch_size,), 0, n)
    noise = label_noise * jax.random.rademacher(kn, (batch_size,), data["y"].dtype)
    batch = {"z": data["z"][idx], "y": data["y"][idx] + noise}
    loss, g = jax.value_and_grad(loss_fn)(p, batch)
    upd, s = optimizer.update(g, s, p)
    return (optax.apply_updates(p, upd), s, k), loss

  (params, opt_state, key), losses = jax.lax.scan(step, (params, opt_state, key), None,
                                                  length=num_steps)
  return params, opt_state, key, jnp.mean(losses)
