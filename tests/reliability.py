"""Helpers of the reliability suites (tests/test_reliability_*.py): run an entry point as a
user would (a subprocess on the `test` configs) and check what it leaves behind."""
import hashlib
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The subprocesses of the test suite compile the same few programs again and again (the
# `test` configs): they share JAX's persistent compilation cache, and compile with LLVM's
# optimisation off (XLA's own passes, fusion included, still run). Both change only compile
# time; every comparison in these suites is between runs made with the same settings.
JAX_TEST_CACHE = os.path.join(tempfile.gettempdir(), f"el_jax_test_jax_cache_{os.getuid()}")
FAST_COMPILE = {"JAX_COMPILATION_CACHE_DIR": JAX_TEST_CACHE,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def fast_compile_env(base):
  """`base` (an environment dict) with FAST_COMPILE and LLVM optimisation level 0."""
  e = dict(base, **FAST_COMPILE)
  flags = e.get("XLA_FLAGS", "")
  if "xla_backend_optimization_level" not in flags:
    e["XLA_FLAGS"] = (flags + " --xla_backend_optimization_level=0").strip()
  return e


def env(**extra):
  e = fast_compile_env(dict(os.environ, JAX_PLATFORMS="cpu", EL_JAX_LOG_EVERY_S="10"))
  e.pop("EL_JAX_VERBOSE", None)
  e.update({k: str(v) for k, v in extra.items()})
  return e


def run(*args, module="el_jax.main", timeout=300, **env_extra):
  """`python -m <module> *args` from the repository root; returns the CompletedProcess."""
  return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                        env=env(**env_extra), capture_output=True, text=True, timeout=timeout)


def start(*args, module="el_jax.main", **env_extra):
  """The same as `run`, in the background (a Popen)."""
  return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                          env=env(**env_extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def last_line(proc):
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  return lines[-1] if lines else ""


def assert_one_line_error(proc, pattern, status=2):
  """Exit `status`, no traceback anywhere, and the last stderr line is `error: ...pattern...`."""
  import re
  out = proc.stdout + proc.stderr
  assert proc.returncode == status, f"exit {proc.returncode}, wanted {status}:\n{out[-3000:]}"
  assert "Traceback" not in out and "Exception ignored" not in out, out[-3000:]
  line = last_line(proc)
  assert line.startswith("error: "), out[-3000:]
  assert re.search(pattern, line), f"{pattern!r} not in {line!r}"
  return line


def snapshot(folder):
  """{relative path: sha256} of every file under `folder` (to show nothing was lost or changed)."""
  out = {}
  for dirpath, _, files in os.walk(folder):
    for name in files:
      path = os.path.join(dirpath, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
  return out


def read_jsonl(path):
  import json
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def start_with(prelude, *args, module="el_jax.main", **env_extra):
  """`start`, with Python code `prelude` run first in the same process (to wrap a function of
  el_jax or orbax, e.g. to signal the process or fail a write at a chosen point)."""
  code = (prelude + f"\nimport runpy, sys\nsys.argv[0] = {module!r}\n"
          f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
  return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT,
                          env=env(**env_extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def run_with(prelude, *args, timeout=300, **kwargs):
  """`run` with a `prelude` (see `start_with`); returns the CompletedProcess."""
  proc = start_with(prelude, *args, **kwargs)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    raise
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def experiment_script(name):
  """experiments/<name>.py as a module (the scripts are not a package; nothing is put on
  sys.path)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "experiments",
                                                                    f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def wait_for(predicate, timeout, poll=0.05):
  """True once `predicate()` is true, polled every `poll` s; False after `timeout` s."""
  import time
  t_end = time.time() + timeout
  while time.time() < t_end:
    if predicate():
      return True
    time.sleep(poll)
  return False
