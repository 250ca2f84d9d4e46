"""Every experiment is a folder with its config, run, analysis, page section and tests; its
committed analysis.json is what its analysis makes of the committed rows, computed without
JAX; no experiment parses a command line of its own; and a new experiment touches only its
own folder (tests/example_experiment, copied into a checkout's experiments/)."""
import ast
import importlib
import json
import math
import re
import os
import shutil
import subprocess
import sys

import pytest

from el_jax import experiment
from el_jax.report import render
from el_jax.report import sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS = os.path.join(ROOT, "experiments")
TOOLS = os.path.join(ROOT, "tools")
NAMES = sorted(n for n in os.listdir(EXPERIMENTS)
               if os.path.isfile(os.path.join(EXPERIMENTS, n, "__init__.py")))
# Tools (benchmarks, the device queue, ...) that put numbers on a page have an analysis too.
TOOL_NAMES = sorted(n for n in (os.listdir(TOOLS) if os.path.isdir(TOOLS) else ())
                    if os.path.isfile(os.path.join(TOOLS, n, "analysis.py")))
ANALYSES = [("experiments", n) for n in NAMES] + [("tools", n) for n in TOOL_NAMES]
PARTS = ("config.py", "run.py", "analysis.py", "page.md")
REQUIRED_VARIANTS = ("test", "cpu", "paper")


def _module(name, part, top="experiments"):
  return importlib.import_module(f"{top}.{name}.{part}")


def test_there_are_experiments():
  assert "ntp_convergence" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_is_a_folder_of_its_parts(name):
  folder = os.path.join(EXPERIMENTS, name)
  missing = [p for p in (*PARTS, f"test_{name}.py") if not os.path.isfile(os.path.join(folder, p))]
  assert not missing, f"experiments/{name}/ lacks {missing}"
  assert callable(getattr(_module(name, "run"), "run", None))
  assert callable(getattr(_module(name, "analysis"), "analyze", None))


@pytest.mark.parametrize("name", NAMES)
def test_every_variant_of_every_experiment_config_loads(name):
  mod = _module(name, "config")
  doc = mod.__doc__ or ""
  assert f"python -m el_jax.experiment --config=experiments/{name}/config.py" in doc, (
      f"experiments/{name}/config.py: its docstring gives the command")
  assert re.search(r"\d[\d.,]*\s*(s|min|minutes|h|hours)\b", doc), (
      f"experiments/{name}/config.py: its docstring gives the wall time")
  assert mod.get_config("cpu").results_dir.startswith(f"results/{name}"), (
      f"experiments/{name}: the cpu variant writes under results/{name}/")
  assert set(REQUIRED_VARIANTS) <= set(mod.VARIANTS), (name, mod.VARIANTS)
  for variant in mod.VARIANTS:
    cfg = mod.get_config(variant)
    assert isinstance(cfg.results_dir, str) and cfg.results_dir, (name, variant)
  with pytest.raises(ValueError, match="valid variants"):
    mod.get_config("no_such_variant")


def _close(a, b, path="analysis"):
  """JSON values equal, floats to a relative 1e-9 (NumPy's sums may round differently on
  another CPU's vector width)."""
  if isinstance(a, dict) and isinstance(b, dict):
    assert list(a) == list(b), (path, list(a), list(b))
    for k in a:
      _close(a[k], b[k], f"{path}.{k}")
  elif isinstance(a, list) and isinstance(b, list):
    assert len(a) == len(b), (path, len(a), len(b))
    for i, (x, y) in enumerate(zip(a, b)):
      _close(x, y, f"{path}[{i}]")
  elif isinstance(a, float) or isinstance(b, float):
    assert isinstance(a, (int, float)) and isinstance(b, (int, float)), (path, a, b)
    assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (a != a and b != b), (path, a, b)
  else:
    assert a == b, (path, a, b)


def _committed(name, top="experiments"):
  cfg = _module(name, "config", top).get_config("cpu")
  return cfg, os.path.join(ROOT, cfg.results_dir)


@pytest.mark.parametrize("top, name", ANALYSES)
def test_the_committed_analysis_is_what_the_rows_give(top, name):
  """results/<name>/analysis.json recomputed from the committed rows: the same numbers, the
  same sources (`python -m el_jax.experiment --config=<top>/<name>/config.py:cpu
  --stage=analyze` rewrites it)."""
  cfg, out = _committed(name, top)
  with open(os.path.join(out, "analysis.json")) as f:
    committed = json.load(f)
  src = sources.Sources(out, root=ROOT)
  fresh = json.loads(json.dumps({**_module(name, "analysis", top).analyze(src, cfg),
                                 "sources": src.read}))
  _close(fresh, committed)


def test_the_analyses_run_without_jax(tmp_path):
  """Every analysis module, imported and run in a process where importing JAX (or Flax,
  Optax, orbax) fails: NumPy only (experiments and tools)."""
  code = f"""
import importlib, importlib.abc, json, sys
class Block(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name.split(".")[0] in ("jax", "jaxlib", "flax", "optax", "orbax", "tensorflow"):
      raise ImportError(f"analysis imported {{name}}")
sys.meta_path.insert(0, Block())
sys.path.insert(0, {ROOT!r})
from el_jax.report import sources
for top, name in {ANALYSES!r}:
  cfg = importlib.import_module(f"{{top}}.{{name}}.config").get_config("cpu")
  mod = importlib.import_module(f"{{top}}.{{name}}.analysis")
  mod.analyze(sources.Sources(cfg.results_dir, root={ROOT!r}), cfg)
print("ok")
"""
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
  assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def _parses_a_command_line(path):
  tree = ast.parse(open(path).read())
  for node in ast.walk(tree):
    if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
      return "imports argparse"
    if isinstance(node, ast.ImportFrom) and node.module in ("argparse", "absl.flags"):
      return f"imports {node.module}"
    if isinstance(node, ast.ImportFrom) and node.module == "absl" and any(
        a.name == "flags" for a in node.names):
      return "imports absl.flags"
    if isinstance(node, ast.Attribute) and node.attr == "argv" and getattr(
        node.value, "id", None) == "sys":
      return "reads sys.argv"
  return None


def test_no_experiment_parses_its_own_command_line():
  """Every experiment runs through `python -m el_jax.experiment`: no argparse, absl flags or
  sys.argv under experiments/, and no script beside the folders."""
  found = []
  for dirpath, _, names in os.walk(EXPERIMENTS):
    for n in names:
      if n.endswith(".py"):
        why = _parses_a_command_line(os.path.join(dirpath, n))
        if why:
          found.append(f"{os.path.relpath(os.path.join(dirpath, n), ROOT)} {why}")
  scripts = sorted(n for n in os.listdir(EXPERIMENTS)
                   if n.endswith(".py") and n != "__init__.py")
  assert not found, found
  assert not scripts, f"scripts beside the experiment folders: {scripts}"


@pytest.mark.parametrize("top, name", ANALYSES)
def test_every_section_names_its_page_and_is_on_it(top, name):
  with open(os.path.join(ROOT, top, name, "page.md")) as f:
    first = f.readline()
  page = first.removeprefix("{# page:").removesuffix("#}\n").strip()
  assert page in render.PAGES, (f"experiments/{name}/page.md: its first line names its page, "
                                f"{{# page: <page> #}} with <page> one of {render.PAGES}")
  assert f"{name}/page.md" in render.sections(ROOT)[page]


def _copy_checkout(dst):
  """What an experiment and the pages need of the checkout: experiments/, tools/ (their
  sections), results/ (the analyses and figures), docs/results/ and the README."""
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
  for d in ("experiments", "tools", "results", os.path.join("docs", "results")):
    shutil.copytree(os.path.join(ROOT, d), dst / d, ignore=ignore)
  shutil.copy(os.path.join(ROOT, "README.md"), dst / "README.md")


def _tree(root):
  out = {}
  for dirpath, dirnames, names in os.walk(root):
    dirnames[:] = [d for d in dirnames if d != "__pycache__"]
    for n in names:
      p = os.path.join(dirpath, n)
      with open(p, "rb") as f:
        out[os.path.relpath(p, root)] = f.read()
  return out


def test_a_new_experiment_touches_only_its_own_folder(tmp_path):
  """tests/example_experiment dropped into a copy of the checkout as experiments/example/:
  `python -m el_jax.experiment --config=experiments/example/config.py:test
  --config.results_dir=results/example` trains it, writes its analysis and puts its section
  on the page its first line names; nothing else in the checkout changes but that page and
  the pages' index, and `python -m el_jax.report --check` then holds."""
  root = tmp_path / "checkout"
  _copy_checkout(root)
  shutil.copytree(os.path.join(ROOT, "tests", "example_experiment"),
                  root / "experiments" / "example",
                  ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  before = _tree(root)
  env = {**os.environ, "PYTHONPATH": ROOT}
  proc = subprocess.run(
      [sys.executable, "-m", "el_jax.experiment",
       f"--config={root}/experiments/example/config.py:test",
       "--config.results_dir=results/example"],
      capture_output=True, text=True, cwd=tmp_path, env=env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  after = _tree(root)
  changed = sorted(k for k in after if before.get(k) != after[k])
  outside = [k for k in changed if not k.startswith(("results/example/", "runs/example/"))]
  assert outside == ["docs/results/README.md", "docs/results/seed003_linear_ntp.md"], outside
  page = after["docs/results/seed003_linear_ntp.md"].decode()
  assert "## Example: alignment by instance draw" in page
  with open(root / "results" / "example" / "analysis.json") as f:
    a = json.load(f)
  assert list(a["cos_mm"]) == ["draw 14", "draw 15"]
  assert f"| draw 14 | {a['cos_mm']['draw 14']:.3f} |" in page
  assert a["sources"] == ["results/example/grid.json"]
  assert "results/example/grid.json" in page.split("\n---\n")[-1]  # the page's footer
  assert render.main(["--check", "--root", str(root)]) == 0


def test_a_folder_that_is_not_an_experiment_is_a_one_line_error(tmp_path):
  cfg = tmp_path / "config.py"
  cfg.write_text("import ml_collections\n\ndef get_config():\n  c = ml_collections.ConfigDict()\n"
                 "  c.results_dir = 'x'\n  return c\n")
  proc = subprocess.run([sys.executable, "-m", "el_jax.experiment", f"--config={cfg}"],
                        capture_output=True, text=True, cwd=ROOT)
  assert proc.returncode == 2
  assert proc.stderr.strip().count("\n") == 0, proc.stderr
  assert "experiments/<name>/config.py" in proc.stderr


def test_every_results_folder_belongs_to_an_experiment_or_a_tool():
  """results/<name>/ is written by experiments/<name>/ or tools/<name>/."""
  owners = set(NAMES) | set(TOOL_NAMES)
  if os.path.isdir(TOOLS):
    owners |= {n for n in os.listdir(TOOLS) if os.path.isdir(os.path.join(TOOLS, n))}
  folders = {d for d in os.listdir(os.path.join(ROOT, "results"))
             if os.path.isdir(os.path.join(ROOT, "results", d))}
  assert folders <= owners, sorted(folders - owners)
