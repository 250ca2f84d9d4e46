"""experiments/loss_baselines.py on el_jax.run.grid: the `test` stage at `--size=test` (three runs of
8 steps) writes grid rows whose per-seed numbers are those of the runs, comparisons with Holm
over each family, reuses its rows, and the selection is the argmax of the validation grid."""
import fcntl
import json
import os

import pytest

from el_jax.run import grid as grid_lib
from el_jax.run import job
from el_jax.run import runner
from el_jax.report import stats
from el_jax.run import config as config_lib
import pins  # tests/pins.py
import reliability  # tests/reliability.py

# A two-loss grid; its validation scores are written by hand (the `select` stage's output),
# so that only the `test` stage trains: CE without warmup, CE + warmup, focal + warmup.
GRID = {"ce": [{"loss.name": "ce"}],
        "focal": [{"loss.name": "focal", "loss.focal.gamma": g} for g in (0.5, 2.0)]}
VALID = {"ce": 0.2, "focal_gamma=0.5": 0.1, "focal_gamma=2.0": 0.3}


def _script():
  mod = reliability.experiment_script("loss_baselines")
  mod.GRID = GRID
  return mod


def _write_select(lb, out, scores):
  """A select.json of the grid schema with these mean validation scores (by point label)."""
  rows = [{"label": lb.point_name(p), "loss": loss, "point": p,
           "aggregate": {"valid_em_hard": {"mean": scores[lb.point_name(p)]}}}
          for loss, points in GRID.items() for p in points if lb.point_name(p) in scores]
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "select.json"), "w") as fh:
    json.dump({"rows": rows, "comparisons": {}}, fh)


def _forbid_training(monkeypatch):
  def forbidden(*a, **k):
    raise AssertionError("a finished run was trained again")
  monkeypatch.setattr(job, "train_and_evaluate", forbidden)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
  # One training for the whole session: under xdist the workers share this session's folder
  # and take turns; a later worker finds the rows finished and reads them back.
  base = tmp_path_factory.getbasetemp()
  tmp = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "loss_baselines_stage"
  tmp.mkdir(exist_ok=True)
  out, runs = str(tmp / "out"), str(tmp / "runs")
  lb = _script()
  with open(tmp / ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(os.path.join(out, "test.json")):
      _write_select(lb, out, VALID)
    lb.main(["--stage=test", "--size=test", f"--out={out}", f"--runs_dir={runs}"])
    with open(os.path.join(out, "test.json")) as fh:
      doc = json.load(fh)
  return lb, out, runs, doc


def test_the_stage_writes_grid_rows_of_the_chosen_settings(staged):
  lb, out, runs, doc = staged
  assert doc["stage"] == "test" and doc["metric"] == "test_em_hard"
  assert [r["label"] for r in doc["rows"]] == ["ce_no_warmup", "ce", "focal"]
  pins.check("loss_baselines/test", doc["rows"])
  size = lb.SIZES["test"]
  for r in doc["rows"]:
    assert set(grid_lib.ROW_FIELDS) | {"point", "warmup", "ran_on"} == set(r)
    assert (r["config_name"], r["variant"], r["seeds"]) == ("copy_task", "test",
                                                            list(size.test_seeds))
    assert r["config"]["progress"] is False
    assert set(r["aggregate"]) <= set(r["per_seed"])  # (per_seed also has the int counts)
    for k, col in r["per_seed"].items():
      assert len(col) == len(r["seeds"])
      if k in r["aggregate"]:
        assert r["aggregate"][k]["mean"] == pytest.approx(sum(col) / len(col))
  rows = {r["label"]: r for r in doc["rows"]}
  # focal's choice is the argmax of its validation grid (gamma 2.0 scored 0.3 > 0.1)
  assert rows["focal"]["point"] == {"loss.name": "focal", "loss.focal.gamma": 2.0}
  assert rows["focal"]["overrides"] == {"loss.name": "focal", "loss.focal.gamma": 2.0,
                                        "optim.warmup_steps": size.warmup}
  assert rows["ce_no_warmup"]["overrides"] == {"loss.name": "ce"}
  assert [rows[k]["warmup"] for k in rows] == [False, True, True]
  assert rows["focal"]["workdir"] == os.path.join(runs, "chosen", "test", "focal")


def test_per_seed_numbers_are_a_direct_run_of_the_same_config(staged, monkeypatch):
  """Each row is what `runner.run_or_reuse` gives for the config built by hand (read back:
  training is forbidden, so the grid trained exactly this config)."""
  lb, out, runs, doc = staged
  _forbid_training(monkeypatch)
  for r in doc["rows"]:
    over = {**r["point"], **({"optim.warmup_steps": 4} if r["warmup"] else {})}
    cfg = config_lib.get_config("copy_task", "test", over)
    cfg.seeds = (0, 1)
    cfg.progress = False
    summary = runner.run_or_reuse(runner.fit_devices(cfg), r["workdir"], verbose=False)
    for k, col in r["per_seed"].items():
      assert col == [f[k] for f in summary["per_seed"]], (r["label"], k)
    assert r["aggregate"] == summary["aggregate"]


def _check_families(comps, rows, metric):
  assert [(c["a"], c["b"]) for c in comps["vs_ce"]] == [("ce", "ce_no_warmup"),
                                                        ("focal", "ce_no_warmup")]
  assert [(c["a"], c["b"]) for c in comps["vs_ce_warmup"]] == [("focal", "ce")]
  assert "best_baseline_vs_e1" not in comps  # no E1 in this grid
  for fam, cs in comps.items():
    for c in cs:
      want = stats.compare(rows[c["a"]]["per_seed"][metric], rows[c["b"]]["per_seed"][metric])
      assert c["metric"] == metric and {k: c[k] for k in want} == want
    assert [c["p_holm"] for c in cs] == stats.holm([c["p_value"] for c in cs])


def test_comparisons_are_holm_adjusted_per_family(staged, monkeypatch):
  lb, out, runs, doc = staged
  rows = {r["label"]: r for r in doc["rows"]}
  _check_families(doc["comparisons"], rows, "test_em_hard")
  # The same families on a metric that is not 0 at 8 steps (CL accuracy), from the rows the
  # grid reads back: Holm over two different p-values.
  _forbid_training(monkeypatch)
  monkeypatch.setattr(lb, "TEST_METRIC", "test_cl_all")
  g = lb.chosen_grid(out, "test", lb.chosen(out), lb.SIZES["test"])
  g.run(configure=lb._quiet, verbose=False)
  _check_families(lb.compare_families(g), rows, "test_cl_all")


def test_a_second_run_reuses_every_row_and_losses_keep_the_others(staged, monkeypatch):
  lb, out, runs, doc = staged
  _forbid_training(monkeypatch)
  monkeypatch.setattr(runner, "run_or_reuse", lambda *a, **k: pytest.fail("not reused"))
  for losses in ("", "--losses=focal"):
    lb.main(["--stage=test", "--size=test", f"--out={out}", f"--runs_dir={runs}"]
            + ([losses] if losses else []))
    with open(os.path.join(out, "test.json")) as fh:
      assert json.load(fh) == doc


def test_table_stage_reads_the_files(staged, capsys):
  lb, out, runs, doc = staged
  lb.main(["--stage=table", "--size=test", f"--out={out}", f"--runs_dir={runs}"])
  with open(os.path.join(out, "table.json")) as fh:
    table = json.load(fh)
  assert table["chosen"] == {"ce": {"loss.name": "ce"},
                             "focal": {"loss.name": "focal", "loss.focal.gamma": 2.0}}
  assert table["warmup_steps"] == lb.SIZES["test"].warmup
  text = capsys.readouterr().out
  assert "focal_gamma=2.0" in text and "reference" in text
  with open(os.path.join(out, "table.png"), "rb") as fh:
    assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_selection_ties_go_to_the_first_grid_point_and_needs_a_finished_grid(tmp_path):
  lb = _script()
  out = str(tmp_path)
  _write_select(lb, out, {"ce": 0.0, "focal_gamma=0.5": 0.25, "focal_gamma=2.0": 0.25})
  assert lb.chosen(out)["focal"] == {"loss.name": "focal", "loss.focal.gamma": 0.5}
  _write_select(lb, out, {"ce": 0.0, "focal_gamma=0.5": 0.25})
  assert lb.chosen(out, {"ce"}) == {"ce": {"loss.name": "ce"}}
  with pytest.raises(SystemExit, match=r"the grid of 'focal' is not finished \(1 of 2"):
    lb.chosen(out)
