"""Command line: one-line errors instead of tracebacks; every config file loads."""
import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

import reliability  # tests/reliability.py
from el_jax.run import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILES = sorted(p for p in glob.glob(os.path.join(ROOT, "configs", "*.py"))
                      if os.path.basename(p) != "__init__.py")


def _run_main(*args):
  env = reliability.suite_env(dict(os.environ, JAX_PLATFORMS="cpu"))
  return subprocess.run([sys.executable, "-m", "el_jax.main", *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=120)


# Each case: extra arguments, a regex the one error line must match.
BAD_INVOCATIONS = {
    "unknown_key": (["--config=configs/copy_task.py:test", "--config.train.bogus=3"],
                    r"^error: unknown config key 'train\.bogus'; valid keys: .*train\.num_steps"),
    "bad_value_type": (["--config=configs/copy_task.py:test", "--config.train.num_steps=abc"],
                       r"^error: flag --config\.train\.num_steps=abc: .*int.*'abc'"),
    "missing_file": (["--config=configs/no_such_config.py:test"],
                     r"^error: could not load --config=configs/no_such_config\.py:test: no such "
                     r"file$"),
    "unknown_variant": (["--config=configs/copy_task.py:bogus"],
                        r"^error: could not load --config=configs/copy_task\.py:bogus: "
                        r"get_config\('bogus'\) raised ValueError: unknown copy_task variant "
                        r"'bogus'; valid variants: .*'paper'.*'test'"),
    "missing_workdir": (["--config=configs/copy_task.py:test"], r"^--workdir is required"),
}


@pytest.mark.parametrize("case", sorted(BAD_INVOCATIONS))
def test_bad_invocation_prints_one_clear_line(case, tmp_path):
  args, pattern = BAD_INVOCATIONS[case]
  if case != "missing_workdir":
    args = [*args, f"--workdir={tmp_path / 'run'}"]
  proc = _run_main(*args)
  out = proc.stdout + proc.stderr
  assert proc.returncode == 2, out
  assert "Traceback" not in out, out
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert len(lines) == 1, f"expected one error line on stderr, got:\n{proc.stderr}"
  assert re.search(pattern, lines[0]), lines[0]
  assert not (tmp_path / "run").exists()  # nothing was started


def test_parse_raises_usage_error_in_process(capsys):
  with pytest.raises(cli.UsageError) as e:
    cli.parse(["prog", "--config=configs/copy_task.py:test", "--config.model.bogus=1",
               "--workdir=x"])
  assert e.value.code == 2
  assert "unknown config key 'model.bogus'" in str(e.value)
  assert str(e.value) in capsys.readouterr().err  # printed, not only raised


def test_overrides_are_applied():
  config, workdir = cli.parse(["prog", "--config=configs/copy_task.py:test",
                               "--config.loss.name=e1", "--config.loss.e1.lam=4",
                               "--config.train.num_steps=3", "--workdir=w"])
  assert (config.loss.name, config.loss.e1.lam, config.train.num_steps, workdir) == ("e1", 4.0, 3, "w")


def _load_module(path):
  spec = importlib.util.spec_from_file_location(f"_cfg_{os.path.basename(path)[:-3]}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_config_files_are_found():
  names = [os.path.basename(p) for p in CONFIG_FILES]
  assert "copy_task.py" in names and "__init__.py" not in names


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_every_variant_of_every_config_loads(path):
  module = _load_module(path)
  assert module.VARIANTS, f"{path}: VARIANTS is empty"
  for variant in module.VARIANTS:
    rel = os.path.relpath(path, ROOT)
    config, _ = cli.parse(["prog", f"--config={rel}:{variant}", "--workdir=w"])
    assert config.task, f"{rel}:{variant} has no task"
    assert config.to_dict() == module.get_config(variant).to_dict()


def _block_fields():
  """{block function: {field: line}} of el_jax/run/config_blocks.py: every field the shared blocks
  define, each on its own line (`c.<field> = ...`, `train.<field> = ...` or an OPTIM_DEFAULTS
  entry) or, for the loss blocks, an entry of LOSS_HPARAMS / REWEIGHT_FIELDS with its comment
  (shown here as the line `c.<loss>.<field> = <default>  # <comment>`)."""
  with open(os.path.join(ROOT, "el_jax", "run", "config_blocks.py")) as f:
    lines = f.read().splitlines()
  out, fn = {}, None
  for line in lines:
    m = re.match(r"^def (\w+)\(", line) or re.match(r"^(OPTIM_DEFAULTS) = \($", line)
    if m:
      fn = m.group(1)
      continue
    # Definitions sit at the function's top level (2 spaces); a variant's overrides deeper.
    m = (re.match(r"^  (?:c|train)\.(\w+) = (.*)$", line)
         or re.match(r'^    \("(\w+)", (.*)\),.*$', line))
    if fn and m and not m.group(2).startswith(("ml_collections.ConfigDict()", "loss()",
                                                "optim(", "flatness()", "_block(")):
      out.setdefault(fn, {})[m.group(1)] = line
  from el_jax.run import config_blocks
  tables = [(n, fields) for n, fields in config_blocks.LOSS_HPARAMS]
  for block, fields in tables + [("reweight", config_blocks.REWEIGHT_FIELDS)]:
    for field, default, comment in fields:
      out["loss"][f"{block}.{field}"] = (f"  c.{block}.{field} = {default!r}"
                                         + (f"  # {comment}" if comment.strip() else ""))
  return out


def test_every_shared_block_field_has_a_comment():
  missing = [f"{fn}: {line.strip()}" for fn, fields in _block_fields().items()
             for line in fields.values() if "  # " not in line]
  assert not missing, "config_blocks fields without a one-line comment:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", ["copy_task.py", "path_star.py"])
def test_every_training_config_field_has_a_comment(name):
  path = os.path.join(ROOT, "configs", name)
  with open(path) as f:
    lines = f.read().splitlines()
  # The fields are defined at the top level of get_config (2-space indent), or by a shared
  # block of el_jax/run/config_blocks.py (`c.loss = blocks.loss()`, `blocks.loop(c.train, ...)`);
  # variant overrides inside `if arg == ...` blocks are not definitions.
  shared = _block_fields()
  defined = {}
  for i, line in enumerate(lines, 1):
    m = re.match(r"^  c\.([\w.]+) = (.*)$", line)
    b = re.match(r"^  c\.(\w+) = blocks\.(\w+)\(", line)
    if b:
      fields = shared["OPTIM_DEFAULTS" if b.group(2) == "optim" else b.group(2)]
      defined.update({f"{b.group(1)}.{k}": (i, v) for k, v in fields.items()})
    elif re.match(r"^  blocks\.loop\(c\.train", line):
      loop_fields = {k: v for k, v in shared["loop"].items()
                     if k not in ("keep_checkpoints", "init_from") or f"{k}=" in line}
      defined.update({f"train.{k}": (i, v) for k, v in loop_fields.items()})
    elif m and not m.group(2).startswith("ml_collections.ConfigDict()"):
      defined[m.group(1)] = (i, line)
  missing = [f"line {i}: {line.strip()}" for i, line in defined.values() if "  # " not in line]
  assert not missing, "config fields without a one-line comment:\n" + "\n".join(missing)
  keys = set(cli._config_keys(_load_module(path).get_config("test")))
  assert keys == set(defined), f"fields not defined on their own line: {keys ^ set(defined)}"


def test_expected_errors_are_el_jax_checks_and_os_errors_not_library_bugs():
  import ml_collections
  import numpy as np
  from el_jax.core import optim

  def caught(fn):
    try:
      fn()
    except Exception as e:  # noqa: BLE001
      return e
    raise AssertionError("no exception")

  own = caught(lambda: optim.validate_config(ml_collections.ConfigDict({"name": "lion"})))
  assert cli.is_expected(own)
  assert cli.one_line(own) == "optim.name='lion'; allowed: ('adamw', 'adam', 'sgd')"
  library = caught(lambda: np.zeros(3).reshape(5))  # a ValueError from inside NumPy: a bug
  assert isinstance(library, ValueError) and not cli.is_expected(library)
  assert not cli.is_expected(caught(lambda: {}["k"]))  # KeyError / TypeError: always bugs
  os_error = caught(lambda: open("/nonexistent/dir/file"))
  assert cli.is_expected(os_error)
  assert cli.one_line(os_error) == "No such file or directory: /nonexistent/dir/file"
  assert cli.is_expected(FloatingPointError("diverged"))


def test_guard_prints_one_line_and_exits_2_or_1(capsys):
  def bad_config(argv):
    from el_jax.core import optim
    import ml_collections
    optim.validate_config(ml_collections.ConfigDict({"name": "adamw", "lr": -1.0}))

  def diverged(argv):
    raise FloatingPointError("non-finite training loss\nat step 3")

  with pytest.raises(SystemExit) as e:
    cli.guard(bad_config)(["prog"])
  assert e.value.code == 2
  assert capsys.readouterr().err == "error: optim.lr=-1.0 must be a finite number > 0\n"
  with pytest.raises(SystemExit) as e:
    cli.guard(diverged)(["prog"])
  assert e.value.code == 1
  assert capsys.readouterr().err == "error: non-finite training loss at step 3\n"
  with pytest.raises(ValueError):  # --verbose: the exception itself, with its traceback
    cli.guard(bad_config)(["prog", "--verbose"])

  def bug(argv):
    return np.zeros(3).reshape(5)

  import numpy as np
  with pytest.raises(ValueError):  # a library's error is a bug: never swallowed
    cli.guard(bug)(["prog"])


def test_seed_list_parses_model_seeds_or_says_what_is_wrong():
  """The experiment scripts' --seeds: distinct integers >= 0, each fault one message."""
  assert cli.seed_list("0,2,1") == [0, 2, 1]
  with pytest.raises(ValueError, match=r"--seeds='0,x' must be comma-separated integers"):
    cli.seed_list("0,x")
  with pytest.raises(ValueError, match=r"--pretrain_seeds=\[0, 0\] must be distinct integers"):
    cli.seed_list("0,0", flag="pretrain_seeds")
  with pytest.raises(ValueError, match=r"must be distinct integers >= 0"):
    cli.seed_list("-1")
  with pytest.raises(ValueError, match="comma-separated integers"):
    cli.seed_list("")


def test_cli_uses_only_public_ml_collections_api():
  """`--config` is ml_collections' public `config_flags.DEFINE_config_file` (el_jax loads the
  file first for its one-line errors): el_jax/run/cli.py imports nothing private of
  ml_collections and uses only names `ml_collections.config_flags` exports."""
  import ast
  from ml_collections import config_flags
  with open(cli.__file__) as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ml_collections"):
      assert node.module == "ml_collections" and [a.name for a in node.names] == ["config_flags"]
    if isinstance(node, ast.Import):
      assert not any(a.name.startswith("ml_collections") for a in node.names)
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "config_flags":
      assert node.attr in config_flags.__all__, node.attr


def test_config_via_define_config_file_keeps_overrides_and_filename(tmp_path, monkeypatch):
  """`cli.parse` through DEFINE_config_file: overrides apply, the config is locked, the flag
  gives the file (`config_filename`, which el_jax.experiment reads), `~` and a bare config
  name are resolved, and the config remembers its file for later one-line errors."""
  from el_jax.run import config as config_lib
  argv = ["prog", "--config=copy_task:test", "--config.train.num_steps=3", f"--workdir={tmp_path}"]
  config, workdir, fv = cli.parse(argv, return_flags=True)
  assert config.train.num_steps == 3 and workdir == str(tmp_path)
  with pytest.raises(AttributeError):
    config.not_a_field = 1  # locked
  path = os.path.join(ROOT, "configs", "copy_task.py")
  assert fv["config"].config_filename == f"{path}:test"
  assert config_lib.source(config) == f"{path}:test"
  home = tmp_path / "home"
  home.mkdir()
  (home / "c.py").write_text(open(path).read())
  monkeypatch.setenv("HOME", str(home))
  config, _ = cli.parse(["prog", "--config", "~/c.py:test", f"--workdir={tmp_path}"])
  assert config.train.num_steps == config_lib.get_config("copy_task", "test").train.num_steps
