"""Progress on long loops that reads well in a terminal, in a notebook and in a log file.

  bar = progress.Bar(total=300, desc="seed 0", initial=0)
  for step in ...:
    bar.update(loss=0.123)        # postfix shown in the bar / log line
  bar.close()

  with progress.Bar(total=n, desc="mlm_data: sampling", unit="sentence",
                    delay_s=progress.PHASE_DELAY_S) as bar:   # a phase: shown if it lasts
    for chunk in ...:
      bar.update(len(chunk))

  with progress.label("seed 0 eval test"):
    for chunk in progress.iterate(chunks, total=len(chunks)):   # long evaluations
      ...

Where it is shown (`mode()`):
* in a Jupyter kernel (ipykernel: Jupyter, JupyterLab, VS Code, Colab) with ipywidgets
  installed (el_jax's `notebooks` extra): tqdm's notebook bar, a widget with the count, the
  rate and the time left, kept in the cell's output when the loop ends;
* on a terminal (stderr a TTY): a tqdm bar;
* in a log file (stderr neither): one line every `EL_JAX_LOG_EVERY_S` seconds (default 10)
  with the count, the postfix (loss), the rate and the time left, and a last line with the
  time it took; no bar characters, no carriage returns. A notebook without ipywidgets gets
  these lines too (and one line saying what to install).
A Bar with `delay_s` shows nothing unless its loop still runs after that long (an evaluation,
a phase of corpus building: `PHASE_DELAY_S`). `set_enabled(False)` (config.progress=False)
silences all of it.
"""
import contextlib
import importlib.util
import os
import sys
import time

from tqdm.std import tqdm

_state = {"enabled": True, "label": None, "hinted": False}

# A phase (corpus building, a measurement) shows its progress only if it lasts this long.
PHASE_DELAY_S = 2.0


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


def _now():
  return time.monotonic()


def in_notebook():
  """Whether this process is a Jupyter kernel writing stderr to its cells (as tqdm.autonotebook
  decides, plus: stderr is still the kernel's stream, not redirected to a file)."""
  if "ipykernel.zmqshell" not in sys.modules:
    return False
  if any(k == "QT_API" or k.startswith("SPYDER") for k in os.environ):  # qtconsole / Spyder
    return False
  try:
    shell = sys.modules["IPython"].get_ipython()
  except (KeyError, AttributeError):
    return False
  return (shell is not None and getattr(shell, "kernel", None) is not None
          and type(sys.stderr).__module__.startswith("ipykernel"))


def _widgets():
  return importlib.util.find_spec("ipywidgets") is not None


def mode():
  """"off" (config.progress=False), "notebook" (tqdm's notebook bar), "tty" (tqdm's bar) or
  "log" (periodic lines): see the module docstring."""
  if not enabled():
    return "off"
  if in_notebook():
    if _widgets():
      return "notebook"
    if not _state["hinted"]:
      _state["hinted"] = True
      print("progress: a bar in this notebook needs ipywidgets (pip install ipywidgets, or "
            "el_jax's notebooks extra); showing progress lines instead", file=sys.stderr)
    return "log"
  return "tty" if sys.stderr.isatty() else "log"


def _fmt_time(s):
  s = int(round(s))
  return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Bar:
  """A progress bar (notebook, TTY) or periodic log lines over `total` units (see the module
  docstring); a context manager that closes it.

  `delay_s`: show nothing unless the loop is still running after this long
  (for loops that are usually short, like evaluations).
  """

  def __init__(self, total, desc, initial=0, unit="step", delay_s=0.0):
    self.total, self.desc, self.n, self.unit = total, desc, initial, unit
    self.t0 = self.last = _now()
    self.n0 = initial
    self.delay_s = min(delay_s, log_interval())
    self.postfix = {}
    self.first = None
    self.mode = mode()
    self.on = self.mode != "off"
    self.printed = False
    self.bar = None
    if self.mode == "notebook":
      from tqdm.notebook import tqdm as notebook_tqdm  # imports ipywidgets: notebooks only
      self.bar = notebook_tqdm(total=total, initial=initial, desc=desc, unit=unit,
                               mininterval=0.5, delay=delay_s, leave=True)
    elif self.mode == "tty":
      self.bar = tqdm(total=total, initial=initial, desc=desc, leave=False, dynamic_ncols=True,
                      unit=unit, mininterval=0.5, delay=delay_s)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False

  def set_postfix(self, **postfix):
    """Values shown after the count (e.g. loss=0.12) from now on."""
    self.postfix.update(postfix)
    if self.bar is not None:
      self.bar.set_postfix({k: _fmt(v) for k, v in self.postfix.items()}, refresh=False)

  def update(self, n=1, **postfix):
    if self.first is None:  # rates are measured from the first update on (after compilation)
      self.first = (_now(), self.n + n)
    self.n += n
    if postfix:
      self.set_postfix(**postfix)
    if self.bar is not None:
      self.bar.update(n)
    elif self.on:
      now = _now()
      if now - self.t0 >= self.delay_s and now - self.last >= log_interval():
        self._line(now)

  def _line(self, now, final=False):
    self.last = now
    extra = "".join(f" {k} {_fmt(v)}" for k, v in self.postfix.items())
    t1, n1 = self.first or (now, self.n)
    if self.n > n1 and now > t1:
      rate = (self.n - n1) / (now - t1)
      speed = f", {rate:.3g} {_plural(self.unit)}/s"
      left = f", {_fmt_time(max(self.total - self.n, 0) / rate)} left"
    else:
      speed = left = ""
    tail = f", done in {_fmt_time(now - self.t0)}" if final else left
    print(f"{self.desc}: {self.unit} {self.n}/{self.total}{extra}{speed}{tail}",
          file=sys.stderr, flush=True)
    self.printed = True

  def close(self):
    if self.bar is not None:
      self.bar.close()
      self.bar = None
    elif self.on and self.printed:
      self._line(_now(), final=True)
      self.on = False


def _plural(unit):
  return unit + ("es" if unit.endswith(("s", "ch", "sh", "x")) else "s")


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


def current_label(default="working"):
  """The text of the innermost `label` block (`default` outside one)."""
  return _state["label"] or default


def iterate(iterable, total, unit="batch", delay_s=PHASE_DELAY_S, desc=None):
  """Yields from `iterable`, reporting progress if the loop runs longer than `delay_s`
  (`desc`, else the current `label`, names it)."""
  bar = Bar(total, desc or current_label(), unit=unit, delay_s=delay_s)
  try:
    for item in iterable:
      yield item
      bar.update(1)
  finally:
    bar.close()
