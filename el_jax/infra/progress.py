"""Progress on long loops that reads well in a terminal and in a log file.

  bar = progress.Bar(total=300, desc="seed 0", initial=0)
  for step in ...:
    bar.update(loss=0.123)        # postfix shown in the bar / log line
  bar.close()

  with progress.label("seed 0 eval test"):
    for chunk in progress.iterate(chunks, total=len(chunks)):   # long evaluations
      ...

On a TTY this is a tqdm bar. In a log file (stderr not a TTY) it is one line
every `EL_JAX_LOG_EVERY_S` seconds (default 10) with the step, the postfix
(loss), steps per second and the time left, and a last line when the loop
ends. `set_enabled(False)` (config.progress=False) silences both.
"""
import contextlib
import os
import sys
import time

from tqdm.auto import tqdm

_state = {"enabled": True, "label": None}


def set_enabled(on):
  _state["enabled"] = bool(on)


def enabled():
  return _state["enabled"]


def log_interval():
  try:
    return max(float(os.environ.get("EL_JAX_LOG_EVERY_S", "10")), 0.0)
  except ValueError:
    return 10.0


PLOTS_ENV = "EL_JAX_PLOTS"


def plots_enabled():
  """Whether a network's training run (`el_jax.run.job`) draws its PNG plots when it ends (the
  task's figures and the flatness plot): yes, unless `EL_JAX_PLOTS=0` (ntp_linear's figures
  are its results and are always drawn). A run's metrics.jsonl and summary.json hold every
  number its plots show, so turning them off loses nothing. The test suite does
  (matplotlib's import and two figures took about 2 s of a 7 s `test`-size run, in each of
  its many short runs); the plots' own tests turn them on. A value other than 0 or 1 is an
  error saying what is allowed."""
  value = os.environ.get(PLOTS_ENV, "1")
  if value not in ("0", "1"):
    raise ValueError(f"{PLOTS_ENV}={value!r} in the environment: 1 (draw a run's plots when "
                     f"it ends, the default) or 0 (skip them)")
  return value == "1"


def _tty():
  return sys.stderr.isatty()


def _fmt_time(s):
  s = int(round(s))
  return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Bar:
  """A progress bar (TTY) or periodic log lines (non-TTY) over `total` units.

  `delay_s`: show nothing unless the loop is still running after this long
  (for loops that are usually short, like evaluations).
  """

  def __init__(self, total, desc, initial=0, unit="step", delay_s=0.0):
    self.total, self.desc, self.n, self.unit = total, desc, initial, unit
    self.t0 = self.last = time.time()
    self.n0 = initial
    self.delay_s = min(delay_s, log_interval())
    self.postfix = {}
    self.first = None
    self.on = enabled()
    self.printed = False
    self.bar = None
    if self.on and _tty():
      self.bar = tqdm(total=total, initial=initial, desc=desc, leave=False, dynamic_ncols=True,
                      unit=unit, mininterval=0.5, delay=delay_s)

  def set_postfix(self, **postfix):
    """Values shown after the count (e.g. loss=0.12) from now on."""
    self.postfix.update(postfix)
    if self.bar is not None:
      self.bar.set_postfix({k: _fmt(v) for k, v in self.postfix.items()}, refresh=False)

  def update(self, n=1, **postfix):
    if self.first is None:  # rates are measured from the first update on (after compilation)
      self.first = (time.time(), self.n + n)
    self.n += n
    if postfix:
      self.set_postfix(**postfix)
    if self.bar is not None:
      self.bar.update(n)
    elif self.on:
      now = time.time()
      if now - self.t0 >= self.delay_s and now - self.last >= log_interval():
        self._line(now)

  def _line(self, now, final=False):
    self.last = now
    extra = "".join(f" {k} {_fmt(v)}" for k, v in self.postfix.items())
    t1, n1 = self.first or (now, self.n)
    if self.n > n1 and now > t1:
      rate = (self.n - n1) / (now - t1)
      speed = f", {rate:.3g} {self.unit}s/s"
      left = f", {_fmt_time((self.total - self.n) / rate)} left"
    else:
      speed = left = ""
    tail = f", done in {_fmt_time(now - self.t0)}" if final else left
    print(f"{self.desc}: {self.unit} {self.n}/{self.total}{extra}{speed}{tail}",
          file=sys.stderr, flush=True)
    self.printed = True

  def close(self):
    if self.bar is not None:
      self.bar.close()
    elif self.on and self.printed:
      self._line(time.time(), final=True)


def _fmt(v):
  return f"{v:.4g}" if isinstance(v, float) else str(v)


@contextlib.contextmanager
def label(text):
  """Names what `iterate` loops over inside this block (e.g. "seed 0 eval test")."""
  old = _state["label"]
  _state["label"] = text
  try:
    yield
  finally:
    _state["label"] = old


def iterate(iterable, total, unit="batch", delay_s=2.0):
  """Yields from `iterable`, reporting progress if the loop runs longer than `delay_s`."""
  bar = Bar(total, _state["label"] or "working", unit=unit, delay_s=delay_s)
  try:
    for item in iterable:
      yield item
      bar.update(1)
  finally:
    bar.close()
