"""experiments/path_star_table1: at test size the grid writes its row schema, its per-seed
numbers are those of `runner.run_or_reuse` of the same config (and the pinned ones), its rows
are reused from the JSON; the committed JSON recomputes from its per-seed values and its
comparisons are the analysis's `stats.family`; each sentence of the page's section holds on
the committed analysis."""
import json
import math
import os

import numpy as np
import pytest

from el_jax import experiment
from el_jax.report import papers
from el_jax.report import sources
from el_jax.report import stats
from el_jax.run import grid as grid_lib

import grid_checks  # tests/grid_checks.py
import pins  # tests/pins.py

from experiments.path_star_table1 import analysis
from experiments.path_star_table1 import config as config_file
from experiments.path_star_table1 import run as run_lib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMMITTED = os.path.join(ROOT, "results", "path_star_table1")
PINS = os.path.join(HERE, "pins.json")


def _check_document(doc, n_rows):
  """Rows of the grid's schema with a value per seed; the stored comparisons are
  `stats.compare` of their pair, Holm over their family."""
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


def test_the_grid_at_test_size(tmp_path):
  """The `test` variant (G(2,3), 2 seeds) through the entry point: the grid's rows and
  comparisons, the pinned numbers, the figures, a direct run of its first config, and its rows
  reused from the JSON when the run folders are gone."""
  out, runs = tmp_path / "out", tmp_path / "runs"
  argv = ["el_jax.experiment", f"--config={HERE}/config.py:test", f"--config.results_dir={out}",
          f"--config.runs_dir={runs}"]
  assert experiment.main(argv) in (None, 0)
  with open(out / "table1.json") as f:
    doc = json.load(f)
  assert doc["size"] == "test" and doc["stage"] == "main"
  assert doc["command"] == run_lib.COMMAND  # results_dir was overridden: no variant named
  rows = _check_document(doc, 3)
  assert list(rows) == ["G(2,3) CE", "G(2,3) CE + warmup", "G(2,3) E1 + warmup"]
  pins.check("path_star_table1/main", doc["rows"], PINS)
  (comps,) = doc["comparisons"].values()
  assert [(c["a"], c["b"]) for c in comps] == [(f"G(2,3) {a}", f"G(2,3) {b}")
                                               for a, b in run_lib.COMPARISONS]
  for r in rows.values():
    assert r["seeds"] == [0, 1] and r["graph"] == "G(2,3)" and r["stage"] == "main"
    assert r["workdir"] == os.path.join(str(runs), "test", grid_lib.slug(r["label"]))
    assert r["test_file"] == "" and r["overrides"]["data.test_file"] == ""
    assert r["test_decision_greedy"] == r["aggregate"]["test_greedy_pos1"]
    assert set(r["train_ce"]) == {"decision", "rest"}
  assert rows["G(2,3) CE"]["paper"] == {"mean": 0.289, "min": 0.123, "max": 0.472}
  assert rows["G(2,3) CE + warmup"]["paper"] is None
  assert rows["G(2,3) E1 + warmup"]["overrides"]["loss.name"] == "e1"
  for name in ("table1.png", "table1_positions.png", "table1_losses.png"):
    assert os.path.exists(out / name), name
  # The analysis of the test run: its comparisons are the stored ones, no earlier files.
  with open(out / "analysis.json") as f:
    a = json.load(f)
  assert a["sources"] == [os.path.relpath(out / "table1.json", ROOT)]
  assert a["before_redesign"] is None and a["long"] is None
  for c, s in zip(a["comparisons"], comps):
    assert {k: c[k] for k in ("a", "b", "diff", "p_value", "p_holm", "ci95")} == {
        k: s[k] for k in ("a", "b", "diff", "p_value", "p_holm", "ci95")}
  grid_checks.same_as_a_direct_run(doc["rows"][0], tmp_path / "direct")
  # Its rows are reused from the JSON (same config) even when the run folders are gone.
  os.rename(runs, tmp_path / "runs_moved")
  cfg = config_file.get_config("test")
  cfg.results_dir, cfg.runs_dir = str(out), str(runs)
  again = run_lib.run(cfg)
  assert again["rows"] == doc["rows"] and again["comparisons"] == doc["comparisons"]
  assert not os.path.exists(runs / "test")


def test_bad_configs_are_one_line_errors():
  cfg = config_file.get_config("test")
  for field, value, msg in (("graphs", ("G(9,9)",), "config.graphs"),
                            ("size", "huge", "config.size"), ("part", "x", "config.part"),
                            ("seeds", (), "config.seeds is empty")):
    bad = config_file.get_config("test")
    setattr(bad, field, value)
    with pytest.raises(SystemExit, match=msg):
      run_lib.make_grid(bad)
  cfg.test_dir = "/nonexistent"
  with pytest.raises(SystemExit, match="reference test set .* not found"):
    run_lib.make_grid(cfg)


def test_every_variant_declares_the_runs_of_its_recipe():
  """cpu: Table 1's three runs on both graphs, seeds 0-4, the shipped reference test sets;
  controls: the two CE controls, seeds 0-2; long: 10,000 steps of G(2,3), seeds 0, 1, into
  long/table1.json; paper: the paper size, apart from the committed rows."""
  g = run_lib.make_grid(config_file.get_config("cpu"))
  assert list(g.runs) == [f"{gr} {r}" for gr in ("G(2,3)", "G(5,3)")
                          for r in ("CE", "CE + warmup", "E1 + warmup")]
  assert all(r.seeds == (0, 1, 2, 3, 4) and r.variant == "cpu"
             and r.overrides["data.test_file"] == "reference" for r in g.runs.values())
  assert g.path == os.path.join("results", "path_star_table1", "table1.json")
  c = run_lib.make_grid(config_file.get_config("controls"))
  assert [r.extra["run"] for r in c.runs.values()] == ["CE, reverse target", "CE, teacherless"] * 2
  assert c.path.endswith("controls.json") and all(r.seeds == (0, 1, 2) for r in c.runs.values())
  long = config_file.get_config("long")
  lg = run_lib.make_grid(long)
  assert lg.path == os.path.join("results", "path_star_table1", "long", "table1.json")
  assert lg.runs["G(2,3) CE"].overrides["train.num_steps"] == 10000
  assert lg.runs["G(2,3) CE"].overrides["train.eval_every"] == 2500
  assert long.graphs == ("G(2,3)",) and long.seeds == (0, 1)
  paper = config_file.get_config("paper")
  assert paper.size == "paper" and paper.results_dir != config_file.get_config("cpu").results_dir


def test_train_ce_summary_is_the_seed_mean_over_each_window(tmp_path):
  rng = np.random.default_rng(0)
  steps = np.arange(25, 1001, 25)
  ce = {(s, k): rng.random(len(steps)) for s in (0, 1, 2) for k in ("ce_decision", "ce_rest")}
  with open(tmp_path / "metrics.jsonl", "w") as f:
    for s in (0, 1, 2):
      for i, t in enumerate(steps):
        f.write(json.dumps({"seed": s, "step": int(t), "kind": "train",
                            "ce_decision": ce[s, "ce_decision"][i],
                            "ce_rest": ce[s, "ce_rest"][i]}) + "\n")
        f.write(json.dumps({"seed": s, "step": int(t), "kind": "eval", "ce_decision": 99.0}) + "\n")
  got = run_lib.train_ce_summary(str(tmp_path), 1000)
  for key, group in (("ce_decision", "decision"), ("ce_rest", "rest")):
    both = np.mean([ce[s, key] for s in (0, 1, 2)], axis=0)
    np.testing.assert_allclose(got[group]["end"], both[steps > 900].mean(), rtol=1e-12)
    np.testing.assert_allclose(got[group]["end_minus_500"],
                               both[(steps > 400) & (steps <= 500)].mean(), rtol=1e-12)
  assert run_lib.train_ce_summary(str(tmp_path / "gone"), 1000) is None
  # A run shorter than 500 steps has no window 500 steps before its end: None, not NaN.
  short = run_lib.train_ce_summary(str(tmp_path), 450)
  assert short["decision"]["end_minus_500"] is None and short["decision"]["end"] is not None


def test_committed_results_recompute_from_their_per_seed_values():
  """table1.json and long/table1.json: aggregates are stats.aggregate of the per-seed values,
  each stored comparison stats.compare of its pair with Holm over the table, and the
  analysis's `stats.family` gives the same numbers."""
  for rel, n in (("table1.json", 6), ("long/table1.json", 2)):
    with open(os.path.join(COMMITTED, rel)) as f:
      doc = json.load(f)
    rows = _check_document(doc, n)
    for r in rows.values():
      k = len(r["seeds"])
      got = stats.aggregate([{m: col[i] for m, col in r["per_seed"].items()} for i in range(k)])
      assert got == {m: r["aggregate"][m] for m in r["per_seed"]}, (rel, r["label"])
  with open(os.path.join(COMMITTED, "table1.json")) as f:
    doc = json.load(f)
  stored = doc["comparisons"]["test_em_all"]
  fresh = analysis.comparisons({r["label"]: r for r in doc["rows"]})
  assert len(stored) == len(fresh) == 6
  for s, c in zip(stored, fresh):
    assert (s["a"], s["b"]) == (c["a"], c["b"])
    for k in ("diff", "p_value", "ci95", "p_holm"):
      assert s[k] == c[k], (s["a"], s["b"], k)


def test_the_papers_numbers_match_the_copies_the_rows_carry():
  """el_jax.report.papers (typed from the seed text) against the `paper` field of each
  committed row."""
  with open(os.path.join(COMMITTED, "table1.json")) as f:
    rows = json.load(f)["rows"]
  for r in rows:
    if r["paper"] is not None:
      assert r["paper"] == run_lib.paper_of(r["graph"], r["run"])
      value = papers.entry(f"s000.t1.{r['graph']}.{r['run']}")[0]
      assert value == f"{r['paper']['mean']:.3f} ({r['paper']['min']:.3f}, {r['paper']['max']:.3f})"
  assert sum(r["paper"] is not None for r in rows) == 4


def _analysis():
  with open(os.path.join(COMMITTED, "analysis.json")) as f:
    return json.load(f)


def _section():
  with open(os.path.join(ROOT, "docs", "results", "seed000_equal_learning.md")) as f:
    page = f.read()
  start = page.index("## Path-star graphs: Table 1")
  return " ".join(page[start:page.index("## Label copying in natural text")].split())


def _committed_rows():
  with open(os.path.join(COMMITTED, "table1.json")) as f:
    return {r["label"]: r for r in json.load(f)["rows"]}


def test_the_paper_does_not_come_out_and_every_run_is_at_one_over_d():
  """'The paper's result does not come out at CPU size': the three runs agree within 0.005 on
  each graph, no comparison below p = 0.05 (even before Holm), every run's test EM within 0.005
  of 1/d; 'every run learns everything but the decision': source and goal right on every test
  graph, the decision right 1/d of the time; train EM above 1/d, validation at it."""
  a, section, rows = _analysis(), _section(), _committed_rows()
  assert "**The paper's result does not come out at CPU size.**" in section
  for g, d in (("G(2,3)", 2), ("G(5,3)", 5)):
    lo, hi = a["test_em_range"][g]
    assert hi - lo < 0.005 and abs(lo - 1 / d) < 0.005 and abs(hi - 1 / d) < 0.005, g
    assert f"between {lo:.4f} and {hi:.4f} on {g}" in section
  assert a["min_p"] >= 0.05 and f"all p >= {a['min_p']:.2g}" in section
  assert all(c["p_holm"] >= 0.05 for c in a["comparisons"])
  for r in rows.values():
    d = int(r["graph"][2])
    agg = r["aggregate"]
    assert agg["test_greedy_pos0"]["mean"] == agg["test_greedy_pos2"]["mean"] == 1.0, r["label"]
    assert abs(agg["test_em_decision"]["mean"] - 1 / d) < 0.005, r["label"]
    assert agg["train_em_all"]["mean"] > 1 / d + 0.02
    assert abs(agg["valid_em_all"]["mean"] - 1 / d) < 0.01
    # after a wrong guess it still ends on the goal: walk_legal = EM
    assert agg["test_walk_legal"]["mean"] == agg["test_em_all"]["mean"], r["label"]
  # the greedy decision is a child of the source on almost every test graph
  assert min(r["decision_legal"] for r in a["rows"].values()) > 0.98
  assert f"the source on {100 * a['rows']['G(2,3) CE']['decision_legal']:.1f}%" in section
  # the paper's CE is below 1/d on both graphs; ours at 1/d
  assert papers.entry("s000.t1.G(2,3).CE")[0].startswith("0.289")
  assert "The paper's CE numbers are *below* 1/d" in section


def test_the_training_losses_sentence_holds():
  """Under CE (and CE + warmup) the later tokens end below 0.01 nats while the decision token
  stays above log d, over a hundred times higher; under E1 + warmup both groups stay within 10%
  of each other, between the page's two numbers."""
  a, section = _analysis(), _section()
  for r in a["train_ce"]:
    d = int(r["graph"][2])
    if r["run"] in ("CE", "CE + warmup"):
      assert r["rest"]["end"] < 0.01 and r["decision"]["end"] > math.log(d) and r["ratio"] > 100
    else:
      assert abs(r["ratio"] - 1) < 0.1
      lo, hi = a["e1_train_ce_end"]
      assert lo <= r["decision"]["end"] <= hi and lo <= r["rest"]["end"] <= hi
  lo, hi = a["e1_train_ce_end"]
  assert f"at {lo:.2f} to {hi:.2f} nats" in section


def test_the_controls_and_the_long_runs_sentences_hold():
  """Controls: reversing the target learns on G(2,3) (test EM above 0.6, its decision CE still
  falling), teacherless stays at 1/d, on G(5,3) neither learns and under 90% of teacherless
  decisions are legal. Long runs: test EM at 1/d for both; under CE the later tokens' CE below
  the 2500-step run's while the decision's levels off just above log 2; under E1 both above 3."""
  a, section = _analysis(), _section()
  ctl = a["before_redesign"]["controls"]
  rev = ctl["G(2,3) CE, reverse target"]
  assert rev["test_em"]["mean"] > 0.6
  assert rev["decision_ce"]["end"] < rev["decision_ce"]["end_minus_500"]
  assert abs(ctl["G(2,3) CE, teacherless"]["test_em"]["mean"] - 0.5) < 0.01
  for run in ("CE, reverse target", "CE, teacherless"):
    assert ctl[f"G(5,3) {run}"]["test_em"]["mean"] <= 0.2
  assert ctl["G(5,3) CE, teacherless"]["legal"] < 0.9
  assert "**reversing the target learns**" in section
  long = {r["run"]: r for r in a["long"]["rows"]}
  for r in long.values():
    assert abs(r["test_em"]["mean"] - 0.5) < 0.005 and r["steps"] == 10000
  short = {r["run"]: r for r in a["train_ce"] if r["graph"] == "G(2,3)"}
  assert long["CE"]["rest"]["end"] < short["CE"]["rest"]["end"]
  ce = long["CE"]["decision"]
  assert math.log(2) < ce["end"] < math.log(2) + 0.1 and abs(ce["end"] - ce["end_minus_500"]) < 0.02
  assert min(long["E1 + warmup"]["decision"]["end"], long["E1 + warmup"]["rest"]["end"]) > 3
  assert "**Four times longer does not change it**" in section


def test_the_readme_row_says_what_the_analysis_gives():
  a = _analysis()
  with open(os.path.join(ROOT, "README.md")) as f:
    row = next(l for l in f if l.startswith("| 000 Table 1, path-star |"))
  want = (f"{a['rows']['G(2,3) E1 + warmup']['test_em']:.3f} vs "
          f"{a['rows']['G(2,3) CE']['test_em']:.3f} on G(2,3)")
  assert want in row and f"smallest p {a['min_p']:.2g}" in row and "every run at 1/d" in row


def test_the_committed_analysis_reads_the_committed_files():
  cfg = config_file.get_config("cpu")
  src = sources.Sources(cfg.results_dir, root=ROOT)
  analysis.analyze(src, cfg)
  assert src.read == ["results/path_star_table1/long/table1.json",
                      "results/path_star_table1/table1.json",
                      "results/path_star_table1/table1_before_redesign.json"]
