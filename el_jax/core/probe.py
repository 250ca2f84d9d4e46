r"""Downstream evaluation of seed paper 002: linear probe and fine-tuning.

  from el_jax.core import probe
  x = {s: probe.encode(graphdef, params, d.tokens, d.segment_ids) for s, d in splits}
  res = probe.linear_probe(x["train"], y_train, x["valid"], y_valid, x["test"], y_test,
                           num_classes)              # res["test_acc_mean"], ["test_acc_std"]
  res = probe.fine_tune(graphdef, params, data.train, data.valid, data.test, num_classes)

The paper's protocol (App. A.4), and what we chose where it is silent:

Linear probe. "Since the CLS token is not trained in pre-training, we
concatenate embeddings of all the tokens in the sentence as the
representations. We use AdamW with learning rate 1e-3 to train the linear
head ... for 100 epochs", standard deviation over 5 seeds; optionally a
random Gaussian projection of the concatenation to 512 dimensions (reported
not to change the results). Our choices:
  * representation (`encode`): the final hidden states (after the last
    LayerNorm) of all T positions, concatenated, [N, T * D]; the hidden
    states at padding positions (segment id 0) are set to 0.
  * features are standardised with the training split's per-feature mean and
    std (`standardize=True`; the paper does not say); a feature whose train
    std is below 1e-3 of the mean std over features is divided by that floor
    instead, so constant ones (padding) stay constant and near-constant ones
    cannot blow up on valid / test. The projection, if any, is applied after
    standardising, with i.i.d. N(0, 1 / F) entries (unit-variance outputs).
  * head: logits = x W^T + b (W [C, F]), initialised like PyTorch's nn.Linear
    (U(-1/sqrt(F), 1/sqrt(F))); loss: mean cross-entropy over the batch;
    optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay) with a constant
    learning rate; minibatches of `batch_size` (default 256) in a fresh
    random order each epoch, the last partial batch kept (weights 0 pad it
    to a static shape, so every example is seen exactly once per epoch).
  * normalisation: `whiten=True` PCA-whitens the features instead (the train split's
    covariance, eigenvalues below 1e-10 of the largest dropped; `whitening`), so the probe
    sees every linear function of the features at one scale. Trained models of the default HMM
    put all but ~1e-9 of their features' variance on their blocks' directions; standardised,
    the probe read only the block. `linear_probe_selected` chooses the normalisation,
    learning rate and weight decay on valid from a grid (`parse_grid`), per model.
  * model selection (early stopping on valid): after every epoch the valid
    accuracy is computed and the head of the first epoch with the highest
    valid accuracy is kept; the test accuracy of that head is reported. Test
    accuracy never takes part in the selection.
  * a seed s fixes the head's initialisation, the minibatch orders and the
    projection: `seed_keys(s)` = (init, shuffle, projection) keys.
  * everything for all seeds is one jitted function: `jax.vmap` over seeds of
    a `lax.scan` over epochs of a `lax.scan` over minibatches (one compilation,
    3-5 s, per shape and setting).

Speed of `linear_probe` (2-core CPU shared with other jobs, load average ~4,
so roughly half of it): 10^4 train x 2,048 features (16 positions x 128),
2,000 valid and 2,000 test, 100 epochs, 5 seeds, batch 256: 54 s with 50
classes, 23 s with 9 classes, 19 s with projection_dim=512 (50 classes),
plus 4-5 s of compilation; under heavier load (~7) the 50-class case took
76-83 s. The cost is two [B, F] x [F, C] products per step and seed, so
it grows like N * F * C * epochs * seeds (one seed takes a fifth); batch
size barely matters (128..1024 within 20%). Memory: the features plus a
standardised copy, and with a projection [seeds, N, P] projected copies.

Fine-tuning. "Following the standard protocol of Devlin et al., we use the
contextual embeddings of the CLS token for fine-tuning. We use AdamW with
learning rate 1e-4. We perform 200 warmup steps and train on the downstream
tasks for 10 epochs." Our MLM token convention has no CLS token (words, MASK,
PAD), so head="cls" reads the first position's final hidden state (the
encoder is bidirectional, so it sees the whole sentence); head="mean" averages
over the real tokens. Our choices: the head is N(0, 0.02) with zero bias
(BERT's classifier init); the learning rate ramps linearly from lr/warmup to lr
over `warmup_steps` (as `el_jax.core.optim`) and then decays linearly to 0 at the
last step (BERT / Hugging Face `linear` schedule); AdamW weight decay 0.01 on
matrices and embeddings only (BERT excludes biases and LayerNorm); batch 32;
selection by valid accuracy after each epoch as for the probe. The model has
no dropout.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from el_jax.core.models import decoder
from el_jax.infra import progress

_STD_FLOOR = 1e-3  # relative to the mean train std over features (see module docstring)


# ----------------------------------------------------------------------------
# Input checks


def _as_features(name, x):
  x = np.asarray(x)
  if x.ndim != 2:
    raise ValueError(f"{name} must be a 2-D [N, F] feature array, got shape {x.shape}")
  if x.shape[0] == 0:
    raise ValueError(f"{name} is empty (0 examples)")
  if x.shape[1] == 0:
    raise ValueError(f"{name} has 0 features")
  if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
    raise ValueError(f"{name} must be real numbers, got dtype {x.dtype}")
  x = x.astype(np.float32, copy=False)
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{name} has non-finite entries (NaN or inf)")
  return x


def _as_labels(name, y, n, num_classes):
  y = np.asarray(y)
  if y.ndim != 1:
    raise ValueError(f"{name} must be a 1-D [N] label array, got shape {y.shape}")
  if y.shape[0] != n:
    raise ValueError(f"{name} has {y.shape[0]} labels but its features have {n} rows")
  if y.size and not np.issubdtype(y.dtype, np.integer):
    raise ValueError(f"{name} must hold integer class ids, got dtype {y.dtype}")
  if y.size and (y.min() < 0 or y.max() >= num_classes):
    bad = int(y[(y < 0) | (y >= num_classes)][0])
    raise ValueError(f"{name} has label {bad}, outside [0, num_classes={num_classes})")
  return y.astype(np.int32)


def _check_int(name, v, low):
  if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
    raise ValueError(f"{name}={v!r} must be an integer >= {low}")
  return int(v)


def _check_positive(name, v, allow_zero=False):
  try:
    v = float(v)
  except (TypeError, ValueError):
    raise ValueError(f"{name}={v!r} must be a number") from None
  if not (0 <= v if allow_zero else 0 < v) or not math.isfinite(v):
    raise ValueError(f"{name}={v} must be a finite number {'>=' if allow_zero else '>'} 0")
  return v


def _check_seeds(seeds):
  seeds = tuple(seeds) if not isinstance(seeds, (int, np.integer)) else (seeds,)
  if not seeds:
    raise ValueError("seeds is empty; give at least one seed")
  for s in seeds:
    if _check_int("seed", s, 0) >= 2 ** 32:
      raise ValueError(f"seed={s} must be < 2**32")
  if len(set(int(s) for s in seeds)) != len(seeds):
    raise ValueError(f"seeds {seeds} has duplicates")
  return tuple(int(s) for s in seeds)


def _summary(test_acc, valid_acc):
  test_acc, valid_acc = np.asarray(test_acc, np.float64), np.asarray(valid_acc, np.float64)
  n = test_acc.size
  std = (lambda a: float(a.std(ddof=1)) if n > 1 else float("nan"))
  return {"test_acc_mean": float(test_acc.mean()), "test_acc_std": std(test_acc),
          "valid_acc_mean": float(valid_acc.mean()), "valid_acc_std": std(valid_acc)}


def _model_cfg(graphdef, params):
  return nnx.merge(graphdef, params).cfg


def _check_tokens(name, tokens, segment_ids, cfg):
  tokens, segment_ids = np.asarray(tokens), np.asarray(segment_ids)
  if tokens.ndim != 2:
    raise ValueError(f"{name} tokens must be [N, T], got shape {tokens.shape}")
  if segment_ids.shape != tokens.shape:
    raise ValueError(f"{name} segment_ids has shape {segment_ids.shape}, tokens "
                     f"{tokens.shape}; they must match")
  if tokens.shape[0] == 0:
    raise ValueError(f"{name} is empty (0 examples)")
  for what, a in (("tokens", tokens), ("segment_ids", segment_ids)):
    if not np.issubdtype(a.dtype, np.integer):
      raise ValueError(f"{name} {what} must be integers, got dtype {a.dtype}")
  if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
    raise ValueError(f"{name} tokens must be in [0, model vocab_size={cfg.vocab_size}), got "
                     f"min {tokens.min()}, max {tokens.max()}")
  if tokens.shape[1] > cfg.max_len:
    raise ValueError(f"{name} has length T={tokens.shape[1]} > model max_len={cfg.max_len}")
  return tokens.astype(np.int32), segment_ids.astype(np.int32)


# ----------------------------------------------------------------------------
# Frozen features


@functools.lru_cache(maxsize=8)
def _encode_fn(graphdef, layer=None):
  def fn(params, tokens, segment_ids):
    h = decoder.features(graphdef, params, tokens, segment_ids, layer).astype(jnp.float32)
    h = h * (segment_ids > 0).astype(jnp.float32)[:, :, None]
    return h.reshape(h.shape[0], -1)
  return jax.jit(fn)


def encode(graphdef, params, tokens, segment_ids, batch_size=256, layer=None):
  """Frozen representation: [N, T * D] float32, all final hidden states concatenated.

  `decoder.features` (the transformer's after its last LayerNorm; the bilstm's 2H states) of
  every position, flattened position-major (row i = h[i, 0], h[i, 1], ...), zero where
  segment_ids == 0 (padding). Jitted, in batches of `batch_size` (the last one padded to the
  same shape, so one compilation serves all batches). `layer` (transformers only): the
  residual stream after that many blocks instead (0: the embeddings).
  """
  cfg = _model_cfg(graphdef, params)
  tokens, segment_ids = _check_tokens("encode:", tokens, segment_ids, cfg)
  batch_size = _check_int("batch_size", batch_size, 1)
  n, t = tokens.shape
  bs = min(batch_size, n)
  fn = _encode_fn(graphdef, layer)
  out = np.empty((n, t * cfg.feature_dim), np.float32)
  for lo in range(0, n, bs):
    tok, seg = tokens[lo:lo + bs], segment_ids[lo:lo + bs]
    m = tok.shape[0]
    if m < bs:
      tok = np.concatenate([tok, np.zeros((bs - m, t), np.int32)])
      seg = np.concatenate([seg, np.zeros((bs - m, t), np.int32)])
    out[lo:lo + m] = np.asarray(fn(params, tok, seg))[:m]
  return out


# ----------------------------------------------------------------------------
# Linear probe: pure pieces


def seed_keys(seed):
  """(init, shuffle, projection) PRNG keys of probe seed `seed`."""
  k = jax.random.split(jax.random.key(seed), 3)
  return k[0], k[1], k[2]


def random_projection(num_features, projection_dim, seed):
  """[F, P] float32 Gaussian projection of probe seed `seed` (N(0, 1/F) entries)."""
  return _projection(seed_keys(seed)[2], num_features, projection_dim)


def _projection(key, f, p):
  return jax.random.normal(key, (f, p), jnp.float32) / jnp.sqrt(jnp.float32(f))


def init_head(key, num_features, num_classes):
  """{"w": [C, F], "b": [C]}, U(-1/sqrt(F), 1/sqrt(F)) like PyTorch's nn.Linear.

  `w` is stored [C, F] (PyTorch's [out, in]): the weight gradient g^T x is then
  a [C, B] @ [B, F] product, which XLA:CPU runs 1.5-3x faster than the [F, C]
  layout's x^T g under `vmap` over seeds (measured on the 2-core CPU).
  """
  kw, kb = jax.random.split(key)
  bound = 1.0 / math.sqrt(num_features)
  return {"w": jax.random.uniform(kw, (num_classes, num_features), jnp.float32, -bound, bound),
          "b": jax.random.uniform(kb, (num_classes,), jnp.float32, -bound, bound)}


def probe_optimizer(lr=1e-3, weight_decay=0.0):
  """AdamW with a constant learning rate (PyTorch's betas and eps)."""
  return optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=weight_decay)


def head_logits(head, x):
  """[B, C] logits x w^T + b of a head {"w": [C, F], "b": [C]}."""
  return x @ head["w"].T + head["b"][None, :]


def probe_loss(head, x, y, weights):
  """Weighted mean cross-entropy of the linear head (weights 0 drop padding rows)."""
  ce = optax.softmax_cross_entropy_with_integer_labels(head_logits(head, x), y)
  return jnp.sum(ce * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def probe_train_step(tx, head, opt_state, x, y, weights):
  """One AdamW step on a minibatch: (head, opt_state, loss)."""
  loss, grads = jax.value_and_grad(probe_loss)(head, x, y, weights)
  updates, opt_state = tx.update(grads, opt_state, head)
  return optax.apply_updates(head, updates), opt_state, loss


def _accuracy(head, x, y):
  return jnp.mean((jnp.argmax(head_logits(head, x), -1) == y).astype(jnp.float32))


def _standardize(x_tr, others):
  mu = jnp.mean(x_tr, 0, keepdims=True)
  sd = jnp.std(x_tr, 0, keepdims=True)
  sd = jnp.maximum(sd, _STD_FLOOR * jnp.mean(sd) + 1e-12)
  return mu, sd, [(x - mu) / sd for x in (x_tr, *others)]


@functools.partial(jax.jit, static_argnames=("num_classes", "lr", "weight_decay", "epochs",
                                             "batch_size", "projection_dim", "standardize",
                                             "return_params", "test_curve"))
def _probe_run(x_tr, y_tr, x_va, y_va, x_te, y_te, seeds, *, num_classes, lr, weight_decay,
               epochs, batch_size, projection_dim, standardize, return_params, test_curve):
  n, f = x_tr.shape
  steps = -(-n // batch_size)
  pad = steps * batch_size - n
  mu = sd = None
  if standardize:
    mu, sd, (x_tr, x_va, x_te) = _standardize(x_tr, (x_va, x_te))
  tx = probe_optimizer(lr, weight_decay)
  weights = jnp.concatenate([jnp.ones((n,), jnp.float32), jnp.zeros((pad,), jnp.float32)])
  weights = weights.reshape(steps, batch_size)

  def one_seed(seed):
    k_init, k_shuf, k_proj = seed_keys(seed)
    xs_tr, xs_va, xs_te = x_tr, x_va, x_te
    proj = None
    if projection_dim:
      proj = _projection(k_proj, f, projection_dim)
      xs_tr, xs_va, xs_te = xs_tr @ proj, xs_va @ proj, xs_te @ proj
    head = init_head(k_init, xs_tr.shape[1], num_classes)
    opt_state = tx.init(head)

    def step(carry, inp):
      head, opt_state = carry
      idx, w = inp
      head, opt_state, loss = probe_train_step(tx, head, opt_state, xs_tr[idx], y_tr[idx], w)
      return (head, opt_state), loss * jnp.sum(w)

    def epoch(carry, e):
      head, opt_state, best = carry
      perm = jax.random.permutation(jax.random.fold_in(k_shuf, e), n)
      idx = jnp.concatenate([perm, jnp.zeros((pad,), perm.dtype)]).reshape(steps, batch_size)
      (head, opt_state), losses = jax.lax.scan(step, (head, opt_state), (idx, weights))
      va = _accuracy(head, xs_va, y_va)
      better = va > best["valid"]  # strict: ties keep the earlier epoch
      best = jax.tree.map(lambda new, old: jnp.where(better, new, old),
                          {"valid": va, "epoch": e + 1, "head": head}, best)
      curves = (jnp.sum(losses) / n, va)
      if test_curve:
        curves += (_accuracy(head, xs_te, y_te),)
      return (head, opt_state, best), curves

    best = {"valid": jnp.float32(-1.0), "epoch": jnp.int32(0), "head": head}
    (_, _, best), curves = jax.lax.scan(
        epoch, (head, opt_state, best), jnp.arange(epochs, dtype=jnp.int32))
    # Test accuracy of the selected (best-on-valid) head only.
    out = {"valid": best["valid"], "test": _accuracy(best["head"], xs_te, y_te),
           "epoch": best["epoch"], "train_loss": curves[0], "valid_curve": curves[1]}
    if test_curve:
      out["test_curve"] = curves[2]
    if return_params:
      out["head"] = best["head"]
      if proj is not None:
        out["projection"] = proj
    return out

  out = jax.vmap(one_seed)(seeds)
  if return_params and standardize:
    out["mean"], out["std"] = mu[0], sd[0]
  return out


WHITEN_REL_TOL = 1e-10  # eigenvalues of the train covariance kept, relative to the largest


def whitening(x_train, rel_tol=WHITEN_REL_TOL):
  """(mean [F], W [F, R]): PCA whitening fitted on the training features, in float64.

  (x - mean) @ W has identity covariance on the training split in the R directions whose
  covariance eigenvalue is above `rel_tol` times the largest (the others are dropped:
  constant features, or rounding noise of float32 features). A linear probe on whitened
  features sees every linear function of the features at the same scale, so it does not
  depend on how the model happens to scale its directions: trained models of the default HMM
  put all but ~1e-9 of their features' variance into the directions of the HMM's blocks, and
  a probe on standardised features saw only the block.
  """
  x = np.asarray(x_train, np.float64)
  mu = x.mean(0)
  xc = x - mu
  lam, v = np.linalg.eigh(xc.T @ xc / x.shape[0])
  keep = lam > rel_tol * max(lam.max(), 0.0)
  if not keep.any():
    raise ValueError("the training features are constant: nothing to whiten")
  return mu, v[:, keep] / np.sqrt(lam[keep])


def linear_probe(x_train, y_train, x_valid, y_valid, x_test, y_test, num_classes, *,
                 seeds=(0, 1, 2, 3, 4), lr=1e-3, epochs=100, batch_size=256, weight_decay=0.0,
                 projection_dim=None, standardize=True, whiten=False, return_params=False,
                 test_curve=False):
  """Linear softmax probe on frozen features, the paper's protocol (module docstring).

  Args:
    x_train, x_valid, x_test: [N_split, F] features (e.g. from `encode`).
    y_train, y_valid, y_test: [N_split] integer labels in [0, num_classes).
    num_classes: C >= 2.
    seeds: probe seeds (head init, minibatch order, projection), run in parallel.
    lr, epochs, batch_size, weight_decay: AdamW with a constant learning rate.
    projection_dim: None, or P: a fixed N(0, 1/F) projection [F, P] per seed.
    standardize: standardise features with the train split's statistics.
    whiten: instead, PCA-whiten them with the train split's covariance (`whitening`).
    return_params: also return the selected heads (and projections, statistics).
    test_curve: also compute the test accuracy after every epoch (for
      inspection only; ~5% slower). Otherwise test is evaluated once, on the
      selected head.

  Returns:
    dict with, per seed (lists in the order of `seeds`): "test_acc" (at the
    selected epoch), "valid_acc" (the best), "epoch" (the selected epoch,
    1..epochs), "train_loss" / "valid_curve" ([epochs] each), "test_curve"
    (with test_curve=True); and "test_acc_mean", "test_acc_std", "valid_acc_mean",
    "valid_acc_std" (sample std, ddof=1; NaN for one seed), "seeds",
    "num_features" (F or P), "epochs", "batch_size", "lr", "weight_decay".
    With return_params: "head" {"w": [S, C, F'], "b": [S, C]}, "projection"
    [S, F, P] (if any), "mean" / "std" [F] (if standardize), as NumPy arrays;
    the logits of raw features x are ((x - mean) / std) @ projection @ w^T + b, or with
    whiten ((x - mean) @ whitening) @ projection @ w^T + b ("whitening" [F, R]).
  """
  num_classes = _check_int("num_classes", num_classes, 2)
  x_train = _as_features("x_train", x_train)
  x_valid = _as_features("x_valid", x_valid)
  x_test = _as_features("x_test", x_test)
  f = x_train.shape[1]
  for name, x in (("x_valid", x_valid), ("x_test", x_test)):
    if x.shape[1] != f:
      raise ValueError(f"{name} has {x.shape[1]} features, x_train has {f}")
  y_train = _as_labels("y_train", y_train, x_train.shape[0], num_classes)
  y_valid = _as_labels("y_valid", y_valid, x_valid.shape[0], num_classes)
  y_test = _as_labels("y_test", y_test, x_test.shape[0], num_classes)
  seeds = _check_seeds(seeds)
  epochs = _check_int("epochs", epochs, 1)
  batch_size = min(_check_int("batch_size", batch_size, 1), x_train.shape[0])
  lr = _check_positive("lr", lr)
  weight_decay = _check_positive("weight_decay", weight_decay, allow_zero=True)
  if projection_dim is not None:
    projection_dim = _check_int("projection_dim", projection_dim, 1)
  white = None
  if whiten:
    white = whitening(x_train)
    x_train, x_valid, x_test = (((x - white[0]) @ white[1]).astype(np.float32)
                                for x in (x_train, x_valid, x_test))
    standardize = False
  out = _probe_run(x_train, y_train, x_valid, y_valid, x_test, y_test,
                   jnp.asarray(seeds, jnp.uint32), num_classes=num_classes, lr=lr,
                   weight_decay=weight_decay, epochs=epochs, batch_size=batch_size,
                   projection_dim=projection_dim, standardize=bool(standardize),
                   return_params=bool(return_params), test_curve=bool(test_curve))
  out = jax.device_get(out)
  res = {"test_acc": [float(a) for a in out["test"]],
         "valid_acc": [float(a) for a in out["valid"]],
         "epoch": [int(e) for e in out["epoch"]],
         "train_loss": np.asarray(out["train_loss"]), "valid_curve": np.asarray(out["valid_curve"]),
         "seeds": list(seeds),
         "num_features": projection_dim or x_train.shape[1], "epochs": epochs,
         "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay,
         "whiten": bool(whiten)}
  if test_curve:
    res["test_curve"] = np.asarray(out["test_curve"])
  res.update(_summary(res["test_acc"], res["valid_acc"]))
  if return_params:
    res["head"] = {k: np.asarray(v) for k, v in out["head"].items()}
    for k in ("projection", "mean", "std"):
      if k in out:
        res[k] = np.asarray(out[k])
    if white is not None:
      res["mean"], res["whitening"] = white
  return res


def feature_rank(x, rel_tol=1e-6, max_rows=2000):
  """Numerical rank of features [N, F]: the eigenvalues of the covariance of (at most the
  first `max_rows` rows of) the centred features above `rel_tol` times the largest, in
  float64. A collapsed representation shows here: trained models of the uniform HMM had
  rank 4 (their 5 blocks) out of 2,048 features, at float32 precision."""
  x = np.asarray(x, np.float64)[:max_rows]
  x = x - x.mean(0)
  s = np.linalg.svd(x, compute_uv=False) ** 2
  return int(np.sum(s > rel_tol * s.max())) if s.size and s.max() > 0 else 0


NORMALIZATIONS = ("standardize", "whiten")


def parse_grid(lrs, weight_decays, normalizations="standardize"):
  """The probe's hyperparameter grid from comma-separated strings (or sequences) of learning
  rates, weight decays and feature normalisations ("standardize" | "whiten"):
  [{"lr", "weight_decay", "whiten"}], normalisation outermost, then learning rate."""
  def items(name, v, cast):
    vals = [cast(str(x).strip()) for x in (v.split(",") if isinstance(v, str) else v)
            if str(x).strip()]
    if not vals:
      raise ValueError(f"{name} is empty; give at least one value")
    return vals

  def norm(x):
    if x not in NORMALIZATIONS:
      raise ValueError(f"probe normalisation {x!r}; allowed: {NORMALIZATIONS}")
    return x == "whiten"
  return [{"lr": lr, "weight_decay": wd, "whiten": w}
          for w in items("probe normalisations", normalizations, norm)
          for lr in items("probe lrs", lrs, float)
          for wd in items("probe weight decays", weight_decays, float)]


def linear_probe_selected(x_train, y_train, x_valid, y_valid, x_test, y_test, num_classes, *,
                          grid=({"lr": 1e-3, "weight_decay": 0.0},), **kwargs):
  """`linear_probe` at every setting of `grid`, the setting chosen on the valid split.

  Each setting (a dict of `linear_probe` keyword arguments, e.g. {"lr", "weight_decay"}) is
  trained with all the probe seeds; the one with the highest mean (over seeds) best-epoch
  valid accuracy is kept, the first in `grid` order on ties. Test accuracy takes no part in
  the choice: only the chosen setting's test accuracies are returned.

  Returns the chosen setting's `linear_probe` result plus "chosen" (its setting) and
  "selection" ([{**setting, "valid_acc_mean"}] for every setting, in `grid` order).
  """
  grid = [dict(g) for g in grid]
  if not grid:
    raise ValueError("grid is empty; give at least one setting")
  best, selection = None, []
  # Progress over the settings, named by the caller's `progress.label`, if it takes a while.
  for setting in progress.iterate(grid, total=len(grid), unit="setting"):
    clash = set(setting) & set(kwargs)
    if clash:
      raise ValueError(f"{sorted(clash)} are set both in the grid and as keyword arguments")
    r = linear_probe(x_train, y_train, x_valid, y_valid, x_test, y_test, num_classes,
                     **setting, **kwargs)
    selection.append({**setting, "valid_acc_mean": r["valid_acc_mean"]})
    if best is None or r["valid_acc_mean"] > best[1]["valid_acc_mean"]:
      best = (setting, r)
  setting, res = best
  return {**res, "chosen": setting, "selection": selection}


# ----------------------------------------------------------------------------
# Fine-tuning


HEADS = ("cls", "mean")


def ft_logits(graphdef, head_kind, params, tokens, segment_ids):
  """[B, C] logits of encoder + linear head; params = {"encoder": ..., "head": {"w", "b"}}."""
  h = decoder.features(graphdef, params["encoder"], tokens, segment_ids).astype(jnp.float32)
  if head_kind == "cls":
    z = h[:, 0]
  else:
    m = (segment_ids > 0).astype(jnp.float32)[:, :, None]
    z = jnp.sum(h * m, 1) / jnp.maximum(jnp.sum(m, 1), 1.0)
  return head_logits(params["head"], z)


def ft_train_step(graphdef, head_kind, tx, state, batch):
  """One AdamW step of encoder + head on a batch {tokens, segment_ids, labels, weights}.

  Returns (new_state, loss); `state` = {"params", "opt_state", "step"} (donated by the caller).
  """
  def objective(params):
    logits = ft_logits(graphdef, head_kind, params, batch["tokens"], batch["segment_ids"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
    w = batch["weights"]
    return jnp.sum(ce * w) / jnp.maximum(jnp.sum(w), 1.0)

  loss, grads = jax.value_and_grad(objective)(state["params"])
  updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
  params = optax.apply_updates(state["params"], updates)
  return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, loss


def ft_schedule(lr, warmup_steps, total_steps):
  """Linear warmup from lr/warmup to lr, then linear decay to 0 at `total_steps`."""
  decay = optax.linear_schedule(lr, 0.0, max(total_steps - warmup_steps, 1))
  if warmup_steps <= 0:
    return decay
  ramp = optax.linear_schedule(lr / warmup_steps, lr, warmup_steps)
  return optax.join_schedules([ramp, decay], [warmup_steps])


def ft_optimizer(lr, warmup_steps, total_steps, weight_decay):
  """AdamW over the schedule above; weight decay on arrays of rank >= 2 only."""
  return optax.adamw(ft_schedule(lr, warmup_steps, total_steps), b1=0.9, b2=0.999, eps=1e-8,
                     weight_decay=weight_decay,
                     mask=lambda p: jax.tree.map(lambda a: a.ndim >= 2, p))


def _as_split(name, split, cfg, num_classes):
  if hasattr(split, "tokens"):
    tokens, seg, labels = split.tokens, split.segment_ids, split.labels
  else:
    try:
      tokens, seg, labels = split
    except (TypeError, ValueError):
      raise ValueError(f"{name} must be a downstream.Split or a (tokens, segment_ids, labels) "
                       f"tuple") from None
  tokens, seg = _check_tokens(name, tokens, seg, cfg)
  labels = _as_labels(f"{name} labels", labels, tokens.shape[0], num_classes)
  return tokens, seg, labels


def _pad_rows(a, rows):
  if a.shape[0] == rows:
    return a
  return np.concatenate([a, np.zeros((rows - a.shape[0],) + a.shape[1:], a.dtype)])


def fine_tune(graphdef, params, train, valid, test, num_classes, *, seeds=(0, 1, 2, 3, 4),
              lr=1e-4, warmup_steps=200, epochs=10, batch_size=32, head="cls",
              weight_decay=0.01, eval_batch_size=256):
  """Full fine-tuning of the encoder plus a linear head, the paper's protocol.

  Args:
    graphdef, params: the pre-trained encoder (`decoder.init` / training);
      `params` is not modified (each seed trains a copy).
    train, valid, test: `downstream.Split`s or (tokens, segment_ids, labels).
    num_classes: C >= 2.
    seeds: each fixes the head's init (`jax.random.key(seed)`) and the
      minibatch orders (NumPy, `default_rng([seed, epoch])`); run one after another.
    lr, warmup_steps, epochs, batch_size: AdamW, linear warmup then linear decay.
    head: "cls" (first position) or "mean" (mean over real tokens).
    weight_decay: AdamW decoupled decay on rank >= 2 parameters.
    eval_batch_size: batch for the per-epoch valid / test accuracies.

  Returns:
    dict like `linear_probe`'s: per seed "test_acc", "valid_acc", "epoch",
    "train_loss" / "valid_curve" / "test_curve" [epochs]; means and sample
    stds over seeds; "seeds", "steps" (optimizer steps per seed).
  """
  if head not in HEADS:
    raise ValueError(f"head={head!r}; allowed: {HEADS}")
  num_classes = _check_int("num_classes", num_classes, 2)
  cfg = _model_cfg(graphdef, params)
  tr = _as_split("train", train, cfg, num_classes)
  va = _as_split("valid", valid, cfg, num_classes)
  te = _as_split("test", test, cfg, num_classes)
  seeds = _check_seeds(seeds)
  epochs = _check_int("epochs", epochs, 1)
  warmup_steps = _check_int("warmup_steps", warmup_steps, 0)
  lr = _check_positive("lr", lr)
  weight_decay = _check_positive("weight_decay", weight_decay, allow_zero=True)
  eval_bs = _check_int("eval_batch_size", eval_batch_size, 1)
  n = tr[0].shape[0]
  bs = min(_check_int("batch_size", batch_size, 1), n)
  steps_per_epoch = -(-n // bs)
  total = steps_per_epoch * epochs
  tx = ft_optimizer(lr, warmup_steps, total, weight_decay)
  d = cfg.feature_dim

  def init_state(enc, key):
    w = 0.02 * jax.random.normal(key, (num_classes, d), jnp.float32)
    p = {"encoder": jax.tree.map(jnp.copy, enc),
         "head": {"w": w, "b": jnp.zeros((num_classes,), jnp.float32)}}
    return {"params": p, "opt_state": tx.init(p), "step": jnp.zeros((), jnp.int32)}

  init = jax.jit(init_state)
  step = jax.jit(functools.partial(ft_train_step, graphdef, head, tx), donate_argnums=0)
  predict = jax.jit(lambda p, t, s: jnp.argmax(ft_logits(graphdef, head, p, t, s), -1))

  def accuracy(p, split):
    tokens, seg, labels = split
    m = tokens.shape[0]
    b = min(eval_bs, m)
    correct = 0
    for lo in range(0, m, b):
      k = min(b, m - lo)
      pred = np.asarray(predict(p, _pad_rows(tokens[lo:lo + b], b), _pad_rows(seg[lo:lo + b], b)))
      correct += int(np.sum(pred[:k] == labels[lo:lo + k]))
    return correct / m

  per_seed = []
  bar = progress.Bar(len(seeds) * epochs, progress.current_label("fine-tuning"), unit="epoch",
                     delay_s=progress.PHASE_DELAY_S)
  for seed in seeds:
    state = init(params, jax.random.key(seed))
    losses, va_c, te_c = [], [], []
    for e in range(epochs):
      perm = np.random.default_rng([seed, e]).permutation(n)
      tot = jnp.zeros((), jnp.float32)
      for i in range(steps_per_epoch):
        idx = perm[i * bs:(i + 1) * bs]
        k = idx.size
        batch = {"tokens": _pad_rows(tr[0][idx], bs), "segment_ids": _pad_rows(tr[1][idx], bs),
                 "labels": _pad_rows(tr[2][idx], bs),
                 "weights": _pad_rows(np.ones((k,), np.float32), bs)}
        state, loss = step(state, batch)
        tot = tot + loss * k
      losses.append(float(tot) / n)
      va_c.append(accuracy(state["params"], va))
      te_c.append(accuracy(state["params"], te))
      bar.update(1)
    best = int(np.argmax(va_c))  # first epoch with the highest valid accuracy
    per_seed.append((te_c[best], va_c[best], best + 1, losses, va_c, te_c))
  bar.close()
  res = {"test_acc": [p[0] for p in per_seed], "valid_acc": [p[1] for p in per_seed],
         "epoch": [p[2] for p in per_seed],
         "train_loss": np.array([p[3] for p in per_seed]),
         "valid_curve": np.array([p[4] for p in per_seed]),
         "test_curve": np.array([p[5] for p in per_seed]),
         "seeds": list(seeds), "steps": total, "epochs": epochs, "batch_size": bs, "lr": lr,
         "warmup_steps": warmup_steps, "weight_decay": weight_decay, "head": head}
  res.update(_summary(res["test_acc"], res["valid_acc"]))
  return res
