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
import scipy.stats


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


# Two computations are SciPy's: the sampled permutation tests' splits (or sign vectors) and
# the statistic over each (`scipy.stats.permutation_test`; the exact tests enumerate the same
# splits here, an order of magnitude faster), and the bootstrap's resamples and the statistic
# over each (`scipy.stats.bootstrap`: the same Generator, seeded with `seed`, drawn in the
# same order as el_jax drew them). Two definitions stay el_jax's, where SciPy's own
# p-value and interval differ from every committed number (docs/testing.md, "Statistics
# through SciPy", says by how much on the committed comparisons):
# * the p-value counts a split as extreme when |statistic| >= |observed| - TIE (absolute).
#   SciPy's two-sided p doubles the smaller one-sided p and takes a split as tied with the
#   observed one within 100 machine epsilons of it (relative); splits of discrete values
#   (exact matches over k strings) that tie in exact arithmetic differ by more than that in
#   floating point, and SciPy's p leaves them out: 5 committed p-values would fall (0.0952
#   to 0.0794 for 5 vs 5 seeds; 0.896 to 0.8958 for 10 vs 10);
# * the interval is the `np.quantile` of the bootstrap distribution at (1 -+ level) / 2.
#   SciPy takes its percentiles at 100 alpha and 100 (1 - alpha), which round differently:
#   its ends differ from these in the last bits (at most 4e-16 relative on the committed
#   comparisons), which would move every committed interval recomputed exactly.
TIE = 1e-12


def _mean_diff(x, y, axis=-1):
  return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _mean(x, axis=-1):
  return np.mean(x, axis=axis)


def _extreme_fraction(null, observed, exact):
  """el_jax's two-sided p over SciPy's null distribution (above): the fraction of the
  statistics with |statistic| >= observed - TIE; sampled (not `exact`), the observed split
  counts too, so p > 0."""
  hits = int(np.sum(np.abs(np.asarray(null, np.float64)) >= observed - TIE))
  if exact:
    return float(hits / np.size(null))
  return float((hits + 1) / (np.size(null) + 1))


def _split_null(a, b):
  """The mean difference over every split of the pooled values into groups of len(a) and
  len(b): the exact null distribution (NumPy; the splits `scipy.stats.permutation_test`
  enumerates in its exact mode, in another order)."""
  pooled = np.concatenate([a, b])
  idx = np.array(list(itertools.combinations(range(pooled.size), a.size)), np.int64)
  sa = pooled[idx].sum(axis=1)
  return sa / a.size - (pooled.sum() - sa) / b.size


def permutation_test(a, b, max_exact=200_000, num_samples=100_000, seed=0, scipy_result=False):
  """Two-sided permutation test of mean(a) = mean(b); returns the p-value.

  Exact (every split of the pooled values into groups of len(a) and len(b)) when there are
  at most `max_exact` (or `num_samples`) splits, else `num_samples` random splits drawn by
  `scipy.stats.permutation_test` ("independent"; fixed `seed`; the observed split is
  counted, so p > 0). A split counts as extreme when |mean difference| >= the observed one
  (with a 1e-12 tolerance, `TIE`; SciPy's own p misses ties, above). The exact splits are
  enumerated here: the same splits as SciPy's exact mode, which is an order of magnitude
  slower for 10 vs 10 seeds (its statistic is called on every split; the counts are equal,
  tests/test_stats_scipy.py). `scipy_result`: returns (p, SciPy's PermutationTestResult of
  the same splits) instead.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.size < 1 or b.size < 1:
    raise ValueError(f"permutation_test needs values in both groups (got {a.size}, {b.size})")
  splits = math.comb(a.size + b.size, a.size)
  exact = splits <= max_exact or splits <= num_samples  # (SciPy enumerates them all then)
  res = None
  if min(a.size, b.size) >= 2 and (scipy_result or not exact):
    res = scipy.stats.permutation_test(
        (a, b), _mean_diff, permutation_type="independent", vectorized=True,
        n_resamples=np.inf if exact else num_samples, alternative="two-sided", rng=seed)
  if exact:  # (SciPy permutes only samples of two or more: every split here then)
    null = _split_null(a, b)
  else:
    null = res.null_distribution
  p = _extreme_fraction(null, abs(a.mean() - b.mean()), exact)
  return (p, res) if scipy_result else p


def bootstrap_ci(a, b, level=0.95, num_samples=20_000, seed=0, scipy_result=False):
  """Percentile bootstrap interval of mean(a) - mean(b), resampling each group's seeds:
  `scipy.stats.bootstrap`'s resamples (rng=`seed`), el_jax's quantiles (above).
  `scipy_result`: returns ((lo, hi), SciPy's BootstrapResult) instead."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if min(a.size, b.size) < 2:  # SciPy resamples only samples of two or more
    rng = np.random.default_rng(seed)
    dist = (a[rng.integers(0, a.size, (num_samples, a.size))].mean(axis=1)
            - b[rng.integers(0, b.size, (num_samples, b.size))].mean(axis=1))
    res = None
  else:
    res = scipy.stats.bootstrap((a, b), _mean_diff, vectorized=True, paired=False,
                                n_resamples=num_samples, confidence_level=level,
                                method="percentile", rng=seed)
    dist = res.bootstrap_distribution
  ci = _quantiles(dist, level)
  return (ci, res) if scipy_result else ci


def _quantiles(dist, level):
  lo, hi = np.quantile(dist, [(1 - level) / 2, (1 + level) / 2])
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


def sign_flip_test(diffs, max_exact=1 << 20, num_samples=100_000, seed=0, scipy_result=False):
  """Two-sided paired sign-flip permutation test of mean(diffs) = 0; returns the p-value.

  Under the null each pair's difference is as likely to have either sign, so the reference
  distribution is that of |mean(s * diffs)| over every sign vector s in {-1, +1}^n: exact
  (all 2^n of them) when 2^n <= `max_exact` (or `num_samples`), else `num_samples` random
  ones (fixed `seed`;
  the observed signs are counted, so p > 0). Extreme: |mean| >= the observed one (1e-12
  tolerance, as `permutation_test`). With n pairs the smallest possible p is 2 / 2^n
  (`p_floor("paired", n)`): 0.25 for 3 pairs. Pairs with a zero difference count in n (they
  flip to themselves), so n is the number of pairs given. Sampled sign vectors are
  `scipy.stats.permutation_test`'s ("samples" on one sample flips signs); the exact ones are
  enumerated here (as in `permutation_test`); the count is el_jax's (above). `scipy_result`:
  returns (p, SciPy's PermutationTestResult of the same sign vectors) instead.
  """
  d = np.asarray(diffs, np.float64).ravel()
  if d.size < 1:
    raise ValueError("sign_flip_test needs at least one pair")
  if not np.all(np.isfinite(d)):
    raise ValueError(f"sign_flip_test needs finite differences; got {d.tolist()}")
  exact = 2 ** d.size <= max(max_exact, num_samples)  # (SciPy enumerates them all then)
  res = None
  if d.size >= 2 and (scipy_result or not exact):
    res = scipy.stats.permutation_test(
        (d,), _mean, permutation_type="samples", vectorized=True,
        n_resamples=np.inf if exact else num_samples, alternative="two-sided", rng=seed)
  if exact:  # every sign vector, enumerated here (SciPy flips samples of two or more)
    signs = 1 - 2 * ((np.arange(2 ** d.size)[:, None] >> np.arange(d.size)) & 1)
    null = (signs * d).mean(axis=1)
  else:
    null = res.null_distribution
  p = _extreme_fraction(null, abs(d.mean()), exact)
  return (p, res) if scipy_result else p


def bootstrap_ci_paired(diffs, level=0.95, num_samples=20_000, seed=0, scipy_result=False):
  """Percentile bootstrap interval of mean(diffs), resampling the pairs: SciPy's resamples,
  el_jax's quantiles (as `bootstrap_ci`)."""
  d = np.asarray(diffs, np.float64)
  if d.size < 2:  # SciPy resamples only samples of two or more
    rng = np.random.default_rng(seed)
    dist, res = d[rng.integers(0, d.size, (num_samples, d.size))].mean(axis=1), None
  else:
    res = scipy.stats.bootstrap((d,), _mean, vectorized=True, n_resamples=num_samples,
                                confidence_level=level, method="percentile", rng=seed)
    dist = res.bootstrap_distribution
  ci = _quantiles(dist, level)
  return (ci, res) if scipy_result else ci


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
  samples = [v for pair in zip(*arms) for v in pair]  # a_0, b_0, a_1, b_1, ...

  def slope_of(*values, axis=-1):
    d = np.stack([np.mean(values[2 * j], axis=axis) - np.mean(values[2 * j + 1], axis=axis)
                  for j in range(x.size)], axis=-1)
    return (d * tc).sum(axis=-1) / denom

  if min(v.size for v in samples) >= 2:  # SciPy's resamples, el_jax's quantiles (above)
    slopes = scipy.stats.bootstrap(samples, slope_of, vectorized=True, paired=False,
                                   n_resamples=num_samples, confidence_level=level,
                                   method="percentile", rng=seed).bootstrap_distribution
  else:  # SciPy resamples only samples of two or more: the same draws, drawn here
    rng = np.random.default_rng(seed)
    slopes = slope_of(*(v[rng.integers(0, v.size, (num_samples, v.size))] for v in samples))
  lo, hi = _quantiles(slopes, level)
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
  the probe sees the model."""
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
