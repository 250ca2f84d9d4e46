"""Quiet failed checkpoint restores: one error line instead of hundreds of background reports.

When orbax gives up restoring a damaged checkpoint, its other reads of that checkpoint are
still running in TensorStore's threads. They fail later, at any time until the process
exits, and each one reports itself on stderr in one of Python's report formats
("Traceback (most recent call last):" from a thread, "Exception ignored in: <coroutine
_read_array_index_and_device_put>", asyncio's "Task exception was never retrieved"), often
with a TensorStore spec thousands of characters long. The error that matters has already
been raised (train.restore_latest turns it into one line).

`abandoned_reads(path)` wraps a restore of the checkpoint at `path`. While it runs, and for
the rest of the process if it fails, sys.stderr is a `ReportFilter`: it drops each report
block that names `path` or the abandoned reads (`ABANDONED`) and passes everything else,
whenever the report comes, so that there is nothing to wait for. A restore that succeeds
leaves stderr as it was.
"""
import atexit
import contextlib
import logging
import sys
import threading
import warnings

# What the reports of abandoned reads contain (besides the checkpoint's own path).
ABANDONED = ("Encountered error while reading array index", "Event loop is closed",
             "_read_array_index_and_device_put", "async_deserialize")

# The first lines of Python's report blocks; a block ends at its first line that is not
# indented and is not one of these (the "SomeError: message" line).
_BLOCK_STARTS = ("Traceback (most recent call last):", "Exception ignored in",
                 "Task exception was never retrieved", "Future exception was never retrieved",
                 "Exception in thread", "During handling of the above exception",
                 "The above exception was the direct cause")
_BLOCK_LINES = _BLOCK_STARTS + ("future: ",)


class ReportFilter:
  """A text stream over `stream` that drops the report blocks mentioning any of `keys`.

  Text outside report blocks goes through at once (a progress bar's partial line is not
  held back); a block is held until its last line, then dropped or passed whole. Blank
  lines just before a block go with it. A line starting "error: " (el_jax's own error
  line) is never taken into a block."""

  def __init__(self, stream, keys):
    self.stream, self.keys = stream, tuple(keys)
    self._lock = threading.RLock()
    self._partial = ""  # text after the last newline, held while it may start a block
    self._midline = False  # part of the current line has been passed on already
    self._blank = []  # blank lines held until we know whether a block follows them
    self._block = None  # lines of the report block being read, or None

  def add_keys(self, keys):
    with self._lock:
      self.keys += tuple(k for k in keys if k not in self.keys)

  def write(self, text):
    with self._lock:
      rest, self._partial = self._partial + text, ""
      while rest:
        line, nl, rest = rest.partition("\n")
        if nl:
          self._line(line + "\n")
        elif self._midline or (self._block is None and not _may_start_block(line)):
          self._emit(line)
          self._midline = True
        else:
          self._partial = line
    return len(text)

  def _line(self, line):
    bare = line.rstrip("\n")
    if self._midline:  # the end of a line begun outside any block
      self._midline = False
      self.stream.write(line)
    elif self._block is None:
      if not bare.strip():
        self._blank.append(line)
      elif bare.startswith(_BLOCK_STARTS):
        self._block, self._blank = self._blank + [line], []
      else:
        self._emit(line)
    elif bare.startswith("error: "):
      self._end_block()
      self._emit(line)
    else:
      self._block.append(line)
      if bare.strip() and not bare[0].isspace() and not bare.startswith(_BLOCK_LINES):
        self._end_block()

  def _end_block(self):
    text, self._block = "".join(self._block), None
    if not any(k in text for k in self.keys):
      self.stream.write(text)

  def _emit(self, text):
    if self._blank:
      self.stream.write("".join(self._blank))
      self._blank = []
    self.stream.write(text)

  def flush(self):
    self.stream.flush()

  def close_out(self):
    """Passes on whatever is held (an unfinished block only if it names none of the keys).
    Nothing to do if the stream was closed meanwhile (at exit, a test's captured stderr)."""
    with self._lock:
      if getattr(self.stream, "closed", False):
        return
      if self._block is not None:
        self._block.append(self._partial)
        self._end_block()
      elif self._partial:
        self._emit(self._partial)
      self._partial, self._midline = "", False
      if self._blank:
        self._emit("")
      self.stream.flush()

  def __getattr__(self, name):  # fileno, isatty, encoding, ... of the real stream
    return getattr(self.stream, name)


def _may_start_block(partial):
  return any(s.startswith(partial) or partial.startswith(s) for s in _BLOCK_STARTS)


@contextlib.contextmanager
def abandoned_reads(path):
  """Runs the body (a restore of the checkpoint at `path`) with stderr filtered; if the body
  raises, the filter and the hooks of `_keep_quiet` stay for the rest of the process."""
  keys = ABANDONED + (str(path),)
  installed = not isinstance(sys.stderr, ReportFilter)
  filt = ReportFilter(sys.stderr, keys) if installed else sys.stderr
  if not installed:
    filt.add_keys(keys)
  sys.stderr = filt
  try:
    yield
  except BaseException:
    _keep_quiet(keys)
    if installed:
      atexit.register(filt.close_out)
    raise
  if installed and sys.stderr is filt:
    filt.close_out()
    sys.stderr = filt.stream


def _keep_quiet(keys):
  """After a failed restore: reports that do not pass through sys.stderr as it is now
  (unraisable exceptions, asyncio's log records, "coroutine was never awaited" warnings)
  are dropped at their source when they name the abandoned reads."""
  previous = sys.unraisablehook

  def hook(unraisable):
    if not any(k in f"{unraisable.exc_value!r} {unraisable.object!r}" for k in keys):
      previous(unraisable)

  sys.unraisablehook = hook

  class _Drop(logging.Filter):
    def filter(self, record):
      text = record.getMessage() + repr(getattr(record, "exc_info", ""))
      return not any(k in text for k in keys)

  logging.getLogger("asyncio").addFilter(_Drop())
  warnings.filterwarnings("ignore", message="coroutine '_read_array_index_and_device_put'")
