"""experiments/loss_baselines: the `test` stage at test size (three runs of 8 steps) writes grid
rows whose per-seed numbers are those of the runs (pinned), reuses its rows, keeps the rows of
the losses it does not run; the validation selection is `stats.select` over each loss's grid;
the comparison families are `stats.family` (Holm over each family) and equal the comparisons
the committed files stored; the whole `test` variant runs through `el_jax.experiment`; and each
sentence of the seed-001 page is held to the analysis."""
import fcntl
import functools
import json
import os

import numpy as np
import pytest

from el_jax import experiment
from el_jax.report import sources
from el_jax.report import stats
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import job
from el_jax.run import runner
import pins  # tests/pins.py

from experiments.loss_baselines import analysis
from experiments.loss_baselines import config as config_file
from experiments.loss_baselines import run as run_lib
from experiments.loss_baselines.config import GRID, point_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pins.json")  # pins.check
OUT = os.path.join(ROOT, "results", "loss_baselines")
# Validation scores written by hand (the `select` stage's output) for CE and focal, so that only
# the `test` stage trains: CE without warmup, CE + warmup, focal + warmup (gamma 2.0 chosen).
VALID = {"ce": 0.2, "focal_gamma=0.5": 0.1, "focal_gamma=1.0": 0.05, "focal_gamma=2.0": 0.3}
LOSSES = ("ce_no_warmup", "ce", "focal")


def _config(out, runs, losses=LOSSES, stages=("test",)):
  cfg = config_file.get_config("test")
  cfg.results_dir, cfg.runs_dir = out, runs
  cfg.losses, cfg.stages = tuple(losses), tuple(stages)
  return cfg


def _write_select(out, scores):
  """A select.json of the grid schema with these mean validation scores (by point label)."""
  rows = [{"label": point_name(p), "loss": loss, "point": p,
           "aggregate": {"valid_em_hard": {"mean": scores[point_name(p)]}}}
          for loss, points in GRID.items() for p in points if point_name(p) in scores]
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "select.json"), "w") as fh:
    json.dump({"rows": rows, "comparisons": {}}, fh)
  return rows


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
  with open(tmp / ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(os.path.join(out, "test.json")):
      _write_select(out, VALID)
    run_lib.run(_config(out, runs))
    with open(os.path.join(out, "test.json")) as fh:
      doc = json.load(fh)
  return out, runs, doc


def test_the_stage_writes_grid_rows_of_the_chosen_settings(staged):
  out, runs, doc = staged
  assert doc["stage"] == "test" and doc["metric"] == "test_em_hard"
  assert doc["command"] == run_lib.COMMAND and doc["comparisons"] == {}
  assert [r["label"] for r in doc["rows"]] == ["ce_no_warmup", "ce", "focal"]
  pins.check("test", doc["rows"], path=PINS_FILE)
  cfg = config_file.get_config("test")
  for r in doc["rows"]:
    assert set(grid_lib.ROW_FIELDS) | {"point", "warmup", "ran_on"} == set(r)
    assert (r["config_name"], r["variant"], r["seeds"]) == ("copy_task", "test",
                                                            list(cfg.test_seeds))
    assert r["config"]["progress"] is False
    assert set(r["aggregate"]) <= set(r["per_seed"])  # (per_seed also has the int counts)
    for k, col in r["per_seed"].items():
      assert len(col) == len(r["seeds"])
      if k in r["aggregate"]:
        assert r["aggregate"][k]["mean"] == pytest.approx(sum(col) / len(col))
  rows = {r["label"]: r for r in doc["rows"]}
  # focal's choice is the validation selection of its grid (gamma 2.0 scored 0.3, the highest)
  assert rows["focal"]["point"] == {"loss.name": "focal", "loss.focal.gamma": 2.0}
  assert rows["focal"]["overrides"] == {"loss.name": "focal", "loss.focal.gamma": 2.0,
                                        "optim.warmup_steps": cfg.warmup}
  assert rows["ce_no_warmup"]["overrides"] == {"loss.name": "ce"}
  assert [rows[k]["warmup"] for k in rows] == [False, True, True]
  assert rows["focal"]["workdir"] == os.path.join(runs, "chosen", "test", "focal")


def test_per_seed_numbers_are_a_direct_run_of_the_same_config(staged, monkeypatch):
  """Each row is what `runner.run_or_reuse` gives for the config built by hand (read back:
  training is forbidden, so the grid trained exactly this config)."""
  out, runs, doc = staged
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


def _check_families(fam, rows, metric):
  assert [(c["a"], c["b"]) for c in fam["vs_ce"]] == [("ce", "ce_no_warmup"),
                                                      ("focal", "ce_no_warmup")]
  assert [(c["a"], c["b"]) for c in fam["vs_ce_warmup"]] == [("focal", "ce")]
  assert "best_baseline_vs_e1" not in fam  # no E1 in this grid
  for cs in fam.values():
    for c in cs:
      want = stats.compare(rows[c["a"]]["per_seed"][metric], rows[c["b"]]["per_seed"][metric])
      assert {k: c[k] for k in want} == want
      assert c["p_floor"] == stats.p_floor("unpaired", c["n_a"], c["n_b"])
    assert [c["p_holm"] for c in cs] == stats.holm([c["p_value"] for c in cs])


def test_comparisons_are_holm_adjusted_per_family(staged):
  out, runs, doc = staged
  rows = {r["label"]: r for r in doc["rows"]}
  _check_families(analysis.families(doc["rows"]), rows, "test_em_hard")
  # The same families on a metric that is not 0 at 8 steps (CL accuracy).
  _check_families(analysis.families(doc["rows"], "test_cl_all"), rows, "test_cl_all")


def test_a_second_run_reuses_every_row_and_losses_keep_the_others(staged, monkeypatch):
  out, runs, doc = staged
  _forbid_training(monkeypatch)
  monkeypatch.setattr(runner, "run_or_reuse", lambda *a, **k: pytest.fail("not reused"))
  for losses in (LOSSES, ("focal",)):
    run_lib.run(_config(out, runs, losses))
    with open(os.path.join(out, "test.json")) as fh:
      assert json.load(fh) == doc


def test_table_stage_and_the_figure_read_the_files(staged):
  out, runs, doc = staged
  run_lib.run(_config(out, runs, stages=("table",)))
  with open(os.path.join(out, "table.json")) as fh:
    table = json.load(fh)
  assert table["chosen"] == {"ce": {"loss.name": "ce"},
                             "focal": {"loss.name": "focal", "loss.focal.gamma": 2.0}}
  assert table["warmup_steps"] == config_file.get_config("test").warmup
  assert table["grid"] == json.loads(json.dumps(GRID))
  analysis.plot(None, sources.Sources(out, root=ROOT), None)
  with open(os.path.join(out, "table.png"), "rb") as fh:
    assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_selection_goes_to_the_first_grid_point_on_a_tie_and_needs_a_finished_grid(tmp_path):
  out = str(tmp_path)
  rows = _write_select(out, {"ce": 0.0, "focal_gamma=0.5": 0.25, "focal_gamma=1.0": 0.1,
                             "focal_gamma=2.0": 0.25})
  got = analysis.choices(rows)
  assert got["focal"]["point"] == {"loss.name": "focal", "loss.focal.gamma": 0.5}
  assert list(got["focal"]["scores"]) == ["focal_gamma=0.5", "focal_gamma=1.0", "focal_gamma=2.0"]
  cfg = _config(out, str(tmp_path / "runs"))
  _write_select(out, {"ce": 0.0, "focal_gamma=0.5": 0.25})
  assert run_lib.chosen(cfg, {"ce"}) == {"ce": {"loss.name": "ce"}}
  with pytest.raises(run_lib.StageError, match=r"the grid of 'focal' is not finished \(1 of 3"):
    run_lib.chosen(cfg, {"ce", "focal"})
  with pytest.raises(run_lib.StageError, match=r"unknown losses \['nope'\]"):
    run_lib.run(_config(out, str(tmp_path / "runs"), ("focal,nope",)))  # split on commas


def test_the_test_variant_runs_every_stage_through_the_entry_point(tmp_path):
  """`python -m el_jax.experiment --config=...:test`: the validation grid, the chosen settings
  on the copy task and on label copy (CE with and without warmup), table.json, and an analysis
  of what there is (no label-copy grid, no seed-000 sweep beside it)."""
  out = tmp_path / "out"
  code = experiment.main(["el_jax.experiment",
                          f"--config={ROOT}/experiments/loss_baselines/config.py:test",
                          f"--config.results_dir={out}", f"--config.runs_dir={tmp_path / 'runs'}"])
  assert code in (None, 0)
  for name in ("select", "test", "label_copy", "table"):
    assert (out / f"{name}.json").exists(), name
  with open(out / "analysis.json") as f:
    a = json.load(f)
  assert a["select"]["grid"]["ce"]["chosen"] == "-" and a["select"]["budget"] == {"ce": 1}
  assert list(a["test"]["rows"]) == list(a["label_copy"]["rows"]) == ["ce_no_warmup", "ce"]
  assert a["test"]["family_size"] == {"vs_ce": 1} and a["test"]["best_vs_e1"] is None
  assert a["label_copy_grid"] is None and a["ce_sweep"] is None
  assert a["label_copy"]["two_runs"] is None
  assert (out / "table.png").exists()


# --- the committed results ----------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _committed():
  """(the Sources of results/loss_baselines, its analysis): computed once for these tests (the
  exact permutation tests over 10 vs 10 seeds take seconds)."""
  src = sources.Sources(OUT, root=ROOT)
  return src, analysis.analyze(src, config_file.get_config("cpu"))


def test_the_committed_choices_are_the_validation_selection():
  """results/loss_baselines: each loss's setting is the highest mean validation hard EM of its
  grid (select.json; the means are the per-seed values' means), the choice table.json and the
  chosen-settings files hold."""
  src, a = _committed()
  table = src.load("table.json")
  select = src.load("select.json")["rows"]
  for r in select:
    assert r["aggregate"]["valid_em_hard"]["mean"] == np.mean(r["per_seed"]["valid_em_hard"])
  got = analysis.choices(select)
  assert list(got) == list(GRID)
  for loss, c in got.items():
    assert len(c["scores"]) == len(GRID[loss])
    assert c["scores"][point_name(c["point"])] == max(c["scores"].values()), loss
  assert {k: c["point"] for k, c in got.items()} == table["chosen"]
  for part in ("test", "label_copy"):
    rows = {r["label"]: r for r in src.load(f"{part}.json")["rows"]}
    assert len(rows) == len(GRID) + 1  # every loss and CE without warmup
    assert {k: rows[k]["point"] for k in GRID} == table["chosen"]


def test_the_committed_comparisons_are_the_analysis_families():
  """Every comparison test.json / label_copy.json stored (with its Holm-adjusted p) is the
  analysis's `stats.family` of the per-seed values beside it; the best of seed 001's losses is
  the highest mean hard-test EM among them."""
  src, a = _committed()
  for part in ("test", "label_copy"):
    doc = src.load(f"{part}.json")
    fam = analysis.families(doc["rows"])
    assert list(fam) == list(doc["comparisons"]) == ["vs_ce", "vs_ce_warmup",
                                                     "best_baseline_vs_e1"]
    assert [len(fam["vs_ce"]), len(fam["vs_ce_warmup"])] == [len(GRID), len(GRID) - 1]
    for name, cs in fam.items():
      for c, stored in zip(cs, doc["comparisons"][name], strict=True):
        assert stored["metric"] == "test_em_hard"
        want = {k: v for k, v in stored.items() if k != "metric"}
        assert {k: c[k] for k in want} == want, (part, name, c["a"])
    (c,) = fam["best_baseline_vs_e1"]
    seed001 = [r for r in doc["rows"] if r["label"] not in ("ce_no_warmup", "ce", "e1", "e2",
                                                            "e3")]
    assert len(seed001) == len(GRID) - 4
    best = max(seed001, key=lambda r: np.mean(r["per_seed"]["test_em_hard"]))
    assert (c["a"], c["b"]) == (best["label"], "e1")
    assert a[part]["best_vs_e1"] == c


def _page():
  with open(os.path.join(ROOT, "docs", "results", "seed001_baselines.md")) as f:
    return " ".join(f.read().split())


def test_the_setting_sentences_hold():
  """"The widened grids changed four choices (label smoothing, spherical Z, spectral
  decoupling and E3), and these four are again at an end of their grid": of the grids with
  more than three points, exactly these chose an end; CE's budget (6 candidates) is at least
  every loss's (3 to 5)."""
  src, a = _committed()
  sel = a["select"]
  page = _page()
  assert sel["at_end"] == ["label_smoothing", "spherical_z", "spectral_decoupling", "e3"]
  assert ("The widened grids changed four choices (label smoothing, spherical Z, spectral "
          "decoupling and E3), and these four are again at an end of their grid") in page
  assert (sel["budget_min"], sel["budget_max"]) == (3, 5)
  assert a["ce_sweep"]["candidates"] >= sel["budget_max"]
  assert f"seeds from {a['ce_sweep']['candidates']} candidates" in page
  assert f"each loss above had {sel['budget_min']} to {sel['budget_max']} candidates" in page


def test_the_copy_task_sentences_hold():
  """Spherical Z-loss and spectral decoupling (seed 001's) and E1 and E3 are the losses whose
  hard-test EM is above CE's after Holm, against either CE row; spherical Z is above E1 at
  p < 0.05 in the one post-hoc comparison; spectral decoupling and E3 are level with E1 (within
  0.05) and their validation EM rose on the widened grid; no other loss differs from CE before
  Holm (the smallest p is label smoothing's, above 0.05); E2 does not help."""
  src, a = _committed()
  t = a["test"]
  rows = t["rows"]
  page = _page()
  assert t["seed001_fixing"] == ["spherical_z", "spectral_decoupling"]
  assert "Two of seed 001's losses, and E3, do what E1 does." in page  # the two above
  assert t["fixes_vs_ce"] == t["fixes_vs_ce_warmup"] == ["spherical_z", "spectral_decoupling",
                                                         "e1", "e3"]
  assert ("spherical Z-loss and spectral decoupling fix the hard strings as E1 + warmup and E3 "
          "+ warmup do; the other baselines do not") in page
  best = t["best_vs_e1"]
  assert best["a"] == "spherical_z" and best["diff"] > 0 and best["p_value"] < 0.05
  assert f"Spherical Z is above E1 (p = {best['p_value']:.2g}, one comparison" in page
  e1 = rows["e1"]["test_em_hard"]["mean"]
  for k in ("spectral_decoupling", "e3"):
    assert abs(rows[k]["test_em_hard"]["mean"] - e1) < 0.05, k  # "level with E1 + warmup's"
  sc = a["select"]["scores"]
  assert sc["spectral_decoupling_lam=1.0"] > sc["spectral_decoupling_lam=0.1"]
  assert sc["e3_b=0.3"] > sc["e3_b=1.0"]
  other = t["others_min_p"]
  assert other["a"] == "label_smoothing" and other["p_value"] > 0.05
  assert f"them: label smoothing's {other['p_value']:.2g})" in page
  e2 = rows["e2"]["vs_ce_warmup"]
  assert e2["diff"] < 0 and e2["p_holm"] > 0.05
  sz = rows["spherical_z"]["vs_ce_warmup"]
  assert stats.at_floor(sz["p_holm"], stats.p_floor("unpaired", 10, 10, m=11))
  assert f"Holm {sz['p_holm']:.2g} (floor of 10 vs 10, Holm over 11)) and untuned CE's" in page
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  assert (f"spherical Z + warmup {sz['mean_a']:.3f} vs CE + warmup {sz['mean_b']:.3f} hard-test EM "
          f"(10 vs 10 seeds, Holm p {sz['p_holm']:.2g}; each tuned on validation, "
          f"{a['select']['budget']['spherical_z']} / {a['ce_sweep']['candidates']} candidates)"
          ) in readme


def test_the_label_copy_sentences_hold():
  """CE copies the label on 99% of the hard examples; seven losses stay above 0.9 (none of
  them differs from either CE row at 0.05 before Holm) and four break, each at the smallest
  5 vs 5 p, not surviving Holm; the two runs of E1 + warmup against CE on KJV are both within
  0.01 of zero, neither survives Holm, their intervals overlap and their per-seed numbers
  differ; the pretrained models' valid CE agree to four decimals."""
  src, a = _committed()
  lc = a["label_copy"]
  rows = lc["rows"]
  page = _page()
  assert round(rows["ce_no_warmup"]["test_em_hard"]["mean"], 2) == 0.99
  assert lc["keep"] == ["label_smoothing", "z_loss", "focal", "gce", "reweight", "e1", "e2"]
  assert ("E1, E2, z-loss, label smoothing, focal, GCE and reweighting all stay between "
          f"{lc['keep_min']:.3f} and {lc['keep_max']:.3f}") in page
  assert lc["keep_min_p_vs_ce"] > 0.05 and lc["keep_min_p_vs_ce_warmup"] > 0.05
  assert lc["break"] == ["spherical_z", "dice", "spectral_decoupling", "e3"]
  for k in lc["break"]:
    c = rows[k]["vs_ce"]
    assert c["p_value"] == rows["dice"]["vs_ce"]["p_value"] and stats.at_floor(c["p_value"],
                                                                              c["p_floor"])
    assert c["p_holm"] == rows["dice"]["vs_ce"]["p_holm"] > 0.05
  assert "(each p = 0.0079, the smallest 5 vs 5 permutation p; Holm 0.095)" in page
  two = lc["two_runs"]
  there, here = two["there"], rows["e1"]["vs_ce"]
  assert abs(there["diff"]) < 0.01 and abs(here["diff"]) < 0.01
  assert there["p_holm"] > 0.05 and here["p_holm"] > 0.05
  assert there["ci95"][0] <= here["ci95"][1] and here["ci95"][0] <= there["ci95"][1]
  assert two["there_e1_by_seed"]["2"] != two["here_e1_by_seed"]["2"]
  assert round(two["pretraining_valid_ce"], 4) == round(a["pretraining"]["valid_ce_text"], 4)
  assert ("Both effects are within 0.01 of zero, neither survives Holm's correction, and their "
          "intervals overlap") in page
