"""Multi-process training (el_jax.infra.distributed, el_jax.run.launch): the copy-task `test` config
trained by 2 processes (1 CPU device each, gloo collectives) gives what 1 process gives.

The two runs are subprocesses started together (module fixture). Both get the suite's
compile settings (`reliability.env`: LLVM optimisation level 0, which halves the compile time
of the train step on CPU, the cost of these tests); both runs compile with them, so they do
not weaken the comparison.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from el_jax.infra import checkpoint
from el_jax.infra import distributed
from el_jax.run import launch
import reliability as rel
import shared_fixtures  # tests/shared_fixtures.py

COPY = "--config=configs/copy_task.py:test"
# 4 steps, an evaluation at step 2 and at the end, checkpoints at steps 2 and 4, 1 layer.
OVERRIDES = ("--config.model.num_layers=1", "--config.train.num_steps=4",
             "--config.train.eval_every=2", "--config.train.log_every=1",
             "--config.train.checkpoint_every=2")
# The 2-process step sums the gradient and metrics over 2 devices (per-device partial sums,
# then an all-reduce through gloo); the 1-process, 1-device step sums in one pass. Float32
# addition in another order differs by a few ulp per sum: on the full `test` config (8 steps)
# every metric agreed within 1.6e-7 relative, so 1e-5 leaves margin for 4 Adam steps, and is
# far below a real difference (every process putting the first rows of the batch fails
# this comparison: tried). Accuracies (greedy decoding) are equal unless a rounding flips an
# argmax tie. (2 processes against 1 process with 2 devices were bit-for-bit equal.)
RTOL, ATOL = 1e-5, 1e-6


def _popen(module, args, **env):
  return subprocess.Popen([sys.executable, "-m", module, *args], cwd=rel.ROOT,
                          env=rel.env(**env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _finish(proc, timeout=300):
  out, err = proc.communicate(timeout=timeout)
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """{"one": (workdir, proc), "two": (workdir, proc)}: 1 process on 1 device, and 2
  processes on 1 device each through el_jax.run.launch, started together (once per session)."""
  return shared_fixtures.once_per_session(tmp_path_factory, "multiprocess_runs", _run_both)


def _run_both(base):
  one, two = base / "one", base / "two"
  p1 = _popen("el_jax.main", [COPY, f"--workdir={one}", *OVERRIDES], JAX_NUM_CPU_DEVICES=1)
  p2 = _popen("el_jax.run.launch", ["--num_processes=2", "--", COPY, f"--workdir={two}", *OVERRIDES])
  r1, r2 = _finish(p1), _finish(p2)
  assert r1.returncode == 0, r1.stderr[-3000:]
  assert r2.returncode == 0, r2.stdout[-1000:] + r2.stderr[-3000:]
  return {"one": (one, r1), "two": (two, r2)}


def _close(a, b, where):
  """Same keys; ints and strings equal, floats within RTOL / ATOL; recursive."""
  if isinstance(a, dict):
    assert isinstance(b, dict) and sorted(a) == sorted(b), f"{where}: {sorted(a)} vs {b}"
    for k in a:
      _close(a[k], b[k], f"{where}.{k}")
  elif isinstance(a, list):
    assert isinstance(b, list) and len(a) == len(b), where
    for i, (x, y) in enumerate(zip(a, b)):
      _close(x, y, f"{where}[{i}]")
  elif isinstance(a, float) or isinstance(b, float):
    np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg=where)
  else:
    assert a == b, f"{where}: {a!r} != {b!r}"


def _metrics(workdir):
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  for r in rows:
    r.pop("time_s", None)  # wall time
  return rows


def test_two_processes_give_the_summary_of_one(runs):
  one = json.loads((runs["one"][0] / "summary.json").read_text())
  two = json.loads((runs["two"][0] / "summary.json").read_text())
  assert one["per_seed"][0]["step"] == 4 and "test_em_hard" in one["per_seed"][0]
  # Where each ran differs by design: 1 device in 1 process, 2 devices in 2 processes.
  r1, r2 = one.pop("ran_on"), two.pop("ran_on")
  assert (r1["device_count"], r1["process_count"]) == (1, 1), r1
  assert (r2["device_count"], r2["process_count"]) == (2, 2), r2
  assert all(r1[k] == r2[k] for k in ("platform", "device_kind", "jax", "flax", "optax"))
  _close(one, two, "summary")
  _close(one["per_seed"][0], json.loads((runs["two"][0] / "seed_0" / "final.json").read_text()),
         "final.json")


def test_two_processes_log_the_metrics_rows_of_one(runs):
  one, two = _metrics(runs["one"][0]), _metrics(runs["two"][0])
  # once each (process 1 writes nothing): eval 0, train 1..4, eval 2, eval 4
  assert [(r["kind"], r["step"]) for r in two] == [(r["kind"], r["step"]) for r in one]
  assert len(two) == 7
  _close(one, two, "metrics")


def test_checkpoints_saved_by_both_processes_hold_the_same_params(runs):
  """The 2-process checkpoint (saved by both processes through orbax) is complete, and
  `checkpoint.load_params_from` (train.init_from, restore_params) reads it in one process."""
  import jax
  import orbax.checkpoint as ocp
  for workdir, _ in runs.values():
    assert checkpoint.checkpoint_steps(str(workdir), 0) == [2, 4]
  mngr = ocp.CheckpointManager(str(runs["one"][0] / "seed_0" / "checkpoints"))
  try:
    one = mngr.restore(4, args=ocp.args.StandardRestore())["params"]
  finally:
    mngr.close()
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), one)
  here = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  two, step = checkpoint.load_params_from(str(runs["two"][0]), 0, abstract, here)
  assert step == 4
  flat_one = jax.tree_util.tree_flatten_with_path(one)[0]
  flat_two = dict(jax.tree_util.tree_flatten_with_path(two)[0])
  assert len(flat_one) == len(flat_two) > 5
  for path, x in flat_one:
    # the gradient sums differ by a few ulp (see RTOL); Adam divides by sqrt(v), so a weight
    # can move by a few 1e-7 more or less per step (measured on the `test` config, 8 steps:
    # at most 1.2e-6 absolute); a wrong batch moves weights by ~lr = 3e-3
    np.testing.assert_allclose(np.asarray(flat_two[path]), np.asarray(x), rtol=1e-4, atol=1e-5,
                               err_msg=jax.tree_util.keystr(path))


def test_process_0_owns_the_workdir_and_the_output(runs):
  (one, r1), (two, r2) = runs["one"], runs["two"]

  def files(d):
    return sorted(os.path.relpath(os.path.join(p, f), d) for p, _, fs in os.walk(d) for f in fs
                  if "checkpoints" not in p)

  assert files(two) == files(one)  # no .lock left, no file of process 1's own
  assert "2 cpu device(s), 2 process(es)" in r2.stderr
  assert r2.stderr.count("results: ") == 1 and "[process 1]" not in r2.stdout + r2.stderr
  assert json.loads((two / "config.json").read_text()) == json.loads(
      (one / "config.json").read_text())


def test_a_refusal_by_process_0_stops_every_process(runs):
  """Process 0 refuses the workdir (another config); process 1 hears it and stops too,
  instead of waiting for a collective: one error line, exit 2, the workdir untouched."""
  workdir = runs["two"][0]
  before = rel.snapshot(workdir)
  t0 = time.time()
  proc = _finish(_popen("el_jax.run.launch", ["--num_processes=2", "--", COPY, f"--workdir={workdir}",
                                          *OVERRIDES, "--config.optim.lr=0.5"]), timeout=120)
  rel.assert_one_line_error(proc, r"was trained with a different config \(optim\.lr: 0\.003 -> "
                                  r"0\.5\)")
  assert time.time() - t0 < launch.GRACE_S + 60  # nobody waited for the grace period to end
  assert rel.snapshot(workdir) == before


@pytest.mark.parametrize("args, pattern", [
    (["--num_processes=0"], r"^error: --num_processes=0 must be an integer >= 1$"),
    (["--num_processes=two"], r"^error: flag --num_processes=two: .*int"),
    (["--devices_per_process=0"], r"^error: --devices_per_process=0 must be an integer >= 1$"),
    (["--port=70000"], r"^error: --port=70000 must be an integer in \[0, 65535\]"),
])
def test_bad_launcher_flag_is_one_line(args, pattern, capsys):
  with pytest.raises(SystemExit) as e:
    launch.main(["launch", *args, "--", COPY, "--workdir=unused"])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and re.search(pattern, err[0]), err


def test_launcher_needs_the_main_flags_after_dashes(capsys):
  with pytest.raises(SystemExit) as e:
    launch.main(["launch", "--num_processes=2", COPY])
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      f"error: --config is a flag of el_jax.main: put el_jax.main's flags after --, e.g. "
      f"python -m el_jax.run.launch --num_processes=2 -- {COPY}\n")
  with pytest.raises(SystemExit):
    launch.main(["launch", "--num_processes=2"])
  assert "give el_jax.main's flags after --" in capsys.readouterr().err


def test_stopping_the_launcher_stops_its_processes(tmp_path):
  proc = subprocess.Popen([sys.executable, "-m", "el_jax.run.launch", "--num_processes=2", "--", COPY,
                           f"--workdir={tmp_path / 'run'}"], cwd=rel.ROOT, env=rel.env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  children_file = f"/proc/{proc.pid}/task/{proc.pid}/children"
  children = []
  t_end = time.time() + 60
  while len(children) < 2 and time.time() < t_end:
    time.sleep(0.1)
    with open(children_file) as f:
      children = [int(p) for p in f.read().split()]
  assert len(children) == 2
  proc.send_signal(signal.SIGTERM)
  proc.communicate(timeout=launch.GRACE_S + 30)
  assert proc.returncode == 128 + signal.SIGTERM
  for pid in children:
    assert not os.path.exists(f"/proc/{pid}"), f"process {pid} outlived the launcher"


_FAKE = """
import os, sys, time
if os.environ["EL_JAX_PROCESS_ID"] == "1":
  print("line of process 1", flush=True)
  print("error: process 1 broke", file=sys.stderr, flush=True)
  sys.exit(3)
print("process 0 waits", flush=True)
time.sleep(60)
"""


def test_a_failing_process_is_shown_and_the_others_stopped():
  """Process 1 fails, process 0 would wait forever (as in a collective): after the grace
  period process 0 is stopped, process 1's last lines are shown, its status is returned.
  (The launcher runs in a subprocess: forking from this process, where JAX runs, is unsafe.)"""
  script = ("import sys; from el_jax.run import launch; launch.GRACE_S = 0.5; "
            f"raise SystemExit(launch.run(2, [], program=(sys.executable, '-c', {_FAKE!r})))")
  t0 = time.time()
  proc = subprocess.run([sys.executable, "-c", script], cwd=rel.ROOT, env=rel.env(),
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 3 and time.time() - t0 < 30, proc.stderr
  assert "process 0 waits" in proc.stdout  # process 0's output passes through
  *shown, last = proc.stderr.splitlines()[-3:]
  assert shown == ["[process 1] line of process 1", "[process 1] error: process 1 broke"]
  assert re.fullmatch(r"error: process 1 \(pid \d+\) of 2 exited with status 3 \(its last lines "
                      r"above\); the others were stopped", last), last


# Process 0 prints its pid and kills itself with SIGKILL (no handler runs, nothing printed);
# process 1 either waits (as in a collective) or, once process 0 is gone (reaped by the
# launcher), aborts the way JAX's coordination agent does when the coordinator dies.
_FAKE_KILLED_0 = """
import os, signal, sys, time
if os.environ["EL_JAX_PROCESS_ID"] == "0":
  print(f"process 0 pid {os.getpid()}", flush=True)
  time.sleep(0.5)
  os.kill(os.getpid(), signal.SIGKILL)
print("process 1 waits", flush=True)
if sys.argv[1] == "aborts":
  time.sleep(0.5)
  with open(f"/proc/{os.getppid()}/task/{os.getppid()}/children") as f:
    while len(f.read().split()) > 1:  # process 0 not yet reaped by the launcher
      time.sleep(0.05)
      f.seek(0)
  print("F0000 Terminating process because the JAX distributed service detected fatal errors",
        flush=True)
  import resource
  resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the repository
  os.abort()
time.sleep(60)
"""


@pytest.mark.parametrize("then", ["waits", "aborts"])
def test_process_0_killed_by_a_signal_is_named(then):
  """kill -9 of process 0: the launcher's last line names process 0, its pid and the signal
  (process 0 printed nothing: its output, passed through, says nothing of it), whether
  process 1 then waits (stopped after the grace period) or ends by itself. Before the fix
  the launcher printed no line (it took a failed process 0 to have printed its own error):
  exit status 137 and nothing said."""
  script = ("import sys; from el_jax.run import launch; launch.GRACE_S = 0.5; raise SystemExit("
            f"launch.run(2, [{then!r}], program=(sys.executable, '-c', {_FAKE_KILLED_0!r})))")
  proc = subprocess.run([sys.executable, "-c", script], cwd=rel.ROOT, env=rel.env(),
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 128 + signal.SIGKILL, proc.stdout + proc.stderr
  pid = re.search(r"process 0 pid (\d+)", proc.stdout).group(1)
  stopped = "; the others were stopped" if then == "waits" else ""
  assert proc.stderr.splitlines()[-1:] == [
      f"error: process 0 (pid {pid}) of 2 was killed by SIGKILL{stopped}"], proc.stderr
  assert "[process 1]" not in proc.stderr  # the cause is process 0, not what followed it


def test_environment_mistakes_are_named(monkeypatch):
  for k in (distributed.ENV_COORDINATOR, distributed.ENV_NUM_PROCESSES, distributed.ENV_PROCESS_ID):
    monkeypatch.delenv(k, raising=False)
  assert distributed.initialize() is False  # nothing asked: a plain single-process run
  monkeypatch.setenv(distributed.ENV_NUM_PROCESSES, "2")
  with pytest.raises(ValueError, match=r"EL_JAX_NUM_PROCESSES set but EL_JAX_PROCESS_ID, "
                                       r"JAX_COORDINATOR_ADDRESS not"):
    distributed.initialize()
  monkeypatch.setenv(distributed.ENV_PROCESS_ID, "2")
  monkeypatch.setenv(distributed.ENV_COORDINATOR, "127.0.0.1:1")
  with pytest.raises(ValueError, match=r"EL_JAX_PROCESS_ID='2' must be an integer in \[0, 1\]"):
    distributed.initialize()
  monkeypatch.setenv(distributed.ENV_NUM_PROCESSES, "x")
  with pytest.raises(ValueError, match=r"EL_JAX_NUM_PROCESSES='x' must be an integer >= 1"):
    distributed.initialize()


class _FakeSharding:
  """What `local_rows` reads of a sharding: the index of each of this process's devices."""

  def __init__(self, slices):
    self.slices = slices

  def addressable_devices_indices_map(self, shape):
    return {f"dev{i}": (s, slice(None)) for i, s in enumerate(self.slices)}


def test_local_rows_are_the_rows_of_this_process_devices():
  # process 1 of 2 with 2 devices each, 8 rows: rows [4, 8) = [i*n/P, (i+1)*n/P)
  rows = distributed.local_rows(_FakeSharding([slice(6, 8), slice(4, 6)]), (8, 3))
  np.testing.assert_array_equal(rows, np.arange(4, 8))
  # devices interleaved across processes, and a replicated slice counted once
  rows = distributed.local_rows(_FakeSharding([slice(6, 8), slice(0, 2), slice(0, 2)]), (8, 3))
  np.testing.assert_array_equal(rows, [0, 1, 6, 7])
  # one process: every row, and put_rows is a plain device_put of them
  import jax
  from jax.sharding import NamedSharding, PartitionSpec as P
  mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
  sharding = NamedSharding(mesh, P("data"))
  np.testing.assert_array_equal(distributed.local_rows(sharding, (6, 2)), np.arange(6))
  x = np.arange(12.0, dtype=np.float32).reshape(6, 2)
  out = distributed.put_rows({"x": x}, sharding)["x"]
  assert out.sharding == sharding
  np.testing.assert_array_equal(np.asarray(out), x)
