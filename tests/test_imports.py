"""The import graph of `el_jax/`: no circle, and every import points down the layers.

Every `import` counts, at module level or inside a function: a function-level import
hides a circle from Python, not from the design. Function-level imports of el_jax
modules are allowed only for a heavy or optional dependency, and each says which in a
comment on its line or the line above.
"""
import ast
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "el_jax"

# Bottom to top. A module may import modules of its own layer (without a circle) or of
# a lower one. The foundation is what every layer may use: file safety, config files,
# statistics, the CLI surface, checkpoint and metrics I/O, losses and optimizers, the
# optional dependencies.
LAYERS = (
    ("foundation", ("infra", "core.losses", "core.optim", "run.config", "run.config_blocks",
                    "report", "run.cli")),
    # el_jax.core.ntp: the linear-NTP science (data, geometry, dynamics); its trainer
    # (run.ntp_train) and its benchmark (tools.ntp_bench) sit higher up.
    ("data", ("core.data", "core.ntp")),
    # core.data.lm_language: a language sampled from a decoder (seed 002's LM-sampled data)
    # loads the model, so it sits with the models; core.tasks.mlm picks it by data.language.
    ("models", ("core.models", "core.probe", "core.flatness", "core.data.lm_language")),
    ("step", ("core.step",)),
    ("tasks", ("core.adversarial", "core.tasks")),
    ("loop", ("run.setup", "run.train", "run.seeds")),
    ("job", ("run.job",)),
    ("runner", ("run.runner", "run.grid", "run.mlm_measure", "run.ntp_train", "run.experiment")),
    ("entry points", ("main", "experiment", "run.launch", "tools")),
)

# The parts of the package (docs/usage.md, "Layout") and the directions between them: the
# science runs from a notebook without the machinery, the machinery's foundation knows no
# runner, and the pages read JSON only.
PARTS = ("core", "run", "infra", "report", "tools")
FORBIDDEN = {"core": ("run", "report", "tools"), "infra": ("core", "run", "report", "tools"),
             "report": ("core", "run", "tools"), "run": ("tools",)}
# Where a core module still needs a run module, and why (each one an edge the test allows).
PART_EXCEPTIONS = {
    # the text LM task excludes label copy's evaluation texts: it reads that config's variants
    ("el_jax.core.tasks.text_lm", "el_jax.run.config"),
    # `python -m el_jax.core.data.tfds_builders` builds a data set from an el_jax config
    ("el_jax.core.data.tfds_builders", "el_jax.run.config"),
}


def _module_name(path):
  rel = path.relative_to(ROOT).with_suffix("")
  return ".".join(rel.parts).removesuffix(".__init__")


def import_graph():
  """{module: {(imported el_jax module, line, at module level)}} over el_jax/."""
  files = {_module_name(f): f for f in PKG.rglob("*.py")}
  graph = {}
  for name, f in files.items():
    tree = ast.parse(f.read_text())
    top = {id(n) for n in tree.body}
    deps = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
      elif isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      else:
        continue
      for t in targets:
        if t in files and t != name:
          deps.add((t, node.lineno, id(node) in top))
    graph[name] = deps
  return graph, files


def _layer(module):
  short = module.removeprefix("el_jax").removeprefix(".")
  best = None
  for i, (_, prefixes) in enumerate(LAYERS):
    for p in prefixes:
      if short == p or short.startswith(p + "."):
        if best is None or len(p) > best[1]:
          best = (i, len(p))
  return None if best is None else best[0]


def _cycles(graph):
  """Strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
  edges = {m: {d for d, _, _ in ds} for m, ds in graph.items()}

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  for v in edges:
    if v not in index:
      visit(v)
  return out


def test_no_import_circle_in_el_jax():
  graph, _ = import_graph()
  assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
  """The check above can fail: a two-module circle and a three-module one are found."""
  graph = {"a": {("b", 1, True)}, "b": {("a", 1, False)}, "c": {("d", 1, True)},
           "d": {("e", 1, True)}, "e": {("c", 1, True)}, "f": set()}
  assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_every_module_has_a_layer():
  graph, _ = import_graph()
  packages = {"el_jax", *(f"el_jax.{p}" for p in PARTS)}  # the parts' __init__: docstrings only
  missing = sorted(m for m in graph if m not in packages and _layer(m) is None)
  assert not missing, f"add these modules to LAYERS: {missing}"


def test_imports_point_down_the_layers():
  graph, _ = import_graph()
  upward = []
  for m, deps in graph.items():
    if m == "el_jax":
      continue
    for d, line, _ in deps:
      if _layer(d) is not None and _layer(d) > _layer(m):
        upward.append(f"{m}:{line} imports {d} ({LAYERS[_layer(m)][0]} -> {LAYERS[_layer(d)][0]})")
  assert not upward, "\n".join(sorted(upward))


def test_function_level_imports_say_why():
  """An el_jax import inside a function is there for a heavy or optional dependency, and
  a comment on its line (or the line just above) says so."""
  graph, files = import_graph()
  silent = []
  for m, deps in graph.items():
    lines = files[m].read_text().split("\n")
    for _, line, top in deps:
      if top:
        continue
      here, above = lines[line - 1], lines[line - 2] if line >= 2 else ""
      near = [here] + ([above] if above.strip().startswith("#") or "import" in above else [])
      # A run of function-level imports shares the comment above its first line.
      k = line - 2
      while k >= 0 and lines[k].strip().startswith(("from ", "import ")):
        k -= 1
      while k >= 0 and lines[k].strip().startswith("#"):  # the comment block above the run
        near.append(lines[k])
        k -= 1
      if not any("#" in s and ("heavy" in s.lower() or "optional" in s.lower()
                               or "matplotlib" in s or "registers" in s or "package name" in s)
                 for s in near):
        silent.append(f"{os.path.relpath(files[m], ROOT)}:{line}: {here.strip()}")
  assert not silent, "\n".join(silent)


@pytest.mark.parametrize("module", ["el_jax.run.train", "el_jax.core.step", "el_jax.run.job"])
def test_the_loop_names_no_task_and_no_objective(module):
  """The loop, the step and the job name no task module and no objective: the task
  supplies its data, metric groups, evaluation and step (`Task.step_fn`)."""
  graph, _ = import_graph()
  named = sorted(d for d, _, _ in graph[module]
                 if d.startswith("el_jax.core.tasks.") and d != "el_jax.core.tasks.base"
                 or d == "el_jax.core.adversarial")
  assert named == []


def _part(module):
  parts = module.split(".")
  return parts[1] if len(parts) > 2 and parts[1] in PARTS else None


def test_the_parts_import_in_their_directions():
  """core imports neither run, report nor tools; infra imports nothing above it; report
  imports no core, run or tool (pages are a function of JSON); run imports no tool."""
  graph, _ = import_graph()
  wrong = []
  for m, deps in graph.items():
    for d, line, _ in deps:
      if _part(d) in FORBIDDEN.get(_part(m), ()) and (m, d) not in PART_EXCEPTIONS:
        wrong.append(f"{m}:{line} imports {d} ({_part(m)} -> {_part(d)})")
  assert not wrong, "\n".join(sorted(wrong))


def test_every_part_exception_is_still_needed():
  graph, _ = import_graph()
  edges = {(m, d) for m, deps in graph.items() for d, _, _ in deps}
  assert PART_EXCEPTIONS <= edges, sorted(PART_EXCEPTIONS - edges)
