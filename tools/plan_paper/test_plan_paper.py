"""tools/plan_paper: the plan of one config at `test` size (plan.json with every number of
`el_jax.tools.plan.plan`, plan.md, the analysis of both), a bad `only` in one line, and the
section's "Not yet run" where no plan was made."""
import json
import os
import shutil

import pytest

from el_jax.report import render
from el_jax.report import sources
from el_jax.tools import plan as plan_lib

from tools.plan_paper import analysis
from tools.plan_paper import config as config_file
from tools.plan_paper import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_test_variant_plans_its_config(tmp_path):
  cfg = config_file.get_config("test")
  cfg.results_dir = str(tmp_path / "out")
  doc = run_lib.run(cfg)
  with open(tmp_path / "out" / "plan.json") as f:
    assert json.load(f) == json.loads(json.dumps(doc))
  assert list(doc["runs"]) == ["copy_task:test"] and doc["num_devices"] == 1
  p = doc["runs"]["copy_task:test"]
  assert p["config"] == "configs/copy_task.py:test" and p["rows_per_step"] == 1
  assert doc["command"] == (f"{run_lib.COMMAND} --config.num_devices=1 "
                            f"--config.only=copy_task:test --config.rows=1")
  assert (tmp_path / "out" / "plan.md").read_text().count("| `copy_task:test` |") == 1
  a = analysis.analyze(sources.Sources(cfg.results_dir, root=ROOT), cfg)
  (r,) = a["runs"]
  assert a["ran"] and r["label"] == "copy_task:test" and r["params_m"] == p["params"] / 1e6
  assert [c["key"] for c in a["chips"]] == list(plan_lib.CHIPS)
  assert r["hours"] == [p["chips"][c]["hours_all_seeds"] for c in plan_lib.CHIPS]
  assert len(r["hours_bf16"]) == len(a["bf16_chips"]) == sum(
      c["bf16"] != c["f32"] for c in plan_lib.CHIPS.values())


def test_a_config_that_is_not_a_variant_is_one_line(tmp_path):
  cfg = config_file.get_config("test")
  cfg.results_dir = str(tmp_path / "out")
  cfg.only = "copy_task:nope"
  with pytest.raises(ValueError, match="config.only: 'copy_task:nope' is not a config variant"):
    run_lib.run(cfg)


def _speed_page(root):
  env = render.environment(str(root))
  text, read = render.render_page(env, "speed", str(root))
  return text, read


def _checkout(tmp_path):
  root = tmp_path / "checkout"
  for d in ("results", os.path.join("docs", "results"), "experiments", "tools"):
    shutil.copytree(os.path.join(ROOT, d), root / d,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  return root


def test_the_section_says_not_yet_run_without_a_plan(tmp_path):
  """With no plan.json the analysis says so, and the section renders one line "Not yet run"
  naming the file and the command that writes it; the page's sources name no plan file."""
  root = _checkout(tmp_path)
  out = root / "results" / "plan_paper"
  (out / "plan.json").unlink()
  cfg = config_file.get_config("cpu")
  src = sources.Sources(str(out), root=str(root))
  a = analysis.analyze(src, cfg)
  assert {k: a[k] for k in ("ran", "file", "mfu")} == {
      "ran": False, "file": "results/plan_paper/plan.json", "mfu": cfg.mfu}
  (out / "analysis.json").write_text(json.dumps({**a, "sources": src.read}))
  text, read = _speed_page(root)
  assert ("*Not yet run* (`results/plan_paper/plan.json` is absent; `python -m el_jax.experiment "
          "--config=tools/plan_paper/config.py:cpu` writes it).") in text
  assert not any(s.startswith("plan_paper") for s in read)


def test_the_section_says_what_the_analysis_gives():
  """The committed plan: the hours' MFU and the table's rows are the analysis's."""
  with open(os.path.join(ROOT, "results", "plan_paper", "analysis.json")) as f:
    a = json.load(f)
  with open(os.path.join(ROOT, "docs", "results", "speed.md")) as f:
    page = " ".join(f.read().split())
  assert f"The hours assume an MFU of {a['mfu']:g}." in page
  lo, hi = a["measured_mfu_pct"]
  assert a["optimistic_by"] == pytest.approx([100 * a["mfu"] / hi, 100 * a["mfu"] / lo])
  assert a["optimistic_by"][0] > 1  # every measured MFU is below the plan's
  assert (f"ran at {lo:.0f}-{hi:.0f}% MFU (small models: launch- and bandwidth-bound), so their "
          f"hours here are optimistic by a factor of {a['optimistic_by'][0]:.0f}-"
          f"{a['optimistic_by'][1]:.0f}.") in page
  for r in a["runs"]:
    assert f"| `{r['label']}` | {r['params_m']:.2f}M |" in page
