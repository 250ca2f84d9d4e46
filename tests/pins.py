"""Pinned test-size numbers of the experiment scripts (tests/golden/experiment_rows.json, or
an experiment folder's own pins file).

Each tests/test_experiment_grids_*.py runs its script at test size and calls
`check(script, rows)` with the grid rows it wrote (an experiment folder's test
`check(name, rows, path=<its pins.json>)`): every per-seed value must equal the pinned
one (relative tolerance 1e-6, as the golden one-step test), so a refactor that changes a
number fails here. The pins were written by the same tests with `EL_JAX_WRITE_PINS=1`, on the
code of issue 22 (whose migrations were checked equal to the scripts before el_jax.run.grid, at
test size, when they were made); rewrite them that way only for a change meant to change
numbers, and say so in the commit. They hold under the suite's settings (conftest.py),
on any x86-64 CPU with AVX2 and FMA (docs/testing.md, "Across CPUs").
"""
import json
import os

import numpy as np

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "experiment_rows.json")


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


def check(script, rows, path=PATH):
  """The per-seed values of `rows` (grid rows) equal the pins of `script` in `path` (an
  experiment folder keeps its own: experiments/<name>/pins.json)."""
  got = _per_seed(rows)
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
      np.testing.assert_allclose(g["per_seed"][m], col, rtol=1e-6, atol=1e-12,
                                 err_msg=f"{script} {label} {m}")
