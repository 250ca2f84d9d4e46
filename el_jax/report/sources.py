"""The results files an analysis reads, and where their numbers ran.

  src = sources.Sources("results/loss_baselines")      # an experiment's results folder
  doc = src.load("test.json")                          # results/loss_baselines/test.json
  sweep = src.load("../copy_task_cpu_sweep/selection.json")  # another experiment's file
  src.ran_on(["test.json"])                            # ["AMD EPYC ...", ...] for a table
  src.read                                             # every file read, from the repository root

An analysis (`experiments/<name>/analysis.py`) reads its rows through a `Sources`, so that its
`analysis.json` can list the files its numbers come from (the pages' footers name them) and
each table can say which machines its numbers ran on. Besides `.json` files a source may be a
log whose last JSON line (`{...}`, optionally after one word: `flatness_bench {...}`) holds
the numbers. Standard library and `el_jax.infra.provenance` only: no JAX.
"""
import json
import os
import re

from el_jax.infra import provenance


class SourceError(ValueError):
  """A results file that is missing or cannot be read: the message names it."""


UNRECORDED = ("not recorded: a CPU of the development machines (results from before el_jax "
              "recorded where each run ran; the CHANGELOG's machine notes name them)")


def json_line(text, name):
  """The last line of a log that is a JSON object, optionally after one leading word."""
  for line in reversed(text.splitlines()):
    s = line.strip()
    m = re.match(r"^(?:[A-Za-z_][\w.]*\s+)?(\{.*\})$", s)
    if m:
      try:
        return json.loads(m.group(1))
      except ValueError:
        continue
  raise SourceError(f"{name} has no JSON line")


def ran_on_records(obj, depth=0):
  """Every `ran_on` record (el_jax.infra.provenance) inside a results file."""
  if depth > 8:
    return []
  if isinstance(obj, dict):
    out = [obj["ran_on"]] if isinstance(obj.get("ran_on"), dict) else []
    return out + [r for k, v in obj.items() if k != "ran_on"
                  for r in ran_on_records(v, depth + 1)]
  if isinstance(obj, list):
    return [r for v in obj for r in ran_on_records(v, depth + 1)]
  return []


def repo_root():
  """The checkout: the folder holding el_jax/ (or the working directory for an installed
  el_jax, whose results/ is the user's)."""
  here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return here if os.path.isdir(os.path.join(here, "results")) else os.getcwd()


class Sources:
  """The files under one results folder (and, by relative paths, its neighbours), read once
  each; remembers every file read (`read`, paths from the repository root)."""

  def __init__(self, folder, root=None):
    self.root = os.path.abspath(root or repo_root())
    self.folder = folder if os.path.isabs(folder) else os.path.join(self.root, folder)
    self._cache = {}
    self._read = set()

  def path(self, rel):
    return os.path.normpath(os.path.join(self.folder, rel))

  def name(self, rel):
    """`rel` as the pages name it: relative to the repository root, with / separators."""
    return os.path.relpath(self.path(rel), self.root).replace(os.sep, "/")

  def exists(self, rel):
    return os.path.exists(self.path(rel))

  def load(self, rel):
    """The JSON of `rel` (or the last JSON line of a log); SourceError if missing or bad."""
    key = self.name(rel)
    if key not in self._cache:
      path = self.path(rel)
      if not os.path.isfile(path):
        raise SourceError(f"{key} does not exist")
      with open(path) as fh:
        text = fh.read()
      if path.endswith(".json"):
        try:
          self._cache[key] = json.loads(text)
        except ValueError as e:
          raise SourceError(f"{key} is not valid JSON ({e})") from None
      elif path.endswith(".jsonl"):
        try:
          self._cache[key] = [json.loads(l) for l in text.splitlines() if l.strip()]
        except ValueError as e:
          raise SourceError(f"{key} is not valid JSON lines ({e})") from None
      else:
        self._cache[key] = json_line(text, key)
    self._read.add(key)
    return self._cache[key]

  def files(self, sub="", ext=".json"):
    """The files under `sub` (relative to the folder) ending in `ext`, sorted, as paths
    relative to the folder (empty if `sub` is absent)."""
    top = self.path(sub)
    out = []
    for dirpath, _, names in os.walk(top):
      for n in names:
        if n.endswith(ext):
          out.append(os.path.relpath(os.path.join(dirpath, n), self.folder))
    return sorted(p.replace(os.sep, "/") for p in out)

  @property
  def read(self):
    """Every file read so far, sorted, from the repository root."""
    return sorted(self._read)

  def ran_on(self, files):
    """The machines (`provenance.describe`) recorded in `files`, in the order first seen, and
    UNRECORDED for a file that records none or some of whose rows record none."""
    seen = []
    for rel in sorted(files, key=self.name):
      data = self.load(rel)
      recs = ran_on_records(data)
      rows = data.get("rows") if isinstance(data, dict) else None
      partly = isinstance(rows, list) and any(isinstance(r, dict) and "ran_on" not in r
                                              for r in rows)
      for d in [provenance.describe(r) for r in recs] + ([UNRECORDED] if partly or not recs
                                                         else []):
        if d not in seen:
          seen.append(d)
    return seen
