"""The generic training loop: config -> task -> jitted data-parallel training -> metrics, checkpoints, plots.

`train_and_evaluate(config, workdir)` trains `config.seeds` model
initialisations of the decoder on the fixed datasets of the task registered
under `config.task` (`el_jax.tasks`: the task supplies data, batches, metric
groups and evaluation; this module names no task). Layout of `workdir`:

  config.json            the config it was trained with (a different one is refused)
  metrics.jsonl          one JSON row per log / eval / flatness event (field `seed`)
  summary.json           final metrics per split, per seed and aggregated over seeds
  seed_<s>/checkpoints/  orbax checkpoints (automatic resume)
  seed_<s>/final.json    final evaluation of that seed (a finished seed is skipped on re-run)
  *.png                  the task's plots

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
from el_jax import runner
from el_jax import tasks
from el_jax.models import decoder


# ----------------------------------------------------------------------------
# Config -> objects


def model_config(config, vocab_size, context_len):
  m = config.model
  return decoder.preset(
      m.preset, vocab_size=vocab_size, num_layers=m.num_layers, num_heads=m.num_heads,
      embed_dim=m.embed_dim, mlp_dim=m.mlp_dim or 4 * m.embed_dim, max_len=context_len,
      doc_mask=m.doc_mask, dtype=m.dtype)


def make_mesh(num_devices=0):
  """1-D `data` mesh over the first `num_devices` local devices (0 = all)."""
  devs = jax.devices()
  n = num_devices or len(devs)
  if n > len(devs):
    raise ValueError(f"num_devices={n} but only {len(devs)} devices are visible")
  return jax.make_mesh((n,), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=devs[:n])


class Setup:
  """Everything derived from a config once: the task (its data), model, loss, optimizer, mesh."""

  def __init__(self, config):
    validate_config(config)
    self.config = config
    t = config.train
    # Cheap objects first, so that their config errors come before any data is built.
    self.loss_fn = losses.get_loss_from_config(config.loss)
    self.tx, self.schedule = optim.make_optimizer(config.optim, t.num_steps)
    self.mesh = make_mesh(config.get("num_devices", 0))
    task_cls = tasks.get_task_class(config.task)
    rows, n = task_cls.rows_per_step(config), self.mesh.devices.size
    if rows % n:
      raise ValueError(f"{task_cls.describe_batch(config)} cannot be split over {n} "
                       f"devices; use a batch that is a multiple of {n}, or set num_devices")
    self.task = task_cls(config)
    self.steps_per_epoch = self.task.num_train // self.task.examples_per_step
    self.model_cfg = model_config(config, self.task.vocab_size, self.task.context_len)
    self.scored_positions = self.task.scored_positions

  def batch(self, seed, step):
    """The training batch of `step` for model seed `seed` (the task's)."""
    return self.task.batch(seed, step)


def make_setup(config):
  return Setup(config)


# ----------------------------------------------------------------------------
# Pure functions (module level so tests can call them un-jitted)


def init_state(model_cfg, tx, seed):
  _, params = decoder.init(model_cfg, seed)
  return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}


def _masked_mean(x, m):
  return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def train_step(graphdef, loss_fn, tx, groups, state, batch, positions=None):
  """One optimizer step. Returns (new_state, metrics).

  `groups`: the task's metric groups; the batch holds a `mask_<g>` for each
  (see `el_jax.tasks.base`), and the metrics `loss_<g>`, `ce_<g>`, `n_<g>`.
  `positions` (optional, static int array): the only positions where any of
  the batch's masks can be nonzero. Logits, losses and metrics are then
  computed there only (the model skips the last block's queries and MLP and
  the unembedding elsewhere); the result equals that of `positions=None` up
  to float rounding. `Trainer` passes the task's `scored_positions`.
  """
  if positions is not None:
    batch = dict(batch)
    for key in ("targets", "loss_mask", *(f"mask_{g}" for g in groups)):
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
  metrics = {"loss": loss, "ce": _masked_mean(ce, batch["loss_mask"])}
  for g in groups:
    m = batch[f"mask_{g}"]
    metrics[f"loss_{g}"] = _masked_mean(per_tok, m)
    metrics[f"ce_{g}"] = _masked_mean(ce, m)
    metrics[f"n_{g}"] = jnp.sum(m)
  metrics.update({
      "margin_mean": stats["margin_mean"],
      "margin_min": stats["margin_min"],
      "fitted_frac": stats["fitted_frac"],
      "grad_norm": optax.global_norm(grads),
      "update_norm": optax.global_norm(updates),
      "param_norm": optax.global_norm(params),
  })
  new_state = {"params": params, "opt_state": opt_state, "step": state["step"] + 1}
  return new_state, metrics


# ----------------------------------------------------------------------------
# Host-side loop


class Trainer:
  """Jitted functions for one Setup (shared by all seeds); the `evaluator` tasks evaluate with."""

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
                                          setup.task.groups, positions=positions),
                        in_shardings=(self.state_sharding, self.data_sharding),
                        out_shardings=(self.state_sharding, self.repl), donate_argnums=0)
    # Inputs arrive sharded over `data` (`put`), params replicated.
    self.decode = jax.jit(setup.task.decode_fn(self.graphdef))
    self.num_devices = mesh.devices.size

  def init(self, seed):
    return self._init(seed)

  def put_batch(self, batch):
    return jax.device_put(batch, self.data_sharding)

  def put(self, arrays):
    """Host arrays (or a tuple of them) -> device arrays sharded over `data`."""
    return jax.device_put(arrays, self.data_sharding)

  def evaluate(self, params, dataset):
    """The task's evaluation of `params` on `dataset` (a flat dict of floats)."""
    return self.setup.task.evaluate(self, params, dataset)


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
    for split, ds in st.task.eval_sets():
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
  for g in st.task.groups:  # a batch without examples of a group has no loss for it
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


# Fields of every task that may change between runs on one workdir: they do not
# change what a finished seed computed (which seeds run, devices, logging and
# stopping). Each task adds its own (`Task.resumable_fields`).
RESUMABLE_FIELDS = frozenset({
    "seeds", "progress", "num_devices", "train.stop_at_step", "train.log_every",
    "train.eval_every", "train.checkpoint_every"})


def resumable_fields(config):
  """`RESUMABLE_FIELDS` plus those of the config's task."""
  name = config.get("task")
  target = tasks.get(name) if name in tasks.REGISTRY else None
  return RESUMABLE_FIELDS | (target.resumable_fields if tasks.is_task_class(target) else frozenset())


def check_workdir_config(config, workdir):
  """Refuses to resume (or read back finished seeds of) a workdir trained with another config.

  Without this a finished seed's final.json would be reported for a config
  that never trained it. Fields in `resumable_fields(config)` may differ.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  try:
    with open(path) as f:
      old = runner.flatten(json.load(f))
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path} is unreadable ({e}); it records the config this workdir was "
                     f"trained with. Use another --workdir or move this one away.") from None
  new = runner.flatten(runner.config_dict(config))
  diff = runner.config_diff(old, new, resumable_fields(config))
  if diff:
    shown = ", ".join(f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
                      for k in diff[:6])
    more = f" (and {len(diff) - 6} more)" if len(diff) > 6 else ""
    raise ValueError(f"workdir {workdir} was trained with a different config ({shown}{more}); "
                     f"its checkpoints and finished seeds do not belong to this config. Use "
                     f"another --workdir, or move this one away to start afresh.")


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
      "task": config.task,
      "groups": list(setup.task.groups),
      "loss": config.loss.to_dict(),
      "seeds": [int(s) for s in config.seeds],
      "num_params": decoder.num_params(trainer.abstract_state["params"]),  # shapes only
      **setup.task.summary_fields(),
      "per_seed": finals,
      "aggregate": runner.aggregate(finals),
  }
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  rows = writer.rows()
  setup.task.write_plots(rows, workdir)
  if config.flatness.every:
    from el_jax import flatness
    flatness.plot_flatness([r for r in rows if r.get("kind") == "flatness"],
                           os.path.join(workdir, "flatness.png"))
  return summary


def ce_objectives(graphdef):
  """(loss_fn, logits_fn) of the mean CE on a batch's scored tokens (`loss_mask`).

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


def validate_config(config):
  """Fails early, with the allowed values, on config mistakes (before any data or model)."""
  task_cls = tasks.get_task_class(config.get("task", "<absent>"))
  seeds = config.seeds
  if not len(seeds):
    raise ValueError("config.seeds is empty; give at least one model seed, e.g. (0,)")
  bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, (int, np.integer))]
  if bad:
    raise ValueError(f"config.seeds={tuple(seeds)!r} must be integers, e.g. (0, 1, 2)")
  t = config.train
  for name in ("num_steps", "log_every", "checkpoint_every"):
    if t[name] < 1:
      raise ValueError(f"train.{name}={t[name]} must be >= 1")
  if t.eval_every < 0:
    raise ValueError(f"train.eval_every={t.eval_every} must be >= 0 (0 = only at the end)")
  task_cls.validate_config(config)
