"""The suite's cross-CPU settings (`reliability.suite_env`, docs/testing.md "Across CPUs") are
in force in the test process itself: the XLA flags (YNNPACK's consistent-arithmetic kernels,
single-threaded Eigen contractions), Eigen's own contraction kernel instead of oneDNN's, and
OpenBLAS (SciPy's, which jaxlib's LAPACK ops call, and NumPy's) on one thread and, on a CPU
with AVX2 and FMA, on its Haswell kernels. OpenBLAS reads its environment when it is loaded,
so this fails if NumPy or SciPy were imported before conftest.py set it."""
import ctypes
import os
import subprocess
import sys

import pytest

import reliability  # tests/reliability.py


def test_the_xla_flags_and_environment_are_set():
  # The cross-CPU flags are known to the installed XLA (never left out) and in force; of the
  # compile-time ones, those it knows (jaxlib 0.12's has no --xla_cpu_use_fusion_emitters).
  cross = reliability.CROSS_CPU_XLA_FLAGS
  assert reliability.known_xla_flags(cross) == cross
  assert set(cross) <= set(os.environ["XLA_FLAGS"].split())
  fast = reliability.known_xla_flags(reliability.FAST_COMPILE_XLA_FLAGS)
  assert "--xla_backend_optimization_level=0" in fast
  assert reliability.suite_env({})["XLA_FLAGS"].split() == [*fast, *cross]
  assert set(fast) <= set(os.environ["XLA_FLAGS"].split())
  assert not set(reliability.DROPPED_XLA_FLAGS) & {f.split("=")[0] for f in cross}
  # a flag the caller set keeps its value
  kept = reliability.suite_env({"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"})
  assert kept["XLA_FLAGS"].split()[:2] == ["--xla_cpu_use_fusion_emitters=true",
                                           "--xla_backend_optimization_level=0"]
  for k, v in reliability.CROSS_CPU_ENV.items():
    assert os.environ[k] == v, k


def test_a_flag_this_xla_does_not_know_is_left_out_with_one_line(monkeypatch, capfd):
  """XLA ends a process on an XLA_FLAGS flag it does not know: the suite's flags are checked
  against the installed jaxlib first (a probe process), and one it lacks is left out with one
  line on stderr; a process started with what is left runs."""
  monkeypatch.setattr(reliability, "DROPPED_XLA_FLAGS", [])
  monkeypatch.setattr(reliability, "_XLA_FLAG_ANSWERS", {})
  bogus, real = "--xla_el_jax_no_such_flag=1", "--xla_cpu_multi_thread_eigen=false"
  capfd.readouterr()
  assert reliability.known_xla_flags((bogus, real)) == (real,)
  assert reliability.known_xla_flags((bogus,)) == ()
  err = capfd.readouterr().err
  assert err.count("\n") == 1 and "has no --xla_el_jax_no_such_flag: left out" in err, err
  assert reliability.DROPPED_XLA_FLAGS == ["--xla_el_jax_no_such_flag"]
  monkeypatch.setattr(reliability, "CROSS_CPU_XLA_FLAGS", (bogus, real))
  env = reliability.suite_env(dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu"))
  assert bogus not in env["XLA_FLAGS"] and real in env["XLA_FLAGS"]
  proc = subprocess.run([sys.executable, "-c", "import jax; print(jax.devices()[0].platform)"],
                        env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0 and proc.stdout.strip() == "cpu", proc.stderr[-2000:]


def _loaded_openblas():
  """{path: CDLL} of the OpenBLAS libraries loaded in this process (/proc/self/maps)."""
  try:
    with open("/proc/self/maps") as f:
      paths = {line.split()[-1] for line in f if "openblas" in line.split()[-1].lower()}
  except OSError:
    return {}
  return {p: ctypes.CDLL(p) for p in sorted(paths) if p.endswith(".so") or ".so." in p}


@pytest.mark.parametrize("module", ["numpy", "scipy.linalg"])
def test_openblas_kernels_and_threads_are_fixed(module):
  __import__(module)
  import jax.numpy as jnp  # jaxlib's LAPACK ops: a Cholesky through SciPy's OpenBLAS
  jnp.linalg.cholesky(jnp.eye(3)).block_until_ready()
  libs = {p: lib for p, lib in _loaded_openblas().items()
          if ("numpy" if module == "numpy" else "scipy.libs") in p}
  if not libs:
    pytest.skip(f"no OpenBLAS of {module} found in /proc/self/maps")
  for path, lib in libs.items():
    suffix = "64_" if "64_" in os.path.basename(path) else ""
    threads = getattr(lib, f"scipy_openblas_get_num_threads{suffix}")
    corename = getattr(lib, f"scipy_openblas_get_corename{suffix}")
    corename.restype = ctypes.c_char_p
    assert threads() == 1, path
    if reliability.has_avx2_fma():
      assert corename().decode() == "Haswell", (path, corename())
