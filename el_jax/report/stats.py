"""Statistics over model seeds: aggregates, comparisons, multiple-comparison correction, tables.

* `aggregate(per_seed)`: mean / min / max / std / n of each float metric.
* `compare(a, b)`: the difference of means with a two-sided permutation-test p-value
  (exact over all splits when there are at most 200,000 of them) and a bootstrap 95%
  interval, for headline comparisons; `holm(p_values)`: Holm-Bonferroni adjustment.
* `paired_compare(after, before)`: before / after on the same units (models, probe seeds,
  input sets): the mean change with the exact two-sided sign-flip p (`sign_flip_test`), and
  a bootstrap interval only where there are more than `MIN_CI_N` pairs.
* `p_floor(design, ...)`: the smallest p-value a design can give (3 vs 3 unpaired: 0.1; 3
  pairs: 0.25; Holm over m tests: m times that), and `at_floor(p, floor)`: whether a p sits
  there, so a page can say so beside it.
* `trend_slope(xs, a, b)`: the least-squares slope of mean(a) - mean(b) against log(x) over
  scale points, with a bootstrap interval over the seeds of each arm at each point (the
  scale-trend test fixed before the runs; docs/results/seed000_equal_learning.md).
* `family(pairs, paired)`: a family of comparisons (each a difference with its p, the
  design's floor and an interval), Holm-adjusted together: the one implementation every
  experiment's analysis uses.
* `select(scores)` / `select_rows(rows, metric)`: the validation selection (the highest
  mean, the first listed on a tie).
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


MIN_CI_N = 4  # a bootstrap interval over 3 or fewer values resamples 10 or fewer distinct means
TREND_MIN_POINTS = 3  # trend_slope: a line through 2 points has no residual to test against


def sign_flip_test(diffs, max_exact=1 << 20, num_samples=100_000, seed=0):
  """Two-sided paired sign-flip permutation test of mean(diffs) = 0; returns the p-value.

  Under the null each pair's difference is as likely to have either sign, so the reference
  distribution is that of |mean(s * diffs)| over every sign vector s in {-1, +1}^n: exact
  (all 2^n of them) when 2^n <= `max_exact`, else `num_samples` random ones (fixed `seed`;
  the observed signs are counted, so p > 0). Extreme: |mean| >= the observed one (1e-12
  tolerance, as `permutation_test`). With n pairs the smallest possible p is 2 / 2^n
  (`p_floor("paired", n)`): 0.25 for 3 pairs. Pairs with a zero difference count in n (they
  flip to themselves), so n is the number of pairs given.
  """
  d = np.asarray(diffs, np.float64).ravel()
  if d.size < 1:
    raise ValueError("sign_flip_test needs at least one pair")
  if not np.all(np.isfinite(d)):
    raise ValueError(f"sign_flip_test needs finite differences; got {d.tolist()}")
  n = d.size
  obs = abs(d.mean())
  if 2 ** n <= max_exact:
    signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)  # every sign vector
    means = np.abs((signs * d).mean(axis=1))
    return float(np.mean(means >= obs - 1e-12))
  rng = np.random.default_rng(seed)
  signs = rng.choice(np.array([-1.0, 1.0]), size=(num_samples, n))
  means = np.abs((signs * d).mean(axis=1))
  return float((np.sum(means >= obs - 1e-12) + 1) / (num_samples + 1))


def bootstrap_ci_paired(diffs, level=0.95, num_samples=20_000, seed=0):
  """Percentile bootstrap interval of mean(diffs), resampling the pairs."""
  d = np.asarray(diffs, np.float64)
  rng = np.random.default_rng(seed)
  m = d[rng.integers(0, d.size, (num_samples, d.size))].mean(axis=1)
  lo, hi = np.quantile(m, [(1 - level) / 2, (1 + level) / 2])
  return float(lo), float(hi)


def paired_compare(after, before):
  """Before / after on the same units: `after[i]` and `before[i]` are one unit (a model seed,
  a probe seed, an input set) measured twice.

  Returns {mean_a, mean_b, diff (mean of after - before), p_value (two-sided sign flip,
  exact up to 20 pairs), p_floor (the smallest p these n pairs can give), n, n_up, n_down,
  test: "paired sign flip", ci95 (bootstrap over the pairs; None at n < MIN_CI_N, where
  it resamples too few distinct means to mean anything)}.
  """
  a, b = np.asarray(after, np.float64), np.asarray(before, np.float64)
  if a.shape != b.shape or a.ndim != 1:
    raise ValueError(f"paired_compare needs two equal-length lists; got {a.shape}, {b.shape}")
  d = a - b
  n = int(d.size)
  return {"mean_a": float(a.mean()), "mean_b": float(b.mean()), "diff": float(d.mean()),
          "p_value": sign_flip_test(d), "p_floor": p_floor("paired", n), "n": n,
          "n_up": int(np.sum(d > 0)), "n_down": int(np.sum(d < 0)), "test": "paired sign flip",
          "ci95": list(bootstrap_ci_paired(d)) if n >= MIN_CI_N else None}


def p_floor(design, n_a, n_b=None, m=1):
  """The smallest two-sided p-value a design can give (with distinct values), Holm-adjusted
  over a family of `m` such tests (`holm` multiplies the smallest p by m).

  design "unpaired": `permutation_test` of n_a against n_b values: 2 / C(n_a + n_b, n_a)
         when n_a = n_b (the extreme split and its mirror), else 1 / C(n_a + n_b, n_a)
         (3 vs 3: 0.1; 5 vs 5: 0.0079; 10 vs 10: 1.1e-5);
  design "paired": `sign_flip_test` of n_a pairs: 2 / 2^n_a (3 pairs: 0.25; 5: 0.0625).
  """
  if design == "unpaired":
    if n_b is None:
      raise ValueError("p_floor('unpaired', n_a, n_b) needs both group sizes")
    splits = math.comb(n_a + n_b, n_a)
    floor = (2 if n_a == n_b else 1) / splits
  elif design == "paired":
    floor = 2 / 2 ** n_a
  else:
    raise ValueError(f"unknown design {design!r}: 'unpaired' or 'paired'")
  return min(1.0, m * floor)


def at_floor(p, floor, rtol=1e-6):
  """Whether a p-value sits at (or below, by rounding) the floor of its design."""
  return float(p) <= float(floor) * (1 + rtol)


def trend_slope(xs, a_by_point, b_by_point, log=True, level=0.95, num_samples=20_000,
                seed=0):
  """The scale-trend test: the least-squares slope of d_j = mean(a_j) - mean(b_j) against
  log(x_j) (x_j itself with log=False) over the points j, with a percentile bootstrap
  interval that resamples each arm's seeds at each point independently (the seeds are the
  only randomness; the points are fixed by design).

  `a_by_point[j]`, `b_by_point[j]`: the per-seed values of the two arms at point j. Returns
  {slope, ci95, diffs (d_j), x (the regressor), n_points, n_seeds_min, decided (the interval
  excludes 0), sign (+1 / -1 / 0: the interval's side of 0)}. Needs >= 3 points (a line
  through 2 points has no residual, so nothing to test it against) and distinct x.
  """
  x = np.asarray(xs, np.float64)
  if x.size < TREND_MIN_POINTS or len(a_by_point) != x.size or len(b_by_point) != x.size:
    raise ValueError(f"trend_slope needs >= {TREND_MIN_POINTS} points with both arms at each; "
                     f"got {x.size}")
  if np.any(x <= 0) and log:
    raise ValueError("trend_slope(log=True) needs positive x")
  t = np.log(x) if log else x
  if np.ptp(t) == 0:
    raise ValueError("trend_slope needs distinct x")
  tc = t - t.mean()
  denom = float(np.sum(tc * tc))
  arms = [[np.asarray(v, np.float64) for v in arm] for arm in (a_by_point, b_by_point)]
  d = np.array([a.mean() - b.mean() for a, b in zip(*arms)])
  slope = float(np.sum(tc * d) / denom)
  rng = np.random.default_rng(seed)
  boot = np.zeros((num_samples, x.size))
  for j in range(x.size):
    a, b = arms[0][j], arms[1][j]
    boot[:, j] = (a[rng.integers(0, a.size, (num_samples, a.size))].mean(axis=1)
                  - b[rng.integers(0, b.size, (num_samples, b.size))].mean(axis=1))
  slopes = (boot * tc).sum(axis=1) / denom
  lo, hi = (float(q) for q in np.quantile(slopes, [(1 - level) / 2, (1 + level) / 2]))
  sign = 1 if lo > 0 else -1 if hi < 0 else 0
  return {"slope": slope, "ci95": [lo, hi], "diffs": d.tolist(), "x": t.tolist(),
          "n_points": int(x.size),
          "n_seeds_min": int(min(v.size for arm in arms for v in arm)),
          "decided": sign != 0, "sign": sign}


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


def vs_random_init(trained, sanity):
  """{task: the trained models' probe against the random init's}: `trained` is {key: point}
  with the same keys as each task's sanity["random_init"] (model seeds, or sizes). One model:
  over its probe seeds (`compare`, unpaired: say whether this model beats its own init);
  several: over the models (one mean per model), each paired with its own init (the same key:
  before / after on one model, so `paired_compare`, a sign flip whose floor is 2 / 2^n:
  0.5 for 2 models, 0.25 for 3). Not in the Holm family of the comparison: a sanity check that
  the probe sees the model (issue 34)."""
  out = {}
  for task, row in sanity.items():
    keys = [k for k in row["random_init"] if k in trained]
    if len(keys) == 1:
      c = compare(trained[keys[0]]["probe"][task]["test_acc"],
                  row["random_init"][keys[0]]["test_acc"])
      over = "probe seeds of one model"
    else:
      c = paired_compare([trained[k]["probe"][task]["test_acc_mean"] for k in keys],
                         [row["random_init"][k]["test_acc_mean"] for k in keys])
      over = "models and their own inits"
    out[task] = {**c, "keys": keys, "over": over,
                 "trained_above_random_in": int(sum(
                     trained[k]["probe"][task]["test_acc_mean"]
                     > row["random_init"][k]["test_acc_mean"] for k in keys))}
  return out


def family(pairs, paired=False):
  """A family of comparisons, Holm-adjusted together.

  `pairs`: [(a, values_a, b, values_b)], a the treatment and b the baseline (labels, and
  their per-unit values). Unpaired (`paired=False`): `compare` (two-sided permutation p,
  bootstrap interval) with the floor of n_a vs n_b; paired: `paired_compare` (values_a[i] and
  values_b[i] one unit: sign flip p, floor 2 / 2^n, no interval at n < MIN_CI_N). Returns
  [{"a", "b", **the comparison, "p_floor", "p_holm"}] in the order given, `p_holm` the
  Holm-adjusted p over the family (`holm`).
  """
  out = []
  for a, va, b, vb in pairs:
    if paired:
      c = paired_compare(va, vb)
    else:
      c = compare(va, vb)
      c["p_floor"] = p_floor("unpaired", c["n_a"], c["n_b"])
    out.append({"a": a, "b": b, **c})
  for c, q in zip(out, holm([c["p_value"] for c in out])):
    c["p_holm"] = q
  return out


def select(scores):
  """The validation selection: the key of `scores` ({candidate: mean validation metric}, in
  the order the candidates were declared) with the highest score, the first listed on a tie."""
  if not scores:
    raise ValueError("select needs at least one candidate")
  keys = list(scores)
  return keys[max(range(len(keys)), key=lambda i: (scores[keys[i]], -i))]


def select_rows(rows, metric, name=lambda r: r["label"]):
  """`select` over grid rows by the mean of `metric` (`row["aggregate"][metric]["mean"]`):
  (the chosen row, {name(row): mean} of every candidate)."""
  scores = {name(r): r["aggregate"][metric]["mean"] for r in rows}
  best = select(scores)
  return next(r for r in rows if name(r) == best), scores
