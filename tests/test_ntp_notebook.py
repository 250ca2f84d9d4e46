"""colab/ntp_linear.ipynb: paired with its .py, and runs end to end on the `test` variant."""
import os

import jupytext
import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB = os.path.join(ROOT, "colab", "ntp_linear.ipynb")
PY = os.path.join(ROOT, "colab", "ntp_linear.py")


def _cells(nb):
  return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_notebook_and_py_are_in_sync():
  nb = nbformat.read(NB, as_version=4)
  assert _cells(nb) == _cells(jupytext.read(PY)), (
      "colab/ntp_linear.ipynb is out of date: run "
      ".venv/bin/jupytext --to ipynb colab/ntp_linear.py")
  assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_notebook_executes_on_test_variant(monkeypatch):
  from nbclient import NotebookClient
  monkeypatch.setenv("EL_JAX_NOTEBOOK_VARIANT", "test")
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setenv("MPLBACKEND", "Agg")
  nb = nbformat.read(NB, as_version=4)
  NotebookClient(nb, timeout=120, kernel_name="python3",
                 resources={"metadata": {"path": ROOT}}).execute()
  out = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
  assert "'separable': True" in out and "cos_mm" in out
  # The test variant's 2000 GD steps already align with W_mm.
  line = [l for l in out.splitlines() if l.strip().startswith("cos_mm")][0]
  assert float(line.split(":")[1]) > 0.95
