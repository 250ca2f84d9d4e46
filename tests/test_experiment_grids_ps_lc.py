"""experiments/path_star_table1.py and experiments/label_copy.py on el_jax.run.grid: at test size
each writes the grid's row schema, its per-seed numbers are those of `runner.run_or_reuse` of
the same config, and its Holm p-values are `stats.holm` over each family; the committed JSON
(converted from the pre-grid schema) recomputes from its per-seed values."""
import json
import os

from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import runner
from el_jax.report import stats

import pins  # tests/pins.py
import reliability  # tests/reliability.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_script = reliability.experiment_script


def _check_document(doc, n_rows):
  assert isinstance(doc["rows"], list) and len(doc["rows"]) == n_rows
  for r in doc["rows"]:
    assert set(grid_lib.ROW_FIELDS) <= set(r), r["label"]
    for m, col in r["per_seed"].items():
      assert len(col) == len(r["seeds"]), (r["label"], m)
  rows = {r["label"]: r for r in doc["rows"]}
  for family, comps in doc["comparisons"].items():
    for c in comps:
      got = stats.compare(rows[c["a"]]["per_seed"][c["metric"]],
                          rows[c["b"]]["per_seed"][c["metric"]])
      assert {k: c[k] for k in got} == got, (family, c["a"], c["b"])
    assert [c["p_holm"] for c in comps] == stats.holm([c["p_value"] for c in comps]), family
  return rows


def _same_as_a_direct_run(row, workdir):
  """The row's per-seed values are those of runner.run_or_reuse of its config, trained
  afresh in `workdir`."""
  cfg = grid_lib.make_config(row["config_name"], row["variant"], row["overrides"], row["seeds"])
  cfg.progress = False
  assert not config_lib.config_diff(config_lib.flatten(row["config"]),
                                    config_lib.flatten(config_lib.config_dict(cfg)))
  summary = runner.run_or_reuse(cfg, str(workdir), verbose=False)
  assert row["per_seed"] and summary["per_seed"]
  for m, col in row["per_seed"].items():
    assert col == [f[m] for f in summary["per_seed"]], m
  assert row["aggregate"] == summary["aggregate"]


def test_label_copy_grid_at_test_size(tmp_path):
  """The from-scratch runs on KJV, 2 seeds: the grid's rows, the two Holm families and a
  direct run of its first config."""
  lc = _script("label_copy")
  doc = lc.main(["--size=test", "--texts=kjv", "--starts=scratch", "--seeds=0,1", "--runs_dir",
                 str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
  with open(tmp_path / "out" / "table.json") as f:
    assert json.load(f) == json.loads(json.dumps(doc))
  rows = _check_document(doc, 2)
  assert list(rows) == ["kjv_scratch_ce", "kjv_scratch_e1_warmup"]
  pins.check("label_copy/table", doc["rows"])
  assert set(doc["comparisons"]) == set(lc.COMPARED)
  for comps in doc["comparisons"].values():
    assert [(c["a"], c["b"]) for c in comps] == [("kjv_scratch_e1_warmup", "kjv_scratch_ce")]
  for r in rows.values():
    assert r["variant"] == "test" and r["seeds"] == [0, 1] and r["start"] == "scratch"
    assert r["workdir"] == os.path.join(str(tmp_path / "runs"), r["label"])
    assert set(r["train_seconds_per_seed"]) == {"0", "1"}
    assert "model.pretrained" not in r["overrides"]
  assert rows["kjv_scratch_e1_warmup"]["overrides"]["optim.warmup_steps"] == 4  # half of 8
  assert doc["pretraining"] is None and doc["fine_tuning"]["steps"] == 8
  assert doc["command"] == ("python experiments/label_copy.py --size=test --seeds=0,1 "
                            "--texts=kjv --starts=scratch")
  assert os.path.exists(tmp_path / "out" / "table.png")
  _same_as_a_direct_run(doc["rows"][0], tmp_path / "direct")


def test_committed_results_recompute_from_their_per_seed_values():
  """The converted JSON: aggregates of the per-seed metrics are stats.aggregate of them,
  each comparison stats.compare of its pair, p_holm stats.holm over its family."""
  for rel, n in (("label_copy/table.json", 8),):
    with open(os.path.join(ROOT, "results", rel)) as f:
      doc = json.load(f)
    rows = _check_document(doc, n)
    for r in rows.values():
      k = len(r["seeds"])
      got = stats.aggregate([{m: col[i] for m, col in r["per_seed"].items()} for i in range(k)])
      assert got == {m: r["aggregate"][m] for m in r["per_seed"]}, (rel, r["label"])
