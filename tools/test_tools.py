"""Every tool folder (tools/<name>/): a package whose config says its command, its wall time,
its results folder and the page its section is on (and that page has the section), and whose
variants (at least test, cpu and paper) load with a results folder; the tools' own command
lines are the device queue's (a session's steps run on different machines) and the benchmarks'
worker processes, nothing else. (tests/test_experiments.py checks their analyses.)"""
import ast
import importlib
import os
import re

import pytest

from el_jax.report import render

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
NAMES = sorted(n for n in os.listdir(TOOLS) if os.path.isfile(os.path.join(TOOLS, n, "__init__.py")))
WITH_CONFIG = [n for n in NAMES if os.path.isfile(os.path.join(TOOLS, n, "config.py"))]
# The command lines a tool keeps: (file, why).
OWN_COMMAND_LINES = {
    os.path.join("device_queue", "queue.py"): "session / run / collect / status on two machines",
    os.path.join("bench_vs_torch", "worker.py"): "a worker process's spec, from run.py",
}


def _anchors(page):
  with open(os.path.join(ROOT, render.DOCS, page)) as fh:
    return {render._anchor(l[3:]) for l in fh.read().splitlines() if l.startswith("## ")}  # noqa: SLF001


def test_there_are_tools():
  assert {"device_queue", "bench_vs_torch", "cross_machine", "plan_paper", "verify"} <= set(NAMES)


@pytest.mark.parametrize("name", WITH_CONFIG)
def test_every_config_says_its_command_time_folder_and_page(name):
  mod = importlib.import_module(f"tools.{name}.config")
  doc = mod.__doc__ or ""
  assert re.search(r"python -m (el_jax\.experiment --config=tools/" + name + r"/config\.py|"
                   r"el_jax\.tools\.\w+|tools\.\w+)", doc), "no command"
  assert re.search(r"\b(seconds?|minutes?)\b", doc), "no wall time"
  assert f"results/{name}" in doc, "no results folder"
  pages = re.findall(r"docs/results/([\w.]+\.md)", doc)
  assert pages, "no results page"
  for page in pages:
    assert os.path.exists(os.path.join(ROOT, render.DOCS, page)), page
  assert {"test", "cpu", "paper"} <= set(mod.VARIANTS)
  for variant in mod.VARIANTS:
    cfg = mod.get_config(variant)
    assert isinstance(cfg.results_dir, str) and cfg.results_dir, (name, variant)
    want = f"results/{name}" if variant != "test" else "runs/"
    assert cfg.results_dir.startswith(want), (name, variant, cfg.results_dir)
  with pytest.raises(ValueError, match="valid variants"):
    mod.get_config("no_such_variant")


@pytest.mark.parametrize("name", NAMES)
def test_every_section_is_on_its_page(name):
  """Each tool's page.md names its page, and every `## ` heading of it is on that page."""
  path = os.path.join(TOOLS, name, "page.md")
  if not os.path.isfile(path):
    pytest.skip(f"tools/{name} has no section")
  with open(path) as fh:
    text = fh.read()
  page = re.match(r"\{#\s*page:\s*([\w.-]+)\s*#\}", text).group(1)
  headings = [l[3:] for l in text.splitlines() if l.startswith("## ")]
  assert headings and set(map(render._anchor, headings)) <= _anchors(f"{page}.md")  # noqa: SLF001


def test_only_the_listed_tools_parse_a_command_line():
  found = {}
  for dirpath, _, names in os.walk(TOOLS):
    for n in names:
      if n.endswith(".py"):
        path = os.path.join(dirpath, n)
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):
          parses = ((isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names))
                    or (isinstance(node, ast.Attribute) and node.attr == "argv"
                        and getattr(node.value, "id", None) == "sys"))
          if parses:
            found[os.path.relpath(path, TOOLS)] = True
  assert set(found) <= set(OWN_COMMAND_LINES), sorted(set(found) - set(OWN_COMMAND_LINES))
