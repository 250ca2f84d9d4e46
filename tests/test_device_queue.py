"""The device queue (experiments/device_queue.py) at test size on the CPU: runs arms, sizes them
by verify's measurements, collects returned files into per-job results with a test over model
seeds once each arm has 3, and the accelerator page renders them."""
import importlib.util
import math
import os
import shutil

import pytest

import shared_fixtures  # tests/shared_fixtures.py

from el_jax import report
from el_jax.report import stats
from el_jax.infra import workdir as wd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("device_queue",
                                               os.path.join(ROOT, "experiments", "device_queue.py"))
dq = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dq)


def test_arms_are_sized_by_the_measured_step_time():
  job = dq.job_by_name("copy_lc1")
  verify = {"parts": {"throughput": {
      "seeds": [{"model": "copy_task:paper_lc1", "mode": "vmap", "seed_steps_per_s": 500.0}],
      "rows": [{"model": "copy_task:paper_lc1", "dtype": "float32", "all_positions": False,
                "step_s": 0.003}]}}}
  assert dq.seed_step_s(job, verify) == pytest.approx(0.002)  # the stacked rate wins
  del verify["parts"]["throughput"]["seeds"]
  assert dq.seed_step_s(job, verify) == 0.003  # else one seed's step time
  assert dq.seed_step_s(job, None) is None
  # 20,000 steps at 2 ms per seed-step, 20% safety: 48 s per seed; 60 s per arm overhead.
  # 2 arms in 400 s: (400 - 120) // (2 * 48) = 2 seeds each; 1 arm in 400 s: 7 -> capped at 5.
  assert dq.seeds_that_fit(job, 5, 2, 400, 0.002, 20_000, "paper") == 2
  assert dq.seeds_that_fit(job, 5, 1, 400, 0.002, 20_000, "paper") == 5
  assert dq.seeds_that_fit(job, 5, 2, 100, 0.002, 20_000, "paper") == 0


def test_arms_are_sized_by_what_the_collected_arms_took(tmp_path, capsys):
  """`measured_seed_s` reads the collected arms' wall time per seed on one device kind, and
  `run` trains no more seeds than it says fit (here none: 1000 s per seed, 600 s left)."""
  seed = {"test_em_hard": 0.5, "arm_seconds": 3000.0, "arm_seeds": 3,
          "ran_on": {"device_kind": "cpu"}}
  doc = {"job": "copy_lc1", "arms": {
      "ce": {"seeds": {"0": dict(seed), "1": {**seed, "arm_seconds": 95.0, "arm_seeds": 1,
                                             "ran_on": {"device_kind": "NVIDIA H200"}}}}}}
  assert dq.measured_seed_s(doc, "cpu") == 1000.0
  assert dq.measured_seed_s(doc, "NVIDIA H200") == 95.0
  assert dq.measured_seed_s(doc) == 1000.0 and dq.measured_seed_s(doc, "TPU v5") is None
  res = tmp_path / "results"
  res.mkdir()
  wd.write_json(dq.results_path(dq.job_by_name("copy_lc1"), str(res), "test"), doc)
  assert dq.run(600, str(tmp_path / "out"), "test", ["copy_lc1"], str(res)) == []
  err = capsys.readouterr().err
  assert "1000 s as the job's collected arms took on cpu: stopping" in err


def _run_and_collect(tmp):
  out, res = str(tmp / "out"), str(tmp / "results")
  files = dq.run(600, out, "test", ["copy_lc1"], res, max_seeds=3)
  report_ = dq.collect(files, res, "test")  # every test below sees the collected results
  return tmp, out, res, files, report_


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
  return shared_fixtures.once_per_session(tmp_path_factory, "device_queue_collected",
                                          _run_and_collect)


def test_run_trains_the_missing_seeds_of_each_arm(collected):
  _, out, res, files, _ = collected
  assert [os.path.basename(f).split(".")[:2] for f in files] == [["copy_lc1", "ce"],
                                                                 ["copy_lc1", "e1_warmup"]]
  doc = wd.read_json(files[1])
  assert doc["seeds"] == [0, 1, 2] and len(doc["per_seed"]) == 3 and doc["size"] == "test"
  assert doc["overrides"]["loss.name"] == "e1" and doc["overrides"]["train.vmap_seeds"] is True
  assert doc["ran_on"]["platform"] == "cpu" and doc["steps"] == 8
  assert all(0 <= f["test_em_hard"] <= 1 for f in doc["per_seed"])


def test_collect_merges_seeds_and_tests_once_each_arm_has_three(collected):
  _, out, res, files, rep = collected
  assert rep == {"copy_lc1": [("ce", [0, 1, 2]), ("e1_warmup", [0, 1, 2])]}
  doc = wd.read_json(dq.results_path(dq.job_by_name("copy_lc1"), res, "test"))
  arms = doc["arms"]
  assert {a: sorted(arms[a]["seeds"]) for a in arms} == {"ce": ["0", "1", "2"],
                                                         "e1_warmup": ["0", "1", "2"]}
  assert all(v["ran_on"]["platform"] == "cpu" for a in arms.values() for v in a["seeds"].values())
  a = [arms["e1_warmup"]["seeds"][s]["test_em_hard"] for s in "012"]
  b = [arms["ce"]["seeds"][s]["test_em_hard"] for s in "012"]
  (c,) = doc["comparisons"]
  want = stats.compare(a, b)
  assert (c["a"], c["b"], c["diff"], c["p_value"]) == ("e1_warmup", "ce", want["diff"],
                                                       want["p_value"])
  assert c["p_floor"] == pytest.approx(2 / math.comb(6, 3)) == pytest.approx(0.1)
  assert c["p_holm"] == c["p_value"]  # one comparison in the family
  # the same files again add nothing (the first measurement of a seed stands)
  assert dq.collect(files, res, "test") == {"copy_lc1": [("ce", []), ("e1_warmup", [])]}
  # the next run would train the two missing seeds of each arm
  assert dq.missing_seeds(dq.job_by_name("copy_lc1"), doc) == {"ce": [3, 4], "e1_warmup": [3, 4]}
  assert "copy_lc1       ce 3/5, e1_warmup 3/5" in dq.status(res, "test")


def test_collect_refuses_what_does_not_belong(collected, tmp_path):
  _, out, res, files, _ = collected
  bad = wd.read_json(files[0])
  bad["overrides"]["optim.lr"] = 1.0
  bad["seeds"], bad["per_seed"] = [4], bad["per_seed"][:1]
  p = str(tmp_path / "bad.json")
  wd.write_json(p, bad)
  with pytest.raises(ValueError, match="a changed arm is a new job"):
    dq.collect([p], res, "test")
  with pytest.raises(ValueError, match="of size 'test', not 'paper'"):
    dq.collect([files[0]], str(tmp_path / "r2"), "paper")
  with pytest.raises(ValueError, match="unknown job"):
    dq.job_by_name("nope")


def test_the_accelerator_page_shows_the_queue(collected, tmp_path):
  _, out, res, files, _ = collected
  root = tmp_path / "root"
  (root / "results" / "device_queue").mkdir(parents=True)
  shutil.copy(dq.results_path(dq.job_by_name("copy_lc1"), res, "test"),
              root / "results" / "device_queue" / "copy_lc1.json")
  R = report.Results(str(root))
  table = report.TABLES["device_queue"](R)
  assert "| copy_lc1 | ce | loss.name=ce | `test_em_hard` | 3 of 5 |" in table
  tests = report.TABLES["device_queue_tests"](R)
  assert "| copy_lc1 | e1_warmup - ce |" in tests and "0.1; Holm" in tests
  empty = report.Results(str(tmp_path / "none"))
  assert report.TABLES["device_queue"](empty).startswith("*Not yet run*")
  assert report.TABLES["accelerator_checks"](empty).startswith("*Not yet run*")
