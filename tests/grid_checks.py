"""Checks of an experiment's grid rows (el_jax.run.grid) shared by the experiments' tests."""
from el_jax.report import stats
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import runner


def check_rows(doc, labels):
  """The grid's rows: the schema of el_jax.run.grid, in the order declared; {label: row}."""
  assert [r["label"] for r in doc["rows"]] == labels
  for r in doc["rows"]:
    assert set(grid_lib.ROW_FIELDS) <= set(r), r["label"]
    assert r["per_seed"] and all(len(c) == len(r["seeds"]) for c in r["per_seed"].values())
    finals = [{m: col[i] for m, col in r["per_seed"].items()} for i in range(len(r["seeds"]))]
    got = stats.aggregate(finals)
    assert got and {m: r["aggregate"][m] for m in got} == got, r["label"]
  return {r["label"]: r for r in doc["rows"]}


def same_as_a_direct_run(row, workdir):
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
