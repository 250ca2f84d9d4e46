"""tools/paper_two_steps: two real steps of the `test` configs, each in a worker process (the
record of each, the machine it ran on, the analysis), a variant that times out recorded as not
run, and the section's "Not yet run" where nothing was run."""
import json
import os
import shutil

import numpy as np

from el_jax.report import render
from el_jax.report import sources

from tools.paper_two_steps import analysis
from tools.paper_two_steps import config as config_file
from tools.paper_two_steps import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_test_variant_runs_two_steps_of_each_config(tmp_path):
  cfg = config_file.get_config("test")
  cfg.results_dir = str(tmp_path / "out")
  cfg.fresh_cache = False  # the suite's cache: the test configs' data are small anyway
  doc = run_lib.run(cfg)
  assert list(doc["runs"]) == ["copy_task:test", "path_star:test"] and doc["rows"] == 2
  for label, r in doc["runs"].items():
    assert r["status"] == "ran", (label, r["status"])
    assert [s["step"] for s in r["steps"]] == [1, 2]
    assert r["rows_per_step"] == 2 and r["overrides"]["train.num_steps"] == 2
    assert all(np.isfinite([s["loss"], s["grad_norm"]]).all() for s in r["steps"])
    assert r["ran_on"]["platform"] == "cpu"
  # the copy task's batch is strings (k per context), path-star's rows
  assert "train.batch_strings" in doc["runs"]["copy_task:test"]["overrides"]
  assert doc["runs"]["path_star:test"]["overrides"]["train.batch_size"] == 2
  a = analysis.analyze(sources.Sources(cfg.results_dir, root=ROOT), cfg)
  assert a["ran"] and [r["label"] for r in a["runs"]] == list(doc["runs"])
  assert all(r["stepped"] for r in a["runs"])
  assert a["ran_on"] and "not recorded" not in a["ran_on"][0]
  # a variant that does not finish in time is recorded as not run, the others kept
  cfg.only, cfg.timeout_s = "copy_task:test", 1
  doc = run_lib.run(cfg)
  assert doc["runs"]["copy_task:test"]["status"].startswith("not run: did not finish within")
  assert doc["runs"]["path_star:test"]["status"] == "ran"
  a = analysis.analyze(sources.Sources(cfg.results_dir, root=ROOT), cfg)
  assert [r["stepped"] for r in a["runs"]] == [False, True]


def test_the_section_says_not_yet_run_without_results(tmp_path):
  root = tmp_path / "checkout"
  for d in ("results", os.path.join("docs", "results"), "experiments", "tools"):
    shutil.copytree(os.path.join(ROOT, d), root / d,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  out = root / "results" / "paper_two_steps"
  (out / "two_steps.json").unlink()
  src = sources.Sources(str(out), root=str(root))
  a = analysis.analyze(src, config_file.get_config("cpu"))
  assert a == {"ran": False, "file": "results/paper_two_steps/two_steps.json"}
  (out / "analysis.json").write_text(json.dumps({**a, "sources": src.read}))
  text, read = render.render_page(render.environment(str(root)), "speed", str(root))
  assert ("*Not yet run* (`results/paper_two_steps/two_steps.json` is absent; `python -m "
          "el_jax.experiment --config=tools/paper_two_steps/config.py:cpu` writes it).") in text
  assert not any(s.startswith("paper_two_steps") for s in read)


def test_the_section_says_what_the_analysis_gives():
  """Every paper variant built and stepped ("run for two steps"), each row on the page."""
  with open(os.path.join(ROOT, "results", "paper_two_steps", "analysis.json")) as f:
    a = json.load(f)
  with open(os.path.join(ROOT, "docs", "results", "speed.md")) as f:
    page = f.read()
  assert a["ran"] and all(r["stepped"] and r["status"] == "ran" for r in a["runs"])
  for r in a["runs"]:
    assert f"| `{r['label']}` | ran | {r['params_m']:.2f}M |" in page
