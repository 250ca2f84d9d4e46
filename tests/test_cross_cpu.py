"""The suite's cross-CPU settings (`reliability.suite_env`, docs/testing.md "Across CPUs") are
in force in the test process itself: the XLA flags (YNNPACK's consistent-arithmetic kernels,
single-threaded Eigen contractions), Eigen's own contraction kernel instead of oneDNN's, and
OpenBLAS (SciPy's, which jaxlib's LAPACK ops call, and NumPy's) on one thread and, on a CPU
with AVX2 and FMA, on its Haswell kernels. OpenBLAS reads its environment when it is loaded,
so this fails if NumPy or SciPy were imported before conftest.py set it."""
import ctypes
import os

import pytest

import reliability  # tests/reliability.py


def test_the_xla_flags_and_environment_are_set():
  assert set(reliability.CROSS_CPU_XLA_FLAGS) <= set(os.environ["XLA_FLAGS"].split())
  assert reliability.suite_env({})["XLA_FLAGS"].split() == [
      *reliability.FAST_COMPILE_XLA_FLAGS, *reliability.CROSS_CPU_XLA_FLAGS]
  assert set(reliability.FAST_COMPILE_XLA_FLAGS) <= set(os.environ["XLA_FLAGS"].split())
  # a flag the caller set keeps its value
  kept = reliability.suite_env({"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"})
  assert kept["XLA_FLAGS"].split()[:2] == ["--xla_cpu_use_fusion_emitters=true",
                                           "--xla_backend_optimization_level=0"]
  for k, v in reliability.CROSS_CPU_ENV.items():
    assert os.environ[k] == v, k


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
