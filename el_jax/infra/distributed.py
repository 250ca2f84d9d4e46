"""Multi-process training, the way JAX scales past one host.

  python -m el_jax.run.launch --num_processes=2 -- --config=configs/copy_task.py:test --workdir=runs/x
  python -m el_jax.main --distributed --config=... --workdir=...   # on every host of a cluster

`initialize` calls `jax.distributed.initialize` when the environment asks for it
(`el_jax.run.launch` sets the variables below for N processes on this machine) or when
`auto=True` (`el_jax.main --distributed`: on a TPU slice, a SLURM job or under Open MPI,
JAX detects the coordinator, the number of processes and this process's id itself).
On CPU the processes' collectives run through gloo (TCP).

Then every process sees every device of every process (`jax.devices()`), the `data` mesh
spans them all, and each process puts its own rows of every batch on its own devices
(`put_rows`). Process 0 (`is_main`) owns the workdir; the decisions it takes from the
workdir's files reach the others through `from_main`.

Environment read by `initialize` (set by `el_jax.run.launch`):

  JAX_COORDINATOR_ADDRESS  host:port of the coordinator service, run by process 0 (JAX reads it)
  EL_JAX_NUM_PROCESSES     number of processes N
  EL_JAX_PROCESS_ID        this process's index, 0 .. N-1
"""
import json
import os
import sys

import numpy as np

ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "EL_JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "EL_JAX_PROCESS_ID"

_state = {"initialized": False}


def _env_int(name, low, high=None):
  raw = os.environ.get(name, "")
  try:
    val = int(raw)
  except ValueError:
    val = None
  if val is None or val < low or (high is not None and val > high):
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    raise ValueError(f"{name}={raw!r} must be {allowed} (el_jax.run.launch sets it; see "
                     f"el_jax.infra.distributed)")
  return val


def initialize(auto=False):
  """Starts JAX's distributed runtime if asked to; returns whether it did.

  Asked by the environment (`EL_JAX_NUM_PROCESSES`, `EL_JAX_PROCESS_ID` and
  `JAX_COORDINATOR_ADDRESS`, all three, as `el_jax.run.launch` sets them) or by `auto`
  (`jax.distributed.initialize()` without arguments: cluster auto-detection on TPU,
  SLURM, Open MPI). Must run before anything else touches JAX's devices. A missing or
  malformed variable is a ValueError naming it.
  """
  given = [k for k in (ENV_NUM_PROCESSES, ENV_PROCESS_ID) if k in os.environ]
  if not given and not auto:
    return False
  import jax
  if _state["initialized"]:
    return True
  # CPU collectives across processes: gloo (TCP). jax 0.10.2 already defaults to it; set
  # here so that an older or newer default (None = no cross-process CPU collectives) cannot
  # silently change it. JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi in the environment wins.
  if "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in os.environ:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if given:
    missing = [k for k in (ENV_NUM_PROCESSES, ENV_PROCESS_ID, ENV_COORDINATOR)
               if not os.environ.get(k)]
    if missing:
      raise ValueError(f"{', '.join(given)} set but {', '.join(missing)} not: set all of "
                       f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES}, {ENV_PROCESS_ID} (el_jax.run.launch "
                       f"does), or none")
    num = _env_int(ENV_NUM_PROCESSES, 1)
    pid = _env_int(ENV_PROCESS_ID, 0, num - 1)
    jax.distributed.initialize(coordinator_address=os.environ[ENV_COORDINATOR],
                               num_processes=num, process_id=pid)
  else:
    jax.distributed.initialize()  # TPU slice / SLURM / Open MPI: detected by JAX
  _state["initialized"] = True
  _no_cached_cpu_collectives(jax)
  return True


# The JAX lines whose CPU programs with gloo collectives, read back from the persistent
# compilation cache, wait forever in their first collective (seen under jax 0.12.1 with a
# warm JAX_COMPILATION_CACHE_DIR; jax 0.10.2 runs them). Lines between are untested, so
# treated as the newer one.
_CACHE_HANGS_FROM = (0, 11)


def _version(v):
  return tuple(int(p) for p in v.split(".")[:2] if p.isdigit())


def _no_cached_cpu_collectives(jax):
  """Turns the persistent compilation cache off in a multi-process CPU run under the JAX
  lines where its cached programs hang (`_CACHE_HANGS_FROM`), with one line on stderr when a
  cache directory was set. Each process then compiles its own programs."""
  if (jax.process_count() == 1 or jax.default_backend() != "cpu"
      or _version(jax.__version__) < _CACHE_HANGS_FROM):
    return
  if jax.config.jax_compilation_cache_dir and jax.config.jax_enable_compilation_cache:
    print(f"el_jax: the persistent compilation cache is off in this run: under jax "
          f"{jax.__version__}, CPU programs with cross-process collectives read back from it "
          f"never finish their first collective", file=sys.stderr)
  jax.config.update("jax_enable_compilation_cache", False)


def process_count():
  import jax
  return jax.process_count()


def is_main():
  """Whether this is process 0 (the one that writes metrics, summaries and plots).
  True in a single-process run."""
  import jax
  return jax.process_index() == 0


# ----------------------------------------------------------------------------
# Agreement: process 0 decides from the workdir's files, every process follows


_CHUNK = 4096  # payloads are padded to a multiple of this (few shapes, few compilations)


def _broadcast_bytes(data):
  """`data` (bytes, significant on process 0 only) on every process."""
  from jax.experimental import multihost_utils as mh
  n = int(mh.broadcast_one_to_all(np.int32(len(data))))
  size = -(-max(n, 1) // _CHUNK) * _CHUNK
  buf = np.zeros(size, np.uint8)
  buf[:len(data)] = np.frombuffer(data, np.uint8)[:size]
  return np.asarray(mh.broadcast_one_to_all(buf))[:n].tobytes()


def from_main(fn):
  """`fn()` computed by process 0 alone, its value (JSON-serialisable) given to every process.

  For what only process 0 may do or decide: take the workdir lock, check and record
  config.json, read or set aside final.json. If `fn` raises on process 0, the exception is
  re-raised there and the others raise a RuntimeError with its message, so that every
  process stops instead of waiting for the next collective. With one process this is `fn()`.
  """
  import jax
  if jax.process_count() == 1:
    return fn()
  error, data, value = None, b"", None
  if jax.process_index() == 0:
    try:
      value = fn()
      data = json.dumps({"value": value}).encode()
    except Exception as e:  # noqa: BLE001 -- passed on to the other processes, then re-raised
      error, data = e, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
  # One call site for every process: under jax 0.12.1, processes that call the broadcast
  # from different lines never meet in its collective (two-process scripts: from two lines
  # they wait forever, from one line they finish).
  got = json.loads(_broadcast_bytes(data).decode())
  if error is not None:
    raise error
  if jax.process_index() == 0:
    return value
  if "error" in got:
    raise RuntimeError(f"process 0 stopped ({' '.join(got['error'].split())}); this process "
                       f"stops too")
  return got["value"]


# ----------------------------------------------------------------------------
# Each process puts its own rows of a global batch


def local_rows(sharding, global_shape):
  """Indices of the rows (axis 0) of a `global_shape` array that this process's devices
  hold under `sharding`, ascending: on a 1-D `data` mesh over `jax.devices()` (process
  by process) the rows [i*n/P, (i+1)*n/P) of process i of P."""
  n = global_shape[0]
  spans = set()
  for idx in sharding.addressable_devices_indices_map(tuple(global_shape)).values():
    s = idx[0] if idx else slice(None)
    spans.add(s.indices(n)[:2])
  return np.concatenate([np.arange(a, b) for a, b in sorted(spans)])


def put_rows(tree, sharding):
  """Host arrays (a pytree; every process holds the same full arrays, e.g. the task's
  global batch) -> global device arrays sharded by `sharding` over the devices of every
  process. Each process passes only its own rows (`local_rows`) to
  `jax.make_array_from_process_local_data`."""
  import jax

  def put(x):
    x = np.asarray(x)
    rows = local_rows(sharding, x.shape)
    return jax.make_array_from_process_local_data(sharding, x[rows], x.shape)

  return jax.tree.map(put, tree)
