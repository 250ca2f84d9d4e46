"""TensorBoard events (el_jax.infra.tensorboard): a run's events, read back with the tensorboard
package's own reader, equal its metrics.jsonl, row for row (at float32, TensorBoard's scalar
type): after an uninterrupted run, after a kill -9 in the middle of training and a resume
(sequential seeds and stacked seeds), and for ntp_linear; `train.tensorboard=False` writes
none; only process 0 writes.
"""
import glob
import json
import os
import signal

import pytest

import reliability as rel
from tb_events import assert_events_equal_metrics, expected_events, read_events

from el_jax.infra import metrics as metrics_lib
from el_jax.infra import tensorboard

COPY = "--config=configs/copy_task.py:test"
# 60 steps, a checkpoint and an evaluation every 20, a training row every 5: a kill at the
# training row of step 30 leaves rows past the checkpoint of step 20 behind.
RESUMABLE = (COPY, "--config.train.num_steps=60", "--config.train.checkpoint_every=20",
             "--config.train.eval_every=20", "--config.train.log_every=5",
             "--config.seeds=(0,1)")
STACKED = RESUMABLE + ("--config.train.vmap_seeds=True",)


def test_values_are_a_tag_per_kind_and_number():
  row = {"seed": 0, "step": 5, "kind": "eval", "test_em_hard": 0.5, "n_easy": 3,
         "loss_hard": None, "label": "x", "ok": True}
  assert tensorboard.values(row) == {"eval/test_em_hard": 0.5, "eval/n_easy": 3.0}


def test_writer_rewrites_a_seed_from_its_kept_rows(tmp_path):
  """MetricsWriter with events: appends go to both; `truncate` (a resume) drops the rows past
  the checkpoint from both, one seed at a time; the other seed's events stay as they were."""
  events = tensorboard.RunEvents(str(tmp_path / "tb"))
  writer = metrics_lib.MetricsWriter(str(tmp_path / "metrics.jsonl"), events)
  for seed in (0, 1):
    for step in (1, 5, 10, 15):
      writer.write({"seed": seed, "step": step, "kind": "train", "loss": 1.0 / step + seed})
  writer.write({"seed": 0, "step": 10, "kind": "eval", "test_em": 0.25})
  assert_events_equal_metrics(str(tmp_path))
  seed1 = tensorboard.event_files(str(tmp_path / "tb" / "seed_1"))
  writer.truncate(0, 5)
  rows = assert_events_equal_metrics(str(tmp_path))
  assert [r["step"] for r in rows if r["seed"] == 0] == [1, 5]
  assert tensorboard.event_files(str(tmp_path / "tb" / "seed_1")) == seed1
  (only,) = tensorboard.event_files(str(tmp_path / "tb" / "seed_0"))  # the older file removed
  assert os.path.basename(only) == "events.out.tfevents.000002"
  writer.write({"seed": 0, "step": 10, "kind": "train", "loss": 0.1})  # appended after it
  assert_events_equal_metrics(str(tmp_path))
  # A finished seed whose folder has no events (trained with train.tensorboard=False) gets them.
  for path in tensorboard.event_files(str(tmp_path / "tb" / "seed_1")):
    os.remove(path)
  writer.backfill(1)
  writer.backfill(0)  # has events: left as they are
  writer.close()
  assert_events_equal_metrics(str(tmp_path))


def test_only_process_0_writes(tmp_path, monkeypatch):
  from el_jax.infra import distributed
  from el_jax.run import config as config_lib
  from el_jax.run import job
  cfg = config_lib.get_config("copy_task", "test")
  row = {"seed": 0, "step": 1, "kind": "train", "loss": 1.0}
  monkeypatch.setattr(distributed, "is_main", lambda: False)
  other = job.metrics_writer(cfg, str(tmp_path / "other"))
  os.makedirs(tmp_path / "other")
  other.repair()
  other.write(row)
  other.truncate(0, 0)
  other.backfill(0)
  other.close()
  assert os.listdir(tmp_path / "other") == []
  monkeypatch.setattr(distributed, "is_main", lambda: True)
  main = job.metrics_writer(cfg, str(tmp_path / "main"))
  os.makedirs(tmp_path / "main")
  main.write(row)
  main.close()
  assert sorted(os.listdir(tmp_path / "main")) == ["metrics.jsonl", "tb"]
  assert_events_equal_metrics(str(tmp_path / "main"))


def test_tensorboard_must_be_a_bool():
  from el_jax.run import config as config_lib
  from el_jax.run import setup as setup_lib
  cfg = config_lib.get_config("copy_task", "test")
  with cfg.ignore_type():
    cfg.train.tensorboard = "no"
  with pytest.raises(ValueError, match=r"train\.tensorboard='no' must be True or False"):
    setup_lib.validate_config(cfg)


def test_tensorboard_is_no_config_difference():
  """A workdir or result row of a config without the field (written before it existed), or
  with the other value, is the same config: the events change nothing that is computed."""
  from el_jax.run import config as config_lib
  new = config_lib.flatten(config_lib.config_dict(config_lib.get_config("copy_task", "test")))
  old = {k: v for k, v in new.items() if k != "train.tensorboard"}
  assert new["train.tensorboard"] is True
  assert config_lib.config_diff(old, new) == []
  assert config_lib.config_diff({**new, "train.tensorboard": False}, new) == []


def _kill_at_train_row(step):
  """A prelude: SIGKILL the process when the training row of seed 0 at `step` is in
  metrics.jsonl but not yet among the events (the worst place: the two disagree)."""
  return f"""
import os, signal
from el_jax.infra import tensorboard as _tb
_orig = _tb.RunEvents.write
def _write(self, row):
  if row.get("seed") == 0 and row.get("kind") == "train" and row.get("step") == {step}:
    os.kill(os.getpid(), signal.SIGKILL)
  return _orig(self, row)
_tb.RunEvents.write = _write
"""


@pytest.mark.parametrize("args", [RESUMABLE, STACKED], ids=["sequential", "stacked"])
def test_events_equal_metrics_after_a_kill_and_a_resume(tmp_path, args):
  workdir = tmp_path / "run"
  proc = rel.start_with(_kill_at_train_row(30), *args, f"--workdir={workdir}")
  proc.communicate(timeout=300)
  assert proc.returncode == -signal.SIGKILL
  rows = rel.read_jsonl(workdir / "metrics.jsonl")
  assert rows[-1]["step"] == 30 and rows[-1]["seed"] == 0
  steps = [s for s, _ in read_events(str(workdir / "tb" / "seed_0"))]
  assert 25 in steps and 30 not in steps  # the events lag metrics.jsonl by that row
  resumed = rel.run(*args, f"--workdir={workdir}")
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "seed 0: resuming from the checkpoint of step 20" in resumed.stderr
  rows = assert_events_equal_metrics(str(workdir))
  for seed in (0, 1):  # every row once: those past step 20 dropped and logged again
    train = [r["step"] for r in rows if r["seed"] == seed and r["kind"] == "train"]
    assert train == [1, *range(5, 61, 5)], (seed, train)
    assert [r["step"] for r in rows if r["seed"] == seed and r["kind"] == "eval"] == [
        0, 20, 40, 60]
  for folder in glob.glob(str(workdir / "tb" / "seed_*")):
    assert len(tensorboard.event_files(folder)) == 1, os.listdir(folder)


def test_tensorboard_false_writes_no_events(tmp_path):
  workdir = tmp_path / "run"
  proc = rel.run(COPY, f"--workdir={workdir}", "--config.train.tensorboard=False")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (workdir / "metrics.jsonl").exists() and not (workdir / "tb").exists()
  assert json.loads((workdir / "config.json").read_text())["train"]["tensorboard"] is False


def test_ntp_linear_events_equal_its_metrics(tmp_path):
  from el_jax.run import config as config_lib
  from el_jax.run import ntp_train
  fast = {"steps": 100, "log_every": 50, "path_bounds": "", "optimizers": "gd,adam"}
  cfg = config_lib.get_config("ntp_linear", "test", fast)
  ntp_train.train_and_evaluate(cfg, str(tmp_path / "w"))
  rows = rel.read_jsonl(tmp_path / "w" / "metrics.jsonl")
  (folder,) = glob.glob(str(tmp_path / "w" / "tb" / "seed_*"))
  assert folder.endswith(f"seed_{cfg.seed}")
  got = read_events(folder)
  assert got == expected_events(rows, kind_key="optimizer")
  assert {"gd/gap", "adam/cos_mm", "gd/lr"} <= set(got[0][1]) | set(got[-1][1])
  off = config_lib.get_config("ntp_linear", "test", {**fast, "tensorboard": False})
  ntp_train.train_and_evaluate(off, str(tmp_path / "off"))
  assert not (tmp_path / "off" / "tb").exists()
