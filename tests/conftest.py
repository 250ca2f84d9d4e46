"""Test-wide JAX settings: 8 forced CPU devices (sharding tests), strict rank promotion, and
the compile settings the suite's subprocesses already had (`reliability.fast_compile_env`):
JAX's persistent compilation cache, shared by the xdist workers and the subprocesses they
start (the suite trains the same few `test` configs in many tests; each program compiles
once), and LLVM's optimisation off (XLA's own passes, fusion included, still run). Both change
compile time only, except that another LLVM optimisation level may round differently: the
pinned numbers (`tests/pins.py`, the golden step, the seed-002 pins) hold under these
settings, which every run of the suite has."""
import os

import reliability  # tests/reliability.py

# Must happen before JAX initialises its backends (and, for the cache, before it is imported).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.update(reliability.fast_compile_env(os.environ))

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")
