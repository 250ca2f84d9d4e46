"""Helpers of the reliability suites (tests/test_reliability_*.py): run an entry point as a
user would (a subprocess on the `test` configs) and check what it leaves behind."""
import hashlib
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The subprocesses of the test suite compile the same few programs again and again (the
# `test` configs): they share JAX's persistent compilation cache, and compile with LLVM's
# optimisation off (XLA's own passes, fusion included, still run) and with XLA:CPU's older
# elemental emitters for fusions instead of its MLIR fusion emitters (a third of the compile
# time of a cold suite). These change compile time only (every pinned number is the same
# under them; docs/testing.md, "Compile settings"); every comparison in these suites is
# between runs made with the same settings.
JAX_TEST_CACHE = os.path.join(tempfile.gettempdir(), f"el_jax_test_jax_cache_{os.getuid()}")
FAST_COMPILE = {"JAX_COMPILATION_CACHE_DIR": JAX_TEST_CACHE,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


FAST_COMPILE_XLA_FLAGS = ("--xla_backend_optimization_level=0",
                          "--xla_cpu_use_fusion_emitters=false")


def _add_flags(flags, new):
  """XLA_FLAGS `flags` with each of `new` that it does not set already (with any value) and
  that the installed XLA knows (`known_xla_flags`)."""
  for flag in known_xla_flags(new):
    if flag.split("=")[0] not in flags:
      flags = (flags + " " + flag).strip()
  return flags


# XLA ends the process on a flag of XLA_FLAGS it does not know ("Unknown flag in XLA_FLAGS"),
# and its flags come and go between jaxlib versions (jaxlib 0.12's XLA has no
# --xla_cpu_use_fusion_emitters). The suite's flags are checked against the installed jaxlib
# by one probe process (import JAX and start its CPU backend with them: about 2 s), whose
# answer is kept per jaxlib version beside the compilation cache; a flag it does not know is
# left out with one line on stderr (once per process) and listed in DROPPED_XLA_FLAGS (the
# suite's header shows them: conftest.py).
DROPPED_XLA_FLAGS = []
_XLA_FLAG_ANSWERS = {}  # flag name -> known, this process


def _jaxlib_version():
  import importlib.metadata
  try:
    return importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    return "none"


def _probe_xla_flags(flags):
  """{flag name: known} for `flags` from a process that starts XLA's CPU backend with them."""
  import re
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(flags))
  proc = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env,
                        capture_output=True, text=True, timeout=300)
  m = re.search(r"Unknown flags? in XLA_FLAGS: (.*)", proc.stderr)
  unknown = {f.split("=")[0] for f in m.group(1).split()} if m else set()
  return {f.split("=")[0]: f.split("=")[0] not in unknown for f in flags}


def known_xla_flags(flags):
  """The flags of `flags` ("--name=value") that the installed jaxlib's XLA knows (above)."""
  import json
  names = [f.split("=")[0] for f in flags]
  if any(n not in _XLA_FLAG_ANSWERS for n in names):
    version = _jaxlib_version()
    path = f"{JAX_TEST_CACHE}_xla_flags_jaxlib-{version}.json"
    try:
      with open(path) as f:
        stored = json.load(f)
    except (OSError, ValueError):
      stored = {}
    if any(n not in stored for n in names):
      stored.update(_probe_xla_flags([f for f in flags if f.split("=")[0] not in stored]))
      tmp = f"{path}.{os.getpid()}.tmp"
      with open(tmp, "w") as f:
        json.dump(stored, f, indent=1, sort_keys=True)
      os.replace(tmp, path)
    for name in names:
      _XLA_FLAG_ANSWERS[name] = known = bool(stored[name])
      if not known and name not in DROPPED_XLA_FLAGS:
        DROPPED_XLA_FLAGS.append(name)
        print(f"tests/reliability.py: jaxlib {version}'s XLA has no {name}: left out of "
              f"XLA_FLAGS", file=sys.stderr)
  return tuple(f for f in flags if _XLA_FLAG_ANSWERS[f.split("=")[0]])


def fast_compile_env(base):
  """`base` (an environment dict) with FAST_COMPILE and FAST_COMPILE_XLA_FLAGS."""
  e = dict(base, **FAST_COMPILE)
  e["XLA_FLAGS"] = _add_flags(e.get("XLA_FLAGS", ""), FAST_COMPILE_XLA_FLAGS)
  return e


# Under these settings the suite's trained numbers do not depend on the CPU (x86-64 with AVX2
# and FMA; docs/testing.md, "Across CPUs"): bit for bit the same on an AVX-512 Zen 4 and an
# emulated AVX2-only Haswell (QEMU), and at 1, 2 and 16 threads. Three libraries of jaxlib /
# SciPy pick their kernels from the CPU they run on:
# * YNNPACK, which XLA:CPU (jax 0.10.2) hands most dots, large reductions and some element-wise
#   ops to: AVX-512, AVX2 + FMA and AVX kernels sum in different orders. With the first flag
#   XLA asks it for its consistent-arithmetic kernels (the same results on any CPU one build
#   runs on).
# * oneDNN's sgemm, the kernel of the Eigen contractions that run the dots YNNPACK does not
#   take (e.g. the weight gradients, X^T dY): AVX-512 and AVX2 kernels. The environment
#   variable makes Eigen use its own kernel (compiled into jaxlib for one ISA), and the second
#   flag runs those contractions on one thread (Eigen blocks and shards k by thread count).
# * OpenBLAS (SciPy's, which jaxlib calls for the LAPACK ops of jitted code, e.g. the
#   adversary's Cholesky; NumPy's): fixed to its Haswell kernels (AVX2 + FMA) and one thread
#   (its Cholesky and triangular solves round differently on 1, 2 and 16 threads).
CROSS_CPU_XLA_FLAGS = ("--xla_cpu_enable_platform_dependent_math=false",
                       "--xla_cpu_multi_thread_eigen=false")
CROSS_CPU_ENV = {"TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL": "false",
                 "OPENBLAS_NUM_THREADS": "1"}  # + OPENBLAS_CORETYPE=Haswell on AVX2 + FMA


def has_avx2_fma():
  """Whether this is an x86-64 CPU with AVX2 and FMA (Linux's /proc/cpuinfo; False elsewhere)."""
  if platform.machine().lower() not in ("x86_64", "amd64"):
    return False
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("flags"):
          return {"avx2", "fma"} <= set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return False


# A training run's PNG plots off (el_jax.infra.progress.plots_enabled): about 2 s of each short run
# the suite starts. The tests of the plots set EL_JAX_PLOTS=1 (`PLOTS`: the `plots` mark of
# conftest.py, or the fixture or helper itself), and so does the clean install of
# tests/test_install.py, whose runs must show that the core's matplotlib draws them.
PLOTS = {"EL_JAX_PLOTS": "1"}


def plots_on(monkeypatch):
  """Sets `PLOTS` through `monkeypatch` (a pytest MonkeyPatch or one of its contexts)."""
  for k, v in PLOTS.items():
    monkeypatch.setenv(k, v)


def suite_env(base):
  """`base` (an environment dict) with the suite's settings: `fast_compile_env`, the
  cross-CPU ones above (an XLA flag already in XLA_FLAGS, with any value, is left as it is;
  OpenBLAS's Haswell kernels only on a CPU that has them) and the plots off (EL_JAX_PLOTS=0)
  unless `base` sets EL_JAX_PLOTS."""
  e = fast_compile_env(base)
  e["XLA_FLAGS"] = _add_flags(e["XLA_FLAGS"], CROSS_CPU_XLA_FLAGS)
  e.update(CROSS_CPU_ENV)
  e.setdefault("EL_JAX_PLOTS", "0")
  if has_avx2_fma():
    e["OPENBLAS_CORETYPE"] = "Haswell"
  return e


def env(**extra):
  e = suite_env(dict(os.environ, JAX_PLATFORMS="cpu", EL_JAX_LOG_EVERY_S="10"))
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


def call_main(capsys, monkeypatch, *args):
  """`el_jax.main.main` called in this process with `args`, from the repository root; returns
  what `run` would (a CompletedProcess: the exit status, stdout, stderr). For the bad-input
  cases that stop before anything trains: a `python -m el_jax.main` start costs ~3 s of CPU,
  nearly all of it imports, and these cases differ only in the line they print; the tests
  that take the same path as a separate process (`run`) keep one case of each kind."""
  from el_jax import main as main_lib
  monkeypatch.chdir(ROOT)
  capsys.readouterr()
  argv = ["el_jax.main", *map(str, args)]
  try:
    main_lib.main(argv)
    status = 0
  except SystemExit as e:  # (as the interpreter maps it: None is 0, a message 1)
    status = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
  out = capsys.readouterr()
  return subprocess.CompletedProcess(argv, status, out.out, out.err)


def wait_for(predicate, timeout, poll=0.05):
  """True once `predicate()` is true, polled every `poll` s; False after `timeout` s."""
  import time
  t_end = time.time() + timeout
  while time.time() < t_end:
    if predicate():
      return True
    time.sleep(poll)
  return False
