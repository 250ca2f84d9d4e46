"""Pinned test-size numbers of the experiment scripts (tests/golden/experiment_rows.json, or
an experiment folder's own pins file).

Each tests/test_experiment_grids_*.py runs its script at test size and calls
`check(script, rows)` with the grid rows it wrote (an experiment folder's test
`check(name, rows, path=<its pins.json>)`): every per-seed value must equal the pinned
one (relative tolerance 1e-6, as the golden one-step test), so a refactor that changes a
number fails here. The pins were written by the same tests with `EL_JAX_WRITE_PINS=1`, on code
whose numbers were checked equal to those of the scripts before el_jax.run.grid (at test size); rewrite them that way only for a change meant to change
numbers, and say so in the commit. They hold under the suite's settings (conftest.py),
on any x86-64 CPU with AVX2 and FMA (docs/testing.md, "Across CPUs").
"""
import importlib.metadata
import json
import math
import os
import re

import numpy as np

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "experiment_rows.json")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Two lines of JAX (docs/testing.md, "Two lines of JAX"). The pins were written under the
# jax of requirements.txt (the Python 3.11 line), and hold there to RTOL, bit for bit across
# CPUs. Under another line (requirements-py312.txt: jax 0.12) XLA:CPU fuses and orders the
# same programs differently, and a float32 number trained for a few steps moves in its
# last digits: there a pinned float holds to OTHER_LINE_RTOL of itself, or to
# OTHER_LINE_SPREAD of the spread of what it pins (the standard deviation of the pinned
# per-seed values of the same row and metric, or of a pinned list of repetitions or probe
# seeds: the variation every comparison of these numbers is measured against), whichever is
# larger. Integers (steps, counts, seeds)
# hold exactly on both lines. EL_JAX_PIN_DRIFT=<file> appends every pinned float's
# relative difference to that file (JSON lines: how far each moved).
RTOL = 1e-6
OTHER_LINE_RTOL = 1e-4
OTHER_LINE_SPREAD = 0.05


def pinned_jax():
  """The jax version of requirements.txt: the line the pins were written under."""
  with open(os.path.join(ROOT, "requirements.txt")) as f:
    return re.search(r"^jax==(\S+)$", f.read(), re.M).group(1)


def on_pinned_line():
  return importlib.metadata.version("jax") == pinned_jax()


def close(got, want, what="", spread=0.0):
  """Whether a pinned number holds (above); `what` names it in the drift record, `spread`
  is the standard deviation over model seeds of its row's metric (0 where it has none)."""
  if isinstance(want, (list, tuple)):  # repetitions, probe seeds: their own spread if none given
    if not spread and len(want) > 1 and all(isinstance(w, float) for w in want):
      spread = float(np.std(want, ddof=1))
    return len(got) == len(want) and all(close(g, w, what, spread) for g, w in zip(got, want))
  if not isinstance(want, float) or isinstance(got, bool) or got is None:
    return got == want
  record = os.environ.get("EL_JAX_PIN_DRIFT")
  if record and got != want:
    with open(record, "a") as f:
      f.write(json.dumps({"what": what, "got": got, "want": want, "spread": spread,
                          "rel": abs(got - want) / max(abs(want), 1e-300)}) + "\n")
  if on_pinned_line():
    return math.isclose(got, want, rel_tol=RTOL, abs_tol=1e-12)
  return math.isclose(got, want, rel_tol=max(OTHER_LINE_RTOL, RTOL), abs_tol=max(
      1e-12, OTHER_LINE_SPREAD * spread))


def _load(path=PATH):
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def _per_seed(rows):
  return {r["label"]: {"seeds": list(r["seeds"]),
                       "per_seed": {m: list(v) for m, v in sorted(r["per_seed"].items())
                                    if all(isinstance(x, (int, float)) for x in v)}}
          for r in rows}


def line_path(path):
  """The pins file of this JAX line: `path`, or under another line its own pins beside it
  (`<name>.jax-<major.minor>.json`) where there are any: for the rows that no tolerance
  derived from their spread holds across lines (the adversarial model's min-max training
  takes another trajectory: docs/testing.md, "Two lines of JAX")."""
  if on_pinned_line():
    return path
  minor = ".".join(importlib.metadata.version("jax").split(".")[:2])
  own = f"{os.path.splitext(path)[0]}.jax-{minor}.json"
  return own if os.path.exists(own) or os.environ.get("EL_JAX_WRITE_PINS") == "1" else path


def check(script, rows, path=PATH):
  """The per-seed values of `rows` (grid rows) equal the pins of `script` in `path` (an
  experiment folder keeps its own: experiments/<name>/pins.json)."""
  got = _per_seed(rows)
  path = line_path(path)
  if os.environ.get("EL_JAX_WRITE_PINS") == "1":
    pins = _load(path)
    pins[script] = got
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(pins, f, indent=1, sort_keys=True)
      f.write("\n")
    return
  pins = _load(path)
  assert script in pins, f"no pins for {script}: run its test once with EL_JAX_WRITE_PINS=1"
  want = pins[script]
  assert sorted(got) == sorted(want), (script, sorted(got), sorted(want))
  for label, w in want.items():
    g = got[label]
    assert g["seeds"] == w["seeds"], (script, label)
    assert sorted(g["per_seed"]) == sorted(w["per_seed"]), (script, label)
    for m, col in w["per_seed"].items():
      spread = float(np.std(col, ddof=1)) if len(col) > 1 else 0.0
      for i, (x, y) in enumerate(zip(g["per_seed"][m], col)):
        assert close(x, float(y) if isinstance(x, float) else y, f"{script} {label} {m} {i}",
                     spread), (script, label, m, g["per_seed"][m], col)
