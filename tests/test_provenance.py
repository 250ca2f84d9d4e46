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
from el_jax.report import formats
from el_jax.report import render
from el_jax.report import sources
from el_jax.run import runner
from el_jax.infra import workdir as wd
from el_jax.run import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def test_a_tables_ran_on_line_names_every_machine_its_files_recorded(tmp_path):
  res = tmp_path / "results" / "a"
  res.mkdir(parents=True)
  (res / "old.json").write_text(json.dumps({"rows": [{"x": 1}]}))
  (res / "new.json").write_text(json.dumps({"rows": [{"x": 1, "ran_on": GPU}],
                                            "more": {"ran_on": GPU}}))
  src = sources.Sources(str(res), root=str(tmp_path))
  assert formats.ran_on(src.ran_on(["new.json"])) == (
      "*Ran on: gpu: 1 x NVIDIA H200 (jax 0.11.2, matmul default).*")
  assert formats.ran_on(src.ran_on(["old.json"])) == f"*Ran on: {sources.UNRECORDED}.*"
  both = src.ran_on(["old.json", "new.json"])
  assert any("NVIDIA H200" in m for m in both) and sources.UNRECORDED in both
  # a file some of whose rows record no machine (kept from before it was recorded) says so
  (res / "mixed.json").write_text(json.dumps({"rows": [{"x": 1, "ran_on": GPU}, {"x": 2}]}))
  mixed = sources.Sources(str(res), root=str(tmp_path)).ran_on(["mixed.json"])
  assert any("NVIDIA H200" in m for m in mixed) and sources.UNRECORDED in mixed
  assert src.read == ["results/a/new.json", "results/a/old.json"]


def _section_templates():
  out = [os.path.join(ROOT, "docs", "results", "templates", f"{p}.md") for p in render.PAGES]
  for top in ("experiments", "tools"):
    base = os.path.join(ROOT, top)
    out += [os.path.join(base, n, f) for n in sorted(os.listdir(base))
            if os.path.isdir(os.path.join(base, n))
            for f in sorted(os.listdir(os.path.join(base, n))) if f.endswith(".md")]
  return out


def test_every_results_table_says_where_it_ran():
  """Every table of a results section whose rows come from an analysis (a Markdown header,
  then a `{% for %}` loop) is followed by its "Ran on" line (`{{ ... | ran_on }}`), or by a
  `{# ran_on: ... #}` comment saying where the machine is named instead (a device column) or
  why none ran (a prediction, a configuration)."""
  n, missing = 0, []
  for path in _section_templates():
    lines = open(path).read().splitlines()
    for i in range(len(lines) - 2):
      if not (lines[i].startswith("|") and re.match(r"^\|[-:|]+\|$", lines[i + 1])
              and lines[i + 2].lstrip().startswith("{%")):
        continue
      if os.path.basename(path) == "index.md":
        continue
      j = i + 2
      while j < len(lines) and (lines[j].startswith(("|", "{%")) or not lines[j].strip()):
        if "ran_on" in lines[j]:
          break
        j += 1
      # the line may follow a short note under the table (e.g. the machine of a timing)
      after = [l for l in lines[j:j + 6] if l.strip()][:3]
      if any("ran_on" in l for l in after):
        n += 1
      else:
        missing.append(f"{os.path.relpath(path, ROOT)}:{i + 1}")
  assert not missing, "tables without a '| ran_on' line after them: " + ", ".join(missing)
  assert n >= 3
