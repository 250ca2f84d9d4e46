"""Orbax checkpoints of a run's seeds: save, resume from the newest, read params back.

Layout: `<workdir>/seed_<s>/checkpoints/<step>/`, each the train state {"params",
"opt_state", "step"} (orbax item "default") and, for a task with a data iterator, its JSON
state (item "data"). `restore_latest` names a damaged checkpoint and what to fall back to
in one line; `load_params_from` reads the params of any run of the same model, whatever
optimizer it used.
"""
import atexit
import errno
import glob
import os
import re
import shutil
import time

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from el_jax.infra import quiet
from el_jax.infra import workdir as wd


def manager(path, every, keep=2, item_names=None):
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


def save_args(state, data_it):
  if data_it is None:
    return ocp.args.StandardSave(state)
  return ocp.args.Composite(default=ocp.args.StandardSave(state),
                            data=ocp.args.JsonSave(data_it.get_state()))


# Failures to write that are the file system's, not a bug: (errno, the text TensorStore and
# the OS put in their messages). Any other failure of a save is raised as it is.
WRITE_ERRORS = ((errno.ENOSPC, "No space left on device"), (errno.EDQUOT, "Disk quota exceeded"),
                (errno.EROFS, "Read-only file system"), (errno.EACCES, "Permission denied"),
                (errno.EIO, "Input/output error"))


def _write_errno(err):
  """The errno of a failed write in `err` (an OSError, or orbax / TensorStore's ValueError
  whose message carries the OS's text), else None."""
  if isinstance(err, OSError) and err.errno in dict(WRITE_ERRORS):
    return err.errno
  text = str(err)
  for code, msg in WRITE_ERRORS:
    if msg in text:
      return code
  return None


def _mount_point(path):
  path = os.path.realpath(path)
  while not os.path.ismount(path):
    path = os.path.dirname(path)
  return path


def _remove_partial(path, quiet_s=0.3, max_s=3.0):
  """Removes the temporary folders of a failed save of the checkpoint at `path`. TensorStore's
  threads may still be writing the save's other arrays (and so re-creating the folder) for a
  moment after the save raised: removes until none has appeared for `quiet_s` (at most
  `max_s`), and once more at exit. A folder with this suffix is never a complete checkpoint."""
  pattern = glob.escape(path) + ".orbax-checkpoint-tmp*"

  def remove():
    found = glob.glob(pattern)
    for tmp in found:
      shutil.rmtree(tmp, ignore_errors=True)
    return bool(found)
  deadline = time.monotonic() + max_s
  remove()
  while time.monotonic() < deadline:
    time.sleep(quiet_s)
    if not remove():
      break
  atexit.register(remove)


def save(mngr, step, state, data_it=None):
  """Saves `state` (and `data_it`'s state, `save_args`) as checkpoint `step` of `mngr`.

  The save is never cut in half by SIGINT / SIGTERM (`el_jax.infra.workdir.uninterrupted`): orbax
  writes `<step>.orbax-checkpoint-tmp` and renames it when complete, and a signal takes
  effect once that is done. A failed write (a full disk, a quota, a read-only or failing
  file system) is one OSError naming the checkpoint, the file system and the checkpoint a
  rerun resumes from, instead of orbax's background reports (`quiet.failed_writes`); the
  partial temporary folder is removed.
  """
  directory = str(mngr.directory)
  path = os.path.join(directory, str(step))
  with wd.uninterrupted(f"the checkpoint of step {step}"):
    try:
      with quiet.failed_writes(path):
        mngr.save(step, args=save_args(state, data_it), force=True)
    except Exception as e:  # noqa: BLE001 -- a failed write is sorted out below
      code = _write_errno(e)
      if code is None:
        raise
    else:
      return
  _remove_partial(path)
  done = [x for x in _steps_in(os.path.dirname(directory)) if x != step]
  resume = (f"the checkpoint of step {max(done)}" if done else "the start (no checkpoint of "
            f"this seed was complete)")
  where = _mount_point(directory)
  try:
    free = f", {shutil.disk_usage(directory).free / 1e6:.3g} MB free now"
  except OSError:
    free = ""
  detail = {errno.ENOSPC: f"no space left on device (ENOSPC) on {where}{free}",
            errno.EDQUOT: f"disk quota exceeded (EDQUOT) on {where}",
            errno.EROFS: f"read-only file system (EROFS) at {where}",
            errno.EACCES: f"permission denied (EACCES) in {directory}",
            errno.EIO: f"input/output error (EIO) on {where}"}[code]
  raise OSError(code, f"could not save the checkpoint of step {step} ({path}): {detail}. "
                      f"Nothing is lost: the run is resumable; "
                      f"{'free some space and ' if code in (errno.ENOSPC, errno.EDQUOT) else ''}"
                      f"run the same command again to resume from {resume}") from None


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


def _seed_step(workdir, seed, step):
  """(the step to read, its orbax manager) of `seed`'s checkpoints in `workdir`; ValueError
  naming the saved steps if there is none (at `step`)."""
  steps = checkpoint_steps(workdir, seed)
  if not steps or (step is not None and step not in steps):
    raise ValueError(f"{workdir} has no checkpoint of seed {seed}"
                     + (f" at step {step}" if step is not None else "")
                     + f"; saved steps: {steps}")
  step = steps[-1] if step is None else step
  mngr = ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, f"seed_{seed}", "checkpoints")),
                               item_handlers=ocp.StandardCheckpointHandler())
  return step, mngr


def param_shapes(workdir, seed, step=None):
  """(step, {"a.b.c": shape}): the shapes of the params of `seed`'s checkpoint at `step`
  (default: the newest) in `workdir`, read from its metadata (no array is loaded)."""
  step, mngr = _seed_step(workdir, seed, step)
  try:
    meta = mngr.item_metadata(step)["params"]
  finally:
    mngr.close()
  return step, {".".join(_path_names(p)): tuple(m.shape)
                for p, m in jax.tree_util.tree_flatten_with_path(meta)[0]}


def load_params_from(workdir, seed, abstract_params, sharding, step=None):
  """(params, step): the params of `seed`'s checkpoint at `step` (default: the newest) in
  a run's `workdir`, in the structure of `abstract_params` (that run may have used another
  optimizer: only its params are read). A missing or mis-shaped leaf is a ValueError."""
  step, mngr = _seed_step(workdir, seed, step)
  # Restored onto this process's first device whatever the devices that saved it: a
  # checkpoint of a multi-process run (el_jax.infra.distributed) names devices this process lacks.
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
