"""Per-token losses by name: cross-entropy and the E-losses of equal learning.

For logits `f` (length V) and label `k`, with margins `m_c = f_k - f_c` over the
V-1 competitors `c != k` (seed paper 000, Sec. 4.1; REFERENCE.md Sec. 1):

  ce: -log softmax(f)_k
  e1: ce + lam * log(1 + (1/(V-1)) sum_{c!=k} m_c^2)
  e2: ce + lam * Var_{c!=k}(m_c)          (population variance = Var_{c!=k} f_c)
  e3: sum_c (f_c - v_c)^2,  v = -b everywhere except v_k = +b

Every loss maps logits `[..., V]` (float32 or bfloat16) and integer labels
`[...]` to float32 per-token values `[...]`; callers reduce them with a masked
mean (`reduce_loss` is one; the train step has its own). Everything is computed
in float32 and stays finite, with finite gradients, for logits up to +-1e4.

Labels outside [0, V) (e.g. -1 used as padding) select no logit: the loss is
finite but meaningless there, so such positions must be masked out.
"""
import inspect
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


LOSSES: dict[str, Callable[..., Array]] = {
    "ce": ce_loss,
    "e1": e1_loss,
    "e2": e2_loss,
    "e3": e3_loss,
}


def _hparam_names(fn):
  return tuple(p.name for p in inspect.signature(fn).parameters.values()
               if p.kind == inspect.Parameter.KEYWORD_ONLY)


def _check_hparam(name, value):
  value = float(value)
  # `not (x >= 0)` also rejects NaN.
  if name == "lam" and not value >= 0:
    raise ValueError(f"lam must be a finite number >= 0, got {value}")
  if name == "b" and not value > 0:
    raise ValueError(f"b must be a finite number > 0, got {value}")
  if value == float("inf"):
    raise ValueError(f"{name} must be finite, got {value}")
  return value


def get_loss(name: str, **hparams) -> LossFn:
  """Returns `fn(logits, labels) -> per-token float32 loss` for `name`.

  Args:
    name: one of `LOSSES` ("ce", "e1", "e2", "e3").
    **hparams: only the loss's own hyperparameters: `lam` (>= 0, default 1)
      for e1 and e2, `b` (> 0, default 1) for e3, none for ce.

  Raises:
    ValueError: unknown name, a hyperparameter foreign to the loss, or a value
      outside its allowed range.
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
  kwargs = {k: _check_hparam(k, v) for k, v in hparams.items()}

  def loss_fn(logits, labels):
    return fn(logits, labels, **kwargs)

  loss_fn.__name__ = f"{name}_loss"
  loss_fn.__doc__ = f"{name} loss with {kwargs or 'no hyperparameters'}."
  return loss_fn


def get_loss_from_config(loss_cfg: Mapping[str, Any]) -> LossFn:
  """`get_loss` from a config (dict or ConfigDict) with `name`, `lam`, `b`.

  The config carries every loss's hyperparameters so that sweeps can switch
  the loss by name alone; only those that belong to `name` are passed on.
  """
  name = loss_cfg["name"]
  if name not in LOSSES:
    raise ValueError(f"unknown loss {name!r}; valid names: {sorted(LOSSES)}")
  hparams = {k: loss_cfg[k] for k in _hparam_names(LOSSES[name])
             if k in loss_cfg}
  return get_loss(name, **hparams)


def validate_config(loss_cfg: Mapping[str, Any]) -> None:
  """Checks config.loss (name and the hyperparameters of that loss): ValueError if wrong."""
  try:
    get_loss_from_config(loss_cfg)
  except ValueError as e:
    msg = str(e)
    raise ValueError(msg if msg.startswith("unknown") else f"loss.{msg}") from None


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
