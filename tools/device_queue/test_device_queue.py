"""tools/device_queue at test size on the CPU: arms sized by verify's measurements and by what
the collected arms took, `run` and `collect` through `python -m el_jax.experiment
--config=tools/device_queue/config.py:test` (the arm files, the merged seeds, the analysis's test
once each arm has 3), what does not belong refused, the command line's one-line errors, the
accelerator page's tables, and the paper-size copy task's sentences held to the committed
seeds."""
import glob
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

import shared_fixtures  # tests/shared_fixtures.py

from el_jax import experiment
from el_jax.infra import workdir as wd
from el_jax.report import render
from el_jax.report import sources
from el_jax.report import stats

from tools.device_queue import analysis
from tools.device_queue import config as config_file
from tools.device_queue import jobs
from tools.device_queue import queue as dq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_arms_are_sized_by_the_measured_step_time():
  job = jobs.job_by_name("copy_lc1")
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
  wd.write_json(dq.results_path(jobs.job_by_name("copy_lc1"), str(res), "test"), doc)
  assert dq.run(600, str(tmp_path / "out"), "test", ["copy_lc1"], str(res)) == []
  err = capsys.readouterr().err
  assert "1000 s as the job's collected arms took on cpu: stopping" in err


def _run_and_collect(tmp):
  """The test variant through the entry point: 3 seeds of each copy_lc1 arm trained, the arm
  files kept under <results>/arms/, collected and analysed."""
  res = tmp / "results"
  code = experiment.main(["el_jax.experiment",
                          f"--config={ROOT}/tools/device_queue/config.py:test",
                          f"--config.results_dir={res}"])
  assert code in (None, 0)
  files = sorted(glob.glob(str(res / "arms" / "*.json")),
                 key=lambda p: wd.read_json(p)["finished"] + wd.read_json(p)["arm"])
  return tmp, str(res), files


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
  return shared_fixtures.once_per_session(tmp_path_factory, "device_queue_collected",
                                          _run_and_collect)


def test_run_trains_the_missing_seeds_of_each_arm(collected):
  _, res, files = collected
  assert sorted(os.path.basename(f).split(".")[:2] for f in files) == [
      ["copy_lc1", "ce"], ["copy_lc1", "e1_warmup"]]
  doc = next(wd.read_json(f) for f in files if ".e1_warmup." in f)
  assert doc["seeds"] == [0, 1, 2] and len(doc["per_seed"]) == 3 and doc["size"] == "test"
  assert doc["overrides"]["loss.name"] == "e1" and doc["overrides"]["train.vmap_seeds"] is True
  assert doc["ran_on"]["platform"] == "cpu" and doc["steps"] == 8
  assert all(0 <= f["test_em_hard"] <= 1 for f in doc["per_seed"])


def test_collect_merges_seeds_and_the_analysis_tests_once_each_arm_has_three(collected):
  _, res, files = collected
  job = jobs.job_by_name("copy_lc1")
  doc = wd.read_json(dq.results_path(job, res, "test"))
  arms = doc["arms"]
  assert {a: sorted(arms[a]["seeds"]) for a in arms} == {"ce": ["0", "1", "2"],
                                                         "e1_warmup": ["0", "1", "2"]}
  assert all(v["ran_on"]["platform"] == "cpu" for a in arms.values() for v in a["seeds"].values())
  # the statistics are the analysis's: none in the collected file
  assert "comparisons" not in doc and not any({"n", "aggregate", "devices"} & set(a)
                                              for a in arms.values())
  assert doc["paper"] == {"ce": "s000.fig1a.ce_k1"}
  a = [arms["e1_warmup"]["seeds"][s]["test_em_hard"] for s in "012"]
  b = [arms["ce"]["seeds"][s]["test_em_hard"] for s in "012"]
  with open(os.path.join(res, "analysis.json")) as f:
    an = json.load(f)
  assert an["sources"] == [os.path.relpath(dq.results_path(job, res, "test"), ROOT)]
  (c,) = an["jobs"]["copy_lc1"]["comparisons"]
  want = stats.compare(a, b)
  assert (c["a"], c["b"], c["diff"], c["p_value"]) == ("e1_warmup", "ce", want["diff"],
                                                       want["p_value"])
  assert c["p_floor"] == pytest.approx(2 / math.comb(6, 3)) == pytest.approx(0.1)
  assert c["p_holm"] == c["p_value"]  # one comparison in the family
  assert an["jobs"]["copy_lc1"]["arms"]["ce"]["values"] == b
  # the same files again add nothing (the first measurement of a seed stands)
  tmp = os.path.join(os.path.dirname(res), "again")
  shutil.copytree(res, tmp)
  assert dq.collect(files, tmp, "test") == {"copy_lc1": [("ce", []), ("e1_warmup", [])]}
  # the next run would train the two missing seeds of each arm
  assert dq.missing_seeds(job, doc) == {"ce": [3, 4], "e1_warmup": [3, 4]}
  assert "copy_lc1       ce 3/5, e1_warmup 3/5" in dq.status(res, "test")


def test_an_arm_below_three_seeds_is_not_tested(collected, tmp_path):
  """With 2 seeds of E1 + warmup there is no comparison (the table says why)."""
  _, res, _ = collected
  job = jobs.job_by_name("copy_lc1")
  doc = wd.read_json(dq.results_path(job, res, "test"))
  del doc["arms"]["e1_warmup"]["seeds"]["2"]
  wd.write_json(dq.results_path(job, str(tmp_path), "test"), doc)
  a = analysis.analyze(sources.Sources(str(tmp_path), root=ROOT),
                       config_file.get_config("test"))
  j = a["jobs"]["copy_lc1"]
  assert j["comparisons"] == [] and j["arms"]["e1_warmup"]["n"] == 2


def test_collect_refuses_what_does_not_belong(collected, tmp_path):
  _, res, files = collected
  res2 = str(tmp_path / "r")
  shutil.copytree(res, res2)
  bad = wd.read_json(files[0])
  bad["overrides"]["optim.lr"] = 1.0
  bad["seeds"], bad["per_seed"] = [4], bad["per_seed"][:1]
  p = str(tmp_path / "bad.json")
  wd.write_json(p, bad)
  with pytest.raises(ValueError, match="a changed arm is a new job"):
    dq.collect([p], res2, "test")
  with pytest.raises(ValueError, match="of size 'test', not 'paper'"):
    dq.collect([files[0]], str(tmp_path / "r3"), "paper")
  with pytest.raises(ValueError, match="unknown job"):
    jobs.job_by_name("nope")


def test_the_command_line_reports_status_and_one_line_errors(collected):
  _, res, _ = collected
  run = lambda *a: subprocess.run([sys.executable, "-m", "tools.device_queue", *a],  # noqa: E731
                                  cwd=ROOT, capture_output=True, text=True, timeout=300)
  p = run("status", "--variant=test", f"--results_dir={res}")
  assert p.returncode == 0 and "copy_lc1       ce 3/5, e1_warmup 3/5" in p.stdout, p.stderr
  p = run("run", "--variant=test", "--out=/tmp/unused", "--jobs=nope")
  assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith(
      "error: unknown job 'nope'"), p.stderr


def _checkout(tmp_path):
  root = tmp_path / "checkout"
  for d in (os.path.join("docs", "results"), "experiments", "tools"):
    shutil.copytree(os.path.join(ROOT, d), root / d,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  (root / "results" / "device_queue").mkdir(parents=True)
  return root


def _tables(root):
  out = root / "results" / "device_queue"
  src = sources.Sources(str(out), root=str(root))
  a = {**analysis.analyze(src, config_file.get_config("cpu")), "sources": src.read}
  (out / "analysis.json").write_text(json.dumps(a))
  return [render.render_section(f"device_queue/{n}.md", root=str(root)) for n in ("arms", "tests")]


def test_the_accelerator_page_shows_the_queue(collected, tmp_path):
  _, res, _ = collected
  root = _checkout(tmp_path)
  shutil.copy(dq.results_path(jobs.job_by_name("copy_lc1"), res, "test"),
              root / "results" / "device_queue" / "copy_lc1.json")
  table, tests = _tables(root)
  assert "| copy_lc1 | ce | loss.name=ce | `test_em_hard` | 3 of 5 |" in table
  assert table.count("| hard-test accuracy falls as the context grows") == 1
  assert "| copy_lc1 | e1_warmup - ce |" in tests and "0.1; Holm" in tests
  empty = _checkout(tmp_path / "empty")
  for text in _tables(empty):
    assert text.strip() == ("*Not yet run* (`results/device_queue/<job>.json` is absent; "
                            "`python -m tools.device_queue collect <returned files>` writes it).")


def _page(name):
  with open(os.path.join(ROOT, "docs", "results", name)) as f:
    return " ".join(f.read().split())


def test_the_paper_size_copy_task_sentences_hold():
  """The accelerator page's copy-task k = 1 paragraph: "20,000 steps; 5 models per arm, trained
  on the H200 in two sessions, seeds 0-1 one at a time, seeds 2-4 stacked", "every model fits
  every training string and every easy test string", "every E1 + warmup model is above every
  CE model on the hard test strings (203 of them ...)" and the p at the design's floor, held to
  the analysis of the committed seeds; the README's row says the same numbers."""
  with open(os.path.join(ROOT, "results", "device_queue", "analysis.json")) as f:
    a = json.load(f)
  j = a["jobs"]["copy_lc1"]
  ce, e1 = j["arms"]["ce"], j["arms"]["e1_warmup"]
  for arm in (ce, e1):
    assert arm["n"] == 5 and arm["seeds"] == [0, 1, 2, 3, 4]
    assert arm["stacked"] == [1, 1, 3, 3, 3] and arm["devices"] == ["NVIDIA H200"]
    assert arm["counts"]["step"] == 20_000 and arm["counts"]["test_n_hard"] == 203
    assert arm["aggregates"]["train_em_all"]["min"] == 1.0
    assert arm["aggregates"]["test_em_easy"]["min"] == 1.0
  assert min(e1["values"]) > max(ce["values"])
  (c,) = j["comparisons"]
  assert (c["a"], c["b"], c["n_a"], c["n_b"]) == ("e1_warmup", "ce", 5, 5)
  assert c["at_floor"] and c["p_value"] == pytest.approx(c["p_floor"])
  assert c["p_floor"] == pytest.approx(2 / 252)
  assert j["min_models"] == 3 and j["wanted"] == 5
  page = _page("accelerator.md")
  for said in ("an arm gets its test against the baseline once it has 3 seeds (5 wanted)",
               "20,000 steps; 5 models per arm, trained on the H200 in two sessions, seeds 0-1 "
               "one at a time, seeds 2-4 stacked",
               "every model fits every training string and every easy test string",
               "every E1 + warmup model is above every CE model on the hard test strings (203 "
               "of them",
               f"CE {ce['aggregate']['mean']:.3f} (sd {ce['aggregate']['std']:.3f}), E1 + warmup "
               f"{e1['aggregate']['mean']:.3f} (sd {e1['aggregate']['std']:.3f}), p = "
               f"{c['p_value']:.2g} (floor of 5 vs 5): the smallest p a permutation test of 5 "
               "against 5 models can give",
               "copy task k = 1 -- partly (E1 + warmup above CE in 5 of 5 models, at the "
               "design's floor"):
    assert said in page, said
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  assert (f"hard-test EM CE {ce['aggregate']['mean']:.3f} vs E1 + warmup "
          f"{e1['aggregate']['mean']:.3f}, p = {c['p_value']:.2g} (floor of 5 vs 5)") in readme
