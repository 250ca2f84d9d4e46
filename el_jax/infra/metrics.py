"""metrics.jsonl: one JSON row per train log / evaluation / flatness event of a run.

`MetricsWriter` appends rows and, on resume, drops those logged past the resume point; a
torn last line (a killed run) is dropped with a warning, a malformed line elsewhere is an
error naming the file and line. With `events` (an `el_jax.infra.tensorboard.RunEvents`) every
row is also a TensorBoard event of `<workdir>/tb/seed_<s>/`, and the events of a seed that
resumes are rewritten from its kept rows: the events read back equal metrics.jsonl.
`read_rows(workdir)` reads a run's rows.
"""
import json
import os
import sys

import jax

from el_jax.infra import workdir as wd


def to_float(tree):
  return {k: float(v) for k, v in jax.device_get(tree).items()}


class MetricsWriter:
  """Appends JSON rows to metrics.jsonl; can drop rows past a resume point.

  A torn last line (a run killed mid-write) is dropped with a warning, when
  reading and (`repair`) before appending; a malformed line elsewhere is an
  error naming the file and line. `events`: an `el_jax.infra.tensorboard.RunEvents` that
  gets every row too (None: no TensorBoard events).
  """

  def __init__(self, path, events=None):
    self.path = path
    self.events = events

  def write(self, row):
    line = json.dumps(row) + "\n"
    with wd.uninterrupted():  # a signal waits for the row: never a torn line from a stop
      with open(self.path, "a") as f:
        f.write(line)
      if self.events is not None:  # after the line: an event is never ahead of metrics.jsonl
        self.events.write(row)

  def _read(self):
    """(rows, torn): the parsed rows and whether the last line was torn."""
    if not os.path.exists(self.path):
      return [], False
    with open(self.path) as f:
      lines = f.read().split("\n")
    # A complete file ends with "\n", so its last piece is "".
    out, torn = [], False
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
      if not line.strip():
        continue
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError as e:
        if i == last:
          torn = True
          continue
        raise wd.WorkdirError(f"{self.path}:{i + 1}: malformed metrics row ({e.msg}); only "
                              f"its last line may be torn. Fix or delete that line") from None
    return out, torn

  def rows(self):
    rows, torn = self._read()
    if torn:
      print(f"warning: {self.path}: its last line is torn (a killed run?); leaving it out",
            file=sys.stderr)
    return rows

  def repair(self):
    """Drops a torn last line (with a warning) so that appended rows start on a new line."""
    if not os.path.exists(self.path):
      return
    rows, torn = self._read()
    with open(self.path, "rb") as f:
      size = f.seek(0, os.SEEK_END)
      ends_ok = size == 0 or (f.seek(size - 1) is not None and f.read(1) == b"\n")
    if torn:
      print(f"warning: {self.path}: dropping its torn last line (a killed run); the rows "
            f"after the last checkpoint are recomputed anyway", file=sys.stderr)
    if torn or not ends_ok:
      self._rewrite(rows)

  def _rewrite(self, rows):
    wd.write_text(self.path, "".join(json.dumps(r) + "\n" for r in rows))

  def truncate(self, seed, after_step, eval_at=None):
    """Drops rows of `seed` logged after `after_step` (they will be recomputed), and
    its eval rows at step `eval_at` (an evaluation about to be redone). The seed's events
    are rewritten from its kept rows (those of a killed run may lack its last rows, or hold
    rows metrics.jsonl no longer has)."""
    rows = self.rows()
    keep = [r for r in rows if r.get("seed") != seed or (
        r.get("step", -1) <= after_step and not (r.get("kind") == "eval" and r.get("step") == eval_at))]
    with wd.uninterrupted():
      if len(keep) != len(rows):
        self._rewrite(keep)
      if self.events is not None:
        self.events.rewrite(seed, [r for r in keep if r.get("seed") == seed])

  def backfill(self, seed):
    """Writes the events of a finished `seed` from its rows if its folder has none (a run
    trained without them, or with `train.tensorboard=False`)."""
    if self.events is not None and not self.events.has_events(seed):
      with wd.uninterrupted():
        self.events.rewrite(seed, [r for r in self.rows() if r.get("seed") == seed])

  def close(self):
    """Closes the event files (metrics.jsonl is opened per row)."""
    if self.events is not None:
      self.events.close()


class NoMetrics(MetricsWriter):
  """The MetricsWriter of processes other than process 0 (el_jax.infra.distributed): writes nothing."""

  def write(self, row):
    pass

  def repair(self):
    pass

  def truncate(self, seed, after_step, eval_at=None):
    pass

  def backfill(self, seed):
    pass


def read_rows(workdir):
  """The rows of `<workdir>/metrics.jsonl` ([] if there is none; a torn last line,
  from a killed run, is left out with a warning)."""
  return MetricsWriter(os.path.join(workdir, "metrics.jsonl")).rows()
