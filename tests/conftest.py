"""Test-wide JAX settings: 8 forced CPU devices (sharding tests), strict rank promotion, and
the settings the suite's subprocesses have too (`reliability.suite_env`): JAX's persistent
compilation cache, shared by the xdist workers and the subprocesses they start (the suite
trains the same few `test` configs in many tests; each program compiles once), LLVM's
optimisation off (XLA's own passes, fusion included, still run) and XLA:CPU's elemental
emitters for fusions instead of its MLIR fusion emitters (both cut compile time only), and the
cross-CPU numerics
(YNNPACK's consistent-arithmetic kernels, Eigen's own single-threaded contractions instead of
oneDNN's, OpenBLAS on its Haswell kernels and one thread), under which a trained number
does not depend on the CPU (docs/testing.md, "Across CPUs"). The
pinned numbers (`tests/pins.py`, the golden step, the seed-002 pins) hold under these
settings, which every run of the suite has; the environment is set before NumPy, SciPy (whose
OpenBLAS reads it when loaded) and JAX are imported."""
import os

import reliability  # tests/reliability.py

# Must happen before JAX initialises its backends (and, for the cache, before it is imported).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.update(reliability.suite_env(os.environ))

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")
