"""Reliability, faults: two runs on one workdir, kills, torn and damaged files, divergence.

Every case runs `python -m el_jax.main` on configs/copy_task.py:test as a
user would and checks the exit status, the message, that there is no
traceback, and that no file of the workdir was lost or corrupted. A kill -9 of
one of `el_jax.run.launch`'s processes is named by the launcher.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import reliability as rel

COPY = "--config=configs/copy_task.py:test"


def _wait_for(predicate, timeout=120):
  return rel.wait_for(predicate, timeout, poll=0.05)


def test_two_runs_on_one_workdir(tmp_path):
  workdir = tmp_path / "run"
  long_run = [COPY, f"--workdir={workdir}", "--config.train.num_steps=4000",
              "--config.train.checkpoint_every=1000", "--config.train.eval_every=0"]
  first = rel.start(*long_run)
  try:
    assert _wait_for(lambda: (workdir / "metrics.jsonl").exists()), "first run never started"
    second = rel.run(*long_run)
    line = rel.assert_one_line_error(second, rf"workdir {workdir} is in use by pid {first.pid} "
                                             r"on this host")
    assert "wait for it to finish" in line
  finally:
    first.send_signal(signal.SIGKILL)
    first.wait()
  # The killed owner left its lock: the next run takes it over, resumes and finishes.
  assert json.loads((workdir / ".lock").read_text())["pid"] == first.pid
  third = rel.run(COPY, f"--workdir={workdir}", "--config.train.num_steps=4000",
                  "--config.train.checkpoint_every=1000", "--config.train.eval_every=0",
                  "--config.train.stop_at_step=1000")
  assert third.returncode == 0, third.stderr
  assert f"locked by pid {first.pid}" in third.stderr and "taking over its lock" in third.stderr
  assert not (workdir / ".lock").exists()
  rows = rel.read_jsonl(workdir / "metrics.jsonl")  # every line parses
  keys = [(r["seed"], r["step"], r["kind"]) for r in rows]
  assert len(keys) == len(set(keys)), "duplicated metrics rows"
  train_steps = [r["step"] for r in rows if r["kind"] == "train"]
  assert train_steps == sorted(train_steps) and train_steps[-1] == 1000


_WRITER = r"""
import sys
from el_jax.infra import workdir as wd
path = sys.argv[1]
i = 0
while True:
  i += 1
  wd.write_json(path, {"i": i, "payload": list(range(20000 + i % 7))})
"""


def test_kill_during_json_writes_never_leaves_a_torn_file(tmp_path):
  path = tmp_path / "summary.json"
  for delay in (0.3, 0.45, 0.6, 0.8, 1.0):
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=rel.ROOT,
                            env=rel.env())
    assert _wait_for(path.exists, 60)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    data = json.loads(path.read_text())  # the old or the new file, never a mix
    assert len(data["payload"]) == 20000 + data["i"] % 7
  left = [p for p in os.listdir(tmp_path) if p != "summary.json"]
  assert all(p.endswith(".tmp") for p in left)  # only a killed writer's temp file, if any


def test_torn_metrics_line_is_dropped_on_resume(tmp_path):
  workdir = tmp_path / "run"
  proc = rel.run(COPY, f"--workdir={workdir}", "--config.train.stop_at_step=4")
  assert proc.returncode == 0, proc.stderr
  with open(workdir / "metrics.jsonl", "a") as f:
    f.write('{"seed": 0, "step": 5, "kind": "tr')  # killed mid-write
  proc = rel.run(COPY, f"--workdir={workdir}")
  assert proc.returncode == 0, proc.stderr
  assert "metrics.jsonl: dropping its torn last line" in proc.stderr
  rows = rel.read_jsonl(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 4, 8]
  assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 4, 6, 8]


def test_damaged_final_json_is_reevaluated_and_kept(tmp_path):
  workdir = tmp_path / "run"
  assert rel.run(COPY, f"--workdir={workdir}").returncode == 0
  final = workdir / "seed_0" / "final.json"
  good = json.loads(final.read_text())
  final.write_text(final.read_text()[:50])  # truncated by a kill
  proc = rel.run(COPY, f"--workdir={workdir}")
  assert proc.returncode == 0, proc.stderr
  assert f"{final} is damaged" in proc.stderr and "re-evaluating seed 0" in proc.stderr
  assert json.loads(final.read_text()) == good  # the same evaluation, recomputed
  assert (workdir / "seed_0" / "final.json.damaged").read_text() == json.dumps(good, indent=1)[:50]
  rows = rel.read_jsonl(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 4, 8]  # not duplicated
  summary = workdir / "summary.json"
  summary.write_text("{")
  proc = rel.run(COPY, f"--workdir={workdir}")
  assert proc.returncode == 0 and f"{summary} is damaged" in proc.stderr
  assert json.loads(summary.read_text())["per_seed"] == [good]


def test_damaged_checkpoint_is_one_line_without_a_flood(tmp_path):
  workdir = tmp_path / "run"
  assert rel.run(COPY, f"--workdir={workdir}", "--config.train.stop_at_step=8",
                 "--config.train.num_steps=12").returncode == 0
  ckpt = workdir / "seed_0" / "checkpoints" / "8"
  for dirpath, _, files in os.walk(ckpt):
    for name in files:
      if os.path.basename(dirpath) == "d":  # the array data files
        with open(os.path.join(dirpath, name), "r+b") as f:
          f.truncate(10)
  before = rel.snapshot(workdir)
  proc = rel.run(COPY, f"--workdir={workdir}", "--config.train.num_steps=12")
  line = rel.assert_one_line_error(
      proc, rf"checkpoint {ckpt} could not be restored .*move it away "
            r"to resume from the checkpoint of step 4 \(nothing was deleted\)")
  assert len(proc.stderr.splitlines()) <= 3, proc.stderr
  assert "tensorstore_spec" not in line, line  # the cause, not its spec
  # The checkpoint is named once; the cause refers to its files as <checkpoint>/..., so the
  # line's length does not grow with the temporary directory's.
  assert line.count(str(ckpt)) == 1, line
  assert len(line) - len(str(ckpt)) < 600, line
  after = rel.snapshot(workdir)
  # config.json records the latest invocation (here without train.stop_at_step); the
  # checkpoints, metrics and everything else are untouched.
  assert after.pop("config.json") and before.pop("config.json")
  assert after == before


def test_diverged_run_is_continued_with_a_lower_learning_rate(tmp_path):
  workdir = tmp_path / "run"
  bad = [COPY, f"--workdir={workdir}", "--config.optim.name=sgd", "--config.optim.grad_clip=0",
         "--config.train.checkpoint_every=2"]
  proc = rel.run(*bad, "--config.optim.lr=1e4")
  line = rel.assert_one_line_error(proc, r"non-finite training .* at step \d+ \(seed 0\); ", 1)
  ckpts = sorted(int(p) for p in os.listdir(workdir / "seed_0" / "checkpoints") if p.isdigit())
  if ckpts:
    assert f"the last checkpoint is step {ckpts[-1]}" in line
  else:
    assert "no checkpoint was saved before it" in line
  assert "--allow_config_change=optim.lr" in line
  refused = rel.run(*bad, "--config.optim.lr=1e-3")
  rel.assert_one_line_error(refused, r"--allow_config_change=optim\.lr")
  proc = rel.run(*bad, "--config.optim.lr=1e-3", "--allow_config_change=optim.lr")
  assert proc.returncode == 0, proc.stderr
  assert "continuing" in proc.stderr and "optim.lr: 10000.0 -> 0.001" in proc.stderr
  config = json.loads((workdir / "config.json").read_text())
  assert config["optim"]["lr"] == 1e-3
  (change,) = config["config_changes"]
  assert change["changes"] == {"optim.lr": [1e4, 1e-3]}
  assert change["resume_steps"] == {"0": ckpts[-1] if ckpts else None}
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["config_changes"] == config["config_changes"]
  # Other fields stay refused even with the flag.
  other = rel.run(*bad, "--config.optim.lr=1e-3", "--config.model.num_layers=1",
                  "--allow_config_change=optim.lr")
  rel.assert_one_line_error(other, r"model\.num_layers: 2 -> 1")


def test_fewer_steps_than_the_workdir_reached_is_refused_untouched(tmp_path):
  workdir = tmp_path / "run"
  assert rel.run(COPY, f"--workdir={workdir}").returncode == 0  # finished at step 8
  before = rel.snapshot(workdir)
  proc = rel.run(COPY, f"--workdir={workdir}", "--config.train.num_steps=4",
                 "--allow_config_change=train.num_steps")
  rel.assert_one_line_error(proc, rf"workdir {workdir} finished at step 8 \(seed 0\); "
                                  r"train\.num_steps=4 is fewer: .*Keep train\.num_steps >= 8")
  assert rel.snapshot(workdir) == before  # config.json still says 8, as summary.json does
  # A checkpoint past the new num_steps (a run stopped at step 8 of 12) is refused the same way.
  stopped = tmp_path / "stopped"
  assert rel.run(COPY, f"--workdir={stopped}", "--config.train.num_steps=12",
                 "--config.train.stop_at_step=8").returncode == 0
  before = rel.snapshot(stopped)
  proc = rel.run(COPY, f"--workdir={stopped}", "--config.train.num_steps=6",
                 "--allow_config_change=train.num_steps")
  rel.assert_one_line_error(proc, rf"workdir {stopped} has a checkpoint at step 8 \(seed 0\); "
                                  r"train\.num_steps=6 is fewer")
  assert rel.snapshot(stopped) == before


def test_evaluation_missed_at_a_stop_is_logged_by_the_next_run(tmp_path):
  # Interrupted during the evaluation that follows the checkpoint of step 4 (train.stop_at_step
  # =4): the rerun, already at its stop, logs that evaluation from the checkpoint.
  workdir = tmp_path / "run"
  assert rel.run(COPY, f"--workdir={workdir}", "--config.train.stop_at_step=4").returncode == 0
  metrics = workdir / "metrics.jsonl"
  rows = rel.read_jsonl(metrics)
  lost = [r for r in rows if r["kind"] == "eval" and r["step"] == 4]
  assert len(lost) == 1
  metrics.write_text("".join(json.dumps(r) + "\n" for r in rows if r not in lost))
  proc = rel.run(COPY, f"--workdir={workdir}", "--config.train.stop_at_step=4")
  assert proc.returncode == 0, proc.stderr
  assert "seed 0: logging the eval row of step 4, which an interrupted run did not" in proc.stderr
  assert [r for r in rel.read_jsonl(metrics) if r["kind"] == "eval" and r["step"] == 4] == lost


def _mount(*args):
  """`mount *args` if this process may (root with CAP_SYS_ADMIN); whether it did."""
  if os.geteuid() != 0:
    return False
  return subprocess.run(["mount", *map(str, args)], capture_output=True).returncode == 0


# Without a small file system to fill (not root): the save fails as a full disk's does.
_FULL_DISK = """
import errno
import orbax.checkpoint as ocp
_orig = ocp.CheckpointManager.save
def _save(self, step, *args, **kwargs):
  if step == 8:
    raise OSError(errno.ENOSPC, "No space left on device", f"{self.directory}/{step}")
  return _orig(self, step, *args, **kwargs)
ocp.CheckpointManager.save = _save
"""


def test_full_disk_during_a_checkpoint_save_is_one_line_and_resumable(tmp_path):
  args = [COPY, "--config.train.num_steps=40", "--config.train.eval_every=8"]
  ref = tmp_path / "ref"
  assert rel.run(*args, f"--workdir={ref}").returncode == 0
  disk = tmp_path / "disk"
  disk.mkdir()
  workdir = disk / "run"
  tmpfs = _mount("-t", "tmpfs", "-o", "size=300k", "tmpfs", disk)  # one checkpoint fits, not two
  try:
    proc = (rel.run(*args, f"--workdir={workdir}") if tmpfs
            else rel.run_with(_FULL_DISK, *args, f"--workdir={workdir}"))
    rel.assert_one_line_error(
        proc, r"could not save the checkpoint of step (\d+) \(.*/seed_0/checkpoints/\1\): no "
              r"space left on device \(ENOSPC\) on .*Nothing is lost: the run is resumable; "
              r"free some space and run the same command again to resume from (the checkpoint "
              r"of step \d+|the start \(no checkpoint of this seed was complete\))$")
    assert len([x for x in proc.stderr.splitlines() if x.strip()]) <= 2, proc.stderr[-3000:]
    assert not (workdir / ".lock").exists()
    assert not list(workdir.glob("seed_0/checkpoints/*.orbax-checkpoint-tmp*"))
    if tmpfs:
      subprocess.run(["mount", "-o", "remount,size=8M", str(disk)], check=True)
    proc = rel.run(*args, f"--workdir={workdir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["per_seed"] == json.loads((ref / "summary.json").read_text())["per_seed"]
    evals = [r["step"] for r in rel.read_jsonl(workdir / "metrics.jsonl") if r["kind"] == "eval"]
    assert evals == [0, 8, 16, 24, 32, 40]
  finally:
    if tmpfs:
      subprocess.run(["umount", str(disk)], check=True)


_READ_ONLY_LOCK = """
import errno
from el_jax.infra import workdir as wd
def _acquire(self):
  raise OSError(errno.EROFS, "Read-only file system", self.path)
wd.Lock._acquire = _acquire
"""


def test_finished_run_on_a_read_only_workdir_is_reported(tmp_path):
  workdir = tmp_path / "run"
  assert rel.run(COPY, f"--workdir={workdir}").returncode == 0
  before = rel.snapshot(workdir)
  root = os.geteuid() == 0
  mounted = root and _mount("--bind", workdir, workdir)
  try:
    if mounted:
      assert _mount("-o", "remount,ro,bind", workdir)
    elif not root:
      os.chmod(workdir, 0o555)

    def run(*extra):
      if mounted or not root:
        return rel.run(COPY, f"--workdir={workdir}", *extra)
      return rel.run_with(_READ_ONLY_LOCK, COPY, f"--workdir={workdir}", *extra)
    proc = run()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("already finished; nothing to train (read-only workdir: reported without locking "
            "it)") in proc.stderr
    assert rel.last_line(proc) == f"results: {workdir / 'summary.json'}"
    # A run that would have to write is still refused, in one line.
    proc = run("--config.train.num_steps=12", "--allow_config_change=train.num_steps")
    rel.assert_one_line_error(proc, rf"cannot use workdir {workdir}: (Read-only file system|"
                                    r"Permission denied)")
  finally:
    if mounted:
      subprocess.run(["umount", str(workdir)], check=True)
    elif not root:
      os.chmod(workdir, 0o755)
  assert rel.snapshot(workdir) == before


def _children(pid):
  with open(f"/proc/{pid}/task/{pid}/children") as f:
    return [int(p) for p in f.read().split()]


def _launched_process(launcher, index):
  """The pid of el_jax.run.launch's process `index` (its EL_JAX_PROCESS_ID), or None."""
  for pid in _children(launcher.pid):
    try:
      with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        running_main = b"el_jax.main" in f.read()  # (not the launcher's fork before exec)
    except OSError:
      continue
    if running_main and f"EL_JAX_PROCESS_ID={index}".encode() in environ:
      return pid
  return None


def test_launch_names_process_0_killed_by_sigkill(tmp_path):
  """`el_jax.run.launch` with 2 processes: kill -9 of process 0 once it has taken the workdir.
  The launcher's last line names process 0, its pid and SIGKILL, its exit status is 137, and
  no process is left. Before the fix the launcher exited 137 with no line at all (it assumed
  a failed process 0 had printed its own error, as process 0's output is passed through);
  the same kill of process 1 was already named."""
  workdir = tmp_path / "run"
  launcher = rel.start("--num_processes=2", "--", COPY, f"--workdir={workdir}",
                       module="el_jax.run.launch")
  try:
    assert _wait_for(lambda: (workdir / "config.json").exists() or launcher.poll() is not None)
    pid = _launched_process(launcher, 0)
    others = [p for p in _children(launcher.pid) if p != pid]
    assert pid is not None and len(others) == 1, _children(launcher.pid)
    os.kill(pid, signal.SIGKILL)
    _, err = launcher.communicate(timeout=120)
  finally:
    if launcher.poll() is None:
      launcher.kill()
      launcher.wait()
  assert launcher.returncode == 128 + signal.SIGKILL, err[-3000:]
  lines = [line for line in err.splitlines() if line.strip()]
  assert re.fullmatch(rf"error: process 0 \(pid {pid}\) of 2 was killed by SIGKILL"
                      r"(; the others were stopped)?", lines[-1]), err[-3000:]
  assert not os.path.exists(f"/proc/{others[0]}"), "process 1 outlived the launcher"


def test_a_failed_saves_partial_folder_is_removed_even_while_writes_trail(tmp_path):
  """After a save fails, TensorStore's threads may write the save's other arrays for a moment
  (re-creating `<step>.orbax-checkpoint-tmp`, as the full-disk run above did under load): the
  clean-up removes it until no write has come for a while, not once."""
  import threading
  from el_jax.infra import checkpoint
  path = str(tmp_path / "8")
  tmp = tmp_path / "8.orbax-checkpoint-tmp"
  tmp.mkdir()

  def trailing_writes():
    for _ in range(3):
      time.sleep(0.1)
      (tmp / "array").mkdir(parents=True, exist_ok=True)
  writer = threading.Thread(target=trailing_writes)
  writer.start()
  checkpoint._remove_partial(path, quiet_s=0.25, max_s=3.0)
  writer.join()
  assert not list(tmp_path.glob("8.orbax-checkpoint-tmp*"))
