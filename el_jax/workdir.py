"""Safe workdirs: atomic JSON files, a lock against two runs, the config a workdir belongs to.

  from el_jax import workdir as wd
  wd.write_json(path, obj)                    # temp file + os.replace: never a torn file
  obj = wd.read_json(path, what="final.json of seed 0")   # WorkdirError naming the file
  with wd.Lock(workdir):                      # a second run on this workdir is refused
    changes = wd.check_config(config, workdir, resumable, allow=("optim.lr",))
    wd.record_config(config, workdir, changes, resume_steps)

Every expected fault is a `WorkdirError` (a ValueError) whose one-line message
names the file and what to do; `el_jax.cli.main_guard` prints it without a
traceback.
"""
import contextlib
import datetime
import json
import os
import socket
import sys
import tempfile

LOCK_NAME = ".lock"
CHANGES_KEY = "config_changes"  # config.json: the history of allowed changes (not a config field)

# Fields that `--allow_config_change` may name: optimizer, loss and the number of steps.
# They change how training continues from a checkpoint but not the shapes in it,
# the data or the model. Anything else is refused even when named.
CHANGEABLE_PREFIXES = ("optim.", "loss.")
CHANGEABLE_FIELDS = frozenset({"train.num_steps"})


class WorkdirError(ValueError):
  """A workdir that cannot be used as asked (locked, other config, damaged file)."""


def write_json(path, obj, **kwargs):
  """Writes `obj` as JSON to `path` atomically: a kill leaves the old file or the new one."""
  kwargs.setdefault("indent", 1)
  write_text(path, json.dumps(obj, **kwargs) + "\n")


def write_text(path, text):
  """Writes `text` to `path` atomically (see `atomic_open`)."""
  with atomic_open(path) as f:
    f.write(text)


@contextlib.contextmanager
def atomic_open(path, binary=False):
  """A file to write `path` through: a temporary file in the same folder, fsync'ed and
  renamed over `path` (`os.replace`) when the block ends, removed if it raises. A kill
  leaves the old file or the new one, never a torn one. Permissions as `open` would give."""
  d = os.path.dirname(os.path.abspath(path))
  os.makedirs(d, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=d)
  try:
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() would not
    with os.fdopen(fd, "wb" if binary else "w") as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask


def read_json(path, what=None):
  """JSON of `path`; a damaged file is a WorkdirError that names it (and `what` it holds)."""
  try:
    with open(path) as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise WorkdirError(f"{path} is damaged ({e.msg} at line {e.lineno} column {e.colno})"
                       + (f"; it holds {what}" if what else "")) from None
  except UnicodeDecodeError:
    raise WorkdirError(f"{path} is damaged (not UTF-8 text)"
                       + (f"; it holds {what}" if what else "")) from None


def set_aside(path):
  """Renames a damaged file to `<path>.damaged[.N]` (kept for inspection); returns the new name."""
  dest, n = path + ".damaged", 1
  while os.path.exists(dest):
    dest, n = f"{path}.damaged.{n}", n + 1
  os.replace(path, dest)
  return dest


# ----------------------------------------------------------------------------
# Lock


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # exists, owned by someone else
    return True
  return True


class Lock:
  """An exclusive lock on a workdir: `<workdir>/.lock` holding the owner's pid, host and start.

  A second run on the same workdir is refused with a WorkdirError naming the
  owner. A lock left by a dead process on this host is taken over (with a
  message on stderr); one held from another host is never taken over (the
  message says how to remove it if that run is known to be dead).
  """

  def __init__(self, workdir):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_NAME)
    self.held = False

  def _owner(self):
    try:
      with open(self.path) as f:
        return json.load(f)
    except (OSError, ValueError):
      return None  # vanished, or being written: treated below

  def acquire(self):
    try:
      return self._acquire()
    except WorkdirError:
      raise
    except OSError as e:
      raise WorkdirError(f"cannot use workdir {self.workdir}: {e.strerror or e} "
                         f"({e.filename or self.path}); give a --workdir in a folder you can "
                         f"write to") from None

  def _acquire(self):
    os.makedirs(self.workdir, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "since": datetime.datetime.now().isoformat(timespec="seconds"),
          "argv": " ".join(sys.argv)[:300]}
    for _ in range(3):
      try:
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
      except FileExistsError:
        owner = self._owner()
        if owner is None:
          # Unreadable: a torn write by a killed owner, or one being written right now.
          try:
            import time
            time.sleep(0.2)
          except KeyboardInterrupt:
            raise
          owner = self._owner()
          if owner is None:
            print(f"warning: taking over the unreadable lock file {self.path}", file=sys.stderr)
            self._remove_stale()
            continue
        same_host = owner.get("host") == me["host"]
        if same_host and not _pid_alive(int(owner.get("pid", -1))):
          print(f"warning: workdir {self.workdir} was locked by pid {owner.get('pid')} "
                f"(started {owner.get('since')}), which is no longer running; taking over "
                f"its lock", file=sys.stderr)
          self._remove_stale()
          continue
        where = "this host" if same_host else f"host {owner.get('host')}"
        hint = ("wait for it to finish or stop it" if same_host else
                f"if that run is dead, delete {self.path}")
        raise WorkdirError(
            f"workdir {self.workdir} is in use by pid {owner.get('pid')} on {where} "
            f"(since {owner.get('since')}: {owner.get('argv', '?')}); {hint}, or use another "
            f"--workdir")
      with os.fdopen(fd, "w") as f:
        json.dump(me, f)
      self.held = True
      return self
    raise WorkdirError(f"could not take the lock {self.path}: another process keeps "
                       f"recreating it; use another --workdir")

  def _remove_stale(self):
    try:
      os.unlink(self.path)
    except FileNotFoundError:
      pass

  def release(self):
    if self.held:
      try:
        owner = self._owner()
        if owner is None or owner.get("pid") == os.getpid():
          os.unlink(self.path)
      except FileNotFoundError:
        pass
      self.held = False

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()
    return False


# ----------------------------------------------------------------------------
# Which config a workdir belongs to


def _flat(d):
  from el_jax import runner
  return runner.flatten({k: v for k, v in d.items() if k != CHANGES_KEY})


def stored_config(workdir):
  """The config.json of `workdir` as a dict (None if there is none)."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return None
  return read_json(path, what="the config this workdir was trained with; move the workdir "
                   "away or restore the file")


def parse_allowed(spec):
  """"optim.lr,optim.warmup_steps" (or a list) -> a tuple of keys, each checked to be changeable."""
  keys = [k.strip() for k in (spec.split(",") if isinstance(spec, str) else spec or ())]
  keys = tuple(k for k in keys if k)
  bad = [k for k in keys if not (k.startswith(CHANGEABLE_PREFIXES) or k in CHANGEABLE_FIELDS)]
  if bad:
    raise WorkdirError(
        f"--allow_config_change cannot allow {', '.join(bad)}: only optimizer and loss fields "
        f"(optim.*, loss.*) and train.num_steps may change on a trained workdir (the "
        f"checkpoints hold the model and data of the old config)")
  return keys


def describe_diff(old, new, keys, limit=6):
  """"a.b: 1 -> 2, c: 'x' -> '<absent>' (and N more)" for the first `limit` of `keys`."""
  shown = ", ".join(f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
                    for k in keys[:limit])
  return shown + (f" (and {len(keys) - limit} more)" if len(keys) > limit else "")


def check_config(config, workdir, resumable=frozenset(), allow=()):
  """Refuses a workdir trained with another config; returns the allowed changes.

  Fields in `resumable` may differ freely (they do not change what is
  computed); fields in `allow` (see `parse_allowed`) may differ and are
  returned as {key: [old, new]} so that the caller records them; any other
  difference is a WorkdirError listing it.
  """
  from el_jax import runner
  old_d = stored_config(workdir)
  if old_d is None:
    return {}
  old, new = _flat(old_d), runner.flatten(runner.config_dict(config))
  diff = runner.config_diff(old, new, frozenset(resumable))
  refused = [k for k in diff if k not in allow]
  if refused:
    changeable = [k for k in refused if k.startswith(CHANGEABLE_PREFIXES) or k in CHANGEABLE_FIELDS]
    hint = (f", or continue it with the new value by adding --allow_config_change="
            f"{','.join(changeable)}" if changeable and len(changeable) == len(refused) else "")
    raise WorkdirError(
        f"workdir {workdir} was trained with a different config "
        f"({describe_diff(old, new, refused)}); its "
        f"checkpoints and finished seeds do not belong to this config. Use another --workdir, "
        f"move this one away to start afresh{hint}")
  return {k: [old.get(k), new.get(k)] for k in diff}


def record_config(config, workdir, changes=None, resume_steps=None):
  """Writes config.json (atomically), keeping and extending its history of allowed changes."""
  from el_jax import runner
  old = stored_config(workdir) or {}
  history = list(old.get(CHANGES_KEY, []))
  if changes:
    history.append({"changes": changes, "resume_steps": resume_steps or {},
                    "time": datetime.datetime.now().isoformat(timespec="seconds")})
  out = runner.config_dict(config)
  if history:
    out[CHANGES_KEY] = history
  write_json(os.path.join(workdir, "config.json"), out)
  return history
