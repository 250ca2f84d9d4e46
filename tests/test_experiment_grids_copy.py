"""experiments/copy_task_suite.py on `el_jax.run.grid`, at
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


def _forbidden(*a, **k):
  raise AssertionError("trained a run that should have been read back")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
  """The script at --size=test: two Table 3 runs (trained), Figure 1's k=1 runs (read back
  from Table 3's); and one direct training (once per session)."""
  suite = _script("copy_task_suite")
  tmp, docs, direct = shared_fixtures.once_per_session(tmp_path_factory, "copy_grids", _build)
  return tmp, suite, None, docs, direct


def _build(tmp):
  suite = _script("copy_task_suite")

  def go():
    suite.main(["--stage=table3", "--size=test", "--out=out", "--runs", *T3])
    t3 = _rows(json.load(open("out/table3.json")))
    train = job.train_and_evaluate
    job.train_and_evaluate = _forbidden
    try:
      suite.main(["--stage=fig1_context", "--size=test", "--out=out", "--runs", "CE k=1",
                  "E1+warmup k=1"])
    finally:
      job.train_and_evaluate = train
  _in(tmp, go)
  docs = {name: json.load(open(tmp / path)) for name, path in (
      ("table3", "out/table3.json"), ("fig1_context", "out/fig1_context.json"))}
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
  for name in ("table3", "fig1_context"):
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
    pins.check(f"copy_task_suite/{name}", doc["rows"])
  # rows in the table's order, with the script's extra fields
  t3 = docs["table3"]["rows"]
  assert [r["label"] for r in t3] == [l for l, _, _ in suite.runs("table3", "test") if l in T3]
  for r in t3:
    assert r["paper"] == {l: p for l, _, p in suite.TABLE3}[r["label"]]
    assert r["data_coverage"] == suite.data_coverage(r["overrides"], "test")
    assert r["overrides"]["data.context_len"] == 11  # one string per context, as at cpu size
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
  suite = _script("copy_task_suite")
  for mod, stage in ((suite, "table3"),):
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

