"""Statistics over model seeds: aggregates, comparisons, multiple-comparison correction, tables.

* `aggregate(per_seed)`: mean / min / max / std / n of each float metric.
* `compare(a, b)`: the difference of means with a two-sided permutation-test p-value
  (exact over all splits when there are at most 200,000 of them) and a bootstrap 95%
  interval, for headline comparisons; `holm(p_values)`: Holm-Bonferroni adjustment.
* `format_mean_range(stats)`: "0.473 (0.360, 0.576)".
"""
import itertools
import math

import numpy as np


def aggregate(per_seed):
  """{metric: {mean, min, max, std, n}} over a list of per-seed dicts (float metrics only).

  `std` is the sample standard deviation (ddof=1; 0 for one seed). Metrics
  that are None / NaN for some seed are aggregated over the others.
  """
  keys = [k for k in per_seed[0] if k not in ("seed", "step") and isinstance(per_seed[0][k], float)]
  out = {}
  for k in keys:
    v = np.array([f[k] for f in per_seed if f.get(k) is not None], dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
      continue
    out[k] = {"mean": float(v.mean()), "min": float(v.min()), "max": float(v.max()),
              "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "n": int(v.size)}
  return out


def permutation_test(a, b, max_exact=200_000, num_samples=100_000, seed=0):
  """Two-sided permutation test of mean(a) = mean(b); returns the p-value.

  Exact (every split of the pooled values into groups of len(a) and len(b))
  when there are at most `max_exact` splits, else `num_samples` random splits
  (fixed `seed`; the observed split is counted, so p > 0). A split counts as
  extreme when |mean difference| >= the observed one (with a 1e-12 tolerance).
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.size < 1 or b.size < 1:
    raise ValueError(f"permutation_test needs values in both groups (got {a.size}, {b.size})")
  pooled = np.concatenate([a, b])
  n, total = a.size, pooled.sum()
  obs = abs(a.mean() - b.mean())
  m = b.size
  count_splits = math.comb(n + m, n)
  if count_splits <= max_exact:
    idx = np.array(list(itertools.combinations(range(n + m), n)), dtype=np.int64)
    sa = pooled[idx].sum(axis=1)
    diffs = np.abs(sa / n - (total - sa) / m)
    return float(np.mean(diffs >= obs - 1e-12))
  rng = np.random.default_rng(seed)
  perm = np.argsort(rng.random((num_samples, n + m)), axis=1)[:, :n]
  sa = pooled[perm].sum(axis=1)
  diffs = np.abs(sa / n - (total - sa) / m)
  return float((np.sum(diffs >= obs - 1e-12) + 1) / (num_samples + 1))


def bootstrap_ci(a, b, level=0.95, num_samples=20_000, seed=0):
  """Percentile bootstrap interval of mean(a) - mean(b), resampling each group's seeds."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  rng = np.random.default_rng(seed)
  da = a[rng.integers(0, a.size, (num_samples, a.size))].mean(axis=1)
  db = b[rng.integers(0, b.size, (num_samples, b.size))].mean(axis=1)
  lo, hi = np.quantile(da - db, [(1 - level) / 2, (1 + level) / 2])
  return float(lo), float(hi)


def compare(a, b):
  """Headline comparison of per-seed values a (treatment) vs b (baseline).

  Returns {mean_a, mean_b, diff, p_value (two-sided permutation test),
  ci95 (bootstrap interval of the difference), n_a, n_b}.
  """
  a, b = [float(x) for x in a], [float(x) for x in b]
  return {"mean_a": float(np.mean(a)), "mean_b": float(np.mean(b)),
          "diff": float(np.mean(a) - np.mean(b)), "p_value": permutation_test(a, b),
          "ci95": list(bootstrap_ci(a, b)), "n_a": len(a), "n_b": len(b)}


def holm(p_values):
  """Holm-Bonferroni adjusted p-values of a family of tests, in the input order: the
  i-th smallest p becomes max over j <= i of min(1, (m - j + 1) p_(j)) (j from 1). Reject
  at level alpha where the adjusted p <= alpha: the family-wise error rate stays <= alpha."""
  p = np.asarray([float(x) for x in p_values], dtype=np.float64)
  if p.size == 0:
    return []
  if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
    raise ValueError(f"p-values must lie in [0, 1]; got {p.tolist()}")
  order = np.argsort(p, kind="stable")
  m = p.size
  scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
  out = np.empty(m)
  out[order] = np.maximum.accumulate(scaled)
  return out.tolist()


def format_mean_range(stats, digits=3):
  """"0.473 (0.360, 0.576)" from {mean, min, max}."""
  f = f"{{:.{digits}f}}"
  return f"{f.format(stats['mean'])} ({f.format(stats['min'])}, {f.format(stats['max'])})"
