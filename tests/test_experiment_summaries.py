"""Numbers the experiment scripts add to their JSON beside the trained metrics."""
import importlib.util
import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "experiments",
                                                                    f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_train_ce_summary_is_the_seed_mean_over_each_window(tmp_path):
  rng = np.random.default_rng(0)
  steps = np.arange(25, 1001, 25)
  ce = {(s, k): rng.random(len(steps)) for s in (0, 1, 2) for k in ("ce_hard", "ce_easy")}
  with open(tmp_path / "metrics.jsonl", "w") as f:
    for s in (0, 1, 2):
      for i, t in enumerate(steps):
        f.write(json.dumps({"seed": s, "step": int(t), "kind": "train",
                            "ce_hard": ce[s, "ce_hard"][i], "ce_easy": ce[s, "ce_easy"][i]}) + "\n")
        f.write(json.dumps({"seed": s, "step": int(t), "kind": "eval", "ce_hard": 99.0}) + "\n")
  got = _script("path_star_table1").train_ce_summary(str(tmp_path), 1000)
  for key, group in (("ce_hard", "decision"), ("ce_easy", "other_tokens")):
    both = np.mean([ce[s, key] for s in (0, 1, 2)], axis=0)
    np.testing.assert_allclose(got[group]["end"], both[steps > 900].mean(), rtol=1e-12)
    np.testing.assert_allclose(got[group]["end_minus_500"],
                               both[(steps > 400) & (steps <= 500)].mean(), rtol=1e-12)
  assert _script("path_star_table1").train_ce_summary(str(tmp_path / "gone"), 1000) is None


def test_data_coverage_counts_easy_test_letters_seen_in_training():
  from el_jax import train
  from el_jax.demo import make_config
  suite = _script("copy_task_suite")
  for lo in ({}, {"data.num_letters": 500, "data.num_train": 800}):
    got = suite.data_coverage(lo)
    cfg = make_config("cpu", lo, [0])
    tr, te = train._datasets(train.task_spec(cfg), cfg.data.num_train, cfg.data.num_test,
                             cfg.data.data_seed)
    seen = {tuple(a) for a, e in zip(tr.answers.tolist(), tr.easy) if e}
    want = np.mean([tuple(a) in seen for a, e in zip(te.answers.tolist(), te.easy) if e])
    assert got == {"test_easy_seen_in_train": want, "train_num_easy": int(tr.easy.sum())}
  assert suite.data_coverage({})["test_easy_seen_in_train"] == 1.0  # 26 letters, 320 strings
  assert suite.data_coverage(lo)["test_easy_seen_in_train"] < 0.8  # 500 letters, 641 strings
