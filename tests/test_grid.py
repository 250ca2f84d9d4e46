"""el_jax.run.grid: declared runs, run or reused, one row schema, comparisons with Holm, JSON."""
import json
import os

import numpy as np
import pytest

from el_jax.run import grid as grid_lib
from el_jax.run import job
from el_jax.infra import plots
from el_jax.report import plots as report_plots
from el_jax.run import runner
from el_jax.report import stats


def _grid(tmp_path, **kw):
  g = grid_lib.Grid(str(tmp_path / "out" / "table.json"), runs_dir=str(tmp_path / "runs"), **kw)
  common = {"train.num_steps": 4, "train.eval_every": 0, "progress": False}
  g.add("ce", "copy_task", "test", {"loss.name": "ce", **common}, seeds=(0, 1), paper=0.5)
  g.add("e1 lam=2", "copy_task", "test", {"loss.name": "e1", "loss.e1.lam": 2.0, **common},
        seeds=(0, 1))
  return g


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("grid")
  g = _grid(tmp)
  rows = g.run(verbose=False)
  g.compare([("e1 lam=2", "ce")], "test_cl_all")
  doc = g.write(command="test")
  return tmp, g, rows, doc


def test_rows_have_one_schema_and_the_runs_own_numbers(ran):
  tmp, g, rows, doc = ran
  assert [r["label"] for r in rows] == ["ce", "e1 lam=2"]
  for r in rows:
    assert set(grid_lib.ROW_FIELDS) <= set(r)
    assert r["seeds"] == [0, 1] and r["config_name"] == "copy_task" and r["variant"] == "test"
    summary = json.load(open(os.path.join(r["workdir"], "summary.json")))
    # per_seed: one column per metric, values in the order of the seeds
    for k, col in r["per_seed"].items():
      assert col == [f[k] for f in summary["per_seed"]]
    assert r["aggregate"] == stats.aggregate(summary["per_seed"])
    assert r["workdir"] == os.path.join(str(tmp / "runs"), grid_lib.slug(r["label"]))
  assert rows[0]["paper"] == 0.5 and "paper" not in rows[1]  # extras go to their row
  assert rows[1]["config"]["loss"]["e1"]["lam"] == 2.0


def test_comparisons_are_stats_compare_with_holm(ran):
  _, g, rows, doc = ran
  (c,) = doc["comparisons"]["test_cl_all"]
  a, b = rows[1]["per_seed"]["test_cl_all"], rows[0]["per_seed"]["test_cl_all"]
  assert {k: c[k] for k in ("mean_a", "mean_b", "diff", "p_value")} == {
      k: v for k, v in stats.compare(a, b).items() if k in ("mean_a", "mean_b", "diff", "p_value")}
  assert c["a"] == "e1 lam=2" and c["b"] == "ce" and c["p_holm"] == c["p_value"]  # one test


def test_holm_over_a_family_against_a_hand_computation(ran):
  _, g, rows, _ = ran
  # Three pairs on a per-seed metric; Holm by hand: sort p, scale by (m - i), running max.
  g.rows["x"] = dict(rows[0], label="x", per_seed={"m": [0.0, 0.1, 0.2, 0.3]})
  g.rows["y"] = dict(rows[0], label="y", per_seed={"m": [1.0, 1.1, 1.2, 1.3]})
  g.rows["z"] = dict(rows[0], label="z", per_seed={"m": [0.05, 0.12, 0.18, 0.31]})
  comps = g.compare([("y", "x"), ("z", "x"), ("y", "z")], "m", family="hand")
  p = np.array([c["p_value"] for c in comps])
  order = np.argsort(p)
  want = np.empty(3)
  run = 0.0
  for i, j in enumerate(order):
    run = max(run, min(1.0, (3 - i) * p[j]))
    want[j] = run
  np.testing.assert_allclose([c["p_holm"] for c in comps], want)
  for k in ("x", "y", "z"):
    del g.rows[k]
  del g.comparisons["hand"]


def test_the_json_file_is_the_document(ran):
  tmp, g, rows, doc = ran
  on_disk = json.load(open(tmp / "out" / "table.json"))
  assert on_disk == json.loads(json.dumps(doc))
  assert on_disk["command"] == "test" and [r["label"] for r in on_disk["rows"]] == ["ce", "e1 lam=2"]


def test_a_stored_row_with_the_same_config_is_reused_without_training(ran, monkeypatch):
  tmp, _, rows, _ = ran

  def forbidden(*a, **k):
    raise AssertionError("a row with an identical config was trained again")

  monkeypatch.setattr(runner, "run_or_reuse", forbidden)
  monkeypatch.setattr(job, "train_and_evaluate", forbidden)
  again = _grid(tmp).run(verbose=False)
  assert [r["per_seed"] for r in again] == [r["per_seed"] for r in rows]


def test_a_changed_config_is_not_reused(ran, monkeypatch):
  tmp, _, _, _ = ran
  calls = []
  monkeypatch.setattr(runner, "run_or_reuse", lambda cfg, wdir, **k: calls.append(wdir))
  g = _grid(tmp)
  g.runs["ce"].overrides["optim.lr"] = 0.123
  with pytest.raises(RuntimeError, match="stopped before"):  # the fake returns no summary
    g.run(["ce"], verbose=False)
  assert calls == [os.path.join(str(tmp / "runs"), "ce")]


def test_reuse_rows_false_never_takes_the_file_as_a_result(ran, monkeypatch):
  tmp, _, _, _ = ran
  calls = []
  monkeypatch.setattr(runner, "run_or_reuse", lambda cfg, wdir, **k: calls.append(wdir))
  with pytest.raises(RuntimeError):
    _grid(tmp, reuse_rows=False).run(["ce"], verbose=False)
  assert len(calls) == 1


def test_errors_name_what_is_wrong(tmp_path, ran):
  g = _grid(tmp_path)
  with pytest.raises(ValueError, match="already has a run labelled 'ce'"):
    g.add("ce", "copy_task", "test")
  with pytest.raises(ValueError, match=r"unknown run 'nope'; the grid's runs: \['ce', 'e1 lam=2'\]"):
    g.run(["nope"])
  with pytest.raises(ValueError, match="run 'e1 lam=2' has no row"):
    g.compare([("e1 lam=2", "ce")], "test_cl_all")
  _, ran_grid, _, _ = ran
  with pytest.raises(ValueError, match="metric 'nope' is not a per-seed metric"):
    ran_grid.compare([("e1 lam=2", "ce")], "nope")
  bad = tmp_path / "bad.json"
  bad.write_text("[1, 2]")
  with pytest.raises(ValueError, match="is not a grid's results file"):
    grid_lib.Grid(str(bad), runs_dir=str(tmp_path))


def test_sweep_runs_are_the_config_files_sweep():
  runs = grid_lib.sweep_runs("copy_task")
  assert list(runs) == ["ce", "ce_warmup", "e1_warmup"]
  assert runs["ce"] == {"loss.name": "ce"}
  assert grid_lib.sweep_label({"loss.name": "e2", "optim.warmup_steps": 10}) == "e2_warmup"


def test_the_two_shared_figures(ran, tmp_path):
  tmp, _, rows, _ = ran
  bars = tmp_path / "bars.png"
  report_plots.bars_with_seeds(rows, ["test_cl_all", "test_cl_easy"], str(bars),
                        paper={("ce", "test_cl_all"): 0.3}, chance=1 / 26)
  curve = tmp_path / "curve.png"
  from el_jax.infra import metrics as metrics_lib
  plots.metric_over_steps({r["label"]: metrics_lib.read_rows(r["workdir"]) for r in rows},
                          "loss", str(curve), kind="train")
  for p in (bars, curve):
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_a_partial_run_keeps_the_other_rows_of_the_file(ran, monkeypatch):
  """Running some labels and writing keeps the stored rows of the declared runs not run
  (when their config is unchanged)."""
  tmp, _, rows, _ = ran
  g = _grid(tmp)
  g.run(["ce"], verbose=False)  # reused from the file, nothing trains
  doc = g.document()
  assert [r["label"] for r in doc["rows"]] == ["ce", "e1 lam=2"]
  assert doc["rows"][1]["per_seed"] == rows[1]["per_seed"]
  g.runs["e1 lam=2"].overrides["loss.e1.lam"] = 3.0  # a changed run loses its stale row
  assert [r["label"] for r in g.document()["rows"]] == ["ce"]


def test_rows_trained_quietly_stay_in_the_file_of_a_partial_run(ran, tmp_path, monkeypatch):
  """The experiments set `progress` through `configure`, so a stored row and its declared run
  can differ in it alone: the row is the same run's, reused, and a write part-way through
  (after each run) keeps the rows of the runs not reached yet: a kill then loses nothing
  (experiments/scale_trends/)."""
  tmp, _, rows, _ = ran
  doc = json.load(open(tmp / "out" / "table.json"))
  for r in doc["rows"]:
    r["config"]["progress"] = True  # _grid declares its runs with progress=False
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "table.json").write_text(json.dumps(doc))
  g = _grid(tmp_path)
  monkeypatch.setattr(runner, "run_or_reuse", lambda *a, **k: pytest.fail("trained"))
  g.run(["ce"], verbose=False)
  assert [r["label"] for r in g.document()["rows"]] == ["ce", "e1 lam=2"]
  assert g.document()["rows"][1]["per_seed"] == rows[1]["per_seed"]
