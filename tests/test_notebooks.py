"""Notebooks are code: paired with their jupytext .py, stripped of outputs, executed.

Every colab/*.ipynb is checked for sync with its .py, and opens with the same install
cell (the one place where a user sets EL_JAX_REPO); copy_task.ipynb, mlm_flatness.ipynb
and path_star.ipynb are executed here (colab/ntp_linear.ipynb runs in
tests/test_ntp_notebook.py). mlm_flatness and path_star show their training as tqdm's
progress-bar widget (ipywidgets, el_jax.infra.progress; they turn config.progress on, which
the `test` variants leave off), and every executed notebook's runs have TensorBoard events
equal to their metrics.jsonl; its `%tensorboard` cell is skipped (EL_JAX_NOTEBOOK_TENSORBOARD=0: no server
is started by the tests).
"""
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

import reliability as rel  # tests/reliability.py
from tb_events import assert_events_equal_metrics  # tests/tb_events.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "colab", "*.ipynb")))


def _cells(notebook):
  return [(c.cell_type, c.source.strip()) for c in notebook.cells]


INSTALL_FIRST_LINE = ('EL_JAX_REPO = ""  # <- set this to your el_jax repository URL '
                      '(git clone URL), e.g. https://github.com/<you>/el_jax.git')


def _install_cell(path):
  """The source of the first code cell of notebook `path`."""
  return next(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")


def test_notebooks_are_found():
  for name in ("copy_task", "mlm_flatness", "ntp_linear", "path_star"):
    assert os.path.join(ROOT, "colab", f"{name}.ipynb") in NOTEBOOKS


def test_every_notebook_opens_with_the_same_install_cell():
  # One place to set the repository URL: the first line of the first code cell, and that
  # cell is the same in every notebook (edit one, copy it to the others, regenerate).
  cells = {os.path.basename(p): _install_cell(p) for p in NOTEBOOKS}
  first = cells["copy_task.ipynb"]
  assert first.splitlines()[0] == INSTALL_FIRST_LINE
  for name, cell in cells.items():
    assert cell == first, f"colab/{name}: its first code cell differs from copy_task's"


def _exec_install_cell(monkeypatch, tmp_path, env_repo=None, cell_repo=""):
  """Runs the install cell as on Colab (el_jax not importable), with subprocess.run
  recorded instead of run; returns the recorded commands."""
  src = _install_cell(NOTEBOOKS[0])
  src = src.replace('EL_JAX_REPO = ""', f"EL_JAX_REPO = {cell_repo!r}", 1)
  real_find_spec = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "el_jax" else real_find_spec(name, *a))
  calls = []
  monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd))
  monkeypatch.setattr(sys, "path", list(sys.path))
  if env_repo is None:
    monkeypatch.delenv("EL_JAX_REPO", raising=False)
  else:
    monkeypatch.setenv("EL_JAX_REPO", env_repo)
  monkeypatch.chdir(tmp_path)
  exec(compile(src, "install_cell", "exec"), {})
  return calls


def test_install_cell_without_a_url_says_what_to_set(monkeypatch, tmp_path):
  with pytest.raises(RuntimeError, match="set EL_JAX_REPO in the first code cell"):
    _exec_install_cell(monkeypatch, tmp_path)


def test_install_cell_clones_and_installs(monkeypatch, tmp_path):
  url = "https://example.org/me/el_jax.git"
  calls = _exec_install_cell(monkeypatch, tmp_path, cell_repo=url)
  assert calls == [["git", "clone", "-q", url, "el_jax_repo"],
                   [sys.executable, "-m", "pip", "install", "-q", "-e", "el_jax_repo"]]
  assert sys.path[0] == os.path.join(str(tmp_path), "el_jax_repo")
  # The environment variable wins over the cell.
  calls = _exec_install_cell(monkeypatch, tmp_path, env_repo="/srv/el_jax", cell_repo=url)
  assert calls[0] == ["git", "clone", "-q", "/srv/el_jax", "el_jax_repo"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_in_sync_with_py_and_stripped(path):
  py = path[:-len(".ipynb")] + ".py"
  assert os.path.exists(py), f"{path} has no paired {py}"
  fix = f"regenerate it with: .venv/bin/jupytext --to ipynb {os.path.relpath(py, ROOT)}"
  assert _cells(jupytext.read(path)) == _cells(jupytext.read(py)), (
      f"{path} differs from {py}; {fix}")
  raw = nbformat.read(path, as_version=4)
  for cell in raw.cells:
    if cell.cell_type == "code":
      assert not cell.outputs and cell.execution_count is None, f"{path} has outputs; {fix}"


def _execute(name, monkeypatch, env):
  """Runs colab/<name>.ipynb on its `test` variant with `env` set; returns (notebook, the
  code cells' outputs, their stream text). The kernel inherits the suite's compile settings
  (conftest.py), so runs that share programs (CE and E1: init, decoding) compile them
  once; its runs draw their plots, which the notebooks show (the suite's EL_JAX_PLOTS is 0)."""
  monkeypatch.setenv("EL_JAX_NOTEBOOK_VARIANT", "test")
  rel.plots_on(monkeypatch)  # the suite's default is 0
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("EL_JAX_NOTEBOOK_TENSORBOARD", "0")  # no TensorBoard server from the tests
  for k, v in env.items():
    monkeypatch.setenv(k, str(v))
  nb = nbformat.read(os.path.join(ROOT, "colab", f"{name}.ipynb"), as_version=4)
  NotebookClient(nb, timeout=300, kernel_name="python3",
                 resources={"metadata": {"path": ROOT}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
  return nb, outputs, text


WIDGET = "application/vnd.jupyter.widget-view+json"


def _training_bars(outputs):
  """The progress-bar widgets of training among a notebook's outputs (their text form starts
  with the loop's name, "seed 0: "; an evaluation that outlasts its delay has one of its own,
  "seed 0 step 8: evaluating ...")."""
  return [o for o in outputs if "data" in o and WIDGET in o.data
          and o.data.get("text/plain", "").startswith("seed 0: ")]


def test_copy_task_notebook_runs(tmp_path, monkeypatch):
  nb, outputs, text = _execute("copy_task", monkeypatch, {"EL_JAX_NOTEBOOK_WORKDIR": tmp_path})
  assert "CpuDevice" in text and "variant 'test'" in text
  table_rows = [l.split()[:3] for l in text.splitlines()]
  for run in ("ce", "ce_warmup", "e1_warmup"):
    for split in ("train", "test"):
      for group in ("easy", "hard"):
        assert [run, split, group] in table_rows, text
  images = [o for o in outputs if "data" in o and "image/png" in o.data]
  assert len(images) == 5  # loss easy/hard, accuracy per run (3), summary
  for run in ("ce", "ce_warmup", "e1_warmup"):
    assert (tmp_path / run / "seed_0" / "final.json").exists()
    assert_events_equal_metrics(str(tmp_path / run))
  assert f"TensorBoard skipped (EL_JAX_NOTEBOOK_TENSORBOARD=0); the events are under {tmp_path}" in text


def test_mlm_flatness_notebook_runs(tmp_path, monkeypatch):
  _, outputs, text = _execute("mlm_flatness", monkeypatch, {
      "EL_JAX_NOTEBOOK_WORKDIR": tmp_path / "run", "EL_JAX_CACHE": tmp_path / "cache"})
  assert "variant 'test'" in text and "optimal one-token MLM loss" in text, text
  for needle in ("gap to the optimum", "Tr(H), B.1 estimator", "task C probe test accuracy"):
    assert needle in text, text
  assert (tmp_path / "run" / "seed_0" / "final.json").exists()
  assert [o for o in outputs if "data" in o and "image/png" in o.data]  # the gap plot
  assert _training_bars(outputs), outputs  # tqdm's notebook bar (el_jax.infra.progress)
  assert "seed 0: step " not in text  # no log lines
  assert_events_equal_metrics(str(tmp_path / "run"))


def test_path_star_notebook_runs(tmp_path, monkeypatch):
  nb, outputs, text = _execute(  # EL_JAX_CACHE: the unpacked reference test set
      "path_star", monkeypatch, {"EL_JAX_NOTEBOOK_WORKDIR": tmp_path / "run",
                                 "EL_JAX_CACHE": tmp_path / "cache"})
  assert "CpuDevice" in text and "variant 'test': G(2,3) over 50 nodes" in text, text
  num = r"\d\.\d{3} \(\d\.\d{3}, \d\.\d{3}\)"
  for run in ("CE", "E1 + warmup"):
    for split in ("test", "valid", "train"):
      assert re.search(rf"^{re.escape(run)} +{split} +{num} +{num} +{num}", text, re.M), text
  assert re.search(rf"^CE +test( +{num}){{3}} +0\.289 \(0\.123, 0\.472\)$", text, re.M), text
  assert re.search(rf"^E1 \+ warmup +test( +{num}){{3}} +0\.655 \(0\.486, 0\.976\)$", text,
                   re.M), text
  assert "chance on the decision token: 1/d = 0.500" in text
  images = [o for o in outputs if "data" in o and "image/png" in o.data]
  assert len(images) == 3  # per-token losses (both runs), test accuracy per token (each run)
  assert len(_training_bars(outputs)) == 2, outputs  # tqdm's notebook bar, one per run
  assert "seed 0: step " not in text  # no log lines
  for name in ("ce", "e1_warmup"):
    run = tmp_path / "run" / name
    assert (run / "seed_0" / "final.json").exists()
    assert_events_equal_metrics(str(run))
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["test_file"] == "reference" and config["data"]["degree"] == 2
  assert (tmp_path / "cache" / "path_star" / "deg_2_path_3_nodes_50_test_20000.txt").exists()
