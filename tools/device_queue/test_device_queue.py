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
from tools.device_queue import sizing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


VERIFY = os.path.join(ROOT, "results", "verify")


def _h200():
  docs = {n: wd.read_json(os.path.join(VERIFY, n)) for n in sorted(os.listdir(VERIFY))
          if n.startswith("verify_")}
  return sizing.kind_rates(docs, "NVIDIA H200")


def test_the_rates_of_a_device_kind_come_from_its_verify_sessions():
  r = _h200()
  assert r["sessions"] == ["verify_h200_20261126.json", "verify_h200_20261127.json"]
  assert sizing.kind_rates({"x": {"parts": {}}}, "NVIDIA H200") is None
  s = r["stack"]  # t_n = t1 (f + (1 - f) n), f from the measured 5 stacked copy-task seeds
  assert sizing.stacked_step_s(s["single_step_s"], s["seeds"], s["fixed_share"]) == \
      pytest.approx(s["stacked_step_s"])
  assert sizing.stacked_step_s(0.003, 1, s["fixed_share"]) == pytest.approx(0.003)
  # the preflight is the slowest env + golden of the kind's sessions (the 27th: 29.7 + 126.3)
  assert r["preflight_s"] == pytest.approx(156.0)
  rate = sizing.job_rate(r, "path_star:paper", "bfloat16")
  assert rate["flops_per_step"] == pytest.approx(2.5234e11, rel=1e-4)


def test_a_call_is_predicted_part_by_part_and_fit_balances_the_arms():
  r = {"peak_flops": {"bfloat16": 1e12}, "preflight_s": 100.0, "stack": {"fixed_share": 0.5},
       "steps": {}}
  rate = {"step_s": 0.01, "setup_s": 20.0, "flops_per_step": 1e9, "source": "t"}
  p = sizing.predict(r, rate, 4, 1000, "bfloat16")
  # 4 slots: 0.01 (0.5 + 0.5 x 4) = 0.025 s per step
  assert p["step_s"] == pytest.approx(0.025) and p["parts_s"]["train"] == pytest.approx(25.0)
  assert p["parts_s"] == {"preflight": 100.0, "setup_compile": 20.0, "train": 25.0,
                          "eval": 20.0, "checkpoint": 0.0, "write": sizing.WRITE_S}
  assert p["tflops"] == pytest.approx(4 * 1e9 / 0.025 / 1e12)
  assert p["bound_train_s"] == pytest.approx(4 * 1e9 * 1000 / 1e12)
  missing = {"ce": [1, 2, 3], "e1_warmup": [0, 4]}
  # without the preflight: 42 + 10 (0.5 + 0.5 n) <= 70 -> n <= 4.6: 4 runs, 2 per arm
  pick, pred = sizing.fit(r, rate, 1000, "bfloat16", 70.0, missing)
  assert pick == {"ce": [1, 2], "e1_warmup": [0, 4]} and pred["slots"] == 4
  pick, pred = sizing.fit(r, rate, 1000, "bfloat16", 54.0, missing)
  assert pick == {"ce": [1]} and pred["slots"] == 1
  assert sizing.fit(r, rate, 1000, "bfloat16", 50.0, missing)[0] == {}
  cmp = sizing.compare(p["parts_s"], {"train": 50.0, "setup_compile": 10.0})
  assert cmp["train"]["ratio"] == pytest.approx(2.0) and cmp["preflight"]["ratio"] is None


def test_without_rates_a_call_is_held_to_what_the_collected_seeds_took(tmp_path, capsys):
  """`measured_seed_s` reads the collected seeds' wall time per model on one device kind, and
  `run` (no verify rates for this CPU) trains nothing when that says it does not fit."""
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
  assert "as the job's collected seeds took on cpu: stopping" in err
  # at paper size, with neither rates nor collected seeds of this kind: not started blind
  assert dq.run(600, str(tmp_path / "out"), "paper", ["path_star_g23"], str(res)) == []
  assert "no measured rate of cpu" in capsys.readouterr().err


def _run_and_collect(tmp):
  """The test variant through the entry point: 3 seeds of each arm of copy_lc1 and of
  path_star_g23 trained, each job as one stacked program, the job files kept under
  <results>/arms/, collected and analysed."""
  res = tmp / "results"
  code = experiment.main(["el_jax.experiment",
                          f"--config={ROOT}/tools/device_queue/config.py:test",
                          f"--config.results_dir={res}"])
  assert code in (None, 0)
  files = sorted(glob.glob(str(res / "arms" / "*.json")),
                 key=lambda p: wd.read_json(p)["finished"] + wd.read_json(p)["job"])
  return tmp, str(res), files


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
  return shared_fixtures.once_per_session(tmp_path_factory, "device_queue_collected",
                                          _run_and_collect)


def test_run_trains_the_missing_seeds_of_every_arm_as_one_program(collected):
  _, res, files = collected
  assert sorted(os.path.basename(f).split(".")[0] for f in files) == ["copy_lc1",
                                                                      "path_star_g23"]
  doc = next(wd.read_json(f) for f in files if "copy_lc1." in f)
  assert doc["size"] == "test" and doc["slots"] == 6 and doc["steps"] == 8
  e1 = doc["arms"]["e1_warmup"]
  assert e1["seeds"] == [0, 1, 2] and len(e1["per_seed"]) == 3
  assert e1["overrides"]["loss.name"] == "e1" and e1["overrides"]["train.vmap_seeds"] is True
  assert doc["ran_on"]["platform"] == "cpu"
  assert all(0 <= f["test_em_hard"] <= 1 for f in e1["per_seed"])
  ps = next(wd.read_json(f) for f in files if "path_star_g23." in f)
  over = ps["arms"]["ce"]["overrides"]
  assert over["model.dtype"] == "bfloat16" and over["train.checkpoint_every"] == 0


def test_each_call_records_its_timeline(collected):
  """Every part of the call recorded; the parts sum to the wall time within the stated slack
  (`el_jax.infra.timeline.SLACK`); one compile of the stacked step for the 6 runs; training
  TFLOP/s = el_jax's FLOPs of a slot's step x slots x steps / training seconds."""
  from el_jax.infra import timeline
  _, _, files = collected
  for f in files:
    d = wd.read_json(f)
    t = d["timeline"]
    for part in ("setup", "compile", "train", "eval", "write"):
      assert t["parts_s"][part] > 0, (f, part)
    assert abs(t["wall_s"] - t["parts_sum_s"]) <= timeline.slack(t["wall_s"])
    assert t["parts_sum_s"] == pytest.approx(sum(t["parts_s"].values()), abs=1e-3)
    assert t["compiled"]["jit(stacked)"] == 1
    (prog,) = t["notes"]["programs"]
    assert (prog["slots"], prog["steps"]) == (d["slots"], d["steps"]) == (6, 8)
    assert prog["flops_per_slot_step"] > 0 and "XLA cost analysis" in prog["flops_source"]
    assert t["train_flops"] == pytest.approx(prog["flops_per_slot_step"] * 6 * 8)
    assert t["train_tflops"] == pytest.approx(t["train_flops"] / t["parts_s"]["train"] / 1e12)
    assert d["seconds"] == t["wall_s"] and "sizing" not in d  # no rates of this CPU


def test_a_sized_call_stacks_what_fits_and_compares_with_its_timeline(tmp_path, monkeypatch):
  """With rates of this device kind (a verify JSON of the CPU: path-star's `test` step at 1 s,
  setup 1 s, nothing shared between stacked runs), 8 steps: a call of n runs is predicted at
  1 + 8 n + 1 + 2 s; within 30 s, 3 runs (CE 0, 1 and E1 + warmup 0) are stacked, and the
  prediction is kept beside the timeline; with 11 s, not one run fits and nothing trains."""
  import jax
  kind = jax.devices()[0].device_kind
  verify = {"parts": {"env": {"ran_on": {"device_kind": kind}, "peak_flops": {"bfloat16": 1e12},
                              "seconds": 1.0},
                      "golden": {"seconds": 1.0},
                      "throughput": {"rows": [{"model": "path_star:test", "dtype": "bfloat16",
                                               "all_positions": False, "step_s": 1.0,
                                               "flops_per_step": 1e6, "setup_s": 1.0}]}}}
  monkeypatch.setattr(dq, "VERIFY_DIR", str(tmp_path / "none"))  # only this session's rates
  out = tmp_path / "out"
  (path,) = dq.run(30, str(out), "test", ["path_star_g23"], str(tmp_path / "res"),
                   verify=verify)
  d = wd.read_json(path)
  assert {a: r["seeds"] for a, r in d["arms"].items()} == {"ce": [0, 1], "e1_warmup": [0]}
  z = d["sizing"]
  assert z["predicted"]["slots"] == 3 and z["predicted"]["total_s"] == pytest.approx(28.0)
  t = d["timeline"]["parts_s"]
  assert z["parts"]["train"]["measured_s"] == t["train"]
  assert z["parts"]["setup_compile"]["measured_s"] == pytest.approx(t["setup"] + t["compile"])
  assert z["parts"]["train"]["ratio"] == pytest.approx(t["train"] / 24.0)
  doc = {"job": "path_star_g23", "arms": {}}
  dq.merge(doc, d, jobs.job_by_name("path_star_g23"))
  (call,) = doc["calls"]
  assert call["slots"] == 3 and call["sizing"] == z and call["device_kind"] == kind
  # the job's own measured rate per slot-step replaces verify's next time
  assert dq.measured_slot_step_s(doc, kind) == pytest.approx(t["train"] / 8 / 3)
  assert dq.run(11, str(out), "test", ["path_star_g23"], str(tmp_path / "res"),
                verify=verify) == []


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
  (call,) = doc["calls"]  # the call's timeline, kept with the seeds
  assert call["slots"] == 6 and call["arms"] == {"ce": [0, 1, 2], "e1_warmup": [0, 1, 2]}
  assert all(v["arm_seeds"] == 6 for a in arms.values() for v in a["seeds"].values())
  a = [arms["e1_warmup"]["seeds"][s]["test_em_hard"] for s in "012"]
  b = [arms["ce"]["seeds"][s]["test_em_hard"] for s in "012"]
  with open(os.path.join(res, "analysis.json")) as f:
    an = json.load(f)
  assert os.path.relpath(dq.results_path(job, res, "test"), ROOT) in an["sources"]
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
  assert dq.collect(files, tmp, "test") == {"copy_lc1": [("ce", []), ("e1_warmup", [])],
                                            "path_star_g23": [("ce", []), ("e1_warmup", [])]}
  assert len(wd.read_json(dq.results_path(job, tmp, "test"))["calls"]) == 1
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
  arm = bad["arms"]["ce"]
  arm["overrides"]["optim.lr"] = 1.0
  arm["seeds"], arm["per_seed"] = [4], arm["per_seed"][:1]
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


def test_the_sizing_prediction_sentences_hold():
  """The accelerator page's prediction for path-star G(2,3) x 10 runs on the H200: it does not
  fit one call; only an MFU far above any el_jax reached there would fit it; one run at the full
  budget fits, or the 10 runs for a quarter of the steps; the numbers are the analysis's."""
  with open(os.path.join(ROOT, "results", "device_queue", "analysis.json")) as f:
    a = json.load(f)
  z = a["sizing"]
  h = z["kinds"]["NVIDIA H200"]
  g = h["jobs"][z["target"]]
  assert z["target"] == "path_star_g23" and (g["runs"], g["steps"]) == (10, 78_100)
  assert g["dtype"] == "bfloat16" and not g["fits"] and g["all"]["total_s"] > z["call_s"]
  assert g["bound_call_s"] < z["call_s"] and g["mfu_needed"] > 5 * h["best_mfu"]
  assert g["runs_that_fit"] == 1 and g["one_call"]["total_s"] <= z["call_s"]
  assert 0.2 < g["steps_fraction"] < 0.3 and g["calls_needed"] == 10
  p = g["all"]
  assert p["step_s"] == pytest.approx(sizing.stacked_step_s(p["single_step_s"], 10,
                                                            h["stack"]["fixed_share"]))
  assert p["total_s"] == pytest.approx(sum(p["parts_s"].values()))
  page = _page("accelerator.md")
  for said in (
      f"Stacked, the 10 runs are predicted at {g['step_ms']:.2f} ms per step "
      f"({p['tflops']:.1f} TFLOP/s, MFU {100 * p['mfu']:.1f}%), so 78,100 steps take "
      f"{p['parts_s']['train']:,.0f} s of training and the call {p['total_s']:,.0f} s",
      f"at 100% of the bf16 ceiling the training takes {p['bound_train_s']:,.0f} s and the call "
      f"{g['bound_call_s']:,.0f} s, so one call needs an MFU of {100 * g['mfu_needed']:.0f}%",
      f"reached at most {100 * h['best_mfu']:.1f}% of it",
      f"What one call can do: 1 run at the full budget (predicted "
      f"{g['one_call']['total_s']:,.0f} s), or the 10 runs for {g['steps_that_fit']:,} of the "
      f"78,100 steps",
      "| NVIDIA H200 | path_star_g23 | 10 x 78,100 | bfloat16 |",
      "not yet checked on a device"):
    assert said in page, said


def _fake_verify(golden_ok, kind="GPU X"):
  """subprocess.run in place of `python -m el_jax.tools.verify`: writes its --out JSON."""
  def fake(argv, **kw):
    out = next(a.split("=", 1)[1] for a in argv if a.startswith("--out="))
    wd.write_json(out, {"ok": golden_ok, "parts": {
        "env": {"ok": True, "ran_on": {"device_kind": kind}},
        "golden": {"ok": golden_ok, "rel_err": 1.0 if not golden_ok else 0.0}}})
    return subprocess.CompletedProcess(argv, 0)
  return fake


def test_the_session_checks_bf16_on_the_device_before_it_trains_a_bf16_job(tmp_path, monkeypatch,
                                                                           capsys):
  """verify first (a golden step that does not match trains nothing: status 1); then the bf16
  check of the bf16 jobs' task on this device: where it fails, those jobs are not trained;
  where this device kind's check is committed, it is not run again."""
  res, out = tmp_path / "res", tmp_path / "out"
  monkeypatch.setattr(subprocess, "run", _fake_verify(golden_ok=False))
  assert dq.session(str(out), 300, preflight=True, size="test", jobs=["path_star_g23"],
                    results_dir=str(res)) == 1
  monkeypatch.setattr(subprocess, "run", _fake_verify(golden_ok=True))
  asked = []
  monkeypatch.setattr(dq, "dtype_step",
                      lambda o, tasks, **kw: asked.append((tasks, kw["kind"])) or
                      {t: False for t in tasks})
  assert dq.session(str(out), 300, preflight=True, size="test", jobs=["path_star_g23"],
                    results_dir=str(res)) == 0
  assert asked == [(["path_star"], "GPU X")]
  printed = capsys.readouterr().out
  assert "bf16 did not stay within the stated distance of float32 on this device for " \
         "['path_star']" in printed and "0 job file(s)" in printed
  assert not glob.glob(str(out / "path_star_g23.*.json"))
  # a committed check of this device kind: not run again
  res.mkdir(exist_ok=True)
  wd.write_json(str(res / "dtype_check_gpu_x.json"),
                {"path_star": {"ok": True, "ran_on": {"device_kind": "GPU X"}}})
  assert dq.committed_dtype_checks(str(res), "GPU X") == {"path_star": True}
  assert dq.committed_dtype_checks(str(res), "GPU Y") == {}
  monkeypatch.undo()
  assert dq.dtype_step(str(out), ["path_star"], kind="GPU X", results_dir=str(res)) == {
      "path_star": True}
  assert "is committed: not run again" in capsys.readouterr().out


def test_the_bf16_check_holds_both_distances(monkeypatch):
  """`dtype_check.check`: ok when every training loss is within t 2^-8 relative and every
  evaluation mean within 2 SE + 1/n, and bf16 moved something; not ok past either bound."""
  from tools.device_queue import dtype_check

  def finals(shift):
    return {s: {"seed": s, "step": 8, "test_em_all": 0.5 + 0.1 * s + shift, "test_n_all": 100}
            for s in dtype_check.TRAIN_SEEDS}

  def rows(loss):
    return {(s, 8): {"loss": loss, "ce": 2.0, "loss_rest": None} for s in dtype_check.TRAIN_SEEDS}

  def fake(train16, shift):
    return lambda task, root: {"float32": (rows(2.0), finals(0.0)),
                               "bfloat16": (rows(train16), finals(shift))}

  for train16, shift, ok in ((2.0 * (1 + 4 * 2 ** -8), 0.01, True),   # half the bound, 1 example
                             (2.0 * (1 + 9 * 2 ** -8), 0.0, False),   # past t 2^-8 at t = 8
                             (2.0 * (1 + 2 ** -8), 0.3, False),       # means 0.3 apart
                             (2.0, 0.0, False)):                      # bf16 changed nothing
    monkeypatch.setattr(dtype_check, "train_both", fake(train16, shift))
    r = dtype_check.check("path_star")
    assert r["ok"] is ok, (train16, shift, r)
  assert r["train_values"] == 6 and r["eval_metrics"] == 1
