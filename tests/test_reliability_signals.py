"""Reliability, signals: SIGINT and SIGTERM at any point of a run stop it cleanly, and the next
run resumes it to the numbers of an uninterrupted run. The two share one handler
(el_jax.infra.workdir.catch_interrupts): both are sent while training, one of them at each other point.

Each case runs `python -m el_jax.main` on configs/copy_task.py:test (longer than the
default: 400 steps, a checkpoint and an evaluation every 100) and sends the signal either
from outside, once the run has logged its first training row, or from inside at a chosen
point (a checkpoint save, an evaluation, a flatness measurement: a prelude wraps that
function to signal its own process, so the point is hit every time). Then it checks: exit
status 130 (SIGINT) / 143 (SIGTERM), the last line, no traceback nor orbax background
noise, the workdir's lock released; and that running the same command again finishes with
the summary.json and evaluation rows of an uninterrupted run. A kill -9 between two stacked
seeds' checkpoint saves resumes to the same numbers too. SIGINT while XLA compiles ends
the process with the message and status 130, never a crash in the interpreter's teardown.
"""
import functools
import hashlib
import json
import math
import os
import signal
import time

import pytest

import reliability as rel
import shared_fixtures  # tests/shared_fixtures.py

COPY = "--config=configs/copy_task.py:test"
LONG = (COPY, "--config.train.num_steps=400", "--config.train.checkpoint_every=100",
        "--config.train.eval_every=100", "--config.train.log_every=20")
STACKED = LONG + ("--config.seeds=(0,1)", "--config.train.vmap_seeds=True")
FLATNESS = (COPY, "--config.train.num_steps=100", "--config.train.checkpoint_every=50",
            "--config.train.eval_every=50", "--config.flatness.every=50",
            "--config.flatness.num_probes=2", "--config.flatness.num_batches=1")
NOISE = ("Traceback", "Exception ignored", "Event loop is closed", "Invalid file descriptor",
         "was never retrieved")


def _start(args, workdir, prelude=None):
  """`python -m el_jax.main *args --workdir=...` in the background (`prelude`: see
  `reliability.start_with`)."""
  args = [*args, f"--workdir={workdir}"]
  return rel.start(*args) if prelude is None else rel.start_with(prelude, *args)


def _signal_in(module, function, when, action):
  """A prelude wrapping `module.function` so that, on the call where `when` (a Python
  expression of the call's `args`) holds, it runs `action` (Python code) first."""
  return f"""
import os, signal
import {module} as _m
_orig = _m.{function}
def _wrapped(*args, **kwargs):
  if {when}:
    {action}
  return _orig(*args, **kwargs)
_m.{function} = _wrapped
"""


def _self_signal(sig):
  return f"os.kill(os.getpid(), signal.{sig.name})"


# Where the signal comes: ("outside", None) once the first training row is logged, or a prelude.
SAVE_200 = ("orbax.checkpoint", "CheckpointManager.save", "args[1] == 200")
SAVE_200_SEED_1 = ("orbax.checkpoint", "CheckpointManager.save",
                   "args[1] == 200 and str(args[0].directory).endswith('seed_1/checkpoints')")
EVAL_100 = ("el_jax.run.train", "eval_row", "args[2] == 100")
FLATNESS_50 = ("el_jax.core.flatness", "measure_during_training", "True")

# SIGINT and SIGTERM share one handler (el_jax.infra.workdir.catch_interrupts): both signals while
# training (their exit status and line differ), one of the two at each other point.
CASES = {
    "sigint_training": (LONG, signal.SIGINT, None),
    "sigterm_training": (LONG, signal.SIGTERM, None),
    "sigint_checkpoint_save": (LONG, signal.SIGINT, SAVE_200),
    "sigterm_evaluation_after_checkpoint": (LONG, signal.SIGTERM, EVAL_100),
    "sigterm_flatness_hook": (FLATNESS, signal.SIGTERM, FLATNESS_50),
    "sigterm_stacked_seeds_training": (STACKED, signal.SIGTERM, None),
    "sigint_stacked_seeds_between_saves": (STACKED, signal.SIGINT, SAVE_200_SEED_1),
}


def _wait_for(predicate, timeout=180):
  return rel.wait_for(predicate, timeout, poll=0.02)


def _has_train_row(workdir):
  path = workdir / "metrics.jsonl"
  return path.exists() and '"kind": "train"' in path.read_text()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The summary.json and metrics rows of an uninterrupted run of `args` (one run per args in
  the session, shared by the xdist workers: `once_per_session`)."""
  def build(args, folder):
    workdir = folder / "run"
    proc = rel.run(*args, f"--workdir={workdir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (json.loads((workdir / "summary.json").read_text()),
            rel.read_jsonl(workdir / "metrics.jsonl"))

  def get(args):
    name = "signals_reference_" + hashlib.sha256(repr(args).encode()).hexdigest()[:16]
    return shared_fixtures.once_per_session(tmp_path_factory, name, functools.partial(build, args))
  return get


def _close(a, b, tol=1e-6):
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
  if isinstance(a, float) and isinstance(b, float):
    return a == b or (math.isfinite(a) and abs(a - b) <= tol * max(1.0, abs(b)))
  return a == b


def _logged(rows, kinds=("eval", "flatness")):
  """{(seed, step, kind): row} of the rows of `kinds`; every key once."""
  keys = [(r["seed"], r["step"], r["kind"]) for r in rows if r["kind"] in kinds]
  assert len(keys) == len(set(keys)), f"duplicated rows: {sorted(keys)}"
  return {(r["seed"], r["step"], r["kind"]): r for r in rows if r["kind"] in kinds}


def _assert_resumes_to_reference(args, workdir, reference):
  proc = rel.run(*args, f"--workdir={workdir}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert not (workdir / ".lock").exists()
  want_summary, want_rows = reference(args)
  summary = json.loads((workdir / "summary.json").read_text())
  assert _close(summary["per_seed"], want_summary["per_seed"]), (summary["per_seed"],
                                                                 want_summary["per_seed"])
  got, want = _logged(rel.read_jsonl(workdir / "metrics.jsonl")), _logged(want_rows)
  assert sorted(got) == sorted(want), "evaluation / flatness rows lost or added"
  for key in want:
    assert _close(got[key], want[key]), (key, got[key], want[key])
  return proc


@pytest.mark.parametrize("case", sorted(CASES))
def test_signal_stops_cleanly_and_the_run_resumes(case, tmp_path, reference):
  args, sig, where = CASES[case]
  workdir = tmp_path / "run"
  if where is None:  # from outside, in the middle of training
    proc = _start(args, workdir)
    assert _wait_for(lambda: _has_train_row(workdir) or proc.poll() is not None)
    proc.send_signal(sig)
  else:
    proc = _start(args, workdir, prelude=_signal_in(*where, _self_signal(sig)))
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 128 + sig, f"exit {proc.returncode}:\n{err[-3000:]}"
  lines = [line for line in err.splitlines() if line.strip()]
  assert lines[-1] == (f"interrupted ({sig.name}); run the same command again to resume "
                       f"from the last checkpoint"), err[-3000:]
  for noise in NOISE:
    assert noise not in err, err[-3000:]
  assert not (workdir / ".lock").exists(), "the lock was left behind"
  if where is SAVE_200 or where is SAVE_200_SEED_1:  # the save finished before the stop
    assert "finishing the checkpoint" in err, err[-3000:]
    for seed_dir in sorted(workdir.glob("seed_*")):
      assert (seed_dir / "checkpoints" / "200").is_dir(), os.listdir(seed_dir / "checkpoints")
  assert not list(workdir.glob("seed_*/checkpoints/*.orbax-checkpoint-tmp*"))
  _assert_resumes_to_reference(args, workdir, reference)


def test_kill_between_two_stacked_seeds_saves_resumes_every_row(tmp_path, reference):
  # kill -9 right after seed 0's checkpoint of step 200, before seed 1's: no handler runs.
  workdir = tmp_path / "run"
  proc = _start(STACKED, workdir, prelude="""
import os, signal
import orbax.checkpoint as ocp
_orig_save = ocp.CheckpointManager.save
def _save(self, step, *args, **kwargs):
  out = _orig_save(self, step, *args, **kwargs)
  if step == 200 and str(self.directory).endswith("seed_0/checkpoints"):
    os.kill(os.getpid(), signal.SIGKILL)
  return out
ocp.CheckpointManager.save = _save
""")
  proc.communicate(timeout=300)
  assert proc.returncode == -signal.SIGKILL
  assert (workdir / "seed_0" / "checkpoints" / "200").is_dir()
  assert not (workdir / "seed_1" / "checkpoints" / "200").exists()
  # Seed 0 resumes from step 200 (its evaluation of step 200, never logged, is computed from
  # that checkpoint), seed 1 from step 100; the stale lock is taken over.
  resumed = _assert_resumes_to_reference(STACKED, workdir, reference)
  assert "taking over its lock" in resumed.stderr
  assert "seed 0: logging the eval row of step 200" in resumed.stderr


# ----------------------------------------------------------------------------
# A signal while XLA compiles


# A prelude: SIGINT `delay` s after the first XLA compile of the run began (the compile of
# the state's initialisation, the first thing the run compiles), sent from a timer thread as
# a Ctrl-C from the terminal would come. The timer writes "SIGINT during a compile" first if
# that compile has not returned yet.
_SIGINT_IN_COMPILE = """
import os, signal, threading
from jax._src import compiler as _c
_orig = _c.backend_compile_and_load
_state = {{"started": False, "running": False}}
def _send():
  if _state["running"]:
    os.write(2, b"SIGINT during a compile\\n")
  os.kill(os.getpid(), signal.SIGINT)
def _wrapped(*args, **kwargs):
  if not _state["started"]:
    _state["started"] = True
    timer = threading.Timer({delay}, _send)
    timer.daemon = True
    timer.start()
  _state["running"] = True
  try:
    return _orig(*args, **kwargs)
  finally:
    _state["running"] = False
_c.backend_compile_and_load = _wrapped
"""
# Seconds after the compile began. At LLVM optimisation level 0 (the suite's) that compile
# took 1.2-1.7 s on the loaded 2-core machine (3 s at the default level); a crash needs it
# to be running still when the interpreter tears down.
COMPILE_DELAYS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)


def test_sigint_while_xla_compiles_never_crashes_after_the_message(tmp_path):
  """Ctrl-C while the first XLA program compiles, 6 times at different points of the
  compile: every time exit status 130, the message as the last line and nothing after it,
  the lock released (a user's Ctrl-C 3 s into `el_jax.main` on the test config).

  Before the fix, Python's teardown destroyed JAX's CPU client while the abandoned compile
  was still running in its thread pool, and the compile, finishing, read a destroyed device:
  "Fatal Python error: Segmentation fault" after the message, exit 139 (-11 here). Measured
  before the fix on the 2-core machine, 3 tries at each of 8 delays 0.05-0.8 s: 19 of 24
  crashed, 16 of the 18 at this test's 6 delays (23 of the 24 signals came during the
  compile); this test failed every run (5 of 5), at its first try. From outside (Ctrl-C 1-6 s
  after the start) 6 of 15 tries crashed. After the fix: 0 of 24 and, from outside, 0 of 28.
  About 20 s on an idle machine. The persistent compilation cache is off: a cached program is loaded, not
  compiled."""
  during = 0
  for i, delay in enumerate(COMPILE_DELAYS):
    workdir = tmp_path / f"run{i}"
    proc = rel.start_with(_SIGINT_IN_COMPILE.format(delay=delay), COPY,
                          f"--workdir={workdir}", JAX_ENABLE_COMPILATION_CACHE="false")
    _, err = proc.communicate(timeout=120)
    tried = f"SIGINT {delay} s into the first compile"
    assert proc.returncode == 130, f"{tried}: exit {proc.returncode}:\n{err[-3000:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == ("interrupted (SIGINT); run the same command again to resume from "
                         "the last checkpoint"), f"{tried}:\n{err[-3000:]}"
    for noise in NOISE + ("Fatal Python error", "Segmentation fault"):
      assert noise not in err, f"{tried}:\n{err[-3000:]}"
    assert not (workdir / ".lock").exists(), f"{tried}: the lock was left behind"
    json.loads((workdir / "config.json").read_text())  # written before the compile, whole
    during += "SIGINT during a compile" in err
  # Most signals must come while the compile runs, or this test tests nothing.
  assert during >= len(COMPILE_DELAYS) // 2, f"only {during} signals came during a compile"


# ----------------------------------------------------------------------------
# The pieces, in process (el_jax.infra.workdir)


def test_uninterrupted_block_finishes_before_the_signal_takes_effect():
  from el_jax.infra import workdir as wd
  done = []
  with wd.catch_interrupts():
    with pytest.raises(wd.Interrupted) as e:
      with wd.uninterrupted("the test block"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler has run by now: deferred
        done.append("rest of the block")
      done.append("after the block")  # never reached
  assert done == ["rest of the block"]
  assert (e.value.name, e.value.exit_status) == ("SIGTERM", 143)
  # Nested blocks: the outermost one defers for all.
  with wd.catch_interrupts():
    with pytest.raises(wd.Interrupted):
      with wd.uninterrupted("outer"):
        with wd.uninterrupted("inner"):
          os.kill(os.getpid(), signal.SIGINT)
          time.sleep(0.05)
        done.append("outer's rest")
  assert done[-1] == "outer's rest"


def test_interrupt_swallowed_by_a_gc_callback_is_sent_again():
  import gc
  from el_jax.infra import workdir as wd
  sent = []

  def callback(phase, info):
    if phase == "start" and not sent:
      sent.append(1)
      os.kill(os.getpid(), signal.SIGTERM)
      for _ in range(1000):  # the handler runs here: its exception cannot leave a callback
        pass

  with wd.catch_interrupts():
    gc.callbacks.append(callback)
    try:
      with pytest.raises(wd.Interrupted):
        gc.collect()
        time.sleep(5)  # the signal comes again within 0.05 s
    finally:
      gc.callbacks.remove(callback)
  assert sent
