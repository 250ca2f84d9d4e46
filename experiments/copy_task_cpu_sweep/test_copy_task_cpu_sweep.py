"""experiments/copy_task_cpu_sweep: at test size through the entry point its JSON has the grid's
schema and the pinned numbers, a finished run of the older folder layout is read back, the
choice is the best validation mean (`stats.select_rows`); on the committed JSON the analysis
gives the committed selection.json; a partial grid never overwrites the committed JSON; each
sentence of its section holds for its numbers."""
import contextlib
import io
import json
import os
import shutil

import pytest

from el_jax import experiment
from el_jax.report import sources
from el_jax.report import stats
from el_jax.run import grid as grid_lib
from el_jax.run import job
import pins  # tests/pins.py
import reliability as rel  # tests/reliability.py
import shared_fixtures  # tests/shared_fixtures.py

from experiments.copy_task_cpu_sweep import analysis
from experiments.copy_task_cpu_sweep import config as config_file
from experiments.copy_task_cpu_sweep import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = f"{ROOT}/experiments/copy_task_cpu_sweep/config.py"
COMMITTED = os.path.join(ROOT, "results", "copy_task_cpu_sweep")
POINT = "context_len=11_embed_dim=16_num_layers=2_num_steps=8"  # the scan's first point, test size
POINT2 = "context_len=11_num_steps=8"  # scan2's


def _build(tmp):
  """The `test` variant through `python -m el_jax.experiment` (scan and scan2, CE and E1 with
  lam 1 + 750 (here 4) warmup steps only: three runs)."""
  with contextlib.redirect_stdout(io.StringIO()):
    code = experiment.main(["el_jax.experiment", f"--config={CONFIG}:test",
                            f"--config.results_dir={tmp / 'out'}",
                            f"--config.runs_dir={tmp / 'runs'}"])
  assert code in (None, 0)
  return tmp


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
  tmp = shared_fixtures.once_per_session(tmp_path_factory, "copy_task_cpu_sweep_test", _build)
  docs = {}
  for name in ("scan", "scan2", "selection", "analysis"):
    with open(tmp / "out" / f"{name}.json") as f:
      docs[name] = json.load(f)
  return tmp, docs


def _rows(doc):
  return {r["label"]: r for r in doc["rows"]}


def test_the_json_has_the_grid_schema_and_the_pinned_numbers(ran):
  tmp, docs = ran
  for name in ("scan", "scan2"):
    doc = docs[name]
    assert set(doc) >= {"rows", "comparisons", "stage", "size", "variant", "command"}
    assert doc["stage"] == name and doc["size"] == "test" and doc["variant"] == "test"
    assert doc["command"] == f"{run_lib.COMMAND}:test" and doc["comparisons"] == {}
    for r in doc["rows"]:
      assert set(grid_lib.ROW_FIELDS) <= set(r), r["label"]
      assert r["config_name"] == "copy_task" and r["variant"] == "test" and r["seeds"] == [0, 1]
      assert r["config"]["seeds"] == [0, 1]
      for k, col in r["per_seed"].items():
        assert len(col) == 2
        if k in r["aggregate"]:
          assert r["aggregate"][k] == stats.aggregate([{k: float(v)} for v in col])[k]
      assert r["workdir"].startswith(str(tmp / "runs" / name))
  scan, scan2 = _rows(docs["scan"]), _rows(docs["scan2"])
  # The scan's CE at one and at four strings per context; scan2's E1 with 750 warmup steps.
  assert list(scan) == [f"{POINT} ce", f"context_len=44_embed_dim=16_num_layers=2_num_steps=8 ce"]
  assert list(scan2) == [f"{POINT2} e1_lam1_warmup750"]
  pins.check("copy_task_cpu_sweep/scan", [scan[f"{POINT} ce"]])
  pins.check("copy_task_cpu_sweep/scan2", docs["scan2"]["rows"])
  r = scan[f"{POINT} ce"]
  assert r["point"] == POINT and r["loss"] == "ce"
  assert r["overrides"] == {"data.context_len": 11, "model.embed_dim": 16,
                            "model.num_layers": 2, "train.num_steps": 8, "loss.name": "ce"}
  assert scan2[f"{POINT2} e1_lam1_warmup750"]["overrides"] == {
      "data.context_len": 11, "train.num_steps": 8, "loss.name": "e1", "loss.e1.lam": 1.0,
      "optim.warmup_steps": 4}


def test_selection_is_the_best_validation_mean(ran):
  """At test size the one E1 candidate at one string per context is chosen; CE had no scan3,
  so no CE choice; the analysis holds the same choice."""
  _, docs = ran
  sel = docs["selection"]
  (e1,) = docs["scan2"]["rows"]
  assert sel["context_len"] == 11 and sel["seeds"] == [0, 1]
  assert sel["candidates"] == {"e1_lam1_warmup750": e1["aggregate"]["valid_em_hard"]["mean"]}
  assert sel["chosen_run"] == "e1_lam1_warmup750"
  assert sel["chosen_overrides"] == {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 4}
  assert sel["budget"] == {"e1": 1, "ce": 1} and "ce_chosen_run" not in sel
  a = docs["analysis"]
  assert a["selection"] == sel and a["ce_ranked"] is None
  assert a["scan"]["one"]["context"] == 11 and a["scan"]["packed"]["context"] == 44
  assert a["scan"]["packed"]["e1_best_test_em_hard"] is None  # no E1 run at 44 at test size


def test_a_finished_run_of_the_older_layout_is_read_back(ran, tmp_path, monkeypatch):
  """A run folder at `<runs_dir>/<stage>/<point>/<loss>/` (the older layout) stands in for
  training it: the row is its numbers, its workdir that folder; nothing trains."""
  tmp, docs = ran
  (row,) = docs["scan2"]["rows"]
  old = tmp_path / "runs" / "scan2" / POINT2 / "e1_lam1_warmup750"
  shutil.copytree(row["workdir"], old)

  def forbidden(*a, **k):
    raise AssertionError("trained a run that should have been read back")
  monkeypatch.setattr(job, "train_and_evaluate", forbidden)
  cfg = config_file.get_config("test")
  cfg.results_dir, cfg.runs_dir = str(tmp_path / "out"), str(tmp_path / "runs")
  cfg.stages, cfg.losses = ("scan2",), ("e1_lam1_warmup750",)
  with contextlib.redirect_stdout(io.StringIO()):
    run_lib.run(cfg)
  with open(tmp_path / "out" / "scan2.json") as f:
    (again,) = json.load(f)["rows"]
  assert again["per_seed"] == row["per_seed"] and again["workdir"] == str(old)


def _committed_rows(tmp_path, stages=("scan", "scan2", "scan3")):
  for stage in stages:
    shutil.copy(os.path.join(COMMITTED, f"{stage}.json"), tmp_path)
  return analysis.stage_rows(sources.Sources(str(tmp_path)))


def test_the_choice_on_the_committed_sweep_is_the_committed_selection(tmp_path):
  with open(os.path.join(COMMITTED, "selection.json")) as f:
    committed = json.load(f)
  got = analysis.selection(_committed_rows(tmp_path), 55)
  assert got == committed
  # It is the highest validation mean of each loss's candidates (stats.select).
  assert got["chosen_run"] == max(got["candidates"], key=got["candidates"].get)
  assert got["ce_chosen_run"] == max(got["ce_candidates"], key=got["ce_candidates"].get)
  os.remove(tmp_path / "scan3.json")  # without CE's extra settings: E1's choice alone
  got = analysis.selection(analysis.stage_rows(sources.Sources(str(tmp_path))), 55)
  assert got["chosen_run"] == "e1_lam1_warmup750" and "ce_chosen_run" not in got
  assert got["budget"] == {"e1": 6, "ce": 3}


def test_a_selection_json_that_is_not_the_choice_is_refused(tmp_path):
  _committed_rows(tmp_path)
  with open(os.path.join(COMMITTED, "selection.json")) as f:
    sel = json.load(f)
  sel["chosen_run"] = "e1_lam2_warmup"
  (tmp_path / "selection.json").write_text(json.dumps(sel))
  with pytest.raises(ValueError, match="is not the choice its stages' JSON gives"):
    analysis.analyze(sources.Sources(str(tmp_path)), config_file.get_config("cpu"))


def test_a_partial_grid_never_overwrites_the_committed_json(tmp_path):
  cfg = config_file.get_config("scan")
  cfg.losses = ("ce",)
  with pytest.raises(ValueError, match="give another config.results_dir"):
    run_lib.run(cfg)
  proc = rel.run(f"--config={CONFIG}:scan", "--config.losses=nope",
                 f"--config.results_dir={tmp_path}", module="el_jax.experiment")
  rel.assert_one_line_error(proc, r"unknown losses \['nope'\] in config\.losses")
  assert not os.listdir(tmp_path)


def test_every_variant_declares_its_grids():
  """cpu: the three stages (20 / 8 / 3 runs) on seeds 0, 1; test: the same points scaled to
  configs/copy_task.py:test; paper: Fig. 1's paper_lc1 model, steps and warmup scaled alike."""
  cpu = config_file.get_config("cpu")
  assert [len(run_lib.make_grid(cpu, s).runs) for s in cpu.stages] == [10, 4, 3]
  assert [config_file.get_config(s).stages for s in ("scan", "scan2", "scan3", "select")] == [
      ("scan",), ("scan2",), ("scan3",), ()]
  scan = run_lib.make_grid(cpu, "scan")
  assert [r.seeds for r in scan.runs.values()] == [(0, 1)] * 10
  assert {r.overrides["data.context_len"] for r in scan.runs.values()} == {55, 220}
  paper = config_file.get_config("paper")
  g = run_lib.make_grid(paper, "scan")
  run = g.runs["context_len=55_embed_dim=1024_num_layers=4_num_steps=20000 ce_warmup"]
  cfg = run.config()
  assert (cfg.data.pad_len, cfg.model.embed_dim, cfg.model.num_layers) == (50, 1024, 4)
  assert (cfg.train.num_steps, cfg.optim.warmup_steps) == (20_000, 4000)
  assert paper.results_dir != cpu.results_dir
  assert run_lib.at_size({"optim.warmup_steps": 750}, "test") == {"optim.warmup_steps": 4}


def _text(path):
  with open(os.path.join(ROOT, path)) as f:
    return " ".join(f.read().split())


def test_the_page_says_what_the_analysis_gives():
  """Each sentence of the sweep's section that states a result, held to its numbers."""
  with open(os.path.join(COMMITTED, "analysis.json")) as f:
    a = json.load(f)
  with open(os.path.join(ROOT, "results", "demo", "analysis.json")) as f:
    demo = json.load(f)
  page = _text("docs/results/seed000_equal_learning.md")
  sel, one, packed = a["selection"], a["scan"]["one"], a["scan"]["packed"]
  # "Packing 4 strings per context (context 220) makes CE memorise: its hard-test EM falls
  # from ... to ... (chance is 1/26 = 0.038)": near chance, far below one string per context
  assert packed["context"] == 220 == 4 * one["context"]
  assert packed["ce_test_em_hard"] < 0.1 < 0.15 < one["ce_test_em_hard"]
  # "there E1 + warmup does not rescue generalisation ... (at most ...)"
  assert packed["e1_best_test_em_hard"] < 0.1
  assert (f"at this size and length of training (at most {packed['e1_best_test_em_hard']:.3f})"
          in page)
  # "validation chose E1 with lam = 1 and 750 warmup steps (...), just ahead of the same with
  # lr 3e-4 (...)"
  first, second = a["e1_ranked"][:2]
  assert first["run"] == sel["chosen_run"] == "e1_lam1_warmup750" and first["chosen"]
  assert sel["chosen_overrides"] == {"loss.name": "e1", "loss.e1.lam": 1.0,
                                     "optim.warmup_steps": 750}
  assert second["run"] == "e1_lam1_warmup_lr3e-4" and 0 < first["score"] - second["score"] < 0.02
  assert (f"validation chose E1 with lam = 1 and 750 warmup steps ({first['score']:.3f}), just "
          f"ahead of the same with lr 3e-4 ({second['score']:.3f})") in page
  # "The scan and scan2 stages gave E1 6 candidate settings ... and CE half as many ... so that
  # both losses have 6"
  assert sel["budget"] == {"e1": 6, "ce": 6} == {"e1": len(sel["candidates"]),
                                                  "ce": len(sel["ce_candidates"])}
  # "CE's best setting is 750 warmup steps (...), which is the demo's CE + warmup run"
  assert a["ce_ranked"][0]["run"] == sel["ce_chosen_run"] == "ce_warmup750"
  assert sel["ce_chosen_overrides"] == {"loss.name": "ce", "optim.warmup_steps": 750}
  # "Against it ... E1 + warmup gains ... giving CE E1's tuning budget does not close the gap"
  c = demo["comparisons"]["e1_warmup vs ce_warmup"]
  assert c["diff"] > 0 and c["ci95"][0] > 0 and c["p_holm"] < 0.05
  assert (f"E1 + warmup gains {c['diff']:+.3f} (95% interval [{c['ci95'][0]:+.3f}, "
          f"{c['ci95'][1]:+.3f}], Holm p = {c['p_holm']:.2g}): giving CE E1's tuning budget does "
          f"not close the gap") in page
  # "the test column is shown only so that the reader can check that the choice did not
  # depend on it": the choice is made on validation
  assert sel["metric"] == "valid_em_hard"
