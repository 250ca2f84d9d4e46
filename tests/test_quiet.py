"""el_jax.infra.quiet: the stderr filter of failed checkpoint restores drops the reports of the
abandoned reads, whatever their format and timing, and passes everything else unchanged."""
import asyncio
import gc
import io
import logging
import sys
import threading
import traceback

import pytest

from el_jax.infra import quiet

PATH = "/runs/x/seed_0/checkpoints/8"


def _report(exc):
  return "".join(traceback.format_exception(exc))


def _raised(make):
  try:
    make()
  except BaseException as e:  # noqa: BLE001 (the exception is the test's data)
    return e


def _chained():
  try:
    raise ValueError(f"OUT_OF_RANGE: Error reading {PATH}/default/d/41a5 [tensorstore_spec='x']")
  except ValueError as e:
    raise Exception("Encountered error while reading array index: (). See full") from e


def _filtered(chunks):
  out = io.StringIO()
  f = quiet.ReportFilter(out, quiet.ABANDONED + (PATH,))
  for c in chunks:
    f.write(c)
  f.close_out()
  return out.getvalue()


def test_drops_matching_reports_and_keeps_the_rest_in_order():
  closed = _report(_raised(lambda: (_ for _ in ()).throw(RuntimeError("Event loop is closed"))))
  other = _report(_raised(lambda: 1 / 0))
  chained = _report(_raised(_chained))
  text = ("JAX 0.10.2: 1 cpu device(s)\n" + closed + "Exception ignored in: <coroutine object "
          "_read_array_index_and_device_put at 0x7f>\n" + chained + other
          + "Task exception was never retrieved\nfuture: <Task finished coro=<async_deserialize()"
          " done>>\n" + chained + "warning: kept\n"
          + f"error: checkpoint {PATH} could not be restored (ValueError: x)\n")
  assert "Traceback" in other and "ZeroDivisionError" in other
  want = "JAX 0.10.2: 1 cpu device(s)\n" + other + "warning: kept\n" + \
      f"error: checkpoint {PATH} could not be restored (ValueError: x)\n"
  assert _filtered([text]) == want
  # The same text written one character at a time, and in lines split anywhere.
  assert _filtered(list(text)) == want
  assert _filtered([text[i:i + 37] for i in range(0, len(text), 37)]) == want


def test_el_jax_error_line_goes_through_amid_an_unfinished_report():
  # The main thread's error line comes amid another thread's report: it goes through at
  # once, and the report stays held (passed whole if it names nothing to drop, else dropped).
  text = f"Traceback (most recent call last):\n  File \"x.py\", line 1\nerror: {PATH} damaged\n"
  assert _filtered([text]) == \
      f"error: {PATH} damaged\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
  assert _filtered([f"Traceback (most recent call last):\n  at {PATH}\nerror: one line\n"]) \
      == "error: one line\n"
  for own in ("error: one line\n", "interrupted (SIGTERM); run the same command again\n"):
    assert _filtered(["Traceback (most recent call last):\n", own, "  File \"a\"\n",
                      "RuntimeError: Event loop is closed\n"]) == own


def test_the_rest_of_a_report_cut_by_another_is_dropped_too():
  # Two threads' reports interleaved: the first one's tail, outside any block, is held by its
  # indentation and dropped with its last line.
  text = ("Traceback (most recent call last):\nTraceback (most recent call last):\n"
          "  File \"base_events.py\", line 519\nRuntimeError: Event loop is closed\n"
          "  File \"base_events.py\", line 519\n    raise RuntimeError('Event loop is closed')\n"
          "RuntimeError: Event loop is closed\nsummary line\n")
  assert _filtered([text]) == "summary line\n"
  assert _filtered(list(text)) == "summary line\n"


def test_partial_lines_go_through_at_once():
  out = io.StringIO()
  f = quiet.ReportFilter(out, quiet.ABANDONED + (PATH,))
  f.write("\r 50%|#####     | 5/10")
  assert out.getvalue() == "\r 50%|#####     | 5/10"  # a progress bar is not held back
  f.write("\r100%|##########| 10/10\n\nTrace")
  assert out.getvalue().endswith("10/10\n")  # a blank line and a possible block start are held
  f.write("back (most recent call last):\n  File \"a\"\nRuntimeError: Event loop is closed\ndone\n")
  f.close_out()
  assert out.getvalue() == "\r 50%|#####     | 5/10\r100%|##########| 10/10\ndone\n"


def test_unfinished_block_at_exit_is_kept_unless_it_names_the_checkpoint():
  assert _filtered(["Traceback (most recent call last):\n  File \"a\""]) == \
      "Traceback (most recent call last):\n  File \"a\""
  assert _filtered([f"Traceback (most recent call last):\n  File \"{PATH}\""]) == ""


def test_failed_restore_keeps_the_filter_for_late_reports_from_any_channel(monkeypatch, caplog):
  real = io.StringIO()
  monkeypatch.setattr(sys, "stderr", real)
  # The interpreter's own hooks (pytest replaces them with its own).
  monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
  monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)
  monkeypatch.setattr(logging.getLogger("asyncio"), "filters", [])
  with pytest.raises(ValueError, match="damaged"):
    with quiet.abandoned_reads(PATH):
      raise ValueError("damaged")
  assert isinstance(sys.stderr, quiet.ReportFilter) and sys.stderr.stream is real

  # Late reports of the abandoned reads: from a reader thread (threading.excepthook) ...
  def reader():
    raise RuntimeError("Event loop is closed")
  t = threading.Thread(target=reader)
  t.start()
  t.join()

  # ... an exception nobody can catch (sys.unraisablehook) ...
  class _Read:
    def __del__(self):
      raise Exception("Encountered error while reading array index: (). See full")
  _Read()
  gc.collect()

  # ... and asyncio's "Task exception was never retrieved" (a log record).
  async def async_deserialize():
    raise ValueError(f"OUT_OF_RANGE at {PATH}/default/")
  loop = asyncio.new_event_loop()
  task = loop.create_task(async_deserialize())
  loop.run_until_complete(asyncio.sleep(0))
  loop.close()
  with caplog.at_level(logging.ERROR, logger="asyncio"):
    del task
    gc.collect()
  assert not [r for r in caplog.records if r.name == "asyncio"]

  print("error: one line", file=sys.stderr)
  print("an unrelated report follows", file=sys.stderr)
  t = threading.Thread(target=lambda: 1 / 0)
  t.start()
  t.join()
  sys.stderr.close_out()
  text = real.getvalue()
  assert "Event loop is closed" not in text and "Encountered error" not in text, text
  assert text.startswith("error: one line\nan unrelated report follows\n"), text
  assert "Traceback" in text and "ZeroDivisionError" in text  # other failures still show

  # Without the filter (the control), the same reports do reach stderr.
  shown = io.StringIO()
  monkeypatch.setattr(sys, "stderr", shown)
  t = threading.Thread(target=reader)
  t.start()
  t.join()
  assert "Event loop is closed" in shown.getvalue()


def test_successful_restore_leaves_stderr_as_it_was(monkeypatch):
  real = io.StringIO()
  monkeypatch.setattr(sys, "stderr", real)
  with quiet.abandoned_reads(PATH):
    print("a warning from orbax", file=sys.stderr)
  assert sys.stderr is real and real.getvalue() == "a warning from orbax\n"


def test_close_out_at_exit_with_the_stream_closed_is_silent():
  out = io.StringIO()
  f = quiet.ReportFilter(out, quiet.ABANDONED)
  f.write("\nTrace")
  out.close()
  f.close_out()  # no "I/O operation on closed file" from the atexit hook
