"""Test-wide JAX settings: 8 forced CPU devices (sharding tests), strict rank promotion, and
the settings the suite's subprocesses have too (`reliability.suite_env`): JAX's persistent
compilation cache, shared by the xdist workers and the subprocesses they start (the suite
trains the same few `test` configs in many tests; each program compiles once), LLVM's
optimisation off (XLA's own passes, fusion included, still run) and XLA:CPU's elemental
emitters for fusions instead of its MLIR fusion emitters (both cut compile time only), a
training run's PNG plots off (EL_JAX_PLOTS=0: ~2 s of each short run; the plots' tests turn
them on), and the cross-CPU numerics
(YNNPACK's consistent-arithmetic kernels, Eigen's own single-threaded contractions instead of
oneDNN's, OpenBLAS on its Haswell kernels and one thread), under which a trained number
does not depend on the CPU (docs/testing.md, "Across CPUs"). The
pinned numbers (`tests/pins.py`, the golden step, the seed-002 pins) hold under these
settings, which every run of the suite has; the environment is set before NumPy, SciPy (whose
OpenBLAS reads it when loaded) and JAX are imported."""
import os
import sys

# tests/ holds the suite's helpers (reliability, pins, shared_fixtures); the experiments' own
# tests (experiments/<name>/test_<name>.py) import them too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))

import reliability  # noqa: E402  (tests/reliability.py)

# Must happen before JAX initialises its backends (and, for the cache, before it is imported).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.update(reliability.suite_env(os.environ))

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")


import pytest  # noqa: E402

from el_jax.core import step  # noqa: E402  (after the settings above)

_ALL_DEVICES = step.default_num_devices


def pytest_report_header(config):
  """The JAX line the suite runs under, and the suite's XLA flags this XLA does not know
  (left out: `reliability.known_xla_flags`)."""
  line = f"jax {jax.__version__}, jaxlib {jax.lib.__version__}, Python {sys.version.split()[0]}"
  if reliability.DROPPED_XLA_FLAGS:
    line += f"; XLA flags left out (unknown to this XLA): {' '.join(reliability.DROPPED_XLA_FLAGS)}"
  return line


@pytest.fixture(scope="session", autouse=True)
def _one_default_device():
  """`num_devices=0` (every config's default, and the device count `runner.fit_devices` fits
  experiment grids to) means one device in the suite, not the 8 forced ones: 8 virtual devices
  share this machine's cores and run each step's program 8 ways (a test-size bilstm trained 3x
  slower, the encoder 1.7x). Sharding is tested where a test asks for devices by number, or
  with the `all_devices` mark (`num_devices=0` then means all 8 again)."""
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(step, "default_num_devices", lambda: 1)
    yield


@pytest.fixture(autouse=True)
def _all_devices_when_marked(request, monkeypatch):
  if request.node.get_closest_marker("all_devices"):
    monkeypatch.setattr(step, "default_num_devices", _ALL_DEVICES)


@pytest.fixture(autouse=True)
def _plots_when_marked(request, monkeypatch):
  """The `plots` mark: the test's runs draw their PNG plots (`reliability.PLOTS`), which the
  suite otherwise turns off (EL_JAX_PLOTS=0, tests/reliability.py)."""
  if request.node.get_closest_marker("plots"):
    reliability.plots_on(monkeypatch)
