"""Quiet failed checkpoint restores and saves: one error line instead of hundreds of
background reports.

When orbax gives up restoring a damaged checkpoint, its other reads of that checkpoint are
still running in TensorStore's threads. They fail later, at any time until the process
exits, and each one reports itself on stderr in one of Python's report formats
("Traceback (most recent call last):" from a thread, "Exception ignored in: <coroutine
_read_array_index_and_device_put>", asyncio's "Task exception was never retrieved"), often
with a TensorStore spec thousands of characters long. The error that matters has already
been raised (checkpoint.restore_latest turns it into one line).

A save that fails (a full disk) leaves the same kind of reports behind: its other writes
fail in the background (`failed_writes(path)`).

`abandoned_reads(path)` wraps a restore of the checkpoint at `path`. While it runs, and for
the rest of the process if it fails, sys.stderr is a `ReportFilter`: it drops each report
block that names `path` or the abandoned reads (`ABANDONED`) and passes everything else,
whenever the report comes, so that there is nothing to wait for. A restore that succeeds
leaves stderr as it was.
"""
import atexit
import contextlib
import logging
import os
import sys
import threading
import warnings

# A closed event loop's report: "RuntimeError: Event loop is closed", raised in
# `_check_closed` from `call_soon_threadsafe` (a report cut short at exit may lack the last
# line: its frames name it).
LOOP_CLOSED = ("Event loop is closed", "in _check_closed", "in call_soon_threadsafe")
# What the reports of abandoned reads contain (besides the checkpoint's own path).
ABANDONED = ("Encountered error while reading array index", *LOOP_CLOSED,
             "_read_array_index_and_device_put", "async_deserialize")

# The first lines of Python's report blocks; a block ends at its first line that is not
# indented and is not one of these (the "SomeError: message" line).
_BLOCK_STARTS = ("Traceback (most recent call last):", "Exception ignored in",
                 "Task exception was never retrieved", "Future exception was never retrieved",
                 "Exception in thread", "During handling of the above exception",
                 "The above exception was the direct cause")
_BLOCK_LINES = _BLOCK_STARTS + ("future: ",)
OWN_LINES = ("error: ", "interrupted (")  # el_jax.run.cli.guard's last lines


class ReportFilter:
  """A text stream over `stream` that drops the report blocks mentioning any of `keys`.

  Text outside report blocks goes through at once (a progress bar's partial line is not
  held back); a block is held until its last line, then dropped or passed whole. Blank
  lines just before a block go with it; an indented line outside a block (the rest of a
  report cut by another thread's) starts one. el_jax's own last lines ("error: ...",
  "interrupted (SIGINT); ...", `OWN_LINES`) are never taken into a block."""

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
      elif bare.startswith(_BLOCK_STARTS) or bare[0] in (" ", "\t"):
        # (an indented line outside a block: the rest of a report whose first lines were
        # interleaved with another thread's report, held like a block of its own)
        self._block, self._blank = self._blank + [line], []
      else:
        self._emit(line)
    elif bare.startswith(OWN_LINES):  # from the main thread, amid another thread's report
      self.stream.write(line)
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
  return partial[:1] in (" ", "\t") or any(s.startswith(partial) or partial.startswith(s)
                                      for s in _BLOCK_STARTS)


# What the reports of a failed checkpoint save contain (besides the checkpoint's path, and
# its temporary folder `<path>.orbax-checkpoint-tmp`): the other writes of that save fail in
# TensorStore's threads and asyncio tasks, until the process exits.
FAILED_WRITES = (*LOOP_CLOSED, "write_fragment", "async_serialize",
                 "_serialize_without_dispatcher", "sys.meta_path is None",
                 "orbax-checkpoint-tmp", "_SignalingThread.run() raised",
                 f"{os.sep}orbax{os.sep}checkpoint{os.sep}")  # a frame of orbax's


@contextlib.contextmanager
def abandoned_reads(path):
  """Runs the body (a restore of the checkpoint at `path`) with stderr filtered; if the body
  raises, the filter and the hooks of `_keep_quiet` stay for the rest of the process."""
  with _filtered(ABANDONED + (str(path),)):
    yield


@contextlib.contextmanager
def failed_writes(path):
  """The same as `abandoned_reads` for a save of the checkpoint at `path` (a full disk: the
  save's other writes fail in the background, each with its report)."""
  with _filtered(FAILED_WRITES + (str(path),)):
    yield


@contextlib.contextmanager
def _filtered(keys):
  installed = not isinstance(sys.stderr, ReportFilter)
  filt = ReportFilter(sys.stderr, keys) if installed else sys.stderr
  if not installed:
    filt.add_keys(keys)
  sys.stderr = filt
  # orbax's threads also report through log records, whose handlers write to the stream
  # they were made with (not the filter): dropped at the source while the body runs.
  drop = _LogDrop(keys)
  for name in LOGGERS:
    logging.getLogger(name).addFilter(drop)
  try:
    yield
  except BaseException:
    _keep_quiet(keys)
    if installed:
      atexit.register(filt.close_out)
    raise
  for name in LOGGERS:
    logging.getLogger(name).removeFilter(drop)
  if installed and sys.stderr is filt:
    filt.close_out()
    sys.stderr = filt.stream


LOGGERS = ("asyncio", "absl")  # asyncio's "Task exception was never retrieved"; orbax's threads


class _LogDrop(logging.Filter):
  """Drops the log records that name any of `keys` (in the message or the exception)."""

  def __init__(self, keys):
    super().__init__()
    self.keys = tuple(keys)

  def filter(self, record):
    text = record.getMessage()
    if record.exc_info:
      try:
        text += _FORMATTER.formatException(record.exc_info)
      except Exception:  # noqa: BLE001 -- at interpreter exit formatting may fail; keep the text
        text += repr(record.exc_info)
    return not any(k in text for k in self.keys)


_FORMATTER = logging.Formatter()


def _keep_quiet(keys):
  """After a failed restore or save: reports that do not pass through sys.stderr as it is
  now (unraisable exceptions, log records, "coroutine was never awaited" warnings) are
  dropped at their source, for the rest of the process, when they name `keys`."""
  previous = sys.unraisablehook

  def hook(unraisable):
    if not any(k in f"{unraisable.exc_value!r} {unraisable.object!r}" for k in keys):
      previous(unraisable)

  sys.unraisablehook = hook
  for name in LOGGERS:
    logging.getLogger(name).addFilter(_LogDrop(keys))
  warnings.filterwarnings("ignore", message="coroutine '_read_array_index_and_device_put'")
  warnings.filterwarnings("ignore", message="coroutine .*write_fragment")
