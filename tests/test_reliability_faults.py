"""Reliability, faults: two runs on one workdir, kills, torn and damaged files, divergence.

Every case runs `python -m el_jax.main` on configs/copy_task.py:test as a
user would and checks the exit status, the message, that there is no
traceback, and that no file of the workdir was lost or corrupted.
"""
import json
import os
import signal
import subprocess
import sys
import time

import reliability as rel

COPY = "--config=configs/copy_task.py:test"


def _wait_for(predicate, timeout=120):
  t_end = time.time() + timeout
  while time.time() < t_end:
    if predicate():
      return True
    time.sleep(0.05)
  return False


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
from el_jax import workdir as wd
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
