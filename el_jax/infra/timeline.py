"""Where a run's wall time goes: setup, compiling, training, evaluating, checkpointing, writing.

  from el_jax.infra import timeline
  tl = timeline.Timeline()
  with timeline.recording(tl):
    job.train_arms(configs, workdirs)      # the loop marks its parts (below)
  tl.as_dict()   # {"wall_s", "parts_s": {part: s}, "unaccounted_s", "compiles", "compiled",
                 #  "notes"}: "compiled" counts the XLA compilations of each program by name

While a Timeline records, the training loop (`el_jax.run.job`, `el_jax.run.seeds`,
`el_jax.run.train`) marks what it is doing with `timeline.part(name)`; outside a recording
every call here does nothing (no synchronisation, no listener). The parts (`PARTS`):

  setup       the config's data set, model and optimizer built on the host, the initial
              state (its device work)
  compile     every trace, lowering and XLA compilation of this thread, wherever it happens
              (JAX's monitoring events `COMPILE_EVENTS`: their seconds are moved from the
              part running at the time into this one)
  train       the step loop: host batches, dispatch, the device's steps, the logged metrics
  eval        evaluations (during training and the final one)
  checkpoint  orbax saves and waiting for them
  write       final.json, summary.json, metrics rows of the results, plots, the job's files

Time is charged to the innermost open part; time inside no part is `unaccounted_s` (what the
loop does between its marked parts: it is small, and a test holds it to `SLACK`). A part
entered with `sync=` first waits for that value's device work (`jax.block_until_ready`),
charging the wait to the part it leaves: JAX dispatches steps asynchronously, so without it a
step still running on the device would be charged to the evaluation that waits for it.
`note(**kw)` and `append(key, value)` add numbers of the run to the record: a stacked program
(`el_jax.run.seeds`) appends {"slots", "steps", "flops_per_slot_step", "flops_source", "impl"}
to "programs".
"""
import contextlib
import threading
import time

PARTS = ("setup", "compile", "train", "eval", "checkpoint", "write")
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
# The parts of a test-size run sum to its wall time within this: 0.5 s plus 5% of the wall.
SLACK = (0.5, 0.05)

_ACTIVE = {"timeline": None}


class Timeline:
  """The seconds of each part of one recording (module docstring)."""

  def __init__(self):
    self.parts = dict.fromkeys(PARTS, 0.0)
    self.unaccounted = 0.0
    self.compiles = 0
    self.programs = {}  # XLA compilations per program name
    self.notes = {}
    self.wall = None
    self._stack, self._mark, self._t0 = [], None, None
    self._thread = None

  def start(self):
    self._t0 = self._mark = time.perf_counter()
    self._thread = threading.get_ident()

  def _charge(self, now):
    spent = now - self._mark
    if self._stack:
      self.parts[self._stack[-1]] += spent
    else:
      self.unaccounted += spent
    self._mark = now

  def enter(self, name):
    if name not in self.parts:
      raise ValueError(f"timeline part {name!r} is not one of {PARTS}")
    self._charge(time.perf_counter())
    self._stack.append(name)

  def exit(self):
    self._charge(time.perf_counter())
    self._stack.pop()

  def compiled(self, event, seconds, **kw):
    """A JAX monitoring event: a compile of `seconds` on this thread moves them to "compile"."""
    if event not in COMPILE_EVENTS or threading.get_ident() != self._thread:
      return
    if event == COMPILE_EVENTS[-1]:
      self.compiles += 1
      name = str(kw.get("fun_name", "?"))
      self.programs[name] = self.programs.get(name, 0) + 1
    self.parts["compile"] += seconds
    if self._stack:
      self.parts[self._stack[-1]] -= seconds
    else:
      self.unaccounted -= seconds

  def stop(self):
    now = time.perf_counter()
    self._charge(now)
    self.wall = now - self._t0

  def as_dict(self):
    wall = self.wall if self.wall is not None else time.perf_counter() - self._t0
    return {"wall_s": round(wall, 3), "parts_s": {k: round(v, 3) for k, v in self.parts.items()},
            "unaccounted_s": round(self.unaccounted, 3), "compiles": self.compiles,
            "compiled": dict(sorted(self.programs.items())), "notes": dict(self.notes)}


def slack(wall_s):
  """How far a recording's parts may sum from its wall time (`SLACK`)."""
  return SLACK[0] + SLACK[1] * wall_s


@contextlib.contextmanager
def recording(tl):
  """Records into `tl` (started here, stopped on exit) while the block runs; one at a time."""
  import jax  # the compile events are JAX's
  if _ACTIVE["timeline"] is not None:
    raise RuntimeError("a timeline is already recording")
  tl.start()
  jax.monitoring.register_event_duration_secs_listener(tl.compiled)
  _ACTIVE["timeline"] = tl
  try:
    yield tl
  finally:
    _ACTIVE["timeline"] = None
    jax.monitoring.unregister_event_duration_listener(tl.compiled)
    tl.stop()


def active():
  """The recording Timeline, or None."""
  return _ACTIVE["timeline"]


@contextlib.contextmanager
def part(name, sync=None):
  """Charges the block to part `name` of the recording timeline (after waiting for the device
  work of `sync`, charged to the part around it); nothing at all when none records."""
  tl = _ACTIVE["timeline"]
  if tl is None:
    yield
    return
  if sync is not None:
    import jax
    jax.block_until_ready(sync)
  tl.enter(name)
  try:
    yield
  finally:
    tl.exit()


def note(**values):
  """Adds `values` to the recording timeline's notes (nothing when none records)."""
  tl = _ACTIVE["timeline"]
  if tl is not None:
    tl.notes.update(values)


def append(key, value):
  """Appends `value` to the list `key` of the recording timeline's notes (e.g. one entry per
  stacked program the run compiled); nothing when none records."""
  tl = _ACTIVE["timeline"]
  if tl is not None:
    tl.notes.setdefault(key, []).append(value)
