"""Copy-task training: config -> jitted data-parallel training -> metrics, checkpoints, plots.

`train_and_evaluate(config, workdir)` trains `config.seeds` model
initialisations on one fixed dataset. Layout of `workdir`:

  metrics.jsonl          one JSON row per log / eval / flatness event (field `seed`)
  summary.json           final EM / CL per split x group, per seed and aggregated
  seed_<s>/checkpoints/  orbax checkpoints (automatic resume)
  seed_<s>/final.json    final evaluation of that seed (a finished seed is skipped on re-run)
  *.png                  plots

The train step is a pure module-level function over a state pytree
(params, optimizer state, step), jitted with the state donated, params
replicated and the batch sharded over the `data` axis of a device mesh.
"""
import functools
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from el_jax import losses
from el_jax import optim
from el_jax.data import copy_task
from el_jax.models import decoder

SPLITS = ("train", "test")
GROUPS = ("easy", "hard")


# ----------------------------------------------------------------------------
# Config -> objects


def model_config(config, vocab_size, context_len):
  m = config.model
  return decoder.preset(
      m.preset, vocab_size=vocab_size, num_layers=m.num_layers, num_heads=m.num_heads,
      embed_dim=m.embed_dim, mlp_dim=m.mlp_dim or 4 * m.embed_dim, max_len=context_len,
      doc_mask=m.doc_mask, dtype=m.dtype)


def task_spec(config):
  d = config.data
  return copy_task.CopyTaskSpec(seq_len=d.seq_len, pad_len=d.pad_len, p_easy=d.p_easy,
                                num_letters=d.num_letters)


@functools.lru_cache(maxsize=4)
def _datasets(spec, num_train, num_test, seed):
  return copy_task.make_datasets(spec, num_train=num_train, num_test=num_test, seed=seed)


class Setup:
  """Everything derived from the config once: data, shapes, model, optimizer, mesh."""

  def __init__(self, config):
    self.config = config
    self.spec = task_spec(config)
    d, t = config.data, config.train
    self.k = copy_task.strings_per_context(self.spec, d.context_len)
    if t.batch_strings % self.k:
      raise ValueError(f"train.batch_strings={t.batch_strings} is not a multiple of the "
                       f"{self.k} strings packed per context (data.context_len={d.context_len})")
    self.contexts_per_batch = t.batch_strings // self.k
    if t.num_steps < 1:
      raise ValueError(f"train.num_steps={t.num_steps} must be >= 1")
    self.train, self.test = _datasets(self.spec, d.num_train, d.num_test, d.data_seed)
    if d.num_train < t.batch_strings:
      raise ValueError(f"data.num_train={d.num_train} < train.batch_strings={t.batch_strings}")
    self.steps_per_epoch = d.num_train // t.batch_strings
    self.model_cfg = model_config(config, self.spec.vocab_size, d.context_len)
    self.loss_fn = losses.get_loss_from_config(config.loss)
    self.tx, self.schedule = optim.make_optimizer(config.optim, t.num_steps)
    self.mesh = make_mesh(config.get("num_devices", 0))
    n = self.mesh.devices.size
    if self.contexts_per_batch % n:
      raise ValueError(f"{self.contexts_per_batch} contexts per batch (train.batch_strings="
                       f"{t.batch_strings} / {self.k} strings per context) cannot be split "
                       f"over {n} devices; use a multiple of {n}")
    self.loss_mask_T = copy_task.loss_mask_for_context(self.spec, self.k)
    # The positions any loss mask can select (static): the train step computes
    # logits and losses only there (see `train_step`'s `positions`).
    self.scored_positions = np.flatnonzero(self.loss_mask_T).astype(np.int32)
    self.segment_T = np.repeat(np.arange(self.k, dtype=np.int32), self.spec.string_len)

  def batch(self, seed, step):
    """The training batch of `step`: a deterministic function of (data seed, model seed, step)."""
    epoch, i = divmod(step, self.steps_per_epoch)
    order_seed = 100_003 * self.config.data.data_seed + seed  # one order stream per (data, model) seed
    order = copy_task.epoch_order(self.train.tokens.shape[0], order_seed, epoch)
    bs = self.config.train.batch_strings
    idx = order[i * bs:(i + 1) * bs]
    return self.make_batch(self.train.tokens[idx], self.train.easy[idx])

  def make_batch(self, tokens_NxS, easy_N, valid_N=None):
    ctx_CxT, valid_CxK = copy_task.pack(tokens_NxS, self.k)
    c = ctx_CxT.shape[0]
    easy_CxK = copy_task.pack(easy_N[:, None].astype(np.int32), self.k)[0].astype(bool)
    if valid_N is not None:
      valid_CxK &= copy_task.pack(valid_N[:, None].astype(np.int32), self.k)[0].astype(bool)
    slot_mask = np.repeat(valid_CxK, self.spec.string_len, axis=1).astype(np.float32)
    easy_T = np.repeat(easy_CxK, self.spec.string_len, axis=1).astype(np.float32)
    mask = self.loss_mask_T[None] * slot_mask
    return {
        "inputs": ctx_CxT,
        "targets": np.roll(ctx_CxT, -1, axis=1),
        "loss_mask": mask,
        "easy_mask": mask * easy_T,
        "hard_mask": mask * (1.0 - easy_T),
        "segment_ids": np.broadcast_to(self.segment_T, (c, self.segment_T.size)).copy(),
    }

  def eval_sets(self):
    """(split name, dataset) pairs evaluated at every eval step."""
    return (("train", self.train), ("test", self.test))

  def decode_fn(self, graphdef):
    """f(params, contexts, segment_ids) -> greedy answers; `Trainer` jits it."""
    return functools.partial(greedy_answers, graphdef, self.spec, self.k)

  def summary_fields(self):
    """Task-specific entries of summary.json."""
    return {}

  def write_plots(self, rows, workdir):
    from el_jax import plots  # matplotlib only when training for real
    plots.plot_loss_groups({self.config.loss.name: rows}, os.path.join(workdir, "loss_easy_hard.png"))
    plots.plot_accuracy(rows, os.path.join(workdir, "accuracy.png"))

  def evaluate(self, trainer, params, dataset):
    """EM and CL accuracy by greedy decoding, per group; returns a flat dict."""
    st = self
    n = dataset.tokens.shape[0]
    per_call = max(st.config.train.eval_batch_contexts, 1) * st.k
    ndev = st.mesh.devices.size
    per_call = -(-per_call // (st.k * ndev)) * st.k * ndev  # whole contexts per device
    preds = []
    for lo in range(0, n, per_call):
      toks = dataset.tokens[lo:lo + per_call]
      m = toks.shape[0]
      valid = np.ones(per_call, bool)
      if m < per_call:  # pad the last call with copies, excluded from the metrics
        toks = np.concatenate([toks, np.repeat(toks[:1], per_call - m, axis=0)])
        valid[m:] = False
      ctx, _ = copy_task.pack(toks, st.k)
      seg = np.broadcast_to(st.segment_T, ctx.shape).copy()
      p = np.asarray(trainer.decode(params, *jax.device_put((ctx, seg), trainer.data_sharding)))
      preds.append(p.reshape(-1, st.spec.seq_len)[:m])
    pred_NxL = np.concatenate(preds)
    ans = copy_task.answer_positions(st.spec)
    true_NxL = dataset.tokens[:, ans]
    correct = pred_NxL == true_NxL
    out = {}
    for g, sel in (("easy", dataset.easy), ("hard", ~dataset.easy), ("all", np.ones(n, bool))):
      c = correct[sel]
      out[f"em_{g}"] = float(c.all(axis=1).mean()) if c.size else float("nan")
      out[f"cl_{g}"] = float(c.mean()) if c.size else float("nan")
      out[f"n_{g}"] = int(sel.sum())
    return out


def make_mesh(num_devices=0):
  """1-D `data` mesh over the first `num_devices` local devices (0 = all)."""
  devs = jax.devices()
  n = num_devices or len(devs)
  if n > len(devs):
    raise ValueError(f"num_devices={n} but only {len(devs)} devices are visible")
  return jax.make_mesh((n,), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=devs[:n])


# ----------------------------------------------------------------------------
# Pure functions (module level so tests can call them un-jitted)


def init_state(model_cfg, tx, seed):
  _, params = decoder.init(model_cfg, seed)
  return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}


def _masked_mean(x, m):
  return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def train_step(graphdef, loss_fn, tx, state, batch, positions=None):
  """One optimizer step. Returns (new_state, metrics).

  `positions` (optional, static int array): the only positions where any of
  the batch's masks (`loss_mask`, `easy_mask`, `hard_mask`) can be nonzero.
  Logits, losses and metrics are then computed there only (the model skips
  the last block's queries and MLP and the unembedding elsewhere); the result
  equals that of `positions=None` up to float rounding. `Trainer` passes
  `Setup.scored_positions`.
  """
  if positions is not None:
    batch = dict(batch)
    for key in ("targets", "loss_mask", "easy_mask", "hard_mask"):
      batch[key] = batch[key][:, positions]

  def objective(params):
    logits = decoder.apply(graphdef, params, batch["inputs"], batch["segment_ids"], positions)
    per_tok = loss_fn(logits, batch["targets"])
    return _masked_mean(per_tok, batch["loss_mask"]), (logits, per_tok)

  (loss, (logits, per_tok)), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
  updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
  params = optax.apply_updates(state["params"], updates)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
  stats = losses.margin_stats(logits, batch["targets"], batch["loss_mask"])
  metrics = {
      "loss": loss,
      "loss_easy": _masked_mean(per_tok, batch["easy_mask"]),
      "loss_hard": _masked_mean(per_tok, batch["hard_mask"]),
      "ce": _masked_mean(ce, batch["loss_mask"]),
      "ce_easy": _masked_mean(ce, batch["easy_mask"]),
      "ce_hard": _masked_mean(ce, batch["hard_mask"]),
      "margin_mean": stats["margin_mean"],
      "margin_min": stats["margin_min"],
      "fitted_frac": stats["fitted_frac"],
      "n_easy": jnp.sum(batch["easy_mask"]),
      "n_hard": jnp.sum(batch["hard_mask"]),
      "grad_norm": optax.global_norm(grads),
      "update_norm": optax.global_norm(updates),
      "param_norm": optax.global_norm(params),
  }
  new_state = {"params": params, "opt_state": opt_state, "step": state["step"] + 1}
  return new_state, metrics


def greedy_answers(graphdef, spec, k, params, contexts_CxT, segment_CxT):
  """Greedy autoregressive decoding of every answer in a packed context.

  Pass j predicts answer token j of all k strings at once from a context
  whose answer tokens < j are the model's own earlier predictions (later
  answer tokens cannot influence the prediction: the model is causal).
  Earlier strings in the context therefore also carry predicted answers for
  positions < j; strings are independent, so this leaks nothing.
  Returns predictions [C, k, L_c].
  """
  s, a0, lc = spec.string_len, spec.answer_start, spec.seq_len
  starts = jnp.arange(k) * s + a0  # first answer token of each slot
  ctx = contexts_CxT
  preds = []
  for j in range(lc):
    logits = decoder.apply(graphdef, params, ctx, segment_CxT)
    q = starts + j - 1  # positions whose next token is answer token j
    pred_CxK = jnp.argmax(logits[:, q, :], axis=-1).astype(ctx.dtype)
    ctx = ctx.at[:, starts + j].set(pred_CxK)
    preds.append(pred_CxK)
  return jnp.stack(preds, axis=-1)


# ----------------------------------------------------------------------------
# Host-side loop


class Trainer:
  """Jitted functions for one Setup (shared by all seeds)."""

  def __init__(self, setup: Setup, score_all_positions=False):
    """`score_all_positions=True` computes the logits at every position in the
    train step (same results up to float rounding, slower; for benchmarks)."""
    self.setup = setup
    mesh = setup.mesh
    self.repl = NamedSharding(mesh, P())
    self.data_sharding = NamedSharding(mesh, P("data"))
    self.graphdef, _ = decoder.init(setup.model_cfg, 0)
    abstract = jax.eval_shape(functools.partial(init_state, setup.model_cfg, setup.tx), 0)
    self.state_sharding = jax.tree.map(lambda _: self.repl, abstract)
    self.abstract_state = abstract
    self._init = jax.jit(functools.partial(init_state, setup.model_cfg, setup.tx),
                         out_shardings=self.state_sharding)
    positions = None if score_all_positions else setup.scored_positions
    self.step = jax.jit(functools.partial(train_step, self.graphdef, setup.loss_fn, setup.tx,
                                          positions=positions),
                        in_shardings=(self.state_sharding, self.data_sharding),
                        out_shardings=(self.state_sharding, self.repl), donate_argnums=0)
    # Inputs arrive sharded over `data` (see the setups' `evaluate`), params replicated.
    self.decode = jax.jit(setup.decode_fn(self.graphdef))

  def init(self, seed):
    return self._init(seed)

  def put_batch(self, batch):
    return jax.device_put(batch, self.data_sharding)

  def evaluate(self, params, dataset):
    """The task's evaluation of `params` on `dataset` (a flat dict of floats)."""
    return self.setup.evaluate(self, params, dataset)


def _to_float(tree):
  return {k: float(v) for k, v in jax.device_get(tree).items()}


class MetricsWriter:
  """Appends JSON rows to metrics.jsonl; can drop rows past a resume point."""

  def __init__(self, path):
    self.path = path

  def write(self, row):
    with open(self.path, "a") as f:
      f.write(json.dumps(row) + "\n")

  def rows(self):
    if not os.path.exists(self.path):
      return []
    out = []
    with open(self.path) as f:
      for i, line in enumerate(f):
        if line.strip():
          try:
            out.append(json.loads(line))
          except json.JSONDecodeError as e:
            raise ValueError(f"{self.path}:{i + 1}: malformed metrics row ({e})") from None
    return out

  def truncate(self, seed, after_step):
    """Drops rows of `seed` logged after `after_step` (they will be recomputed)."""
    rows = self.rows()
    keep = [r for r in rows if not (r.get("seed") == seed and r.get("step", -1) > after_step)]
    if len(keep) != len(rows):
      tmp = self.path + ".tmp"
      with open(tmp, "w") as f:
        for r in keep:
          f.write(json.dumps(r) + "\n")
      os.replace(tmp, self.path)


def _checkpoint_manager(path, every):
  options = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=max(every, 1),
                                         enable_async_checkpointing=False, create=True)
  return ocp.CheckpointManager(os.path.abspath(path), options=options)


def restore_latest(mngr, abstract_state, state_sharding):
  """Restores the newest checkpoint, or returns None if there is none."""
  step = mngr.latest_step()
  if step is None:
    return None
  target = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract_state, state_sharding)
  try:
    return mngr.restore(step, args=ocp.args.StandardRestore(target))
  except Exception as e:  # orbax raises many types for damaged files
    raise RuntimeError(
        f"checkpoint {mngr.directory}/{step} could not be restored ({type(e).__name__}: "
        f"{str(e).splitlines()[0] if str(e) else ''}). It is corrupt or from a different "
        f"config; move it away to start this seed afresh (nothing was deleted).") from None


def train_seed(trainer: Trainer, seed, workdir, writer, flat_hook=None):
  """Trains one seed to completion (resuming if possible); returns its final evaluation."""
  st = trainer.setup
  cfg = st.config
  tcfg = cfg.train
  sdir = os.path.join(workdir, f"seed_{seed}")
  final_path = os.path.join(sdir, "final.json")
  if os.path.exists(final_path):
    with open(final_path) as f:
      return json.load(f)
  os.makedirs(sdir, exist_ok=True)
  mngr = _checkpoint_manager(os.path.join(sdir, "checkpoints"), tcfg.checkpoint_every)
  state = restore_latest(mngr, trainer.abstract_state, trainer.state_sharding)
  if state is None:
    state = trainer.init(seed)
    start = 0
  else:
    start = int(state["step"])
  # Rows logged past the resume point (all of them when starting afresh) are recomputed.
  writer.truncate(seed, start if start else -1)
  stop = tcfg.num_steps if not tcfg.get("stop_at_step", 0) else min(tcfg.stop_at_step, tcfg.num_steps)

  def log_eval(step, params):
    row = {"seed": seed, "step": step, "kind": "eval"}
    for split, ds in st.eval_sets():
      for key, val in trainer.evaluate(params, ds).items():
        row[f"{split}_{key}"] = val
    writer.write(row)
    return row

  if start == 0 and tcfg.eval_every:
    log_eval(0, state["params"])
  pending = None  # (step, metrics) of the previous step, fetched after the next dispatch
  t0 = time.time()
  bar = tqdm(range(start, stop), initial=start, total=stop, desc=f"seed {seed}",
             disable=not cfg.get("progress", True), leave=False, dynamic_ncols=True,
             mininterval=0.5 if sys.stderr.isatty() else 30.0)
  for step in bar:
    batch = trainer.put_batch(st.batch(seed, step))
    state, metrics = trainer.step(state, batch)
    if pending is not None:
      _check_and_log(pending, seed, st, writer, bar, t0)
    pending = (step + 1, metrics)
    done = step + 1
    if done % tcfg.checkpoint_every == 0 or done == stop:
      _check_and_log(pending, seed, st, writer, bar, t0)
      pending = None
      mngr.save(done, args=ocp.args.StandardSave(state), force=True)
    if tcfg.eval_every and done % tcfg.eval_every == 0 and done < tcfg.num_steps:
      log_eval(done, state["params"])
    if flat_hook is not None and cfg.flatness.every and done % cfg.flatness.every == 0:
      row = flat_hook(state["params"], seed, done)
      writer.write({"seed": seed, "step": done, "kind": "flatness", **row})
  if pending is not None:
    _check_and_log(pending, seed, st, writer, bar, t0)
  bar.close()
  mngr.wait_until_finished()
  if stop < tcfg.num_steps:
    return None  # stopped early on purpose (train.stop_at_step)
  final = log_eval(stop, state["params"])
  with open(final_path, "w") as f:
    json.dump(final, f, indent=1)
  return final


def _check_and_log(pending, seed, st, writer, bar, t0):
  step, metrics = pending
  m = _to_float(metrics)
  for g in GROUPS:  # a batch without strings of a group has no loss for it
    if m[f"n_{g}"] == 0:
      m[f"loss_{g}"] = m[f"ce_{g}"] = None
  # param_norm is that of the parameters after this step's update: checking it
  # too keeps a diverged state (finite loss, overflowing update) out of the
  # checkpoint that may be saved right after this check.
  bad = [k for k in ("loss", "param_norm") if not np.isfinite(m[k])]
  if bad:
    raise FloatingPointError(
        f"non-finite training {' and '.join(bad)} (loss={m['loss']}, param_norm="
        f"{m['param_norm']}) at step {step} (seed {seed}); the last checkpoint is intact. "
        f"Lower optim.lr, raise optim.warmup_steps or use optim.grad_clip.")
  every = st.config.train.log_every
  if step % every == 0 or step == 1:
    row = {"seed": seed, "step": step, "kind": "train", "lr": float(st.schedule(step - 1)),
           "epoch": (step - 1) / st.steps_per_epoch, "time_s": round(time.time() - t0, 3), **m}
    writer.write(row)
    bar.set_postfix(loss=f"{m['loss']:.4f}", refresh=False)


# Fields that may change between runs on one workdir: they do not change what a
# finished seed computed (which seeds run, devices, logging and stopping).
RESUMABLE_FIELDS = frozenset({
    "seeds", "progress", "num_devices", "train.stop_at_step", "train.log_every",
    "train.eval_every", "train.checkpoint_every", "train.eval_batch_size",
    "train.eval_batch_contexts", "train.eval_train_graphs"})


def _flatten(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def check_workdir_config(config, workdir):
  """Refuses to resume (or read back finished seeds of) a workdir trained with another config.

  Without this a finished seed's final.json would be reported for a config
  that never trained it. Fields in `RESUMABLE_FIELDS` may differ.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  try:
    with open(path) as f:
      old = _flatten(json.load(f))
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path} is unreadable ({e}); it records the config this workdir was "
                     f"trained with. Use another --workdir or move this one away.") from None
  new = _flatten(json.loads(config.to_json_best_effort()))
  diff = sorted(k for k in set(old) | set(new)
                if k not in RESUMABLE_FIELDS and old.get(k, "<absent>") != new.get(k, "<absent>"))
  if diff:
    shown = ", ".join(f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
                      for k in diff[:6])
    more = f" (and {len(diff) - 6} more)" if len(diff) > 6 else ""
    raise ValueError(f"workdir {workdir} was trained with a different config ({shown}{more}); "
                     f"its checkpoints and finished seeds do not belong to this config. Use "
                     f"another --workdir, or move this one away to start afresh.")


def aggregate(finals):
  """mean / min / max over seeds of every numeric metric."""
  keys = [k for k in finals[0] if k not in ("seed", "step") and isinstance(finals[0][k], float)]
  out = {}
  for k in keys:
    v = np.array([f[k] for f in finals], dtype=np.float64)
    out[k] = {"mean": float(v.mean()), "min": float(v.min()), "max": float(v.max())}
  return out


def train_and_evaluate(config, workdir):
  """Trains every seed of `config`, writes metrics, summary.json and plots; returns the summary."""
  validate_config(config)
  check_workdir_config(config, workdir)  # before any data or model is built
  os.makedirs(workdir, exist_ok=True)
  setup = make_setup(config)
  trainer = Trainer(setup)
  writer = MetricsWriter(os.path.join(workdir, "metrics.jsonl"))
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort(indent=1))
  flat_hook = make_flatness_hook(trainer) if config.flatness.every else None
  finals = []
  for seed in config.seeds:
    final = train_seed(trainer, int(seed), workdir, writer, flat_hook)
    if final is None:
      return None
    finals.append(final)
  summary = {
      "loss": config.loss.to_dict(),
      "seeds": [int(s) for s in config.seeds],
      "num_params": decoder.num_params(trainer.abstract_state["params"]),  # shapes only
      "strings_per_context": setup.k,
      **setup.summary_fields(),
      "per_seed": finals,
      "aggregate": aggregate(finals),
  }
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  rows = writer.rows()
  setup.write_plots(rows, workdir)
  if config.flatness.every:
    from el_jax import flatness
    flatness.plot_flatness([r for r in rows if r.get("kind") == "flatness"],
                           os.path.join(workdir, "flatness.png"))
  return summary


def ce_objectives(graphdef):
  """(loss_fn, logits_fn) of the mean CE on a copy-task batch's scored tokens.

  The pure functions of params and batch that el_jax.flatness measures:
  `loss_fn(params, batch) -> scalar`, `logits_fn(params, batch) -> (logits, mask)`.
  """
  ce = losses.get_loss("ce")

  def logits_fn(params, batch):
    return decoder.apply(graphdef, params, batch["inputs"], batch["segment_ids"]), batch["loss_mask"]

  def loss_fn(params, batch):
    logits, mask = logits_fn(params, batch)
    return _masked_mean(ce(logits, batch["targets"]), mask)

  return loss_fn, logits_fn


def make_flatness_hook(trainer):
  """Measures Hessian / Fisher traces of the mean CE on fixed training batches."""
  from el_jax import flatness
  st = trainer.setup
  fcfg = st.config.flatness
  loss_fn, logits_fn = ce_objectives(trainer.graphdef)

  # Fixed batches (the first ones of epoch 0 for model seed 0): the same data at every measurement.
  batches = [st.batch(0, i % st.steps_per_epoch) for i in range(fcfg.num_batches)]

  def hook(params, seed, step):
    key = jax.random.key(1000 * seed + step)
    return flatness.measure_during_training(fcfg, loss_fn=loss_fn, logits_fn=logits_fn,
                                            params=params, batches=batches, key=key)

  return hook


# config.task -> "module:Setup class"; every setup provides the attributes the
# Trainer and train loop use (config, model_cfg, tx, schedule, loss_fn, mesh,
# scored_positions, steps_per_epoch, k, batch, eval_sets, decode_fn, evaluate,
# write_plots).
SETUPS = {
    "copy_task": "el_jax.train:Setup",
    "path_star": "el_jax.train_path_star:PathStarSetup",
}
BATCH_FIELD = {"copy_task": "batch_strings", "path_star": "batch_size"}


def make_setup(config):
  validate_config(config)
  import importlib
  module, cls = SETUPS[config.task].split(":")
  return getattr(importlib.import_module(module), cls)(config)


def validate_config(config):
  """Fails early, with the allowed values, on config mistakes."""
  if config.task not in SETUPS:
    raise ValueError(f"config.task={config.task!r} is not trained by el_jax.train; "
                     f"valid tasks: {sorted(SETUPS)}")
  if not len(config.seeds):
    raise ValueError("config.seeds is empty; give at least one model seed, e.g. (0,)")
  t = config.train
  for name in ("log_every", "checkpoint_every", BATCH_FIELD[config.task]):
    if t[name] < 1:
      raise ValueError(f"train.{name}={t[name]} must be >= 1")
  if t.eval_every < 0:
    raise ValueError(f"train.eval_every={t.eval_every} must be >= 0 (0 = only at the end)")
