"""Where a result was computed (el_jax.infra.provenance): recorded with every run, shown under every
results table, and a workdir of another platform is never resumed or reported as this one's."""
import json
import os
import re
import shutil

import pytest

from el_jax.run import grid as grid_lib
from el_jax.run import job
from el_jax.infra import provenance
from el_jax import report
from el_jax.run import runner
from el_jax.infra import workdir as wd
from el_jax.run import config as config_lib

GPU = {"platform": "gpu", "device_kind": "NVIDIA H200", "device_count": 1, "jax": "0.11.2",
       "matmul_precision": "default", "cpu": "Intel(R) Xeon(R) Processor", "cpu_flags": []}


def test_ran_on_describes_this_process():
  info = provenance.ran_on()
  assert info["platform"] == "cpu" and info["device_count"] == 8  # conftest.py
  for key in ("device_kind", "process_count", "jax", "jaxlib", "flax", "optax",
              "matmul_precision", "cpu", "cpu_flags", "xla_flags"):
    assert key in info
  json.dumps(info)  # JSON-able
  with open("/proc/cpuinfo") as f:
    text = f.read()
  for flag in provenance.ISA_FLAGS:  # the flags recorded are this CPU's, and only those
    assert (flag in info["cpu_flags"]) == (f" {flag} " in text.replace("\n", " ") + " ")
  family = re.search(r"^cpu family\s*:\s*(\d+)", text, re.M)
  model = re.search(r"^model\s*:\s*(\d+)", text, re.M)
  if family and model:  # x86 Linux: vendor, family, model and stepping of the first processor
    assert f" family {family.group(1)} model {model.group(1)} stepping " in info["cpu_id"]
  else:
    assert info["cpu_id"] == ""
  assert provenance.describe(info).startswith("cpu: ")
  zen4 = dict(info, cpu="AMD EPYC", cpu_flags=["avx2", "avx512f"],
              cpu_id="AuthenticAMD family 25 model 17 stepping 1")
  assert provenance.describe(zen4) == ("cpu: AMD EPYC (avx512f; family 25 model 17) "
                                       f"(jax {info['jax']}, matmul default)")
  assert provenance.describe(dict(zen4, cpu_id="")) == (  # recorded before cpu_id was
      f"cpu: AMD EPYC (avx512f) (jax {info['jax']}, matmul default)")
  assert provenance.describe(GPU) == "gpu: 1 x NVIDIA H200 (jax 0.11.2, matmul default)"
  assert provenance.same_platform(None, info)  # unrecorded = the CPU it always ran on
  assert not provenance.same_platform(GPU, info)
  assert provenance.same_platform(GPU, dict(GPU, jax="0.12.0", device_count=8))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  cfg = config_lib.get_config("copy_task", "test", {"progress": False, "train.eval_every": 0,
                                                "model.num_layers": 1})
  path = str(tmp_path_factory.mktemp("prov") / "run")
  summary = job.train_and_evaluate(cfg, path)
  return cfg, path, summary


def test_a_run_records_where_it_trained(finished):
  cfg, path, summary = finished
  assert summary["ran_on"]["platform"] == "cpu"
  with open(os.path.join(path, "seed_0", "ran_on.json")) as f:
    assert json.load(f)["platform"] == "cpu"
  row = grid_lib.make_row(grid_lib.Run("x", "copy_task", "test", {}), cfg, summary, 1.0, path)
  assert row["ran_on"] == summary["ran_on"]


def test_a_workdir_of_another_platform_is_refused_not_reused(finished, tmp_path, capsys):
  cfg, path, _ = finished
  other = str(tmp_path / "gpu_run")
  shutil.copytree(path, other)
  wd.write_json(os.path.join(other, "seed_0", "ran_on.json"), GPU)
  with pytest.raises(wd.WorkdirError, match=r"seed 0 in .* was trained on gpu: 1 x NVIDIA H200 "
                                            r".*this process runs on cpu: .*another --workdir"):
    job.train_and_evaluate(cfg, other)
  # the grid runner does not reuse it either (its summary says gpu)
  s = json.load(open(os.path.join(other, "summary.json")))
  s["ran_on"] = GPU
  wd.write_json(os.path.join(other, "summary.json"), s)
  assert runner.finished_summary(cfg, other) is None
  assert "not reusing" in capsys.readouterr().err
  assert runner.finished_summary(cfg, path) is not None  # this platform's: reused


def test_every_results_table_says_where_it_ran(tmp_path):
  res = tmp_path / "results"
  (res / "a").mkdir(parents=True)
  (res / "a" / "old.json").write_text(json.dumps({"rows": [{"x": 1}]}))
  (res / "a" / "new.json").write_text(json.dumps({"rows": [{"x": 1, "ran_on": GPU}],
                                                  "more": {"ran_on": GPU}}))
  R = report.Results(str(tmp_path))
  assert report.ran_on_line(R, {"a/new.json"}) == (
      "*Ran on: gpu: 1 x NVIDIA H200 (jax 0.11.2, matmul default).*")
  assert report.ran_on_line(R, {"a/old.json"}) == f"*Ran on: {report.UNRECORDED}.*"
  both = report.ran_on_line(R, {"a/old.json", "a/new.json"})
  assert "NVIDIA H200" in both and report.UNRECORDED in both
  # a file some of whose rows record no machine (kept from before it was recorded) says so
  (res / "a" / "mixed.json").write_text(json.dumps({"rows": [{"x": 1, "ran_on": GPU},
                                                             {"x": 2}]}))
  mixed = report.ran_on_line(report.Results(str(tmp_path)), {"a/mixed.json"})
  assert "NVIDIA H200" in mixed and report.UNRECORDED in mixed
  # the scale-trend choice table's scores are the tuning runs': its line is the tuning file's
  R = report.Results()
  choice = report._fill_one(R, "table: scale_trend_choice path_star")
  tune = report.ran_on_line(R, {"scale_trends/path_star_tune.json"})
  assert choice.splitlines()[-1] == tune
  assert tune != report.ran_on_line(R, {"scale_trends/path_star.json"})
  # and every table of the committed pages ends with the line
  R = report.Results()
  n = 0
  for page in report.PAGES:
    with open(os.path.join(report.ROOT, report.TEMPLATES, f"{page}.md")) as fh:
      tpl = fh.read()
    for m in report._PLACEHOLDER.finditer(tpl):
      raw = " ".join(m.group(1).split())
      if raw.startswith("table:"):
        R.last_read = set()
        out = report._fill_one(R, raw)
        if out.lstrip().startswith("|"):  # a Markdown table (not an inline value: p_at, ...)
          assert out.splitlines()[-1].startswith("*Ran on: "), raw
          n += 1
  assert n > 40
