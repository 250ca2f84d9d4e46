"""Reading a run's TensorBoard events back with the tensorboard package's own reader, and
comparing them with its metrics.jsonl (tests/test_tensorboard.py, tests/test_notebooks.py)."""
import os

import numpy as np
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

import reliability as rel

from el_jax.infra import tensorboard


def read_events(folder):
  """[(step, {tag: value})] of the event files of `folder` in TensorBoard's order (file name,
  then position), read by the tensorboard package (the file-version record left out)."""
  out = []
  for path in tensorboard.event_files(folder):
    for event in event_file_loader.EventFileLoader(path).Load():
      if event.HasField("summary"):
        out.append((event.step, {v.tag: tensor_util.make_ndarray(v.tensor).item()
                                 for v in event.summary.value}))
  return out


def expected_events(rows, kind_key="kind"):
  """What `read_events` must give for metrics `rows` of one seed: a tag per kind and number,
  the value rounded to float32."""
  out = []
  for r in rows:
    kind = r[kind_key]
    vals = {f"{kind}/{k}": float(np.float32(v)) for k, v in r.items()
            if k not in ("seed", "step", "kind", kind_key) and isinstance(v, (int, float))
            and not isinstance(v, bool)}
    out.append((r["step"], vals))
  return out


def assert_events_equal_metrics(workdir):
  rows = rel.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  seeds = sorted({r["seed"] for r in rows})
  folders = sorted(os.listdir(os.path.join(workdir, "tb")))
  assert folders == [f"seed_{s}" for s in seeds], folders
  for s in seeds:
    want = expected_events([r for r in rows if r["seed"] == s])
    got = read_events(os.path.join(workdir, "tb", f"seed_{s}"))
    assert got == want, (s, [x[0] for x in got], [x[0] for x in want])
  return rows
