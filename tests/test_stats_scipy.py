"""The bootstrap and sampled permutation computations of `el_jax.report.stats` are SciPy's
(`scipy.stats.bootstrap`, `scipy.stats.permutation_test`); its exact tests enumerate the same
splits as SciPy's exact mode; the tie rule and quantiles are el_jax's (stats.py says why). Every comparison stored in the committed JSON (results/, each
dict with a `p_value` and a `ci95`) is recomputed from the values it was computed from, found
in the same file: its p-value and interval come out exactly as committed. SciPy's own
p-value and interval are checked beside them: the interval equal within 1e-12 (relative),
the p-value equal wherever no split ties with the observed one (docs/testing.md,
"Statistics through SciPy", gives the counts and sizes)."""
import functools
import glob
import itertools
import json
import math
import os

import numpy as np
import pytest

import reliability  # tests/reliability.py

from el_jax.report import stats

RESULTS = os.path.join(reliability.ROOT, "results")
MAX_COLUMN = 40  # columns (a field across a file's points) searched for subsets up to this long


def _number(v):
  return isinstance(v, (int, float)) and not isinstance(v, bool)


def _walk(x):
  yield x
  if isinstance(x, dict):
    for v in x.values():
      yield from _walk(v)
  elif isinstance(x, list):
    for v in x:
      yield from _walk(v)


def _leaves(x, prefix=""):
  """{dotted path: number} of the numeric leaves of a dict (lists of numbers left out)."""
  out = {}
  if isinstance(x, dict):
    for k, v in x.items():
      if _number(v):
        out[f"{prefix}{k}"] = float(v)
      elif isinstance(v, dict):
        out.update(_leaves(v, f"{prefix}{k}."))
  return out


def _candidates(doc):
  """The value lists a comparison of `doc` may have been computed from: every list of
  numbers, and every field across the elements of a list or dict of dicts (a column of
  points, models, repetitions) with its order-preserving subsets (a comparison over some
  of the points: the first and last step, the models of one size)."""
  lists, columns = [], []
  for node in _walk(doc):
    if isinstance(node, list) and node and all(map(_number, node)):
      lists.append([float(v) for v in node])
    elements = (node if isinstance(node, list) else
                list(node.values()) if isinstance(node, dict) else [])
    if len(elements) >= 2 and all(isinstance(e, dict) for e in elements):
      flat = [_leaves(e) for e in elements]
      for key in sorted({k for f in flat for k in f}):
        col = [f[key] for f in flat if key in f]
        if 2 <= len(col) <= MAX_COLUMN:
          columns.append(col)
  return lists, columns


MAX_SUBSETS = 50_000  # order-preserving subsets of one column tried for one size


def _index(lists, columns, sizes, means=None):
  """{(n, mean): [value lists]}: the lists of `lists` and the order-preserving subsets of the
  `columns` of each size in `sizes` (those of a column with at most MAX_SUBSETS of them)
  whose mean is close to one of `means`, keyed by their mean as NumPy computes it over the
  list."""
  index, seen = {}, set()

  def add(values):
    key = tuple(values)
    if key not in seen:
      seen.add(key)
      index.setdefault((len(values), float(np.mean(values))), []).append(list(values))

  for values in lists:
    add(values)
  wanted = np.asarray(sorted(means or ()), np.float64)
  for n in sizes:
    for col in columns:
      if n <= len(col) and math.comb(len(col), n) <= MAX_SUBSETS and wanted.size:
        subsets = np.asarray(col)[_subsets(len(col), n)]
        near = np.isclose(subsets.mean(axis=1)[:, None], wanted[None, :], rtol=1e-9,
                          atol=1e-12).any(axis=1)
        for values in subsets[near]:
          add(values.tolist())
  return index


@functools.lru_cache(maxsize=None)
def _subsets(k, n):
  return np.asarray(list(itertools.combinations(range(k), n)), np.int64).reshape(-1, n)


def _comparisons():
  out = []
  for path in sorted(glob.glob(os.path.join(RESULTS, "**", "*.json"), recursive=True)):
    with open(path) as f:
      doc = json.load(f)
    # (An experiment's analysis.json copies its comparisons without their means; test_experiments
    # recomputes each from the committed rows through the same functions.)
    if os.path.basename(path) == "analysis.json":
      continue
    found = [c for c in _walk(doc) if isinstance(c, dict) and "p_value" in c and "ci95" in c]
    if found:
      out.append((os.path.relpath(path, reliability.ROOT), doc, found))
  return out


_MEMO = {}


def _memo(fn, *values):
  """`fn(*values, scipy_result=True)`, once per function and values (files repeat them)."""
  key = (fn.__name__, *(tuple(np.asarray(v, np.float64).tolist()) for v in values))
  if key not in _MEMO:
    _MEMO[key] = fn(*values, scipy_result=True)
  return _MEMO[key]


def _unpaired(c, index):
  for a in index.get((c["n_a"], c["mean_a"]), ()):
    for b in index.get((c["n_b"], c["mean_b"]), ()):
      if float(np.mean(a) - np.mean(b)) != c["diff"]:
        continue
      ci, bres = _memo(stats.bootstrap_ci, a, b)  # (the cheaper one first)
      if list(ci) != c["ci95"]:
        continue
      p, pres = _memo(stats.permutation_test, a, b)
      if p == c["p_value"]:
        return pres.pvalue, [bres.confidence_interval.low, bres.confidence_interval.high], pres
  return None


def _paired(c, index):
  for a in index.get((c["n"], c["mean_a"]), ()):
    for b in index.get((c["n"], c["mean_b"]), ()):
      d = np.asarray(a) - np.asarray(b)
      if float(d.mean()) != c["diff"]:
        continue
      ci, sci = None, None  # (paired_compare gives no interval below MIN_CI_N pairs)
      if d.size >= stats.MIN_CI_N:
        ci, bres = _memo(stats.bootstrap_ci_paired, d)
        ci, sci = list(ci), [bres.confidence_interval.low, bres.confidence_interval.high]
      if ci != c["ci95"]:
        continue
      p, pres = _memo(stats.sign_flip_test, d)
      if p == c["p_value"]:
        return pres.pvalue, sci, pres
  return None


def _ties(res, observed):
  """Whether a split of SciPy's null distribution ties with the observed statistic within
  el_jax's TIE but not within SciPy's own relative tolerance (100 machine epsilons)."""
  null = np.abs(np.asarray(res.null_distribution))
  gap = np.abs(null - observed)
  return bool(np.any((gap <= stats.TIE) & (gap > 100 * np.finfo(float).eps * abs(observed))))


def test_every_committed_comparison_recomputes_through_scipy():
  missing, checked, p_differ, ci_differ, cache = [], 0, [], [], {}
  for path, doc, comps in _comparisons():
    lists, columns = _candidates(doc)
    sizes = {n for c in comps for n in (c.get("n_a"), c.get("n_b"), c.get("n")) if n}
    index, wider, built = _index(lists, [], sizes), {}, set()
    means = {c[k] for c in comps for k in ("mean_a", "mean_b")}
    for c in comps:
      key = json.dumps(c, sort_keys=True)
      if key not in cache:
        find = _unpaired if "n_a" in c else _paired
        cache[key] = find(c, index)
        if cache[key] is None:  # a comparison over some points' fields: the columns too
          for n in {c.get("n_a"), c.get("n_b"), c.get("n")} - {None} - built:
            wider.update(_index([], columns, [n], means))
            built.add(n)
          cache[key] = find(c, wider)
      got = cache[key]
      if got is None:
        missing.append((path, {k: c.get(k) for k in ("a", "b", "metric", "mean_a", "mean_b")}))
        continue
      checked += 1
      sp_p, sp_ci, res = got
      if sp_p != c["p_value"]:
        observed = abs(c["mean_a"] - c["mean_b"]) if "n_a" in c else abs(c["diff"])
        assert _ties(res, observed), (path, c, sp_p)
        p_differ.append((path, c["p_value"], float(sp_p)))
      if c["ci95"] is not None and sp_ci != c["ci95"]:
        np.testing.assert_allclose(sp_ci, c["ci95"], rtol=1e-12, atol=0, err_msg=path)
        ci_differ.append((path, max(abs(x - y) / abs(y) for x, y in zip(sp_ci, c["ci95"]))))
  assert not missing, f"{len(missing)} committed comparisons whose values were not found: {missing[:5]}"
  assert checked >= 300, checked
  print(f"{checked} comparisons; SciPy's own p differs on {len(p_differ)}: {p_differ}; "
        f"its interval on {len(ci_differ)} (max relative "
        f"{max([d for _, d in ci_differ], default=0):.1e})")
