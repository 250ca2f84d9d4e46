"""experiments/copy_task_suite.py and experiments/copy_task_cpu_sweep.py on `el_jax.run.grid`, at
`--size=test`: the JSON they write has the grid's schema, its per-seed numbers are those of a
direct `job.train_and_evaluate` of the same config (the scripts add nothing to them), and the
comparisons carry Holm's adjustment over each table."""
import json
import os
import shutil

import pytest

from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import job
from el_jax.run import runner
from el_jax.report import stats
import pins  # tests/pins.py
import reliability
import shared_fixtures  # tests/shared_fixtures.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T3 = ["CE (no warmup)", "E1 + warmup, lam=1"]


_script = reliability.experiment_script


def _in(tmp, fn):
  cwd = os.getcwd()
  os.chdir(tmp)  # the scripts train in runs/ under the working directory
  try:
    return fn()
  finally:
    os.chdir(cwd)


def _sweep_points(sweep):
  return (sweep.name_of(next(sweep.points("scan", "test"))),
          sweep.name_of(next(sweep.points("scan2", "test"))))


def _forbidden(*a, **k):
  raise AssertionError("trained a run that should have been read back")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
  """Both scripts at --size=test: two Table 3 runs (trained), Figure 1's k=1 runs (read back
  from Table 3's), one run of each sweep stage (read back: Table 3's CE and E1 + warmup
  runs are the same training) and the selection; and one direct training (once per
  session)."""
  suite, sweep = _script("copy_task_suite"), _script("copy_task_cpu_sweep")
  tmp, docs, direct = shared_fixtures.once_per_session(tmp_path_factory, "copy_grids", _build)
  return tmp, suite, sweep, docs, direct


def _build(tmp):
  suite, sweep = _script("copy_task_suite"), _script("copy_task_cpu_sweep")
  scan, scan2 = _sweep_points(sweep)

  def go():
    suite.main(["--stage=table3", "--size=test", "--out=out", "--runs", *T3])
    t3 = _rows(json.load(open("out/table3.json")))
    train = job.train_and_evaluate
    job.train_and_evaluate = _forbidden
    try:
      suite.main(["--stage=fig1_context", "--size=test", "--out=out", "--runs", "CE k=1",
                  "E1+warmup k=1"])
      # The sweep's CE at one string per context and its E1, lam 1 + 750 (here 4) warmup
      # steps train what Table 3's CE and E1 + warmup, lam=1 trained (with another evaluation
      # cadence): their folders, where the sweep reads finished runs back (the older layout
      # <stage>/<point>/<loss>), stand in for training them again.
      shutil.copytree(t3["CE (no warmup)"]["workdir"], f"runs/sweep/scan/{scan}/ce")
      shutil.copytree(t3["E1 + warmup, lam=1"]["workdir"],
                      f"runs/sweep/scan2/{scan2}/e1_lam1_warmup750")
      sweep.main(["--stage=scan", "--size=test", "--out=sweep", "--runs", f"{scan} ce"])
      sweep.main(["--stage=scan2", "--size=test", "--out=sweep", "--runs",
                  f"{scan2} e1_lam1_warmup750"])
      sweep.main(["--stage=select", "--size=test", "--out=sweep"])
    finally:
      job.train_and_evaluate = train
  _in(tmp, go)
  docs = {name: json.load(open(tmp / path)) for name, path in (
      ("table3", "out/table3.json"), ("fig1_context", "out/fig1_context.json"),
      ("scan", "sweep/scan.json"), ("scan2", "sweep/scan2.json"),
      ("selection", "sweep/selection.json"))}
  # A direct training of the script's "E1 + warmup, lam=1" run, in a fresh folder.
  row = _rows(docs["table3"])["E1 + warmup, lam=1"]
  cfg = grid_lib.make_config(row["config_name"], row["variant"], row["overrides"], row["seeds"])
  suite.configure(None, cfg)
  assert config_lib.config_dict(cfg) == row["config"]
  direct = job.train_and_evaluate(cfg, str(tmp / "direct"))
  return tmp, docs, grid_lib.per_seed_columns(direct["per_seed"])


def _rows(doc):
  return {r["label"]: r for r in doc["rows"]}


def test_the_json_has_the_grid_schema(ran):
  tmp, suite, sweep, docs, _ = ran
  for name in ("table3", "fig1_context", "scan", "scan2"):
    doc = docs[name]
    assert set(doc) >= {"rows", "comparisons", "stage", "size", "variant", "command"}
    assert doc["stage"] == name and doc["size"] == "test" and doc["variant"] == "test"
    for r in doc["rows"]:
      assert set(grid_lib.ROW_FIELDS) <= set(r), r["label"]
      assert r["config_name"] == "copy_task" and r["variant"] == "test" and r["seeds"] == [0, 1]
      assert r["config"]["seeds"] == [0, 1]
      for k, col in r["per_seed"].items():
        assert len(col) == 2
        if k in r["aggregate"]:
          assert r["aggregate"][k] == stats.aggregate([{k: float(v)} for v in col])[k]
      assert r["workdir"].startswith("runs" + os.sep)
    pins.check(f"copy_task_suite/{name}" if name in ("table3", "fig1_context")
               else f"copy_task_cpu_sweep/{name}", doc["rows"])
  # rows in the table's order, with the script's extra fields
  t3 = docs["table3"]["rows"]
  assert [r["label"] for r in t3] == [l for l, _, _ in suite.runs("table3", "test") if l in T3]
  for r in t3:
    assert r["paper"] == {l: p for l, _, p in suite.TABLE3}[r["label"]]
    assert r["data_coverage"] == suite.data_coverage(r["overrides"], "test")
    assert r["overrides"]["data.context_len"] == 11  # one string per context, as at cpu size
  scan_point, scan2_point = _sweep_points(sweep)
  (scan,), (scan2,) = docs["scan"]["rows"], docs["scan2"]["rows"]
  assert scan["label"] == f"{scan_point} ce" and scan["loss"] == "ce"
  assert scan["point"] == scan_point == "context_len=11_embed_dim=16_num_layers=2_num_steps=8"
  assert scan["overrides"] == {"data.context_len": 11, "model.embed_dim": 16,
                               "model.num_layers": 2, "train.num_steps": 8, "loss.name": "ce"}
  assert scan2["overrides"] == {"data.context_len": 11, "train.num_steps": 8, "loss.name": "e1",
                                "loss.e1.lam": 1.0, "optim.warmup_steps": 4}
  assert docs["scan"]["comparisons"] == {} and docs["scan2"]["comparisons"] == {}
  for p in ("out/table3.png", "out/fig1.png"):
    assert (tmp / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_per_seed_numbers_are_a_direct_training_of_the_same_config(ran):
  _, _, sweep, docs, direct = ran
  t3 = _rows(docs["table3"])
  assert t3["E1 + warmup, lam=1"]["per_seed"] == direct
  # Figure 1's k=1 runs are Table 3's, read back from their folders, not trained again.
  fig1 = _rows(docs["fig1_context"])
  for label, t3_label in (("CE k=1", "CE (no warmup)"), ("E1+warmup k=1", "E1 + warmup, lam=1")):
    assert fig1[label]["per_seed"] == t3[t3_label]["per_seed"]
    assert fig1[label]["workdir"] == t3[t3_label]["workdir"]
  # The sweep's rows are the numbers of the finished runs it read back (same training as
  # Table 3's, with another evaluation cadence), from where it found them.
  scan_point, scan2_point = _sweep_points(sweep)
  for doc, label, folder in ((docs["scan"], "CE (no warmup)", f"runs/sweep/scan/{scan_point}/ce"),
                             (docs["scan2"], "E1 + warmup, lam=1",
                              f"runs/sweep/scan2/{scan2_point}/e1_lam1_warmup750")):
    (row,) = doc["rows"]
    assert runner.same_training(config_lib.flatten(row["config"]),
                                config_lib.flatten(t3[label]["config"]))
    assert row["config"]["train"]["eval_every"] != t3[label]["config"]["train"]["eval_every"]
    assert row["per_seed"] == t3[label]["per_seed"] and row["workdir"] == folder


def test_comparisons_are_stats_compare_with_holm_over_the_table(ran):
  _, _, _, docs, _ = ran
  rows = _rows(docs["table3"])
  comps = docs["table3"]["comparisons"]["test_em_hard"]
  assert [(c["a"], c["b"]) for c in comps] == [("E1 + warmup, lam=1", "CE (no warmup)")]
  for c in comps:
    want = stats.compare(rows[c["a"]]["per_seed"]["test_em_hard"],
                         rows[c["b"]]["per_seed"]["test_em_hard"])
    assert {k: c[k] for k in want} == want and c["metric"] == "test_em_hard"
  assert [c["p_holm"] for c in comps] == stats.holm([c["p_value"] for c in comps])
  (c,) = docs["fig1_context"]["comparisons"]["test_em_hard"]
  assert (c["a"], c["b"], c["p_holm"]) == ("E1+warmup k=1", "CE k=1", c["p_value"])


def test_selection_is_the_best_validation_mean(ran):
  _, _, sweep, docs, _ = ran
  sel = docs["selection"]
  (e1,) = docs["scan2"]["rows"]  # the scan's one run is CE: not a candidate
  assert sel["context_len"] == 11 and sel["seeds"] == [0, 1]
  assert sel["candidates"] == {"e1_lam1_warmup750": e1["aggregate"]["valid_em_hard"]["mean"]}
  assert sel["chosen_run"] == "e1_lam1_warmup750"
  assert sel["chosen_overrides"] == {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 4}


def test_a_second_run_reuses_the_rows_without_training(ran, tmp_path, monkeypatch):
  tmp, suite, _, docs, _ = ran

  def forbidden(*a, **k):
    raise AssertionError("a row with an identical config was trained again")

  mine = tmp_path / "copy"  # the fixture's folder is shared with the other worker: read only
  shutil.copytree(tmp, mine)
  monkeypatch.setattr(runner, "run_or_reuse", forbidden)
  monkeypatch.setattr(job, "train_and_evaluate", forbidden)
  doc = _in(mine, lambda: suite.run_stage("table3", "out", size="test", labels=T3))
  assert [r["per_seed"] for r in doc["rows"]] == [r["per_seed"] for r in docs["table3"]["rows"]]
  assert doc["comparisons"] == docs["table3"]["comparisons"]


def test_flags(tmp_path, capsys):
  suite, sweep = _script("copy_task_suite"), _script("copy_task_cpu_sweep")
  for mod, stage in ((suite, "table3"), (sweep, "scan")):
    with pytest.raises(SystemExit) as e:  # a partial grid never overwrites the committed JSON
      mod.main([f"--stage={stage}", "--runs", "x"])
    assert e.value.code == 2 and "give --out" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
      mod.main([f"--stage={stage}", f"--out={tmp_path}", "--runs", "nope"])
    assert e.value.code == 2 and "unknown runs ['nope']" in capsys.readouterr().err


def test_test_size_scales_the_cpu_grid():
  suite = _script("copy_task_suite")
  cpu, test = suite.runs("fig1_width", "cpu"), suite.runs("fig1_width", "test")
  assert [l for l, _, _ in cpu][:2] == ["CE k=1 d=256", "CE k=8 d=256"]
  assert [l for l, _, _ in test][:2] == ["CE k=1 d=32", "CE k=8 d=32"]
  assert [o for _, o, _ in test][1] == {"data.context_len": 88, "loss.name": "ce",
                                        "model.embed_dim": 32}
  assert [o for _, o, _ in suite.runs("table3", "cpu")] == [lo for _, lo, _ in suite.TABLE3]
  assert [o for _, o, _ in suite.runs("table3", "test")][0] == {
      "data.context_len": 11, "loss.name": "e1", "loss.e1.lam": 2.0}


def test_select_on_the_committed_sweep_gives_the_committed_choice(tmp_path, capsys):
  sweep = _script("copy_task_cpu_sweep")
  committed = os.path.join(ROOT, "results", "copy_task_cpu_sweep")
  for stage in ("scan", "scan2", "scan3"):
    shutil.copy(os.path.join(committed, f"{stage}.json"), tmp_path)
  got = sweep.select(str(tmp_path))
  assert got == json.load(open(os.path.join(committed, "selection.json")))
  os.remove(tmp_path / "scan3.json")  # without CE's extra settings: E1's choice alone
  got = sweep.select(str(tmp_path))
  assert got["chosen_run"] == "e1_lam1_warmup750" and "ce_chosen_run" not in got
  assert got["budget"] == {"e1": 6, "ce": 3}

