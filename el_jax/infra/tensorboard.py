"""TensorBoard event files of a run: the rows of metrics.jsonl as scalars, one folder per seed.

  <workdir>/tb/seed_<s>/events.out.tfevents.<n>

  tensorboard --logdir <workdir>/tb          # or, in a notebook: %tensorboard --logdir ...

Every row {"seed", "step", "kind", key: value, ...} of metrics.jsonl is one event at its step
in `tb/seed_<seed>/`, with a scalar per number of the row tagged "<kind>/<key>" (train/loss,
eval/test_em_hard, flatness/trace_hutchinson); seed, step and kind are the event's place, and
values that are not numbers (None: a group absent from a batch) are left out. TensorBoard
keeps a scalar as a 32-bit float (its data server reads no other), so an event holds the
row's value rounded to float32: metrics.jsonl stays the exact record.

The files are written by tensorboardX (no TensorFlow), synchronously: a row's event is in the
file before `write` returns (no background thread, nothing lost to a kill -9 once a row is
logged). `rewrite(seed, rows)` replaces a seed's events by `rows` when a resume drops the rows
logged past its checkpoint (`el_jax.infra.metrics.MetricsWriter.truncate`): a new file, named
after the older ones, then the older ones removed, so that the events read back always
equal metrics.jsonl (an event's wall time is when it was written: rewritten events carry the
time of the resume; a train row's own `time_s` is among its scalars). Only process 0 writes (the MetricsWriter of the other processes has no
events, el_jax.infra.distributed); `train.tensorboard=False` turns them off.
"""
import glob
import numbers
import os
import re
import time

TB_DIR = "tb"  # <workdir>/tb: the --logdir of a run
PLACE = ("seed", "step", "kind")  # the fields of a row that place its event


def seed_dir(root, seed):
  return os.path.join(root, f"seed_{seed}")


def event_files(folder):
  """The event files of `folder`, oldest first (TensorBoard reads them in name order)."""
  return sorted(glob.glob(os.path.join(glob.escape(folder), "*tfevents*")))


def values(row):
  """{tag: value} of a metrics row: "<kind>/<key>" for every number of the row but its
  place (seed, step, kind); booleans, None and strings are left out."""
  kind = row.get("kind", "row")
  return {f"{kind}/{k}": float(v) for k, v in row.items()
          if k not in PLACE and isinstance(v, numbers.Real) and not isinstance(v, bool)}


def _tbx():
  """tensorboardX's (scalar, Summary, Event, RecordWriter), imported on first use: its import
  takes a few tenths of a second, which a run with `train.tensorboard=False` does not pay."""
  from tensorboardX import RecordWriter
  from tensorboardX.proto.event_pb2 import Event
  from tensorboardX.proto.summary_pb2 import Summary
  from tensorboardX.summary import scalar
  return scalar, Summary, Event, RecordWriter


def to_event(row, wall_time):
  """The Event of a metrics row (its step; one scalar per `values`), or None if it holds no
  number."""
  vals = values(row)
  if not vals:
    return None
  scalar, Summary, Event, _ = _tbx()
  summary = Summary(value=[scalar(tag, v).value[0] for tag, v in vals.items()])
  return Event(step=int(row.get("step", 0)), wall_time=wall_time, summary=summary)


_SEQ = re.compile(r"tfevents\.(\d{6})$")


class SeedEvents:
  """The event file of one seed's folder: `append(row)`, `rewrite(rows)`, `close()`. Files are
  named `events.out.tfevents.<n>` (n = 000001, 000002, ...: TensorBoard reads a folder's files
  in name order; no time or host in the name, so that a run's files are named alike on every
  machine and at every try)."""

  def __init__(self, folder):
    self.folder = folder
    self.writer = None

  def _open(self, wall_time):
    """A new event file, named after every file of the folder, opened by its version record."""
    os.makedirs(self.folder, exist_ok=True)
    seqs = [int(m.group(1)) for m in (_SEQ.search(p) for p in event_files(self.folder)) if m]
    path = os.path.join(self.folder, f"events.out.tfevents.{max(seqs, default=0) + 1:06d}")
    _, _, Event, RecordWriter = _tbx()
    writer = RecordWriter(path)
    writer.write(Event(wall_time=wall_time, file_version="brain.Event:2").SerializeToString())
    return writer

  def append(self, row, wall_time):
    event = to_event(row, wall_time)
    if event is None:
      return
    if self.writer is None:
      self.writer = self._open(wall_time)
    self.writer.write(event.SerializeToString())
    self.writer.flush()

  def rewrite(self, rows, wall_time):
    """The folder's events become `rows` (one new file; the older files removed)."""
    old = event_files(self.folder)
    self.close()
    self.writer = self._open(wall_time)
    for row in rows:
      event = to_event(row, wall_time)
      if event is not None:
        self.writer.write(event.SerializeToString())
    self.writer.flush()
    for path in old:
      try:
        os.remove(path)
      except FileNotFoundError:
        pass

  def close(self):
    if self.writer is not None:
      self.writer.close()
      self.writer = None


class RunEvents:
  """The events of a run under `root` (`<workdir>/tb`), one SeedEvents per seed of the rows."""

  def __init__(self, root, clock=time.time):
    self.root = root
    self.clock = clock
    self.seeds = {}

  def _seed(self, seed):
    if seed not in self.seeds:
      self.seeds[seed] = SeedEvents(seed_dir(self.root, seed))
    return self.seeds[seed]

  def write(self, row):
    self._seed(row.get("seed", 0)).append(row, self.clock())

  def rewrite(self, seed, rows):
    """Seed `seed`'s events become `rows` (its rows of metrics.jsonl)."""
    self._seed(seed).rewrite(rows, self.clock())

  def has_events(self, seed):
    return bool(event_files(seed_dir(self.root, seed)))

  def sync(self, rows):
    """The events of every seed become its `rows` (all of a run's rows, any seeds); the event
    files of seeds without rows are removed."""
    by_seed = {}
    for r in rows:
      by_seed.setdefault(r.get("seed", 0), []).append(r)
    keep = {os.path.normpath(seed_dir(self.root, s)) for s in by_seed}
    for folder in glob.glob(os.path.join(glob.escape(self.root), "seed_*")):
      if os.path.normpath(folder) not in keep:
        for path in event_files(folder):
          os.remove(path)
    for seed, seed_rows in by_seed.items():
      self.rewrite(seed, seed_rows)

  def close(self):
    for s in self.seeds.values():
      s.close()


NOTEBOOK_ENV = "EL_JAX_NOTEBOOK_TENSORBOARD"  # "0": the notebooks start no TensorBoard


def notebook_should_show(workdir):
  """Whether a notebook's TensorBoard cell should start TensorBoard on `workdir` (the cell
  runs `%tensorboard` when True); says on stdout what it does: skipped
  (`EL_JAX_NOTEBOOK_TENSORBOARD=0`, as the tests run the notebooks), not installed (the
  `notebooks` extra's install line); the cell says the rest."""
  import importlib.util
  if os.environ.get(NOTEBOOK_ENV, "1") == "0":
    print(f"TensorBoard skipped ({NOTEBOOK_ENV}=0); the events are under {workdir}")
    return False
  if importlib.util.find_spec("tensorboard") is None:
    print(f'TensorBoard is not installed (pip install "el_jax[notebooks]"); the events are '
          f"under {workdir}")
    return False
  return True
