"""el_jax.infra.progress where no terminal and no notebook is: one plain line every
EL_JAX_LOG_EVERY_S seconds with the count, the rate and the time left (no bar characters, no
carriage returns), nothing for a phase shorter than its delay, a last line with the time it
took; in a Jupyter kernel without ipywidgets, the same lines and one line saying what to
install; a phase of corpus building reports its time left. (The notebook bar itself:
tests/test_notebooks.py executes the notebooks in a kernel.)"""
import re

import numpy as np
import pytest

from el_jax.infra import progress


class Clock:
  def __init__(self):
    self.t = 1000.0

  def __call__(self):
    return self.t


@pytest.fixture
def clock(monkeypatch):
  """A fake clock for progress (seconds advanced by hand), lines every 5 s, progress on, and
  stderr neither a terminal nor a notebook (pytest's capture)."""
  c = Clock()
  monkeypatch.setattr(progress, "_now", c)
  monkeypatch.setenv("EL_JAX_LOG_EVERY_S", "5")
  monkeypatch.setattr(progress, "_state", {"enabled": True, "label": None, "hinted": False})
  return c


def _lines(capsys):
  err = capsys.readouterr().err
  assert "\r" not in err and not re.search(r"[|█▏▎▍▌▋▊▉#]", err), err
  return err.splitlines()


def test_a_line_every_few_seconds_with_the_time_left(clock, capsys):
  assert progress.mode() == "log"
  bar = progress.Bar(total=100, desc="seed 0")
  for _ in range(60):  # 2 steps per second for 30 s
    clock.t += 0.5
    bar.update(1, loss=0.25)
  bar.close()
  lines = _lines(capsys)
  # One line each 5 s (after 10, 20, ..., 60 steps) and the last one.
  assert len(lines) == 7, lines
  assert [int(re.match(r"seed 0: step (\d+)/100", l).group(1)) for l in lines] == [
      10, 20, 30, 40, 50, 60, 60]
  # The rate is measured from the first update on: 9 steps in 4.5 s; 90 steps left at 2/s.
  assert lines[0] == "seed 0: step 10/100 loss 0.25, 2 steps/s, 0:45 left"
  assert lines[5] == "seed 0: step 60/100 loss 0.25, 2 steps/s, 0:20 left"
  assert lines[-1] == "seed 0: step 60/100 loss 0.25, 2 steps/s, done in 0:30"


def test_a_phase_shorter_than_its_delay_prints_nothing(clock, capsys):
  with progress.Bar(10, "mlm_data: sampling", unit="sentence",
                    delay_s=progress.PHASE_DELAY_S) as bar:
    for _ in range(10):
      clock.t += 0.1
      bar.update(1)
  assert _lines(capsys) == []
  # A longer one reports, in its unit, once past its delay and then every 5 s.
  with progress.Bar(40, "mlm_data: sampling", unit="sentence",
                    delay_s=progress.PHASE_DELAY_S) as bar:
    for _ in range(40):
      clock.t += 1.0
      bar.update(1)
  lines = _lines(capsys)
  assert lines[0] == "mlm_data: sampling: sentence 5/40, 1 sentences/s, 0:35 left", lines
  assert len(lines) == 9 and lines[-1].endswith("done in 0:40"), lines


def test_nothing_when_progress_is_off(clock, capsys):
  progress.set_enabled(False)
  assert progress.mode() == "off"
  bar = progress.Bar(10, "seed 0")
  for _ in range(10):
    clock.t += 10
    bar.update(1)
  bar.close()
  assert _lines(capsys) == []


def test_a_notebook_without_ipywidgets_gets_lines_and_says_what_to_install(clock, capsys,
                                                                          monkeypatch):
  monkeypatch.setattr(progress, "in_notebook", lambda: True)
  monkeypatch.setattr(progress, "_widgets", lambda: False)
  assert progress.mode() == "log"
  assert progress.mode() == "log"
  (hint,) = _lines(capsys)
  assert "needs ipywidgets" in hint and "notebooks extra" in hint
  monkeypatch.setattr(progress, "_widgets", lambda: True)
  assert progress.mode() == "notebook"


def test_not_a_notebook_here():
  assert not progress.in_notebook()  # pytest is no Jupyter kernel


def test_corpus_building_reports_its_time_left(clock, capsys, monkeypatch):
  """The exact conditionals of an MLM corpus split (mlm_data, the slowest phase of building
  it), in chunks of 16 sentences here, 2 s a chunk: a line with the time left."""
  from el_jax.core.data import mlm_data
  from el_jax.run import config as config_lib
  d = config_lib.get_config("pcfg_mlm", "test").data
  lang = mlm_data.language(d)
  tokens, lengths, _ = mlm_data._sample(d, lang, 64, [0, 1])
  real = lang.mlm_conditionals_batch

  def slow(sentences):
    clock.t += 2.0
    return real(sentences)
  monkeypatch.setattr(lang, "mlm_conditionals_batch", slow)
  monkeypatch.setattr(mlm_data, "COND_CHUNK", 16)
  capsys.readouterr()
  cond = mlm_data.conditionals(lang, tokens, lengths, "mlm_data: exact conditionals")
  assert np.isfinite(cond).all()
  lines = _lines(capsys)
  # Past 5 s: 48 sentences, 32 of them in the 4 s since the first chunk; 16 left at 8 a second.
  assert lines == ["mlm_data: exact conditionals: sentence 48/64, 8 sentences/s, 0:02 left",
                   "mlm_data: exact conditionals: sentence 64/64, 8 sentences/s, done in 0:08"]
