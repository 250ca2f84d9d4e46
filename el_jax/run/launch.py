r"""Runs `python -m el_jax.main` in several processes on this machine (el_jax.infra.distributed).

  python -m el_jax.run.launch --num_processes=2 -- --config=configs/copy_task.py:test --workdir=runs/x
  python -m el_jax.run.launch --num_processes=2 --devices_per_process=4 -- --config=... --workdir=...

Everything after `--` is passed to every process's el_jax.main. Each process gets the
environment of `el_jax.infra.distributed.initialize` (the coordinator on a free port of this
machine, the number of processes, its index) and `--devices_per_process` CPU devices
(JAX_NUM_CPU_DEVICES); the processes then train as one job over all their devices, their
CPU collectives through gloo.

Output: process 0's stdout and stderr are passed through unchanged (it writes the metrics,
the summary and the table); the other processes' output is dropped unless `--log_all`
(then each line is prefixed with `[process <i>]`). When a process fails, the launcher's last
line names the first that failed, with its pid and how it ended ("error: process 1 (pid N)
of 2 exited with status 3 (its last lines above) ...", "... was killed by SIGKILL"), after
that process's last lines if it is not process 0; unless process 0 exited with an error
status first (its own error line, passed through, is then the last line). When one
process fails, the others get 10 s to stop by themselves, then are stopped. The exit status
is the worst of the processes that ended by themselves (0 ok, 1 a diverged run, 2 an
expected error, 128 + N killed by signal N).
Stopping the launcher (Ctrl-C, SIGTERM) stops the processes (SIGINT, then SIGKILL after
10 s); if the launcher is killed outright, the kernel stops them (PR_SET_PDEATHSIG).

`--devices_per_process` sets CPU devices; on a machine with several GPUs every process
would see every GPU (give each its own through CUDA_VISIBLE_DEVICES; not done here).
On a TPU slice or a SLURM cluster do not use this: run `python -m el_jax.main --distributed`
on every host (one process per host), and JAX finds the others itself.
"""
import collections
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from absl import flags

from el_jax.run import cli
from el_jax.infra import distributed

GRACE_S = 10.0  # how long the other processes may take to stop by themselves
TAIL_LINES = 30  # lines kept of each non-main process's output (shown if it fails)


def _flags():
  fv = flags.FlagValues()
  flags.DEFINE_integer("num_processes", 2, "processes to start on this machine (>= 1)",
                       flag_values=fv)
  flags.DEFINE_integer("devices_per_process", 1, "CPU devices of each process "
                       "(JAX_NUM_CPU_DEVICES, >= 1)", flag_values=fv)
  flags.DEFINE_integer("port", 0, "coordinator port on this machine (0 = a free one)",
                       flag_values=fv)
  flags.DEFINE_boolean("log_all", False, "show every process's output, each line prefixed "
                       "with [process <i>] (default: only process 0's)", flag_values=fv)
  return fv


_MAIN_FLAGS = ("--config", "--workdir", "--allow_config_change", "--distributed")


def parse(argv):
  """argv -> (flag values, the el_jax.main arguments after `--`); mistakes are one line."""
  argv = list(argv)
  if "--" in argv:
    cut = argv.index("--")
    own, rest = argv[:cut], argv[cut + 1:]
  else:
    own, rest = argv, []
  misplaced = [a for a in own[1:] if a.split("=")[0].split(".")[0] in _MAIN_FLAGS]
  if misplaced:
    raise cli.UsageError(f"error: {misplaced[0].split('=')[0]} is a flag of el_jax.main: put "
                         f"el_jax.main's flags after --, e.g. python -m el_jax.run.launch "
                         f"--num_processes=2 -- {misplaced[0]}")
  fv = cli.parse_plain_flags(_flags(), own, doc=__doc__)
  for name, low in (("num_processes", 1), ("devices_per_process", 1), ("port", 0)):
    if fv[name].value < low or (name == "port" and fv.port > 65535):
      allowed = "in [0, 65535] (0 = a free port)" if name == "port" else f">= {low}"
      raise cli.UsageError(f"error: --{name}={fv[name].value} must be an integer {allowed}")
  if not rest:
    raise cli.UsageError("error: give el_jax.main's flags after --, e.g. python -m "
                         "el_jax.run.launch --num_processes=2 -- --config=configs/copy_task.py:test "
                         "--workdir=runs/x")
  return fv, rest


def free_port():
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def process_env(i, num, port, devices, base=None):
  """The environment of process `i` of `num` (el_jax.infra.distributed.initialize reads it)."""
  env = dict(os.environ if base is None else base)
  env.update({distributed.ENV_COORDINATOR: f"127.0.0.1:{port}",
              distributed.ENV_NUM_PROCESSES: str(num), distributed.ENV_PROCESS_ID: str(i),
              "JAX_NUM_CPU_DEVICES": str(devices)})
  return env


def _die_with_parent():
  """In the child, before exec: SIGTERM when the launcher dies (Linux)."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


class _Child:
  def __init__(self, i, command, env, log_all, lock):
    self.i, self.log_all, self.lock = i, log_all, lock
    self.tail = collections.deque(maxlen=TAIL_LINES)
    self.stopped_by_us = False
    self.ended_round = None  # the round of the launcher's loop that first saw it ended
    pipe = None if i == 0 else subprocess.PIPE
    self.proc = subprocess.Popen(command, env=env,
                                 stdout=pipe, stderr=subprocess.STDOUT if pipe else None,
                                 stdin=subprocess.DEVNULL, process_group=0,
                                 preexec_fn=_die_with_parent)
    self.reader = None

  def start_reading(self):
    if self.proc.stdout is not None:
      self.reader = threading.Thread(target=self._read, daemon=True)
      self.reader.start()

  def _read(self):
    for raw in self.proc.stdout:
      line = raw.decode(errors="replace").rstrip("\n")
      self.tail.append(line)
      if self.log_all:
        with self.lock:
          print(f"[process {self.i}] {line}", file=sys.stderr, flush=True)

  def signal(self, sig):
    if self.proc.poll() is None:
      self.stopped_by_us = True
      try:
        self.proc.send_signal(sig)
      except ProcessLookupError:
        pass


def _status(rc):
  """A shell-style exit status: a death by signal N is 128 + N."""
  return rc if rc >= 0 else 128 - rc


def _how_it_ended(rc):
  """'exited with status 3', 'was killed by SIGKILL' (Popen's returncode -N: signal N)."""
  if rc >= 0:
    return f"exited with status {rc}"
  try:
    name = signal.Signals(-rc).name
  except ValueError:
    name = f"signal {-rc}"
  return f"was killed by {name}"


def _first_failure(children):
  """The process whose failure to report (`run`), or None when there is nothing to add.

  Among the processes that failed by themselves, the first the launcher saw ended (in the
  same round of its loop: one killed by a signal before one that exited with a status, as
  the exit is more likely the consequence, then the lowest index). None when every process
  succeeded, or when process 0 exited with an error status and no process had been killed
  by a signal by then: process 0 printed its own error (its output is passed through), and
  it must stay the last line (a refusal of the workdir reaches the other processes, which
  may exit a moment before process 0 does). A process killed by a signal printed nothing,
  so it is named whatever its index: process 0's output says nothing of a kill -9."""
  failed = sorted((c for c in children if not c.stopped_by_us and c.proc.returncode != 0),
                  key=lambda c: (c.ended_round, c.proc.returncode > 0, c.i))
  if not failed:
    return None
  main = children[0]
  if main in failed and main.proc.returncode > 0 and not any(
      c.proc.returncode < 0 and c.ended_round <= main.ended_round for c in failed):
    return None
  return failed[0]


def run(num_processes, args, devices_per_process=1, port=0, log_all=False, program=None):
  """Runs el_jax.main `args` in `num_processes` processes; returns the exit status.
  `program`: the command instead of `python -m el_jax.main` (for tests)."""
  command = [*(program or (sys.executable, "-m", "el_jax.main")), *args]
  port = port or free_port()
  lock = threading.Lock()
  children = []
  interrupted = []

  def on_signal(sig, _frame):
    interrupted.append(sig)
    for c in children:
      c.signal(signal.SIGINT)  # el_jax.main stops cleanly (its lock released) on SIGINT

  old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    for i in range(num_processes):
      env = process_env(i, num_processes, port, devices_per_process)
      children.append(_Child(i, command, env, log_all, lock))
    for c in children:
      c.start_reading()
    # When a process fails (or the launcher is stopped), the others get GRACE_S to stop by
    # themselves; then SIGTERM (SIGKILL if the launcher was stopped: SIGINT went out at once),
    # then SIGKILL after another GRACE_S.
    deadline, rounds, loop = None, 0, 0
    while True:
      loop += 1
      for c in children:
        if c.ended_round is None and c.proc.poll() is not None:
          c.ended_round = loop
      if all(c.ended_round is not None for c in children):
        break
      failed = [c for c in children if c.proc.returncode not in (None, 0) and not c.stopped_by_us]
      if deadline is None and (failed or interrupted):
        deadline = time.time() + GRACE_S
      if deadline is not None and time.time() > deadline:
        sig = signal.SIGKILL if (rounds or interrupted) else signal.SIGTERM
        for c in children:
          c.signal(sig)
        deadline, rounds = time.time() + GRACE_S, rounds + 1
      time.sleep(0.05)
  finally:
    for c in children:  # the launcher itself failed: leave nothing running
      if c.proc.poll() is None:
        c.signal(signal.SIGKILL)
        c.proc.wait()
    for s, h in old.items():
      signal.signal(s, h)
  for c in children:
    if c.reader is not None:
      c.reader.join(timeout=5)
  if interrupted:
    return 128 + interrupted[0]
  own = [c for c in children if not c.stopped_by_us]
  worst = max((_status(c.proc.returncode) for c in own), default=1)
  bad = _first_failure(children)
  if bad is not None:
    shown = bad.i != 0 and bad.tail  # (process 0's output was passed through already)
    stopped = any(c.stopped_by_us for c in children)
    with lock:
      for line in (bad.tail if shown else ()):
        print(f"[process {bad.i}] {line}", file=sys.stderr)
      print(f"error: process {bad.i} (pid {bad.proc.pid}) of {num_processes} "
            f"{_how_it_ended(bad.proc.returncode)}"
            f"{' (its last lines above)' if shown else ''}"
            f"{'; the others were stopped' if stopped else ''}", file=sys.stderr)
  return worst


@cli.guard
def main(argv=None):
  fv, rest = parse(sys.argv if argv is None else argv)
  raise SystemExit(run(fv.num_processes, rest, fv.devices_per_process, fv.port, fv.log_all))


if __name__ == "__main__":
  main()
