"""Every script in experiments/ says its command, its wall time at CPU size, its results folder
(`results/<script>/`, named after it) and the generated page its numbers appear on."""
import ast
import glob
import os
import re

import pytest

from el_jax.report import render as report

ROOT = report.ROOT
SCRIPTS = sorted(p for p in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
                 if os.path.basename(p) != "__init__.py")


def _anchors(page):
  with open(os.path.join(ROOT, report.DOCS, page)) as fh:
    return {report._anchor(l[3:]) for l in fh.read().splitlines() if l.startswith("## ")}


@pytest.mark.parametrize("path", SCRIPTS, ids=os.path.basename)
def test_docstring_names_command_time_folder_and_page(path):
  name = os.path.basename(path)[:-3]
  with open(path) as fh:
    doc = ast.get_docstring(ast.parse(fh.read())) or ""
  assert f"python experiments/{name}.py" in doc, "no command"
  assert "Wall time at CPU size" in doc, "no wall time"
  assert f"`results/{name}/`" in doc, "no results folder named after the script"
  m = re.search(r"docs/results/([\w.]+\.md)(?:#([\w\-]+))?", doc)
  assert m, "no results page"
  page, anchor = m.groups()
  assert os.path.exists(os.path.join(ROOT, report.DOCS, page)), page
  if anchor:
    assert anchor in _anchors(page), f"{page} has no section #{anchor}"


def test_every_results_folder_is_named_after_a_script_or_command():
  scripts = {os.path.basename(p)[:-3] for p in SCRIPTS}
  # experiments/<name>/ and tools/<name>/ folders write results/<name>/
  scripts |= {n for top in ("experiments", "tools") for n in os.listdir(os.path.join(ROOT, top))
              if os.path.isfile(os.path.join(ROOT, top, n, "__init__.py"))}
  # Folders of `python -m` commands rather than scripts in experiments/.
  commands = {"demo": "el_jax.tools.demo", "bench": "el_jax.tools.bench", "flatness_bench": "el_jax.tools.flatness_bench",
              "ntp_bench": "el_jax.tools.ntp_bench", "verify": "el_jax.tools.verify"}
  folders = {d for d in os.listdir(os.path.join(ROOT, "results"))
             if os.path.isdir(os.path.join(ROOT, "results", d))}
  assert folders <= scripts | set(commands), sorted(folders - scripts - set(commands))
