"""Safe workdirs: atomic JSON files, a lock against two runs, the config a workdir belongs to.

  from el_jax.infra import workdir as wd
  wd.write_json(path, obj)                    # temp file + os.replace: never a torn file
  obj = wd.read_json(path, what="final.json of seed 0")   # WorkdirError naming the file
  with wd.Lock(workdir):                      # a second run on this workdir is refused
    ...
  with wd.uninterrupted("the checkpoint of step 8"):   # SIGINT / SIGTERM wait for the block
    ...

Which config a workdir belongs to (config.json, `--allow_config_change`) is
`el_jax.run.config.check_config` / `record_config`.

Every expected fault is a `WorkdirError` (a ValueError) whose one-line message
names the file and what to do; `el_jax.run.cli.guard` prints it without a
traceback.

Interrupts: `catch_interrupts()` (installed by `el_jax.run.cli.guard`) turns SIGINT and SIGTERM
into `Interrupted` (a KeyboardInterrupt) raised in the main thread, so that a terminated run
unwinds like a Ctrl-C one (the lock is released, the message says how to resume).
`uninterrupted(what)` defers both signals while a block that must not be cut in half runs
(a checkpoint save, the lock file, a metrics row): the signal takes effect when it ends.
"""
import contextlib
import datetime
import errno
import json
import os
import signal
import socket
import sys
import tempfile
import threading


LOCK_NAME = ".lock"


class WorkdirError(ValueError):
  """A workdir that cannot be used as asked (locked, other config, damaged file)."""


class NotWritable(WorkdirError):
  """A workdir whose lock cannot be written (read-only file system, permissions)."""


# errno values meaning "this folder cannot be written": `Lock` raises NotWritable on them.
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


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
    except KeyboardInterrupt:  # a signal deferred while taking the lock: give it back
      self.release()
      raise
    except WorkdirError:
      raise
    except OSError as e:
      cls = NotWritable if e.errno in READ_ONLY_ERRNOS else WorkdirError
      raise cls(f"cannot use workdir {self.workdir}: {e.strerror or e} "
                f"({e.filename or self.path}); give a --workdir in a folder you can "
                f"write to") from None

  def _acquire(self):
    os.makedirs(self.workdir, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "since": datetime.datetime.now().isoformat(timespec="seconds"),
          "argv": " ".join(sys.argv)[:300]}
    for _ in range(3):
      try:
        with uninterrupted():  # never a lock file without its owner (a signal waits)
          fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
          try:
            with os.fdopen(fd, "w") as f:
              json.dump(me, f)
          except BaseException:
            os.unlink(self.path)
            raise
          self.held = True
        return self
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
    raise WorkdirError(f"could not take the lock {self.path}: another process keeps "
                       f"recreating it; use another --workdir")

  def _remove_stale(self):
    try:
      os.unlink(self.path)
    except FileNotFoundError:
      pass

  def release(self):
    if self.held:
      with uninterrupted():
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
# Interrupts

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
  """SIGINT or SIGTERM received by a run under `catch_interrupts` (el_jax.run.cli.guard)."""

  def __init__(self, signum):
    super().__init__(signum)
    self.signum = int(signum)

  @property
  def name(self):
    return signal.Signals(self.signum).name

  @property
  def exit_status(self):
    """128 + the signal number, as a shell reports a process killed by it (130, 143)."""
    return 128 + self.signum


_deferring = []  # the `uninterrupted` blocks running (main thread only)


def _main_thread():
  return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def catch_interrupts():
  """While the block runs, SIGINT and SIGTERM raise `Interrupted` in the main thread (the
  first one: later ones are ignored, so that the cleanup the first one starts -- releasing
  the lock, closing checkpoint managers -- is not cut short). Nothing to do outside the
  main thread."""
  if not _main_thread():
    yield
    return
  fired = []

  def handler(signum, frame):
    if fired:  # already stopping
      return
    fired.append(Interrupted(signum))
    raise fired[-1]

  def unraisable(u):
    # A signal handled while Python ran a garbage-collection callback or a __del__: the
    # exception cannot leave it and would be lost. Send the signal again, a moment later.
    if fired and u.exc_value is fired[-1]:
      fired.clear()
      resend = threading.Timer(0.05, os.kill, (os.getpid(), u.exc_value.signum))
      resend.daemon = True
      resend.start()
      return
    previous_hook(u)

  previous = {s: signal.signal(s, handler) for s in INTERRUPT_SIGNALS}
  previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
  try:
    yield
  finally:
    for s, h in previous.items():
      signal.signal(s, h if h is not None else signal.SIG_DFL)
    if sys.unraisablehook is unraisable:
      sys.unraisablehook = previous_hook


@contextlib.contextmanager
def uninterrupted(what=None):
  """Defers SIGINT and SIGTERM while the block runs: a signal received meanwhile is
  delivered again (to whatever handled it before) when the block has ended, so that the
  block is never cut in half (if the block raised, the interrupt takes the error's place).
  `what` ("the checkpoint of step 8") is named on stderr when a
  signal has to wait for it. Nothing to do outside the main thread."""
  if not _main_thread() or _deferring:  # (nested: the outermost block defers for it)
    yield
    return
  pending = []

  def defer(signum, frame):
    if not pending and what:
      print(f"{signal.Signals(signum).name} received: finishing {what} first", file=sys.stderr,
            flush=True)
    pending.append(signum)

  previous = {s: signal.signal(s, defer) for s in INTERRUPT_SIGNALS}
  _deferring.append(what)
  try:
    yield
  finally:
    _deferring.pop()
    for s, h in previous.items():
      signal.signal(s, h if h is not None else signal.SIG_DFL)
    if pending:
      signal.raise_signal(pending[0])
