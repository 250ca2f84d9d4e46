"""glibc malloc settings that let XLA's CPU steps reuse their temporary buffer.

XLA's CPU runtime allocates each execution's temporaries as one block (`posix_memalign`,
129 MB for the bench_vs_torch train step with scored positions, 152 MB at all positions)
from one of its worker threads, and frees it when the execution ends. glibc serves a block
that large from a thread arena by `mmap` (a thread arena's heap holds at most 64 MB, and
then glibc maps even past `M_MMAP_MAX`), and `munmap`s it on free: every step then
page-faults its whole temporary buffer back in (31,500 minor faults per step, the kernel
zeroing 129 MB), which on the 2-core machines here cost a fifth of the step (docs/bench.md).

`tune()` (called by `el_jax/__init__.py`, so before JAX starts its CPU client and its worker
threads) makes every thread allocate from the main arena (`M_ARENA_MAX=1`), never from
`mmap` (`M_MMAP_MAX=0`), and never gives the heap's top back to the system
(`M_TRIM_THRESHOLD`): the temporaries of one step are then the free memory of the last, and
the step page-faults nothing. Nothing computed changes (the same programs on other
addresses, 64-byte aligned as before); the process keeps its peak heap until it exits.

`EL_JAX_MALLOC=glibc` in the environment leaves glibc's defaults (for an A/B, or a process
that needs its memory back); unset or `tuned` applies these settings, and any other value is
warned about on stderr and these settings applied; `state()` says what this process runs with (recorded in
`provenance.ran_on()`). Other C libraries (macOS, musl) are left alone.
"""
import ctypes
import ctypes.util
import os
import sys

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2 ** 31 - 1))
ENV = "EL_JAX_MALLOC"

_state = {"malloc": "default", "why": "not tuned yet"}


def _backend_started():
  """True if JAX has already created a backend (its worker threads may hold thread arenas)."""
  xb = sys.modules.get("jax._src.xla_bridge")
  return bool(xb is not None and getattr(xb, "_backends", None))


def tune():
  """Applies SETTINGS with mallopt on glibc Linux (once; idempotent). Returns `state()`."""
  if _state["why"] != "not tuned yet":
    return state()
  value = os.environ.get(ENV, "")
  if value not in ("", "tuned", "glibc"):  # said, not ignored; the default settings stand
    print(f"el_jax: warning: {ENV}={value!r} is not one of 'tuned' (the default) or 'glibc' "
          f"(glibc's own malloc settings); using 'tuned'", file=sys.stderr)
  if value == "glibc":
    _state.update(malloc="default", why=f"{ENV}=glibc")
    return state()
  if not sys.platform.startswith("linux"):
    _state.update(malloc="default", why=f"not Linux ({sys.platform})")
    return state()
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt
    gnu_get_libc_version = libc.gnu_get_libc_version
  except (OSError, AttributeError):
    _state.update(malloc="default", why="not glibc")
    return state()
  gnu_get_libc_version.restype = ctypes.c_char_p
  mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
  ok = all(mallopt(k, v) == 1 for k, v in SETTINGS)
  if not ok:
    _state.update(malloc="default", why="mallopt refused")
    return state()
  _state.update(malloc="arena_max=1,mmap_max=0,trim_threshold=2^31-1",
                why=f"glibc {gnu_get_libc_version().decode()}" + (
                    "; set after JAX's backend started: its threads may keep thread arenas"
                    if _backend_started() else ""))
  return state()


def state():
  """{"malloc": the settings applied ("default" if none), "why": glibc version or the reason}."""
  return dict(_state)
