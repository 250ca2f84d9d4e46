"""The generic training loop: config -> task -> jitted data-parallel training -> metrics, checkpoints, plots.

`train_and_evaluate(config, workdir)` trains `config.seeds` model
initialisations of the decoder on the fixed datasets of the task registered
under `config.task` (`el_jax.tasks`: the task supplies data, batches, metric
groups and evaluation; this module names no task). Layout of `workdir`:

  config.json            the config it was trained with (a different one is refused, except
                         fields named by `allow_config_change`, logged in `config_changes`)
  .lock                  pid / host of the run using the workdir (`el_jax.workdir.Lock`)
  metrics.jsonl          one JSON row per log / eval / flatness event (field `seed`)
  summary.json           final metrics per split, per seed and aggregated over seeds
  seed_<s>/checkpoints/  orbax checkpoints (automatic resume; `train.keep_checkpoints`)
  seed_<s>/final.json    final evaluation of that seed (a finished seed is skipped on re-run)
  *.png                  the task's plots

JSON files are written atomically; a torn last metrics line, a damaged final.json /
summary.json or checkpoint are handled on resume (see `train_seed`, `MetricsWriter`).

The train step is a pure module-level function over a state pytree
(params, optimizer state, step), jitted with the state donated, params
replicated and the batch sharded over the `data` axis of a device mesh.
"""
import functools
import json
import os
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from el_jax import adversarial
from el_jax import distributed
from el_jax import losses
from el_jax import optim
from el_jax import runner
from el_jax import progress
from el_jax import quiet
from el_jax import tasks
from el_jax import workdir as wd
from el_jax.models import decoder


# ----------------------------------------------------------------------------
# Config -> objects


def model_config(config, vocab_size, context_len):
  m = config.model
  return decoder.preset(
      m.preset, vocab_size=vocab_size, num_layers=m.num_layers, num_heads=m.num_heads,
      embed_dim=m.embed_dim, mlp_dim=m.mlp_dim or 4 * m.embed_dim, max_len=context_len,
      doc_mask=m.doc_mask, dtype=m.dtype)


def load_pretrained(config, task):
  """(DecoderConfig, params) of the Hugging Face GPT-2 checkpoint `config.model.pretrained`.

  The architecture is the checkpoint's: `model.preset` must be "gpt2" and the size fields of
  config.model (num_layers, num_heads, embed_dim, mlp_dim) must equal the checkpoint's, and
  the task's vocabulary and context must fit it; otherwise a ValueError names what differs.
  """
  from el_jax.models import pretrained
  m = config.model
  path = m.pretrained
  if m.preset != "gpt2":
    raise ValueError(f"model.pretrained={path!r} is a GPT-2 checkpoint; set model.preset='gpt2' "
                     f"(got {m.preset!r})")
  cfg, params = pretrained.load_gpt2(path)
  want = {"num_layers": m.num_layers, "num_heads": m.num_heads, "embed_dim": m.embed_dim,
          "mlp_dim": m.mlp_dim or 4 * m.embed_dim}
  differ = [f"model.{k}={v} (checkpoint {getattr(cfg, k)})" for k, v in want.items()
            if getattr(cfg, k) != v]
  if differ:
    raise ValueError(f"model.pretrained={path!r} does not match the config: " + ", ".join(differ)
                     + "; set these fields to the checkpoint's sizes")
  if cfg.vocab_size != task.vocab_size:
    raise ValueError(f"model.pretrained={path!r} has a vocabulary of {cfg.vocab_size} tokens, "
                     f"the task {task.vocab_size}; use a task tokenized for this checkpoint")
  if cfg.max_len < task.context_len:
    raise ValueError(f"model.pretrained={path!r} has {cfg.max_len} positions, fewer than the "
                     f"task's context of {task.context_len}")
  if m.dtype != cfg.dtype:
    import dataclasses
    cfg = dataclasses.replace(cfg, dtype=m.dtype)
  return cfg, params


def make_mesh(num_devices=0):
  """1-D `data` mesh over the first `num_devices` devices (0 = all). With several processes
  (el_jax.distributed) `jax.devices()` are those of every process, and the mesh takes them all."""
  devs = jax.devices()
  n = num_devices or len(devs)
  if n > len(devs):
    raise ValueError(f"num_devices={n} but only {len(devs)} devices are visible")
  if jax.process_count() > 1 and n != len(devs):
    raise ValueError(f"num_devices={n}: with {jax.process_count()} processes the mesh must take "
                     f"every device of every process; set num_devices=0 (or {len(devs)})")
  return jax.make_mesh((n,), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=devs[:n])


class Setup:
  """Everything derived from a config once: the task (its data), model, loss, optimizer, mesh."""

  def __init__(self, config):
    validate_config(config)
    self.config = config
    t = config.train
    # Cheap objects first, so that their config errors come before any data is built.
    self.loss_fn = losses.get_loss_from_config(config.loss)
    self.reduce_fn = losses.get_reduction_from_config(config.loss)
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
    self.pretrained_params = None
    if config.model.get("pretrained", ""):
      self.model_cfg, self.pretrained_params = load_pretrained(config, self.task)
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


def train_step(graphdef, loss_fn, tx, groups, state, batch, positions=None, reduce_fn=None):
  """One optimizer step. Returns (new_state, metrics).

  The objective is `reduce_fn(per_token_loss, loss_mask)` (`losses.get_reduction`;
  None = the masked mean, the "mean" reduction); the metric `loss` is that objective,
  `loss_<g>` the plain masked means.

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
    return (reduce_fn or _masked_mean)(per_tok, batch["loss_mask"]), (logits, per_tok)

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


# `train.cpu_dots`: XLA debug options for the CPU backend's matmuls, passed per compiled
# function (`jax.jit(compiler_options=...)`), so one process can time both (el_jax.bench).
# "xla": XLA's own choice (in jax 0.10.2, dots run as YNNPACK fusions); every committed
# result was trained with it. "eigen": XLA's Eigen dot emitter, no XNNPACK / YNNPACK
# fusions: measured faster on the small models here (docs/bench.md), different rounding.
CPU_DOTS = {
    "xla": {},
    "eigen": {"xla_cpu_use_xnnpack": False, "xla_cpu_experimental_ynn_fusion_type": ""},
}


def compiler_options(config):
  """The `jax.jit` compiler options of `config.train.cpu_dots` ({} off the CPU backend)."""
  if jax.default_backend() != "cpu":
    return {}
  return dict(CPU_DOTS[config.train.get("cpu_dots", "xla")])


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
    step_fn = train_step
    if adversarial.enabled(setup.config):  # seed 002: MLM minus a transfer term (its docstring)
      step_fn = adversarial.make_step_fn(setup)
    step_kw = {"positions": positions}
    if setup.config.loss.get("reduction", "mean") != "mean":  # "mean": train_step's own
      step_kw["reduce_fn"] = setup.reduce_fn
    self.compiler_options = opts = compiler_options(setup.config)
    self.step = jax.jit(functools.partial(step_fn, self.graphdef, setup.loss_fn, setup.tx,
                                          setup.task.groups, **step_kw),
                        in_shardings=(self.state_sharding, self.data_sharding),
                        out_shardings=(self.state_sharding, self.repl), donate_argnums=0,
                        compiler_options=opts)
    # Inputs arrive sharded over `data` (`put`), params replicated.
    self.decode = jax.jit(setup.task.decode_fn(self.graphdef), compiler_options=opts)
    self.num_devices = mesh.devices.size
    self.num_processes = jax.process_count()
    if self.num_processes > 1:  # el_jax.distributed: predictions replicated, readable by every process
      self.decode = jax.jit(setup.task.decode_fn(self.graphdef), out_shardings=self.repl,
                            compiler_options=opts)

  def init(self, seed):
    return self._init(seed)

  def put_batch(self, batch):
    if self.num_processes > 1:  # each process puts its own rows of the global batch
      return distributed.put_rows(batch, self.data_sharding)
    return jax.device_put(batch, self.data_sharding)

  def put(self, arrays):
    """Host arrays (or a tuple of them) -> device arrays sharded over `data`."""
    if self.num_processes > 1:
      return distributed.put_rows(arrays, self.data_sharding)
    return jax.device_put(arrays, self.data_sharding)

  def evaluate(self, params, dataset):
    """The task's evaluation of `params` on `dataset` (a flat dict of floats)."""
    return self.setup.task.evaluate(self, params, dataset)


def _to_float(tree):
  return {k: float(v) for k, v in jax.device_get(tree).items()}


class MetricsWriter:
  """Appends JSON rows to metrics.jsonl; can drop rows past a resume point.

  A torn last line (a run killed mid-write) is dropped with a warning, when
  reading and (`repair`) before appending; a malformed line elsewhere is an
  error naming the file and line.
  """

  def __init__(self, path):
    self.path = path

  def write(self, row):
    with open(self.path, "a") as f:
      f.write(json.dumps(row) + "\n")

  def _read(self):
    """(rows, torn): the parsed rows and whether the last line was torn."""
    if not os.path.exists(self.path):
      return [], False
    with open(self.path) as f:
      lines = f.read().split("\n")
    # A complete file ends with "\n", so its last piece is "".
    out, torn = [], False
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
      if not line.strip():
        continue
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError as e:
        if i == last:
          torn = True
          continue
        raise wd.WorkdirError(f"{self.path}:{i + 1}: malformed metrics row ({e.msg}); only "
                              f"its last line may be torn. Fix or delete that line") from None
    return out, torn

  def rows(self):
    rows, torn = self._read()
    if torn:
      print(f"warning: {self.path}: its last line is torn (a killed run?); leaving it out",
            file=sys.stderr)
    return rows

  def repair(self):
    """Drops a torn last line (with a warning) so that appended rows start on a new line."""
    if not os.path.exists(self.path):
      return
    rows, torn = self._read()
    with open(self.path, "rb") as f:
      size = f.seek(0, os.SEEK_END)
      ends_ok = size == 0 or (f.seek(size - 1) is not None and f.read(1) == b"\n")
    if torn:
      print(f"warning: {self.path}: dropping its torn last line (a killed run); the rows "
            f"after the last checkpoint are recomputed anyway", file=sys.stderr)
    if torn or not ends_ok:
      self._rewrite(rows)

  def _rewrite(self, rows):
    wd.write_text(self.path, "".join(json.dumps(r) + "\n" for r in rows))

  def truncate(self, seed, after_step, eval_at=None):
    """Drops rows of `seed` logged after `after_step` (they will be recomputed), and
    its eval rows at step `eval_at` (an evaluation about to be redone)."""
    rows = self.rows()
    keep = [r for r in rows if r.get("seed") != seed or (
        r.get("step", -1) <= after_step and not (r.get("kind") == "eval" and r.get("step") == eval_at))]
    if len(keep) != len(rows):
      self._rewrite(keep)


class _NoMetrics(MetricsWriter):
  """The MetricsWriter of processes other than process 0 (el_jax.distributed): writes nothing."""

  def write(self, row):
    pass

  def repair(self):
    pass

  def truncate(self, seed, after_step, eval_at=None):
    pass


def _checkpoint_manager(path, every, keep=2, item_names=None):
  """Orbax manager keeping the newest `keep` checkpoints (0 = every one, e.g. to measure
  flatness and probes along training; `train.keep_checkpoints`). `item_names`: see
  `DATA_ITEMS` (None: the train state alone)."""
  options = ocp.CheckpointManagerOptions(max_to_keep=keep or None,
                                         save_interval_steps=max(every, 1),
                                         enable_async_checkpointing=False, create=True)
  return ocp.CheckpointManager(os.path.abspath(path), options=options, item_names=item_names)


# --- Data iterators (a task's `data_iterator`, e.g. the copy task's data.pipeline="grain").
# Their state is saved in each checkpoint as the JSON item "data" beside the train state,
# which keeps orbax's item name "default" (where a checkpoint of the state alone has it), so
# that `load_params_from` reads the params of either kind.
DATA_ITEMS = ("default", "data")


def _save_args(state, data_it):
  if data_it is None:
    return ocp.args.StandardSave(state)
  return ocp.args.Composite(default=ocp.args.StandardSave(state),
                            data=ocp.args.JsonSave(data_it.get_state()))


def _restore_args(target, data_it):
  if data_it is None:
    return ocp.args.StandardRestore(target)
  return ocp.args.Composite(default=ocp.args.StandardRestore(target),
                            data=ocp.args.JsonRestore())


def _restored_state(restored, data_it):
  """The train state of a restore; sets `data_it` to the saved data-iterator state."""
  if data_it is None:
    return restored
  data_it.set_state(restored["data"])
  return restored["default"]


def restore_latest(mngr, abstract_state, state_sharding, data_it=None):
  """Restores the newest checkpoint, or returns None if there is none (and, with a task's
  `data_iterator`, sets it to the state saved with that checkpoint)."""
  step = mngr.latest_step()
  if step is None:
    return None
  target = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract_state, state_sharding)
  path = os.path.join(str(mngr.directory), str(step))
  try:
    with quiet.abandoned_reads(path):
      return _restored_state(mngr.restore(step, args=_restore_args(target, data_it)), data_it)
  except Exception as e:  # orbax raises many types for damaged files
    err = e
  # The first line of the cause, without the TensorStore spec (thousands of characters).
  detail = re.split(r" See full TensorStore| \[tensorstore_spec", str(err).strip() + "\n")[0]
  detail = detail.splitlines()[0] if detail.strip() else ""
  # The cause names files inside the checkpoint by their full path; the line names the
  # checkpoint once, so inside the cause it is "<checkpoint>".
  detail = detail.replace(os.path.realpath(path), "<checkpoint>").replace(path, "<checkpoint>")
  others = [x for x in mngr.all_steps() if x != step]
  fallback = (f"move it away to resume from the checkpoint of step {max(others)}"
              if others else "move it away to start this seed afresh")
  raise RuntimeError(
      f"checkpoint {path} could not be restored ({type(err).__name__}: "
      f"{detail}). It is corrupt or from a different config; {fallback} (nothing was "
      f"deleted)") from None


def checkpoint_steps(workdir, seed):
  """Sorted steps of the checkpoints of `seed` in `workdir`."""
  return _steps_in(os.path.join(workdir, f"seed_{seed}"))


def _steps_in(seed_dir):
  d = os.path.join(seed_dir, "checkpoints")
  return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def restore_params(trainer, workdir, seed, step=None):
  """The params of `seed`'s checkpoint at `step` (default: the newest) in `workdir`,
  for measurements on saved checkpoints (flatness, probes). The run may have used
  another optimizer than `trainer`: only the params are read."""
  params, _ = load_params_from(workdir, seed, trainer.abstract_state["params"],
                               trainer.state_sharding["params"], step)
  return params


def _path_names(path):
  return tuple(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path)


def load_params_from(workdir, seed, abstract_params, sharding, step=None):
  """(params, step): the params of `seed`'s checkpoint at `step` (default: the newest) in
  a run's `workdir`, in the structure of `abstract_params` (that run may have used another
  optimizer: only its params are read). A missing or mis-shaped leaf is a ValueError."""
  steps = checkpoint_steps(workdir, seed)
  if not steps or (step is not None and step not in steps):
    raise ValueError(f"{workdir} has no checkpoint of seed {seed}"
                     + (f" at step {step}" if step is not None else "")
                     + f"; saved steps: {steps}")
  step = steps[-1] if step is None else step
  # Restored onto this process's first device whatever the devices that saved it: a
  # checkpoint of a multi-process run (el_jax.distributed) names devices this process lacks.
  mngr = ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, f"seed_{seed}", "checkpoints")),
                               item_handlers=ocp.StandardCheckpointHandler())
  try:
    with quiet.abandoned_reads(os.path.join(str(mngr.directory), str(step))):
      here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
      target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=here),
                            mngr.item_metadata(step))
      raw = mngr.restore(step, args=ocp.args.StandardRestore(target))["params"]
  finally:
    mngr.close()
  have = {_path_names(p): v for p, v in jax.tree_util.tree_flatten_with_path(raw)[0]}
  paths, treedef = jax.tree_util.tree_flatten_with_path(abstract_params)
  leaves = []
  for path, want in paths:
    name = _path_names(path)
    got = have.get(name)
    if got is None or tuple(got.shape) != tuple(want.shape):
      raise ValueError(f"{workdir} (step {step}): parameter {'.'.join(name)} is "
                       f"{'missing' if got is None else tuple(got.shape)}, this model needs "
                       f"{tuple(want.shape)}; it must be a run of the same model")
    leaves.append(jnp.asarray(got, want.dtype))
  return jax.device_put(jax.tree_util.tree_unflatten(treedef, leaves), sharding), step


def latest_checkpoint_step(seed_dir):
  """The newest checkpoint step under `<seed_dir>/checkpoints` (None if there is none)."""
  steps = _steps_in(seed_dir)
  return steps[-1] if steps else None


def _read_final(seed, sdir, num_steps):
  """The finished evaluation of a seed, or None if the seed must (re)train or re-evaluate.

  A damaged final.json is set aside (renamed, never deleted) and the seed is
  re-evaluated from its last checkpoint; one of fewer steps than `num_steps`
  (the run was continued with --allow_config_change=train.num_steps) is kept
  as final_step<N>.json and training continues.
  """
  path = os.path.join(sdir, "final.json")
  if not os.path.exists(path):
    return None
  try:
    final = wd.read_json(path, what=f"the final evaluation of seed {seed}")
  except wd.WorkdirError as e:
    moved = wd.set_aside(path)
    print(f"warning: {e}; kept it as {moved} and re-evaluating seed {seed} from its last "
          f"checkpoint", file=sys.stderr)
    return None
  if final.get("step", num_steps) < num_steps:
    kept = os.path.join(sdir, f"final_step{final['step']}.json")
    os.replace(path, kept)
    print(f"seed {seed}: finished at step {final['step']}, continuing to step {num_steps} "
          f"(its evaluation then is kept as {kept})", file=sys.stderr)
    return None
  print(f"seed {seed}: already finished, skipped (reading {path})", file=sys.stderr)
  return final


def train_seed(trainer: Trainer, seed, workdir, writer, flat_hook=None):
  """Trains one seed to completion (resuming if possible); returns its final evaluation.

  Returns None if `train.stop_at_step` stopped it before `train.num_steps`.
  """
  st = trainer.setup
  cfg = st.config
  tcfg = cfg.train
  sdir = os.path.join(workdir, f"seed_{seed}")
  final_path = os.path.join(sdir, "final.json")
  final = distributed.from_main(lambda: _read_final(seed, sdir, tcfg.num_steps))
  if final is not None:
    return final
  os.makedirs(sdir, exist_ok=True)
  stop = tcfg.num_steps if not tcfg.get("stop_at_step", 0) else min(tcfg.stop_at_step, tcfg.num_steps)
  latest = latest_checkpoint_step(sdir)
  if latest is not None and latest > tcfg.num_steps:
    raise wd.WorkdirError(
        f"seed {seed} has a checkpoint at step {latest}, past train.num_steps={tcfg.num_steps}; "
        f"set train.num_steps >= {latest}, or move {sdir} away to train it afresh")
  if latest is not None and latest >= stop and stop < tcfg.num_steps:
    print(f"seed {seed}: already at step {latest} >= train.stop_at_step={stop}; nothing to do",
          file=sys.stderr)
    writer.truncate(seed, latest)  # rows a killed run logged past its last checkpoint
    return None
  data_it = st.task.data_iterator(seed)  # None: batches from st.batch(seed, step)
  mngr = _checkpoint_manager(os.path.join(sdir, "checkpoints"), tcfg.checkpoint_every,
                             tcfg.get("keep_checkpoints", 2),
                             item_names=DATA_ITEMS if data_it is not None else None)
  try:
    return _train_seed(trainer, seed, writer, flat_hook, mngr, stop, final_path, data_it)
  finally:
    mngr.close()


def _with_params(trainer, state, params):
  """`state` with `params` and a fresh optimizer state for them (fine-tuning, init_from)."""
  return jax.device_put({"params": params, "opt_state": trainer.setup.tx.init(params),
                         "step": state["step"]}, trainer.state_sharding)


def _train_seed(trainer, seed, writer, flat_hook, mngr, stop, final_path, data_it=None):
  st = trainer.setup
  cfg = st.config
  tcfg = cfg.train
  state = restore_latest(mngr, trainer.abstract_state, trainer.state_sharding, data_it)
  if state is None:
    state = trainer.init(seed)
    start = 0
    if st.pretrained_params is not None:  # fine-tuning: the checkpoint's weights, fresh optimizer
      # From host copies: the step donates its state, so the device buffers of one seed must
      # never be those of `st.pretrained_params` (the next seed starts from them too).
      host = jax.tree.map(np.asarray, st.pretrained_params)
      state = _with_params(trainer, state, jax.device_put(host, trainer.state_sharding["params"]))
      print(f"seed {seed}: starting from the pretrained weights of {cfg.model.pretrained}",
            file=sys.stderr)
    if tcfg.get("init_from", ""):  # continue another run's parameters with a fresh optimizer
      params, from_step = load_params_from(tcfg.init_from, seed,
                                           trainer.abstract_state["params"],
                                           trainer.state_sharding["params"])
      state = _with_params(trainer, state, params)
      print(f"seed {seed}: starting from the parameters of {tcfg.init_from} (step "
            f"{from_step}) with a fresh optimizer", file=sys.stderr)
  else:
    start = int(state["step"])
    print(f"seed {seed}: resuming from the checkpoint of step {start}", file=sys.stderr)
    if data_it is not None and data_it.step != start:
      raise RuntimeError(f"checkpoint {mngr.directory}/{start}: its data-iterator state is at "
                         f"step {data_it.step}, not {start}; the checkpoint is inconsistent")
  # Rows logged past the resume point (all of them when starting afresh) are recomputed,
  # and so is a final evaluation being redone.
  writer.truncate(seed, start if start else -1, eval_at=stop if start >= stop else None)

  def log_eval(step, params):
    row = {"seed": seed, "step": step, "kind": "eval"}
    for split, ds in st.task.eval_sets():
      with progress.label(f"seed {seed} step {step}: evaluating {split}"):
        for key, val in trainer.evaluate(params, ds).items():
          row[f"{split}_{key}"] = val
    writer.write(row)
    return row

  if start == 0 and tcfg.eval_every:
    log_eval(0, state["params"])
  pending = None  # (step, metrics) of the previous step, fetched after the next dispatch
  t0 = time.time()
  bar = progress.Bar(total=stop, initial=start, desc=f"seed {seed}")
  try:
    for step in range(start, stop):
      batch = trainer.put_batch(next(data_it) if data_it is not None else st.batch(seed, step))
      state, metrics = trainer.step(state, batch)
      if pending is not None:
        _check_and_log(pending, seed, st, writer, bar, t0)
      pending = (step + 1, metrics)
      done = step + 1
      if done % tcfg.checkpoint_every == 0 or done == stop:
        _check_and_log(pending, seed, st, writer, bar, t0)
        pending = None
        mngr.save(done, args=_save_args(state, data_it), force=True)
      if tcfg.eval_every and done % tcfg.eval_every == 0 and done < tcfg.num_steps:
        log_eval(done, state["params"])
      if flat_hook is not None and cfg.flatness.every and done % cfg.flatness.every == 0:
        row = flat_hook(state["params"], seed, done)
        writer.write({"seed": seed, "step": done, "kind": "flatness", **row})
      bar.update(1)
    if pending is not None:
      _check_and_log(pending, seed, st, writer, bar, t0)
  except FloatingPointError as e:
    raise diverged_error(e, mngr) from None
  finally:
    bar.close()
  mngr.wait_until_finished()
  if stop < tcfg.num_steps:
    print(f"seed {seed}: stopped at step {stop} (train.stop_at_step); run again without it "
          f"to continue to step {tcfg.num_steps}", file=sys.stderr)
    return None  # stopped early on purpose (train.stop_at_step)
  final = log_eval(stop, state["params"])
  if distributed.is_main():
    wd.write_json(final_path, final)
  return final


def diverged_error(err, mngr):
  """The FloatingPointError to raise for a diverged seed: `err` plus where a rerun resumes
  (the newest checkpoint of `mngr`) and how to continue with a lower learning rate."""
  last = mngr.latest_step()
  where = (f"the last checkpoint is step {last} ({mngr.directory}/{last}), where a rerun "
           f"resumes" if last is not None else
           "no checkpoint was saved before it, so a rerun starts this seed afresh")
  return FloatingPointError(
      f"{err}; {where}. Rerun with a lower --config.optim.lr (or more optim.warmup_steps, or "
      f"optim.grad_clip) and --allow_config_change=optim.lr (naming each field you change)")


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
        f"{m['param_norm']}) at step {step} (seed {seed})")
  every = st.config.train.log_every
  if step % every == 0 or step == 1:
    row = {"seed": seed, "step": step, "kind": "train", "lr": float(st.schedule(step - 1)),
           "epoch": (step - 1) / st.steps_per_epoch, "time_s": round(time.time() - t0, 3), **m}
    writer.write(row)
    bar.set_postfix(loss=m["loss"])


# Fields of every task that may change between runs on one workdir: they do not
# change what a finished seed computed (which seeds run, devices, logging and
# stopping). Each task adds its own (`Task.resumable_fields`).
RESUMABLE_FIELDS = frozenset({
    "seeds", "progress", "num_devices", "train.stop_at_step", "train.log_every",
    "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
    "train.vmap_seeds", "train.vmap_seeds_impl"})


def resumable_fields(config):
  """`RESUMABLE_FIELDS` plus those of the config's task."""
  name = config.get("task")
  target = tasks.get(name) if name in tasks.REGISTRY else None
  return RESUMABLE_FIELDS | (target.resumable_fields if tasks.is_task_class(target) else frozenset())


def check_workdir_config(config, workdir, allow=()):
  """Refuses to resume (or read back finished seeds of) a workdir trained with another config.

  Without this a finished seed's final.json would be reported for a config
  that never trained it. Fields in `resumable_fields(config)` may differ;
  those named in `allow` (`--allow_config_change`) too, and are returned as
  {key: [old, new]} (see `el_jax.workdir.check_config`).
  """
  return wd.check_config(config, workdir, resumable_fields(config), allow)


def _resume_points(config, workdir):
  """{seed: the step it continues from ("finished" / None = from scratch)} (for the change log)."""
  out = {}
  for seed in config.seeds:
    sdir = os.path.join(workdir, f"seed_{int(seed)}")
    out[str(int(seed))] = ("finished" if os.path.exists(os.path.join(sdir, "final.json"))
                           else latest_checkpoint_step(sdir))
  return out


def train_and_evaluate(config, workdir, allow_config_change=()):
  """Trains every seed of `config`, writes metrics, summary.json and plots; returns the summary.

  Returns None if `train.stop_at_step` stopped training early. The workdir is
  locked while this runs (`el_jax.workdir.Lock`); `allow_config_change` names
  the optimizer / loss fields that may differ from the config it was trained
  with (`el_jax.workdir.parse_allowed`).
  """
  validate_config(config)
  allow = wd.parse_allowed(allow_config_change)
  if jax.process_count() > 1:
    return _train_and_evaluate_processes(config, workdir, allow)
  created = not os.path.exists(workdir)
  if not created:
    check_workdir_config(config, workdir, allow)  # fail fast, before taking the lock
  try:
    with wd.Lock(workdir):
      return _train_and_evaluate(config, workdir, allow)
  except BaseException:
    # A run refused before it wrote anything leaves no empty workdir behind.
    if created and os.path.isdir(workdir) and not os.listdir(workdir):
      os.rmdir(workdir)
    raise


def _train_and_evaluate_processes(config, workdir, allow):
  """`train_and_evaluate` run by every process of a multi-process job (el_jax.distributed).

  Every process builds the same setup, trains on its own rows of each global batch (the
  `data` mesh spans the devices of all processes) and takes part in orbax's checkpoint saves
  and restores. Process 0 alone owns the workdir: it takes the lock (one lock for the job,
  so the processes never fight over it), checks and records config.json, reads and writes
  final.json, metrics.jsonl, summary.json and the plots. What it decides from those files
  (a refusal, a finished seed, a resume) reaches the others through `distributed.from_main`,
  so they never read a file it is rewriting. The workdir must be a folder every process
  sees (one machine, or a shared file system).
  """
  # Refused rather than left to fail inside JAX: these put host or one-device values into
  # the step, which several processes would need to build as global arrays (not done).
  for bad, why in ((config.flatness.every, "flatness.every (set it to 0; measure flatness of "
                    "the saved checkpoints in one process)"),
                   (adversarial.enabled(config), "adversarial.enabled (its downstream data "
                    "live on one device)"),
                   (config.train.get("init_from", ""), "train.init_from"),
                   (config.model.get("pretrained", ""), "model.pretrained")):
    if bad:
      raise ValueError(f"{why} is not supported with {jax.process_count()} processes; run it "
                       f"in one process (python -m el_jax.main)")
  main = distributed.is_main()
  lock = wd.Lock(workdir)
  created = []

  def claim():  # process 0: the same checks and lock as a single-process run
    if os.path.exists(workdir):
      check_workdir_config(config, workdir, allow)
    else:
      created.append(workdir)
    lock.acquire()

  try:
    distributed.from_main(claim)
    return _train_and_evaluate(config, workdir, allow)
  finally:
    lock.release()  # held by process 0 only
    if main and created and os.path.isdir(workdir) and not os.listdir(workdir):
      os.rmdir(workdir)


def _already_finished(config, workdir):
  """The summary of `workdir` if every seed of `config` finished there, else None.

  A damaged summary.json is set aside with a warning (it is rebuilt from the
  seeds' final.json files); a damaged final.json is left to `train_seed`.
  """
  finals = []
  for seed in config.seeds:
    path = os.path.join(workdir, f"seed_{int(seed)}", "final.json")
    try:
      final = wd.read_json(path) if os.path.exists(path) else None
    except wd.WorkdirError:
      return None
    if final is None or final.get("step") != config.train.num_steps:
      return None
    finals.append(final)
  path = os.path.join(workdir, "summary.json")
  if not os.path.exists(path):
    return None
  try:
    summary = wd.read_json(path, what="the summary of the finished seeds")
  except wd.WorkdirError as e:
    print(f"warning: {e}; kept it as {wd.set_aside(path)}, rebuilding it from the seeds' "
          f"final.json", file=sys.stderr)
    return None
  if summary.get("seeds") != [int(s) for s in config.seeds] or summary.get("per_seed") != finals:
    return None
  return summary


def _train_and_evaluate(config, workdir, allow):
  # under the lock: authoritative (several processes: process 0 checks, the others follow)
  changes = distributed.from_main(lambda: check_workdir_config(config, workdir, allow))
  progress.set_enabled(config.get("progress", True))
  summary = None if changes else distributed.from_main(lambda: _already_finished(config, workdir))
  if summary is not None:
    print(f"{workdir}: every seed {tuple(summary['seeds'])} already finished; nothing to "
          f"train", file=sys.stderr)
    table = runner.summary_table(summary)
    if table:
      print(table, file=sys.stderr)
    print(f"results: {os.path.join(workdir, 'summary.json')}", file=sys.stderr)
    return summary
  setup = make_setup(config)
  trainer = Trainer(setup)
  writer = (MetricsWriter if distributed.is_main() else _NoMetrics)(
      os.path.join(workdir, "metrics.jsonl"))
  writer.repair()
  history = distributed.from_main(
      lambda: wd.record_config(config, workdir, changes, _resume_points(config, workdir)))
  if changes:
    shown = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in changes.items())
    print(f"continuing {workdir} with a changed config ({shown}); recorded in config.json",
          file=sys.stderr)
  flat_hook = make_flatness_hook(trainer) if config.flatness.every else None
  if config.train.get("vmap_seeds", False):  # all seeds as one program (el_jax.seeds)
    from el_jax import seeds as seeds_lib
    finals = seeds_lib.train_seeds(trainer, workdir, writer)
    if finals is None:
      return None
  else:
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
      **({wd.CHANGES_KEY: history} if history else {}),
      "per_seed": finals,
      "aggregate": runner.aggregate(finals),
  }
  summary_path = os.path.join(workdir, "summary.json")
  if not distributed.is_main():  # process 0 writes the summary and plots
    return summary
  wd.write_json(summary_path, summary)
  rows = writer.rows()
  setup.task.write_plots(rows, workdir)
  if config.flatness.every:
    from el_jax import flatness
    flatness.plot_flatness([r for r in rows if r.get("kind") == "flatness"],
                           os.path.join(workdir, "flatness.png"))
  table = runner.summary_table(summary)
  if table:
    print(table, file=sys.stderr)
  print(f"results: {summary_path}", file=sys.stderr)
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


def _not_int(v):
  return isinstance(v, bool) or not isinstance(v, (int, np.integer))


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
    if _not_int(t[name]) or t[name] < 1:
      raise ValueError(f"train.{name}={t[name]!r} must be an integer >= 1")
  for name, meaning in (("eval_every", "0 = only at the end"),
                        ("stop_at_step", "0 = train to train.num_steps"),
                        ("keep_checkpoints", "0 = keep every checkpoint")):
    val = t.get(name, 0)
    if _not_int(val) or val < 0:
      raise ValueError(f"train.{name}={val!r} must be an integer >= 0 ({meaning})")
  src = t.get("init_from", "")
  if src and not os.path.isdir(os.path.join(src, f"seed_{int(seeds[0])}", "checkpoints")):
    raise ValueError(f"train.init_from={src!r} is not a workdir with checkpoints of seed "
                     f"{int(seeds[0])}; give a finished run of the same model (or '' = none)")
  pre = config.model.get("pretrained", "")
  if pre and not os.path.isfile(os.path.join(pre, "config.json")):
    raise ValueError(f"model.pretrained={pre!r} is not a Hugging Face GPT-2 checkpoint directory "
                     f"(config.json + model.safetensors); give one, or '' for random weights")
  if not isinstance(config.get("progress", True), bool):
    raise ValueError(f"progress={config.progress!r} must be True or False")
  n = config.get("num_devices", 0)
  if _not_int(n) or n < 0:
    raise ValueError(f"num_devices={n!r} must be an integer >= 0 (0 = all local devices)")
  dots = t.get("cpu_dots", "xla")
  if dots not in CPU_DOTS:
    raise ValueError(f"train.cpu_dots={dots!r} must be one of {tuple(CPU_DOTS)} (the matmul "
                     f"library of the CPU backend; docs/bench.md)")
  optim.validate_config(config.optim)
  losses.validate_config(config.loss)
  decoder.validate_model_config(config.model)
  adversarial.validate_config(config)
  from el_jax import seeds as seeds_lib  # imports this module
  seeds_lib.validate_config(config)
  task_cls.validate_config(config)
