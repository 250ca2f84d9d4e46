"""el_jax.report.stats: the paired sign-flip test, the floors of each design, the scale-trend slope.

Each is checked against an independent NumPy computation (every sign vector enumerated with
itertools.product; the least-squares slope by np.polyfit) and against the designs' floors
quoted on the results pages (3 vs 3 unpaired: 0.1; Holm over 3 of those: 0.3; 3 pairs: 0.25).
"""
import itertools
import math

import numpy as np
import pytest

from el_jax.report import stats


def _sign_flip_enumerated(d):
  """Independent reference: every sign vector, built by itertools.product."""
  d = np.asarray(d, np.float64)
  obs = abs(d.mean())
  count = total = 0
  for signs in itertools.product((-1.0, 1.0), repeat=d.size):
    total += 1
    count += abs(np.dot(signs, d) / d.size) >= obs - 1e-12
  return count / total


@pytest.mark.parametrize("d", [[1.0, 2.0, 3.0], [0.5, -0.2, 0.1, 0.3], [3.7, 19.8, 0.6],
                               [-1.0, -2.0, 0.5, -0.25, -3.0, 1.5], [0.0, 0.0, 1.0],
                               list(np.linspace(-1, 2, 9))])
def test_sign_flip_matches_enumeration(d):
  assert stats.sign_flip_test(d) == pytest.approx(_sign_flip_enumerated(d), abs=1e-12)


def test_sign_flip_sampled_close_to_exact():
  rng = np.random.default_rng(1)
  d = rng.normal(0.3, 1.0, 14)
  exact = stats.sign_flip_test(d)
  sampled = stats.sign_flip_test(d, max_exact=1000, num_samples=15_000, seed=3)  # < 2^14
  assert sampled != exact and abs(sampled - exact) < 0.01
  assert sampled > 0


def test_sign_flip_rejects_bad_input():
  with pytest.raises(ValueError):
    stats.sign_flip_test([])
  with pytest.raises(ValueError):
    stats.sign_flip_test([1.0, float("nan")])


def test_floors_are_what_the_tests_give():
  # 3 models each up: the paired test cannot go below 2 / 2^3.
  assert stats.p_floor("paired", 3) == 0.25
  assert stats.sign_flip_test([1.0, 2.0, 3.0]) == pytest.approx(0.25)
  # 3 vs 3 unpaired, fully separated: 2 / C(6, 3).
  assert stats.p_floor("unpaired", 3, 3) == pytest.approx(0.1)
  assert stats.permutation_test([4, 5, 6], [1, 2, 3]) == pytest.approx(0.1)
  # 5 vs 5 and 10 vs 10 (the demo's 1.1e-05).
  assert stats.p_floor("unpaired", 5, 5) == pytest.approx(2 / 252)
  assert stats.permutation_test([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(2 / 252)
  assert stats.p_floor("unpaired", 10, 10) == pytest.approx(2 / math.comb(20, 10))
  # Unequal sizes: the mirror split is not a split of the same sizes.
  assert stats.p_floor("unpaired", 2, 3) == pytest.approx(0.1)
  assert stats.permutation_test([10, 11], [0, 1, 2]) == pytest.approx(0.1)
  # Holm over three tests each at the 3 vs 3 floor: 0.3.
  assert stats.p_floor("unpaired", 3, 3, m=3) == pytest.approx(0.3)
  assert min(stats.holm([0.1, 0.1, 0.1])) == pytest.approx(stats.p_floor("unpaired", 3, 3, m=3))
  assert stats.p_floor("paired", 1, m=5) == 1.0
  with pytest.raises(ValueError):
    stats.p_floor("unpaired", 3)
  with pytest.raises(ValueError):
    stats.p_floor("welch", 3, 3)


def test_at_floor():
  assert stats.at_floor(0.1, stats.p_floor("unpaired", 3, 3))
  assert stats.at_floor(0.30000000000000004, stats.p_floor("unpaired", 3, 3, m=3))
  assert not stats.at_floor(0.2, 0.1)


def test_paired_compare():
  before, after = [172.0, 170.5, 173.7], [191.9, 190.0, 193.6]
  c = stats.paired_compare(after, before)
  assert c["diff"] == pytest.approx(np.mean(np.subtract(after, before)))
  assert c["p_value"] == pytest.approx(0.25) and c["p_floor"] == 0.25
  assert (c["n"], c["n_up"], c["n_down"]) == (3, 3, 0)
  assert c["ci95"] is None  # 3 pairs: no interval
  c5 = stats.paired_compare([1.0, 2.0, 3.5, 4.0, 6.0], [0.5, 1.0, 3.0, 3.0, 5.5])
  assert c5["ci95"] is not None and c5["ci95"][0] <= c5["diff"] <= c5["ci95"][1]
  assert c5["p_value"] == pytest.approx(_sign_flip_enumerated([0.5, 1.0, 0.5, 1.0, 0.5]))
  with pytest.raises(ValueError):
    stats.paired_compare([1.0, 2.0], [1.0])


def test_paired_is_more_powerful_than_unpaired_when_units_differ():
  # Three models far apart, each moved up by about 1: unpaired sees the spread between
  # models, paired sees only the changes.
  before = np.array([10.0, 20.0, 30.0])
  after = before + np.array([1.0, 1.2, 0.9])
  assert stats.permutation_test(after, before) > 0.5
  assert stats.paired_compare(after, before)["p_value"] == pytest.approx(0.25)


def test_trend_slope_matches_polyfit_and_detects_a_trend():
  rng = np.random.default_rng(0)
  xs = [55, 110, 220, 440]
  truth = [0.4, 0.25, 0.1, -0.05]  # the gain falls with log x
  b = [rng.normal(0.3, 0.02, 5) for _ in xs]
  a = [bj + t + rng.normal(0, 0.02, 5) for bj, t in zip(b, truth)]
  r = stats.trend_slope(xs, a, b)
  means = [aj.mean() - bj.mean() for aj, bj in zip(a, b)]
  assert r["slope"] == pytest.approx(np.polyfit(np.log(xs), means, 1)[0], rel=1e-12)
  assert r["diffs"] == pytest.approx(means)
  assert r["ci95"][0] <= r["slope"] <= r["ci95"][1]
  assert r["decided"] and r["sign"] == -1
  assert (r["n_points"], r["n_seeds_min"]) == (4, 5)
  assert r == stats.trend_slope(xs, a, b)  # fixed seed: the same interval every time


def test_trend_slope_flat_is_undecided_and_needs_three_points():
  rng = np.random.default_rng(2)
  xs = [1, 2, 4]
  a = [rng.normal(0.5, 0.1, 5) for _ in xs]
  b = [rng.normal(0.5, 0.1, 5) for _ in xs]
  r = stats.trend_slope(xs, a, b)
  assert not r["decided"] and r["sign"] == 0
  with pytest.raises(ValueError):
    stats.trend_slope([1, 2], a[:2], b[:2])
  with pytest.raises(ValueError):
    stats.trend_slope([1, 1, 1], a, b)
  lin = stats.trend_slope([1.0, 2.0, 3.0], [[1.0], [2.0], [3.0]], [[0.0], [0.0], [0.0]],
                          log=False)
  assert lin["slope"] == pytest.approx(1.0)


def test_one_value_a_side_is_el_jax_own_enumeration():
  """SciPy permutes and resamples only samples of two or more: one seed against several (a
  notebook's single-seed run), or one pair, is enumerated by el_jax itself, the same count."""
  assert stats.permutation_test([1.0], [0.0, 0.5, 2.0]) == 1.0  # every split as far out
  assert stats.permutation_test([3.0], [0.0, 0.5, 2.0]) == 0.25
  assert stats.sign_flip_test([0.7]) == 1.0
  c = stats.compare([0.5], [0.1, 0.2])
  assert c["ci95"][0] <= c["ci95"][1] and c["p_value"] == pytest.approx(1 / 3)
