"""Per-token losses by name, and their reduction over a batch.

For logits `f` (length V) and label `k`, with margins `m_c = f_k - f_c` over the
V-1 competitors `c != k` (seed paper 000, Sec. 4.1; REFERENCE.md Sec. 1) and
`p = softmax(f)`:

  ce: -log p_k
  e1: ce + lam * log(1 + (1/(V-1)) sum_{c!=k} m_c^2)
  e2: ce + lam * Var_{c!=k}(m_c)          (population variance = Var_{c!=k} f_c)
  e3: sum_c (f_c - v_c)^2,  v = -b everywhere except v_k = +b

and the baselines of seed 001 (its list of related loss designs):

  label_smoothing:      -(1 - eps) log p_k - (eps / V) sum_c log p_c
  z_loss:               ce + coef * (logsumexp f)^2
  spherical_z:          softplus(a (b - z_k)) / a,  z = (f - mean f) / (std f + 1e-6)
                        (the "Z-loss" of the spherical family; population std over
                        the V logits; the epsilon keeps equal logits finite)
  focal:                -(1 - p_k)^gamma log p_k
  dice:                 1 - (2 (1 - p_k)^alpha p_k + gamma) / ((1 - p_k)^alpha p_k + 1 + gamma)
                        (self-adjusting Dice loss)
  gce:                  (1 - p_k^q) / q          (generalised cross-entropy)
  spectral_decoupling:  ce + (lam / 2) ||f||^2

Every loss maps logits `[..., V]` (float32 or bfloat16) and integer labels
`[...]` to float32 per-token values `[...]`. Everything is computed in float32
and in log space where it matters (log p_k by log-softmax, 1 - p_k as
exp(logsumexp_{c!=k} f_c - logsumexp f), p_k^q as exp(q log p_k)), so values
and gradients stay finite for logits up to +-1e4.

Per-token values are reduced by `reduce` (`get_reduction`): "mean" is the
masked mean sum(l * m) / max(sum(m), 1); "reweight" is the dynamic loss-based
reweighting of seed 001 (Sow et al. 2025, "Dynamic Loss-Based Sample
Reweighting for Improved Large Language Model Pretraining", their Algorithm 1
and public code), applied to the tokens of the batch: with the detached losses
l_i of the masked tokens, h_i = (2 l_i - l_max - l_min) / max(l_max - l_min,
1e-6) in [-1, 1], s_i = strategy(h_i) with

  linupper:  min(h + 1, 1)      (down-weights low-loss tokens; the paper's best)
  quadratic: 1 - h^2            (down-weights both extremes)
  extremes:  |h|                (up-weights both extremes)

and weights w_i = sum(m) exp(s_i / r) / sum_j m_j exp(s_j / r) (with a 0/1 mask:
N exp(s_i / r) / sum_{j masked} exp(s_j / r), summing to the N masked tokens;
r > 0 is the strength of the KL regularisation towards uniform weights, r -> inf
gives the plain mean). The objective is sum_i m_i w_i l_i / max(sum(m), 1) with
the weights under stop_gradient. The paper weighs sequences (their mean token
loss) and skips reweighting for a first "burn-in" of steps; here the units are
the scored tokens of the batch and reweighting runs from the first step.

Labels outside [0, V) (e.g. -1 used as padding) select no logit: the loss is
finite but meaningless there, so such positions must be masked out.
"""
import inspect
import math
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

Array = jax.Array
LossFn = Callable[[Array, Array], Array]


def _prepare(logits, labels):
  """Float32 logits, float32 one-hot of the labels and V; checks shapes."""
  f = jnp.asarray(logits).astype(jnp.float32)
  labels = jnp.asarray(labels)
  if not jnp.issubdtype(labels.dtype, jnp.integer):
    raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
  if f.ndim < 1 or labels.shape != f.shape[:-1]:
    raise ValueError(
        f"labels shape {labels.shape} must equal logits shape {f.shape} "
        "without its last (vocabulary) axis")
  v = f.shape[-1]
  if v < 2:
    raise ValueError(f"need at least 2 classes on the last axis, got V={v}")
  # A one-hot (not a gather) so out-of-range padding labels give finite values
  # instead of NaN fill, which a mask multiply could not remove.
  onehot = jax.nn.one_hot(labels, v, dtype=jnp.float32)
  return f, onehot, v


def _label_logit(f, onehot):
  """f_k, keeping the class axis (size 1)."""
  return jnp.sum(onehot * f, axis=-1, keepdims=True)


def _ce(f, onehot, f_k=None):
  if f_k is None:
    f_k = _label_logit(f, onehot)
  return jax.nn.logsumexp(f, axis=-1) - f_k[..., 0]


def _margins(f, f_k):
  """m_c = f_k - f_c for every c; m_k = 0 exactly, so sums over c skip k."""
  return f_k - f


def ce_loss(logits, labels):
  """Cross-entropy -log softmax(logits)_label, per token, float32."""
  f, onehot, _ = _prepare(logits, labels)
  return _ce(f, onehot)


def e1_loss(logits, labels, *, lam=1.0):
  """CE + lam * log(1 + mean_{c!=k} m_c^2), per token, float32."""
  f, onehot, v = _prepare(logits, labels)
  f_k = _label_logit(f, onehot)
  m = _margins(f, f_k)
  # m_k == 0, so the sum over all classes is the sum over competitors; at
  # |f| = 1e4 it is ~4e8 * V, far from float32 overflow.
  msq = jnp.sum(jnp.square(m), axis=-1) / (v - 1)
  return _ce(f, onehot, f_k) + lam * jnp.log1p(msq)


def e2_loss(logits, labels, *, lam=1.0):
  """CE + lam * population Var_{c!=k}(m_c), per token, float32."""
  f, onehot, v = _prepare(logits, labels)
  f_k = _label_logit(f, onehot)
  m = _margins(f, f_k)
  competitor = 1.0 - onehot
  mu = jnp.sum(m, axis=-1, keepdims=True) / (v - 1)  # m_k == 0 adds nothing
  # Centred two-pass variance: E[m^2] - E[m]^2 cancels catastrophically when
  # the margins are large and nearly equal. Masking by multiplication keeps
  # the gradient of the excluded label entry an exact zero (no NaN).
  d = (m - mu) * competitor
  var = jnp.sum(jnp.square(d), axis=-1) / (v - 1)
  return _ce(f, onehot, f_k) + lam * var


def e3_loss(logits, labels, *, b=1.0):
  """sum_c (f_c - v_c)^2 with v = +b at the label and -b elsewhere, float32."""
  f, onehot, _ = _prepare(logits, labels)
  target = b * (2.0 * onehot - 1.0)
  return jnp.sum(jnp.square(f - target), axis=-1)


def _log_p_and_log_1mp(f, onehot):
  """(log p_k, log(1 - p_k)), each [...], without ever forming 1 - p_k.

  log(1 - p_k) = logsumexp_{c!=k} f_c - logsumexp_c f_c: finite even when p_k
  rounds to 1 (at |f| = 1e4 it is about -2e4). The label is excluded with a
  finite floor, not -inf, so no gradient of this is NaN.
  """
  lse = jax.nn.logsumexp(f, axis=-1)
  log_p = _label_logit(f, onehot)[..., 0] - lse
  floor = jnp.finfo(jnp.float32).min
  lse_comp = jax.nn.logsumexp(jnp.where(onehot > 0, floor, f), axis=-1)
  return log_p, lse_comp - lse


def label_smoothing_loss(logits, labels, *, eps=0.1):
  """-(1 - eps) log p_k - (eps / V) sum_c log p_c, per token, float32."""
  f, onehot, v = _prepare(logits, labels)
  log_p = jax.nn.log_softmax(f, axis=-1)
  return (-(1.0 - eps) * jnp.sum(onehot * log_p, axis=-1)
          - (eps / v) * jnp.sum(log_p, axis=-1))


def z_loss(logits, labels, *, coef=1e-4):
  """CE + coef * (logsumexp f)^2 (the log-normaliser penalty), per token, float32."""
  f, onehot, _ = _prepare(logits, labels)
  lse = jax.nn.logsumexp(f, axis=-1)
  return lse - _label_logit(f, onehot)[..., 0] + coef * jnp.square(lse)


SPHERICAL_Z_STD_EPS = 1e-6  # added to std f in spherical_z: equal logits give z = 0, not NaN


def spherical_z_loss(logits, labels, *, a=1.0, b=1.0):
  """softplus(a (b - z_k)) / a with z = (f - mean f) / (std f + 1e-6), float32.

  The Z-loss of the spherical family (de Brebisson & Vincent 2016): invariant
  to shifting and (up to the epsilon) scaling the logits. `std` is the
  population std over the V logits.
  """
  f, onehot, v = _prepare(logits, labels)
  d = f - jnp.mean(f, axis=-1, keepdims=True)
  var = jnp.sum(jnp.square(d), axis=-1, keepdims=True) / v
  # sqrt has an infinite derivative at 0: take it only where var > 0 so that
  # equal logits (var = 0) give z = 0 and a finite (~1 / epsilon), not NaN, gradient.
  pos = var > 0
  std = jnp.where(pos, jnp.sqrt(jnp.where(pos, var, 1.0)), 0.0)
  z_k = jnp.sum(onehot * d, axis=-1) / (std[..., 0] + SPHERICAL_Z_STD_EPS)
  return jax.nn.softplus(a * (b - z_k)) / a


def focal_loss(logits, labels, *, gamma=2.0):
  """-(1 - p_k)^gamma log p_k (focal loss; gamma = 0 is CE), per token, float32."""
  f, onehot, _ = _prepare(logits, labels)
  log_p, log_1mp = _log_p_and_log_1mp(f, onehot)
  return -jnp.exp(gamma * log_1mp) * log_p


def dice_loss(logits, labels, *, alpha=1.0, gamma=1.0):
  """Self-adjusting Dice loss 1 - (2 (1-p_k)^alpha p_k + gamma) / ((1-p_k)^alpha p_k + 1 + gamma)."""
  f, onehot, _ = _prepare(logits, labels)
  log_p, log_1mp = _log_p_and_log_1mp(f, onehot)
  wp = jnp.exp(alpha * log_1mp + log_p)  # (1 - p_k)^alpha p_k in [0, 1]
  return 1.0 - (2.0 * wp + gamma) / (wp + 1.0 + gamma)


def gce_loss(logits, labels, *, q=0.7):
  """(1 - p_k^q) / q (generalised cross-entropy; q -> 0 is CE, q = 1 is MAE / 2), float32."""
  f, onehot, _ = _prepare(logits, labels)
  log_p = _label_logit(f, onehot)[..., 0] - jax.nn.logsumexp(f, axis=-1)
  return -jnp.expm1(q * log_p) / q


def spectral_decoupling_loss(logits, labels, *, lam=1.0):
  """CE + (lam / 2) ||f||^2 (spectral decoupling), per token, float32."""
  f, onehot, _ = _prepare(logits, labels)
  return _ce(f, onehot) + 0.5 * lam * jnp.sum(jnp.square(f), axis=-1)


LOSSES: dict[str, Callable[..., Array]] = {
    "ce": ce_loss,
    "e1": e1_loss,
    "e2": e2_loss,
    "e3": e3_loss,
    "label_smoothing": label_smoothing_loss,
    "z_loss": z_loss,
    "spherical_z": spherical_z_loss,
    "focal": focal_loss,
    "dice": dice_loss,
    "gce": gce_loss,
    "spectral_decoupling": spectral_decoupling_loss,
}

# Allowed range of each hyperparameter: (low, high, low_closed, high_closed),
# None for an open end. The (None, name) entry is the default; a (loss, name)
# entry overrides it for that loss (e3's `b` must be > 0, spherical_z's may be
# any finite real; dice's `gamma` must be > 0, focal's may be 0).
_RANGES = {
    (None, "lam"): (0.0, None, True, False),
    (None, "b"): (0.0, None, False, False),
    ("spherical_z", "b"): (None, None, False, False),
    (None, "eps"): (0.0, 1.0, True, False),
    (None, "coef"): (0.0, None, True, False),
    (None, "a"): (0.0, None, False, False),
    (None, "gamma"): (0.0, None, True, False),
    ("dice", "gamma"): (0.0, None, False, False),
    (None, "alpha"): (0.0, None, True, False),
    (None, "q"): (0.0, 1.0, False, True),
}


def _hparam_names(fn):
  return tuple(p.name for p in inspect.signature(fn).parameters.values()
               if p.kind == inspect.Parameter.KEYWORD_ONLY)


def _range_text(lo, hi, lo_closed, hi_closed):
  if lo is None and hi is None:
    return "(any real)"
  if hi is None:
    return f"{'>=' if lo_closed else '>'} {lo:g}"
  return f"in {'[' if lo_closed else '('}{lo:g}, {hi:g}{']' if hi_closed else ')'}"


def _check_value(name, value, lo, hi, lo_closed, hi_closed):
  """float(value) if it is a finite number in the range, else ValueError naming `name`."""
  want = f"{name} must be a finite number {_range_text(lo, hi, lo_closed, hi_closed)}"
  if isinstance(value, bool):
    raise ValueError(f"{want}, got {value!r}")
  try:
    value = float(value)
  except (TypeError, ValueError):
    raise ValueError(f"{want}, got {value!r}") from None
  ok = math.isfinite(value)  # also rejects NaN
  if lo is not None:
    ok = ok and (value >= lo if lo_closed else value > lo)
  if hi is not None:
    ok = ok and (value <= hi if hi_closed else value < hi)
  if not ok:
    raise ValueError(f"{want}, got {value}")
  return value


def _check_hparam(loss, name, value):
  rng = _RANGES.get((loss, name), _RANGES[(None, name)])
  return _check_value(name, value, *rng)


def get_loss(name: str, **hparams) -> LossFn:
  """Returns `fn(logits, labels) -> per-token float32 loss` for `name`.

  Args:
    name: one of `LOSSES`: "ce", "e1", "e2", "e3", "label_smoothing",
      "z_loss", "spherical_z", "focal", "dice", "gce", "spectral_decoupling"
      (formulas in the module docstring).
    **hparams: only the loss's own hyperparameters (defaults in brackets):
      `lam` >= 0 for e1, e2 [1] and spectral_decoupling [1]; `b` > 0 for e3
      [1]; `eps` in [0, 1) for label_smoothing [0.1]; `coef` >= 0 for z_loss
      [1e-4]; `a` > 0 and `b` any finite real for spherical_z [1, 1];
      `gamma` >= 0 for focal [2]; `alpha` >= 0 and `gamma` > 0 for dice
      [1, 1]; `q` in (0, 1] for gce [0.7]; none for ce.

  Raises:
    ValueError: unknown name, a hyperparameter foreign to the loss, or a value
      outside its allowed range (the message names the hyperparameter).
  """
  if name not in LOSSES:
    raise ValueError(f"unknown loss {name!r}; valid names: {sorted(LOSSES)}")
  fn = LOSSES[name]
  allowed = _hparam_names(fn)
  foreign = sorted(set(hparams) - set(allowed))
  if foreign:
    raise ValueError(
        f"loss {name!r} takes hyperparameters {list(allowed)}, got unexpected "
        f"{foreign}")
  kwargs = {k: _check_hparam(name, k, v) for k, v in hparams.items()}

  def loss_fn(logits, labels):
    return fn(logits, labels, **kwargs)

  loss_fn.__name__ = f"{name}_loss"
  loss_fn.__doc__ = f"{name} loss with {kwargs or 'no hyperparameters'}."
  return loss_fn


# Fields of config.loss before each loss's hyperparameters moved under that loss
# (`loss.lam` -> `loss.e1.lam`, ...; `loss.reweight_r` -> `loss.reweight.r`).
LEGACY_FIELDS = ("lam", "b", "eps", "coef", "a", "gamma", "alpha", "q", "reweight_strategy",
                 "reweight_r")


def moved_field_hint(field):
  """For a config.loss field of the old flat layout, where it lives now (else "")."""
  if field in ("reweight_strategy", "reweight_r"):
    return f"loss.{field} is now loss.reweight.{field[len('reweight_'):]}"
  owners = [n for n, fn in LOSSES.items() if field in _hparam_names(fn)]
  if not owners:
    return ""
  return (f"loss.{field} has moved: each loss's hyperparameters live under that loss "
          f"({', '.join(f'loss.{n}.{field}' for n in owners)})")


def _check_layout(loss_cfg):
  legacy = [k for k in LEGACY_FIELDS if k in loss_cfg]
  if legacy:
    raise ValueError("; ".join(moved_field_hint(k) for k in legacy))


def get_loss_from_config(loss_cfg: Mapping[str, Any]) -> LossFn:
  """`get_loss` from config.loss (dict or ConfigDict): `name` and, under the loss's own
  name, its hyperparameters (`{"name": "e1", "e1": {"lam": 4.0}, "e3": {...}, ...}`; the
  blocks of other losses are ignored, a missing block or field takes the loss's default).
  The old flat layout (`{"name": "e1", "lam": 4.0}`) is a ValueError saying where each
  field lives now.
  """
  _check_layout(loss_cfg)
  name = loss_cfg["name"]
  if name not in LOSSES:
    raise ValueError(f"unknown loss {name!r}; valid names: {sorted(LOSSES)}")
  block = loss_cfg.get(name) or {}
  return get_loss(name, **dict(block))


def hparams_from_config(loss_cfg: Mapping[str, Any]) -> dict[str, float]:
  """{hyperparameter: value} the loss of config.loss trains with: its block's values, the
  loss's defaults for those the block lacks ({} for "ce")."""
  name = loss_cfg["name"]
  fn = LOSSES[name]
  out = {p.name: float(p.default) for p in inspect.signature(fn).parameters.values()
         if p.kind == inspect.Parameter.KEYWORD_ONLY}
  out.update({k: float(v) for k, v in dict(loss_cfg.get(name) or {}).items()})
  return out


def validate_config(loss_cfg: Mapping[str, Any]) -> None:
  """Checks config.loss: name, that loss's hyperparameters, the reduction and its fields.

  Raises:
    ValueError naming the field (`loss.e1.lam`, `loss.reweight.r`, ...) and what is allowed.
  """
  _check_layout(loss_cfg)
  name = loss_cfg.get("name")
  try:
    get_loss_from_config(loss_cfg)
  except ValueError as e:
    msg = str(e)
    raise ValueError(msg if msg.startswith(("unknown", "loss ")) else f"loss.{name}.{msg}") from None
  try:
    get_reduction_from_config(loss_cfg)
  except ValueError as e:
    msg = str(e)
    raise ValueError(msg if msg.startswith("unknown") else f"loss.reweight.{msg}") from None


# ----------------------------------------------------------------------------
# Reduction of per-token losses over a batch


REDUCTIONS = ("mean", "reweight")
REWEIGHT_STRATEGIES = ("linupper", "quadratic", "extremes")
REWEIGHT_HPARAMS = ("reweight_strategy", "reweight_r")
REWEIGHT_DENOM_EPS = 1e-6  # floor of l_max - l_min (the reference code's): equal losses -> equal weights


def _strategy(h, strategy):
  """The reweighting function of the normalised loss h in [-1, 1] (delta = 1)."""
  if strategy == "linupper":
    return jnp.minimum(h + 1.0, 1.0)
  if strategy == "quadratic":
    return 1.0 - jnp.square(h)
  return jnp.abs(h)  # "extremes"


def _check_reweight(strategy, r):
  """(strategy, float r) if valid, else ValueError naming the config field."""
  if strategy not in REWEIGHT_STRATEGIES:
    raise ValueError(f"reweight_strategy={strategy!r}; allowed: {list(REWEIGHT_STRATEGIES)}")
  return strategy, _check_value("reweight_r", r, 0.0, None, False, False)


def reweight_weights(per_token, mask, *, strategy="linupper", r=1.0):
  """Loss-based token weights of seed 001's dynamic reweighting (module docstring).

  Args:
    per_token: float `[...]` per-token losses (only their values are used: the
      result is under stop_gradient).
    mask: float `[...]` of the same shape; tokens with mask <= 0 get weight 0
      and play no part in l_min, l_max or the normalisation.
    strategy: one of `REWEIGHT_STRATEGIES`.
    r: the KL-regularisation strength (temperature) > 0.

  Returns:
    Float32 weights `[...]`, >= 0, with sum(mask * w) = sum(mask) (so with a
    0/1 mask they sum to the number of masked tokens); all zero if the mask is.
  """
  strategy, r = _check_reweight(strategy, r)
  l = jax.lax.stop_gradient(jnp.asarray(per_token, jnp.float32))
  m = jax.lax.stop_gradient(jnp.asarray(mask, jnp.float32))
  if m.shape != l.shape:
    raise ValueError(f"mask shape {m.shape} must equal per-token loss shape {l.shape}")
  on = m > 0
  big = jnp.finfo(jnp.float32).max
  l_min = jnp.min(jnp.where(on, l, big))
  l_max = jnp.max(jnp.where(on, l, -big))
  denom = jnp.maximum(l_max - l_min, REWEIGHT_DENOM_EPS)
  # Masked tokens only: the others could be far outside [l_min, l_max].
  h = jnp.where(on, (2.0 * l - (l_max + l_min)) / denom, 0.0)
  s = _strategy(h, strategy)
  s_max = jnp.max(jnp.where(on, s, -big))
  e = jnp.where(on, jnp.exp((s - s_max) / r), 0.0)  # <= 1: no overflow
  me = jnp.sum(m * e)
  scale = jnp.sum(m) / jnp.where(me > 0, me, 1.0)
  return e * scale


def _masked_mean(l, m):
  return jnp.sum(l * m) / jnp.maximum(jnp.sum(m), 1.0)


def get_reduction(reduction: str = "mean", **hparams) -> Callable[[Array, Array], Array]:
  """Returns `fn(per_token, mask) -> float32 scalar` for `reduction`.

  Args:
    reduction: one of `REDUCTIONS`: "mean" (the masked mean sum(l * m) /
      max(sum(m), 1); no hyperparameters) or "reweight" (seed 001's loss-based
      reweighting, sum(m * w * l) / max(sum(m), 1) with the `reweight_weights`
      w under stop_gradient).
    **hparams: for "reweight" only (named as in config.loss):
      `reweight_strategy` (one of `REWEIGHT_STRATEGIES`, default "linupper")
      and `reweight_r` (the temperature r > 0, default 1).

  Raises:
    ValueError: unknown reduction, a hyperparameter foreign to it, or a bad value.
  """
  if reduction not in REDUCTIONS:
    raise ValueError(f"unknown reduction {reduction!r}; allowed: {list(REDUCTIONS)}")
  allowed = REWEIGHT_HPARAMS if reduction == "reweight" else ()
  foreign = sorted(set(hparams) - set(allowed))
  if foreign:
    raise ValueError(f"reduction {reduction!r} takes hyperparameters {list(allowed)}, got "
                     f"unexpected {foreign}")
  if reduction == "mean":
    return _masked_mean
  strategy, r = _check_reweight(hparams.get("reweight_strategy", "linupper"),
                                hparams.get("reweight_r", 1.0))

  def reweighted_mean(per_token, mask):
    w = reweight_weights(per_token, mask, strategy=strategy, r=r)
    return _masked_mean(per_token * w, mask)

  return reweighted_mean


def reduce(per_token, mask, reduction="mean", **hparams):
  """Reduces per-token losses `[...]` with a float mask `[...]` (see `get_reduction`)."""
  return get_reduction(reduction, **hparams)(per_token, mask)


def get_reduction_from_config(loss_cfg: Mapping[str, Any]) -> Callable[[Array, Array], Array]:
  """`get_reduction` from config.loss: `reduction` (absent = "mean") and, for "reweight"
  only, the `loss.reweight` block's `strategy` and `r` (absent = their defaults)."""
  reduction = loss_cfg.get("reduction", "mean")
  if reduction not in REDUCTIONS:
    raise ValueError(f"unknown reduction loss.reduction={reduction!r}; allowed: "
                     f"{list(REDUCTIONS)}")
  if reduction == "mean":
    return get_reduction("mean")
  block = dict(loss_cfg.get("reweight") or {})
  foreign = sorted(set(block) - {"strategy", "r"})
  if foreign:
    raise ValueError(f"{foreign[0]} is not a field of loss.reweight; fields: ['strategy', 'r']")
  strategy = block.get("strategy", "linupper")
  if strategy not in REWEIGHT_STRATEGIES:
    raise ValueError(f"strategy={strategy!r}; allowed: {list(REWEIGHT_STRATEGIES)}")
  _check_value("r", block.get("r", 1.0), 0.0, None, False, False)
  return get_reduction("reweight", reweight_strategy=strategy, reweight_r=block.get("r", 1.0))


def reduce_loss(per_token, mask):
  """Masked mean sum(l * mask) / max(sum(mask), 1), float32 scalar."""
  l = jnp.asarray(per_token, jnp.float32)
  w = jnp.asarray(mask, jnp.float32)
  return jnp.sum(l * w) / jnp.maximum(jnp.sum(w), 1.0)


def margin_stats(logits, labels, mask=None) -> dict[str, Array]:
  """Statistics of the margin to the strongest competitor, f_k - max_{c!=k} f_c.

  Args:
    logits: `[..., V]`, any float dtype.
    labels: integer `[...]`.
    mask: optional float `[...]` token weights (1 = counted); tokens with
      weight <= 0 are ignored by `margin_min`.

  Returns:
    Float32 scalars `margin_mean`, `margin_min`, `margin_std` (population, over
    masked tokens) and `fitted_frac` (weighted fraction of tokens with margin
    > 0, i.e. a strictly correct argmax). All are 0 when the mask sums to 0.
  """
  f, onehot, _ = _prepare(logits, labels)
  f_k = jnp.sum(onehot * f, axis=-1)
  # A finite floor rather than -inf keeps any gradient through here NaN-free.
  floor = jnp.finfo(jnp.float32).min
  runner_up = jnp.max(jnp.where(onehot > 0, floor, f), axis=-1)
  margin = f_k - runner_up
  w = (jnp.ones_like(margin) if mask is None
       else jnp.asarray(mask, jnp.float32))
  if w.shape != margin.shape:
    raise ValueError(f"mask shape {w.shape} must equal labels shape "
                     f"{margin.shape}")
  total = jnp.sum(w)
  denom = jnp.maximum(total, 1.0)
  mean = jnp.sum(margin * w) / denom
  std = jnp.sqrt(jnp.sum(jnp.square(margin - mean) * w) / denom)
  fitted = jnp.sum((margin > 0).astype(jnp.float32) * w) / denom
  has_any = jnp.any(w > 0)
  mn = jnp.min(jnp.where(w > 0, margin, jnp.finfo(jnp.float32).max))
  mn = jnp.where(has_any, mn, 0.0)
  return {
      "margin_mean": mean,
      "margin_min": mn,
      "fitted_frac": fitted,
      "margin_std": std,
  }
