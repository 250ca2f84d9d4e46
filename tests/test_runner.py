"""el_jax.run.runner: configs by name, overrides, run-or-reuse, result rows, statistics over seeds."""
import itertools
import json

import numpy as np
import pytest
import scipy.stats

from el_jax.run import job
from el_jax.run import runner
from el_jax.run import config as config_lib
from el_jax.report import stats


def test_get_config_by_name_and_path_with_overrides():
  a = config_lib.get_config("copy_task", "test", {"loss.name": "e1", "seeds": (3, 4)})
  b = config_lib.get_config(config_lib.config_path("copy_task"), "test")
  assert a.loss.name == "e1" and tuple(a.seeds) == (3, 4) and b.loss.name == "ce"
  with pytest.raises(ValueError, match=r"unknown config key 'loss.bogus'"):
    config_lib.get_config("copy_task", "test", {"loss.bogus": 1})
  with pytest.raises(ValueError, match=r"could not load config .*nope\.py: no such file; "
                                       r"configs in .*'copy_task'.*'path_star'"):
    config_lib.get_config("nope", "test")


def test_configs_folder_from_the_environment(tmp_path, monkeypatch):
  (tmp_path / "mine.py").write_text(
      "import ml_collections\n"
      "def get_config(arg=None):\n"
      "  return ml_collections.ConfigDict({'task': 'x', 'v': arg})\n")
  monkeypatch.setenv("EL_JAX_CONFIGS", str(tmp_path))
  assert config_lib.get_config("mine", "q").v == "q"


def test_parse_sets():
  assert config_lib.parse_sets(["a.b=3", "c=x", "d=(1, 2)"]) == {"a.b": 3, "c": "x", "d": (1, 2)}
  with pytest.raises(SystemExit, match="not key=value"):
    config_lib.parse_sets(["a.b"])


def _exact_p(a, b):
  """Independent two-sided exact permutation p-value (plain loops over all splits)."""
  pooled = list(a) + list(b)
  obs = abs(np.mean(a) - np.mean(b))
  n, hits, total = len(a), 0, 0
  for idx in itertools.combinations(range(len(pooled)), n):
    ga = [pooled[i] for i in idx]
    gb = [pooled[i] for i in range(len(pooled)) if i not in idx]
    total += 1
    hits += abs(np.mean(ga) - np.mean(gb)) >= obs - 1e-12
  return hits / total


@pytest.mark.parametrize("seed", range(4))
def test_permutation_test_exact_against_enumeration_and_scipy(seed):
  rng = np.random.default_rng(seed)
  a, b = rng.normal(0.3 * seed, 1, 5), rng.normal(0, 1, 6)
  p = stats.permutation_test(a, b)
  assert p == pytest.approx(_exact_p(a, b), abs=1e-12)
  # Two-sided as |mean difference| >= the observed one (scipy's "two-sided" doubles a
  # one-sided p-value instead, which differs for unequal group sizes).
  ref = scipy.stats.permutation_test(
      (a, b), lambda x, y: np.abs(np.mean(x) - np.mean(y)), permutation_type="independent",
      alternative="greater", n_resamples=np.inf).pvalue
  assert p == pytest.approx(ref, abs=1e-9)


def test_permutation_test_extremes_and_sampled_branch():
  # 10 vs 10 fully separated seeds: the two most extreme of C(20, 10) splits.
  a, b = np.arange(10) + 100.0, np.arange(10.0)
  assert stats.permutation_test(a, b) == pytest.approx(2 / 184756)
  assert stats.permutation_test(b, b.copy()) == 1.0
  # The sampled branch agrees with the exact one within its Monte Carlo error.
  rng = np.random.default_rng(7)
  x, y = rng.normal(0.8, 1, 8), rng.normal(0, 1, 8)
  exact = stats.permutation_test(x, y)
  mc = stats.permutation_test(x, y, max_exact=10, num_samples=10_000)  # < C(16, 8) splits
  assert mc != exact and abs(mc - exact) < 5 * np.sqrt(exact * (1 - exact) / 10_000) + 1e-4
  with pytest.raises(ValueError, match="needs values in both groups"):
    stats.permutation_test([], [1.0])


def test_permutation_test_is_calibrated_under_the_null():
  """Under equal distributions P(p <= 0.1) is at most 0.1 (up to sampling error)."""
  rng = np.random.default_rng(0)
  ps = np.array([stats.permutation_test(rng.normal(size=5), rng.normal(size=5))
                 for _ in range(400)])
  rate = np.mean(ps <= 0.1)
  assert rate <= 0.1 + 3 * np.sqrt(0.1 * 0.9 / 400)


def test_bootstrap_interval_covers_the_true_difference():
  """Over fixed seeds the 95% interval covers the true mean difference (1.0) about 95% of the
  time; with 5 seeds per group the percentile bootstrap undercovers somewhat, so >= 80%."""
  rng = np.random.default_rng(1)
  hits = 0
  for _ in range(200):
    lo, hi = stats.bootstrap_ci(rng.normal(1, 1, 10), rng.normal(0, 1, 10), num_samples=2000)
    hits += lo <= 1.0 <= hi
  assert hits / 200 >= 0.85


def test_aggregate_and_compare_against_numpy():
  per_seed = [{"seed": s, "step": 9, "x": float(v), "n": 3, "maybe": m}
              for s, (v, m) in enumerate([(0.1, 1.0), (0.5, None), (0.3, 2.0)])]
  agg = stats.aggregate(per_seed)
  assert set(agg) == {"x", "maybe"}  # floats only
  v = np.array([0.1, 0.5, 0.3])
  assert agg["x"] == pytest.approx({"mean": v.mean(), "min": 0.1, "max": 0.5,
                                    "std": v.std(ddof=1), "n": 3})
  assert agg["maybe"]["n"] == 2 and agg["maybe"]["mean"] == 1.5
  c = stats.compare([1.0, 2.0, 3.0], [0.0, 0.5])
  assert c["diff"] == pytest.approx(2.0 - 0.25) and c["n_a"] == 3 and c["n_b"] == 2
  assert c["ci95"][0] <= c["diff"] <= c["ci95"][1]
  assert c["p_value"] == pytest.approx(_exact_p([1.0, 2.0, 3.0], [0.0, 0.5]))


def _holm_rejects(p, alpha):
  """Holm's step-down procedure itself: walk the sorted p-values, reject while
  p_(j) <= alpha / (m - j + 1), stop at the first that is not."""
  rejected, m = set(), len(p)
  for j, i in enumerate(sorted(range(m), key=lambda i: (p[i], i))):
    if p[i] > alpha / (m - j):
      break
    rejected.add(i)
  return rejected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_holm_adjusted_p_values_reject_as_the_step_down_procedure(seed):
  rng = np.random.default_rng(seed)
  p = np.concatenate([rng.uniform(0, 0.05, 4), rng.uniform(0, 1, 8), [0.02, 0.02]]).tolist()
  adj = stats.holm(p)
  for alpha in np.linspace(0.001, 0.999, 400):  # adjusted p is capped at 1
    assert {i for i, a in enumerate(adj) if a <= alpha} == _holm_rejects(p, alpha), alpha
  assert all(a >= q for a, q in zip(adj, p)) and max(adj) <= 1.0


def test_holm_known_values_and_bad_input():
  assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  assert stats.holm([]) == [] and stats.holm([0.3]) == [0.3]
  with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
    stats.holm([0.1, 1.5])


def test_run_or_reuse_trains_once(tmp_path, monkeypatch):
  cfg = config_lib.get_config("copy_task", "test")
  cfg.progress = False
  first = runner.run_or_reuse(cfg, str(tmp_path))

  def forbidden(*a, **k):
    raise AssertionError("a finished run with the same config was retrained")

  monkeypatch.setattr(job, "train_and_evaluate", forbidden)
  assert runner.run_or_reuse(cfg, str(tmp_path), verbose=False) == first
  other = config_lib.get_config("copy_task", "test", {"seeds": (0, 1)})
  with pytest.raises(AssertionError, match="retrained"):  # other seeds: not reused
    runner.run_or_reuse(other, str(tmp_path), verbose=False)
  # Another evaluation cadence trains the same thing: read back, also from another folder.
  cadence = config_lib.get_config("copy_task", "test", {"train.eval_every": 0, "train.log_every": 1})
  assert runner.run_or_reuse(cadence, str(tmp_path / "new"), verbose=False,
                             reuse_from=runner.run_dirs(str(tmp_path))) == first
  lr = config_lib.get_config("copy_task", "test", {"optim.lr": 1e-2})
  with pytest.raises(AssertionError, match="retrained"):  # another optimizer: not reused
    runner.run_or_reuse(lr, str(tmp_path / "new"), verbose=False,
                        reuse_from=runner.run_dirs(str(tmp_path)))
  # A run adding seed 1 that was stopped: config.json (written at its start) names seeds
  # (0, 1), summary.json is still seed 0's. Not finished: seed 1 is trained, not read back.
  with open(tmp_path / "config.json") as fh:
    stored = json.load(fh)
  with open(tmp_path / "config.json", "w") as fh:
    json.dump({**stored, "seeds": [0, 1]}, fh)
  with pytest.raises(AssertionError, match="retrained"):
    runner.run_or_reuse(other, str(tmp_path), verbose=False)


def test_config_diff_ignores_fields_that_cannot_change_training():
  """Hyperparameters of other losses, the reweighting fields under the plain mean, the WSD
  fraction of another schedule and a disabled adversarial block (and such fields absent
  from a config written before they existed) are no difference; active ones are."""
  new = config_lib.flatten(config_lib.config_dict(config_lib.get_config("copy_task", "test")))
  assert new["loss.name"] == "ce"
  old = {k: v for k, v in new.items()
         if not k.startswith(("loss.label_smoothing.", "loss.z_loss.", "loss.focal.",
                              "loss.gce.", "loss.reduction", "optim.decay_frac"))}
  assert len(old) < len(new)
  assert config_lib.config_diff(old, new) == []
  # An unused loss's value is no difference, by construction: it lives under that loss.
  assert config_lib.config_diff(old, {**new, "loss.e1.lam": 7.0}) == []  # CE does not use lam
  assert config_lib.config_diff(old, {**new, "loss.name": "e1"}) == ["loss.name"]
  e1_old, e1_new = {**old, "loss.name": "e1"}, {**new, "loss.name": "e1", "loss.e1.lam": 7.0}
  assert config_lib.config_diff(e1_old, e1_new) == ["loss.e1.lam"]
  assert config_lib.config_diff(e1_old, {**e1_new, "loss.e1.lam": 1.0, "loss.e2.lam": 7.0,
                                     "loss.spectral_decoupling.lam": 7.0}) == []
  ls = {**new, "loss.name": "label_smoothing"}
  assert config_lib.config_diff({**old, "loss.name": "label_smoothing"}, ls) == ["loss.label_smoothing.eps"]
  assert config_lib.config_diff(old, {**new, "loss.reduction": "reweight"})[0] == "loss.reduction"
  assert config_lib.config_diff(old, {**new, "optim.decay": "wsd"}) == ["optim.decay",
                                                                     "optim.decay_frac"]
  assert config_lib.config_diff({**old, "adversarial.enabled": False, "adversarial.weight": 1.0},
                            new) == []
  assert config_lib.config_diff(old, {**new, "adversarial.enabled": True}) == ["adversarial.enabled"]
  assert new["train.cpu_dots"] == "xla"  # the default: inert, so also when absent
  no_dots = {k: v for k, v in new.items() if k != "train.cpu_dots"}
  assert config_lib.config_diff(no_dots, new) == []
  assert config_lib.config_diff(no_dots, {**new, "train.cpu_dots": "eigen"}) == ["train.cpu_dots"]
