"""el_jax.infra.workdir and the metrics file, in process: lock, atomic JSON, config check, torn rows."""
import json
import os
import socket
import subprocess
import sys

import pytest

from el_jax.run import config as config_lib
from el_jax.run import job
from el_jax.infra import metrics as metrics_lib
from el_jax.infra import workdir as wd


def test_write_json_replaces_whole_file_and_leaves_no_temp(tmp_path):
  path = tmp_path / "a.json"
  wd.write_json(path, {"x": 1})
  wd.write_json(path, {"x": [1, 2]})
  assert json.loads(path.read_text()) == {"x": [1, 2]}
  assert os.listdir(tmp_path) == ["a.json"]
  with pytest.raises(TypeError):  # not JSON: the old file stays, no temp file is left
    wd.write_json(path, {"x": object()})
  assert json.loads(path.read_text()) == {"x": [1, 2]}
  assert os.listdir(tmp_path) == ["a.json"]


def test_read_json_names_a_damaged_file(tmp_path):
  path = tmp_path / "final.json"
  path.write_text('{"a": 1')
  with pytest.raises(wd.WorkdirError, match=r"final\.json is damaged \(.*\); it holds the thing"):
    wd.read_json(path, what="the thing")
  moved = wd.set_aside(str(path))
  assert moved.endswith("final.json.damaged") and not path.exists()
  path.write_text("{")
  assert wd.set_aside(str(path)).endswith("final.json.damaged.1")


def test_lock_refuses_a_live_owner_and_takes_over_a_dead_one(tmp_path, capsys):
  with wd.Lock(str(tmp_path)) as lock:
    owner = json.loads((tmp_path / ".lock").read_text())
    assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
    with pytest.raises(wd.WorkdirError, match=rf"is in use by pid {os.getpid()} on this host"):
      wd.Lock(str(tmp_path)).acquire()
    assert lock.held
  assert not (tmp_path / ".lock").exists()
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True).stdout.strip()
  (tmp_path / ".lock").write_text(json.dumps({"pid": int(dead), "host": socket.gethostname(),
                                              "since": "then"}))
  with wd.Lock(str(tmp_path)):
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
  assert f"locked by pid {dead}" in capsys.readouterr().err
  (tmp_path / ".lock").write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": "then"}))
  with pytest.raises(wd.WorkdirError, match=r"in use by pid 1 on host elsewhere .*if that run "
                                            r"is dead, delete"):
    wd.Lock(str(tmp_path)).acquire()


def test_config_check_allows_only_named_changeable_fields(tmp_path):
  cfg = config_lib.get_config("copy_task", "test")
  config_lib.record_config(cfg, str(tmp_path))
  assert config_lib.check_config(cfg, str(tmp_path)) == {}
  new = config_lib.get_config("copy_task", "test", {"optim.lr": 1e-4, "train.log_every": 1})
  with pytest.raises(wd.WorkdirError, match=r"optim\.lr: 0\.003 -> 0\.0001.*"
                                            r"--allow_config_change=optim\.lr"):
    config_lib.check_config(new, str(tmp_path), job.resumable_fields(new))
  changes = config_lib.check_config(new, str(tmp_path), job.resumable_fields(new), allow=("optim.lr",))
  assert changes == {"optim.lr": [0.003, 1e-4]}  # log_every is resumable, not a change
  history = config_lib.record_config(new, str(tmp_path), changes, {"0": 4})
  assert history == json.loads((tmp_path / "config.json").read_text())[config_lib.CHANGES_KEY]
  assert history[0]["changes"] == changes and history[0]["resume_steps"] == {"0": 4}
  assert config_lib.check_config(new, str(tmp_path), job.resumable_fields(new)) == {}  # history ignored
  assert config_lib.parse_allowed("optim.lr, loss.e1.lam,train.num_steps") == (
      "optim.lr", "loss.e1.lam", "train.num_steps")
  with pytest.raises(wd.WorkdirError, match=r"cannot allow data\.num_train"):
    config_lib.parse_allowed("optim.lr,data.num_train")


def test_metrics_writer_drops_only_a_torn_last_line(tmp_path, capsys):
  path = tmp_path / "metrics.jsonl"
  w = metrics_lib.MetricsWriter(str(path))
  w.write({"seed": 0, "step": 1})
  w.write({"seed": 0, "step": 2})
  with open(path, "a") as f:
    f.write('{"seed": 0, "st')
  assert w.rows() == [{"seed": 0, "step": 1}, {"seed": 0, "step": 2}]
  assert "last line is torn" in capsys.readouterr().err
  w.repair()
  assert path.read_text() == '{"seed": 0, "step": 1}\n{"seed": 0, "step": 2}\n'
  w.write({"seed": 0, "step": 3})
  assert [r["step"] for r in w.rows()] == [1, 2, 3]
  with open(path, "a") as f:  # a whole row without its newline is kept, the file mended
    f.write('{"seed": 0, "step": 4}')
  w.repair()
  assert path.read_text().endswith('{"seed": 0, "step": 4}\n')
  lines = path.read_text().splitlines()
  lines[1] = "garbage"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(wd.WorkdirError, match=r"metrics\.jsonl:2: malformed metrics row"):
    w.rows()
