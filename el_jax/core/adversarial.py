r"""Adversarial pretraining of seed 002 (Sec. 3, Table 1; App. A.4): MLM minus a transfer term.

  cfg = config_lib.get_config("pcfg_mlm", "cpu", {"adversarial.enabled": True,
                                              "adversarial.weight": 0.3})
  runner.run_or_reuse(cfg, "runs/adv")   # the generic loop; metrics gain adv_* fields

The paper pre-trains a model "with an additional meta-learning objective that
intends to mess up the downstream performance while keeping the same
pre-training loss" (inspired by Liu et al. 2020, MeRLin, and Raghu et al.
2021): each step samples two disjoint subsets D1, D2 of the downstream
*training* set, fits the linear head on D1 "with the closed form solution as
shown in Liu et al.", and updates the features to *maximise* that head's loss
on D2. The authors' public code (Liuhong99/implicitbiasmlmcode) does not
contain this algorithm, so what the text leaves open is our choice:

  * features: those the linear probe reads (`el_jax.core.probe.encode`): the final
    hidden states (after the last LayerNorm) of every position, zero at
    padding, concatenated, [N, T * D]; raw (the probe standardises its
    features, the adversary does not); no bias column.
  * head: ridge regression on one-hot labels, W = (X1^T X1 + ridge I)^-1 X1^T Y1,
    solved by Cholesky in the smaller of the primal ([F, F]) and dual
    ([n1, n1]: W = X1^T (X1 X1^T + ridge I)^-1 Y1) forms; differentiable, so
    the gradient flows through the solve into the features (MeRLin's closed
    form is this ridge regression with the squared loss).
  * D2 loss: the squared loss of the head's predictions, the loss the head is
    fitted with: mean over D2 rows of ||x W - y||^2 (summed over classes).
  * objective: total = MLM loss - weight * D2 loss, minimised by the config's
    optimizer (one gradient: the MLM gradient plus the adversarial term's,
    before clipping).
  * subsets: D1 and D2 are the first d1_size and the next d2_size indices of a
    permutation of the downstream training set drawn from
    fold_in(key(adversarial.data_seed), step) inside the step, so a resumed
    run sees the subsets an uninterrupted one would; the same sequence serves
    every model seed.
  * the downstream training set: `el_jax.core.data.downstream.pcfg_task(task,
    num_train=adversarial.num_train, seed=adversarial.data_seed)` (on the
    HMM, `hmm_task(int(task), ...)`: task-k, the k-th hidden state), the split
    a probe with the same arguments trains on (its train split does not
    depend on the valid / test sizes).

Hook: the MLM task's `step_fn` (`el_jax.core.tasks.mlm`) is `make_step_fn(task)` instead of
`el_jax.core.step.train_step` when `config.adversarial.enabled`. The step calls
`step.train_step` unchanged with the optimizer wrapped so that the
adversarial gradient is added to the MLM gradient; its metrics are
train_step's (`loss`, `grad_norm`: the MLM part) plus `adv_d2_loss`,
`adv_d1_loss` (the head's fit on D1), `adv_grad_norm` and `adv_objective`
(loss - weight * adv_d2_loss).
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from el_jax.core.data import downstream
from el_jax.core.models import decoder
from el_jax.core import step as step_lib

TASKS = ("A", "B")  # the PCFG downstream tasks of Table 1
LANGUAGES = ("pcfg", "hmm")  # languages with downstream tasks (the HMM's: task-k, k = 1..length)


def tasks_of(data):
  """The downstream tasks the term can use on `config.data` (() for a language without)."""
  if data.get("language") == "pcfg":
    return TASKS
  if data.get("language") == "hmm":
    return tuple(str(k) for k in range(1, int(data.get("length", 16)) + 1))
  return ()


# ----------------------------------------------------------------------------
# Config


def enabled(config):
  """Whether `config` asks for adversarial pretraining (False without the block)."""
  return "adversarial" in config and config.adversarial.get("enabled", False) is True


def _int(name, v, low):
  if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
    raise ValueError(f"adversarial.{name}={v!r} must be an integer >= {low}")
  return int(v)


def _number(name, v, positive):
  try:
    f = float(v)
  except (TypeError, ValueError):
    raise ValueError(f"adversarial.{name}={v!r} must be a number") from None
  if isinstance(v, bool) or not math.isfinite(f) or (f <= 0 if positive else f < 0):
    raise ValueError(f"adversarial.{name}={v!r} must be a finite number "
                     f"{'> 0' if positive else '>= 0'}")
  return f


def validate_config(config):
  """ValueError naming the field and what is allowed (a config without the block passes)."""
  if "adversarial" not in config:
    return
  a = config.adversarial
  if not isinstance(a.get("enabled"), bool):
    raise ValueError(f"adversarial.enabled={a.get('enabled')!r} must be True or False")
  _number("weight", a.get("weight"), positive=False)
  _number("ridge", a.get("ridge"), positive=True)
  lang = config.data.get("language")
  if a.enabled and lang not in LANGUAGES:
    raise ValueError(f"adversarial.enabled needs data.language 'pcfg' or 'hmm' (the languages "
                     f"with downstream tasks), got {lang!r}")
  allowed = tasks_of(config.data)
  # The HMM's tasks depend on data.length: checked only where the term runs.
  if allowed and (a.enabled or lang == "pcfg") and a.get("task") not in allowed:
    shown = (f"{allowed} (the PCFG downstream tasks)" if lang == "pcfg" else
             f"'1'..'{allowed[-1]}' (HMM task-k: the k-th hidden state, k <= data.length)")
    raise ValueError(f"adversarial.task={a.get('task')!r}; allowed for data.language={lang!r}: "
                     f"{shown}")
  d1, d2 = _int("d1_size", a.get("d1_size"), 1), _int("d2_size", a.get("d2_size"), 1)
  n = _int("num_train", a.get("num_train"), 2)
  _int("data_seed", a.get("data_seed"), 0)
  if d1 + d2 > n:
    raise ValueError(f"adversarial.d1_size + d2_size = {d1} + {d2} = {d1 + d2} exceeds the "
                     f"downstream training set (adversarial.num_train={n}); D1 and D2 are "
                     f"disjoint subsets of it")


# ----------------------------------------------------------------------------
# Pure pieces


def features(graphdef, params, tokens_BxT, segment_ids_BxT):
  """[B, T * D] float32: the probe's representation (`el_jax.core.probe.encode`), inside jit."""
  h_BxTxD = decoder.features(graphdef, params, tokens_BxT, segment_ids_BxT).astype(jnp.float32)
  h_BxTxD = h_BxTxD * (segment_ids_BxT > 0).astype(jnp.float32)[:, :, None]
  return h_BxTxD.reshape(h_BxTxD.shape[0], -1)


def ridge_head(x_NxF, y_NxC, ridge):
  """[F, C] W = (X^T X + ridge I)^-1 X^T Y, by Cholesky in the smaller form.

  N < F: the dual W = X^T (X X^T + ridge I)^-1 Y (an [N, N] solve); else the
  primal [F, F] solve. Both are the same matrix (push-through identity); with
  ridge = 0 the dual is the minimum-norm interpolant and the primal ordinary
  least squares (each needs its Gram matrix to be non-singular).
  """
  n, f = x_NxF.shape
  if n < f:
    gram = x_NxF @ x_NxF.T + ridge * jnp.eye(n, dtype=x_NxF.dtype)
    alpha_NxC = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(gram), y_NxC)
    return x_NxF.T @ alpha_NxC
  gram = x_NxF.T @ x_NxF + ridge * jnp.eye(f, dtype=x_NxF.dtype)
  return jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(gram), x_NxF.T @ y_NxC)


def squared_loss(pred_NxC, y_NxC):
  """Mean over rows of the squared error summed over classes."""
  return jnp.mean(jnp.sum(jnp.square(pred_NxC - y_NxC), axis=-1))


def head_losses(x1, y1, x2, y2, ridge):
  """(D2 loss, D1 loss) of the ridge head fitted on (x1, y1) (one-hot labels)."""
  w_FxC = ridge_head(x1, y1, ridge)
  return squared_loss(x2 @ w_FxC, y2), squared_loss(x1 @ w_FxC, y1)


def draw_subsets(key, n, d1, d2):
  """Disjoint index sets ([d1], [d2]) of range(n): the start of one random permutation."""
  perm = jax.random.permutation(key, n)
  return perm[:d1], perm[d1:d1 + d2]


def adversarial_term(graphdef, params, data, idx1, idx2, *, weight, ridge):
  """(-weight * D2 loss, {"adv_d2_loss", "adv_d1_loss"}) of the head fitted on D1 = idx1.

  `data`: {"tokens" [N, T], "segment_ids" [N, T], "onehot" [N, C]} of the
  downstream training set. Minimising the returned value raises the D2 loss.
  """
  idx = jnp.concatenate([idx1, idx2])
  x = features(graphdef, params, data["tokens"][idx], data["segment_ids"][idx])
  y = data["onehot"][idx]
  d1 = idx1.shape[0]
  d2_loss, d1_loss = head_losses(x[:d1], y[:d1], x[d1:], y[d1:], ridge)
  return -weight * d2_loss, {"adv_d2_loss": d2_loss, "adv_d1_loss": d1_loss}


def _add_to_gradient(tx, extra_grads):
  """`tx` with `extra_grads` added to the gradient it receives (same state)."""
  def update(updates, state, params=None, **kw):
    return tx.update(jax.tree.map(jnp.add, updates, extra_grads), state, params, **kw)
  return optax.GradientTransformation(tx.init, update)


def adversarial_train_step(graphdef, loss_fn, tx, groups, state, batch, positions=None,
                           reduce_fn=None, *, data, key, d1_size, d2_size, weight, ridge):
  """`step.train_step` on MLM loss - weight * D2 loss (module docstring); same signature
  once the keyword arguments are bound, same state, metrics plus the adv_* ones."""
  n = data["tokens"].shape[0]
  idx1, idx2 = draw_subsets(jax.random.fold_in(key, state["step"]), n, d1_size, d2_size)
  term = functools.partial(adversarial_term, graphdef, data=data, idx1=idx1, idx2=idx2,
                           weight=weight, ridge=ridge)
  (value, aux), g_adv = jax.value_and_grad(term, has_aux=True)(state["params"])
  new_state, metrics = step_lib.train_step(graphdef, loss_fn, _add_to_gradient(tx, g_adv), groups,
                                        state, batch, positions, reduce_fn=reduce_fn)
  metrics = dict(metrics)
  metrics.update(aux)
  metrics["adv_grad_norm"] = optax.tree.norm(g_adv)
  metrics["adv_objective"] = metrics["loss"] + value
  return new_state, metrics


# ----------------------------------------------------------------------------
# From a config


def downstream_data(config, language, seq_len, num_valid=1, num_test=1, cache=False):
  """The downstream task of `config.adversarial` (`downstream.pcfg_task`, or on the HMM
  `downstream.hmm_task` of the hidden state at position int(task)); its train split is the
  adversary's training set, whatever `num_valid` / `num_test`."""
  a = config.adversarial
  kw = dict(num_train=a.num_train, num_valid=num_valid, num_test=num_test, seed=a.data_seed,
            cache=cache)
  if config.data.language == "hmm":
    return downstream.hmm_task(language, int(a.task), length=int(config.data.length),
                               seq_len=seq_len, **kw)
  return downstream.pcfg_task(language, a.task, seq_len=seq_len, **kw)


def make_step_fn(task):
  """`adversarial_train_step` bound to the MLM `task`'s config and downstream training set."""
  a = task.config.adversarial
  ds = downstream_data(task.config, task.language, task.context_len)
  tr = ds.train
  data = {"tokens": jnp.asarray(tr.tokens), "segment_ids": jnp.asarray(tr.segment_ids),
          "onehot": jnp.asarray(np.eye(ds.num_classes, dtype=np.float32)[tr.labels])}
  return functools.partial(adversarial_train_step, data=data,
                           key=jax.random.key(int(a.data_seed)), d1_size=int(a.d1_size),
                           d2_size=int(a.d2_size), weight=float(a.weight), ridge=float(a.ridge))
