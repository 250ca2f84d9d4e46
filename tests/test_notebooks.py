"""Notebooks are code: paired with their jupytext .py, stripped of outputs, executed.

Every colab/*.ipynb is checked for sync with its .py; copy_task.ipynb and
mlm_flatness.ipynb are executed here (colab/ntp_linear.ipynb runs in
tests/test_ntp_notebook.py).
"""
import glob
import os

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "colab", "*.ipynb")))


def _cells(notebook):
  return [(c.cell_type, c.source.strip()) for c in notebook.cells]


def test_copy_task_notebook_is_found():
  assert os.path.join(ROOT, "colab", "copy_task.ipynb") in NOTEBOOKS


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


def test_copy_task_notebook_runs(tmp_path, monkeypatch):
  monkeypatch.setenv("EL_JAX_NOTEBOOK_VARIANT", "test")
  monkeypatch.setenv("EL_JAX_NOTEBOOK_WORKDIR", str(tmp_path))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  # CE and E1 share the init and decoding programs: compile them once.
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax_cache"))
  monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  nb = nbformat.read(os.path.join(ROOT, "colab", "copy_task.ipynb"), as_version=4)
  NotebookClient(nb, timeout=300, kernel_name="python3",
                 resources={"metadata": {"path": ROOT}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
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


def test_mlm_flatness_notebook_runs(tmp_path, monkeypatch):
  monkeypatch.setenv("EL_JAX_NOTEBOOK_VARIANT", "test")
  monkeypatch.setenv("EL_JAX_NOTEBOOK_WORKDIR", str(tmp_path / "run"))
  monkeypatch.setenv("EL_JAX_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  nb = nbformat.read(os.path.join(ROOT, "colab", "mlm_flatness.ipynb"), as_version=4)
  NotebookClient(nb, timeout=300, kernel_name="python3",
                 resources={"metadata": {"path": ROOT}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
  assert "variant 'test'" in text and "optimal one-token MLM loss" in text, text
  for needle in ("gap to the optimum", "Tr(H), B.1 estimator", "task C probe test accuracy"):
    assert needle in text, text
  assert (tmp_path / "run" / "seed_0" / "final.json").exists()
  assert [o for o in outputs if "data" in o and "image/png" in o.data]  # the gap plot
