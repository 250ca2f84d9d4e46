"""experiments/label_copy: at test size the grid writes its row schema, its per-seed numbers
are those of `runner.run_or_reuse` of the same config (and the pinned ones); the pretraining
exports the small GPT-2 where the other experiments read it; the committed table.json
recomputes from its per-seed values and its comparisons are the analysis's `stats.family`;
each sentence of the page's section holds on the committed analysis. (The label-copy task,
its data and the tokenizer: tests/test_label_copy.py.)"""
import json
import os

import pytest

from el_jax import experiment
from el_jax.report import papers
from el_jax.report import sources
from el_jax.report import stats
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import runner

import pins  # tests/pins.py

from experiments.label_copy import analysis
from experiments.label_copy import config as config_file
from experiments.label_copy import run as run_lib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMMITTED = os.path.join(ROOT, "results", "label_copy")
PINS = os.path.join(HERE, "pins.json")


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


def test_the_grid_at_test_size(tmp_path):
  """The `test` variant (from scratch on KJV, 2 seeds) through the entry point: the grid's
  rows, the two Holm families, the pinned numbers, the analysis and a direct run of its first
  config."""
  out = tmp_path / "out"
  argv = ["el_jax.experiment", f"--config={HERE}/config.py:test", f"--config.results_dir={out}",
          f"--config.runs_dir={tmp_path / 'runs'}"]
  assert experiment.main(argv) in (None, 0)
  with open(out / "table.json") as f:
    doc = json.load(f)
  rows = _check_document(doc, 2)
  assert list(rows) == ["kjv_scratch_ce", "kjv_scratch_e1_warmup"]
  pins.check("label_copy/table", doc["rows"], PINS)
  assert set(doc["comparisons"]) == set(run_lib.COMPARED)
  for comps in doc["comparisons"].values():
    assert [(c["a"], c["b"]) for c in comps] == [("kjv_scratch_e1_warmup", "kjv_scratch_ce")]
  for r in rows.values():
    assert r["variant"] == "test" and r["seeds"] == [0, 1] and r["start"] == "scratch"
    assert r["workdir"] == os.path.join(str(tmp_path / "runs"), r["label"])
    assert set(r["train_seconds_per_seed"]) == {"0", "1"}
    assert "model.pretrained" not in r["overrides"]
  assert rows["kjv_scratch_e1_warmup"]["overrides"]["optim.warmup_steps"] == 4  # half of 8
  assert doc["pretraining"] is None and doc["fine_tuning"]["steps"] == 8
  assert doc["command"] == run_lib.COMMAND
  assert doc["paper_table2"] == {"kjv": {"ce": 0.863, "e1_warmup": 0.981},
                                 "shakespeare": {"ce": 0.703, "e1_warmup": 0.766}}
  assert os.path.exists(out / "table.png")
  with open(out / "analysis.json") as f:
    a = json.load(f)
  for m, comps in doc["comparisons"].items():
    (c,) = a["comparisons"][m]
    assert {k: c[k] for k in ("a", "b", "diff", "p_value", "p_holm", "ci95")} == {
        k: comps[0][k] for k in ("a", "b", "diff", "p_value", "p_holm", "ci95")}
  # A direct run of the first config gives the same numbers.
  row = doc["rows"][0]
  cfg = grid_lib.make_config(row["config_name"], row["variant"], row["overrides"], row["seeds"])
  cfg.progress = False
  assert not config_lib.config_diff(config_lib.flatten(row["config"]),
                                    config_lib.flatten(config_lib.config_dict(cfg)))
  summary = runner.run_or_reuse(cfg, str(tmp_path / "direct"), verbose=False)
  for m, col in row["per_seed"].items():
    assert col == [f[m] for f in summary["per_seed"]], m
  assert row["aggregate"] == summary["aggregate"]


def test_the_small_gpt2_is_exported_where_the_other_experiments_read_it(monkeypatch):
  """`cpu` and `pretrain` pretrain configs/text_lm.py:cpu in runs/label_copy/text_lm and
  export it to runs/label_copy/small_gpt2 (what loss_baselines, scale_trends and
  mlm_convergence read), and the pretrained runs fine-tune from exactly that folder;
  `pretrain` trains nothing else; `paper` fine-tunes from a given GPT-2 and pretrains none."""
  calls = []
  monkeypatch.setattr(run_lib.runner, "pretrain_and_export", lambda cfg, workdir, export: (
      calls.append((cfg.train.num_steps, workdir, export)) or {"aggregate": {}}))
  assert run_lib.run(config_file.get_config("pretrain")) is None
  text_lm = config_lib.get_config("text_lm", "cpu")
  assert calls == [(text_lm.train.num_steps, os.path.join("runs", "label_copy", "text_lm"),
                    os.path.join("runs", "label_copy", "small_gpt2"))]
  g = run_lib.make_grid(config_file.get_config("cpu"))
  pre = [r for r in g.runs.values() if r.extra["start"] == "pretrained"]
  assert len(pre) == 4 and all(r.overrides["model.pretrained"] == calls[0][2] for r in pre)
  assert len(g.runs) == 8 and all(r.seeds == (0, 1, 2, 3, 4) for r in g.runs.values())
  e1 = g.runs["kjv_scratch_e1_warmup"].overrides
  assert e1["optim.warmup_steps"] == 200 and e1["train.num_steps"] == 400
  paper = config_file.get_config("paper")
  with pytest.raises(SystemExit, match="config.gpt2"):
    run_lib.make_grid(paper)
  paper.gpt2 = HERE  # any folder: the grid only names it
  g = run_lib.make_grid(paper)
  assert [r.extra["start"] for r in g.runs.values()] == ["pretrained"] * 4
  assert all(r.overrides["model.pretrained"] == HERE and r.variant == "paper"
             and "train.num_steps" not in r.overrides for r in g.runs.values())
  assert g.runs["kjv_pretrained_e1_warmup"].overrides["optim.warmup_steps"] == 1000


def test_bad_configs_are_one_line_errors():
  for field, value, msg in (("texts", ("latin",), "config.texts"), ("starts", (), "config.starts"),
                            ("seeds", (), "config.seeds is empty"), ("steps", 1, "config.steps"),
                            ("gpt2", "/nonexistent", "is not a folder")):
    bad = config_file.get_config("test")
    setattr(bad, field, value)
    with pytest.raises(SystemExit, match=msg):
      run_lib.make_grid(bad)
  bad = config_file.get_config("test")
  bad.only = ("kjv_scratch_nope",)
  with pytest.raises(SystemExit, match="unknown runs"):
    run_lib.run(bad)


def test_committed_results_recompute_from_their_per_seed_values():
  """table.json: aggregates of the per-seed metrics are stats.aggregate of them, each stored
  comparison stats.compare of its pair with Holm over its family, and the analysis's
  `stats.family` gives the same numbers; the paper's numbers it carries are papers.PAPER's."""
  with open(os.path.join(COMMITTED, "table.json")) as f:
    doc = json.load(f)
  rows = _check_document(doc, 8)
  for r in rows.values():
    k = len(r["seeds"])
    got = stats.aggregate([{m: col[i] for m, col in r["per_seed"].items()} for i in range(k)])
    assert got == {m: r["aggregate"][m] for m in r["per_seed"]}, r["label"]
  fresh = analysis.comparisons(rows)
  for m, stored in doc["comparisons"].items():
    assert len(stored) == len(fresh[m]) == 4
    for s, c in zip(stored, fresh[m]):
      assert (s["a"], s["b"]) == (c["a"], c["b"])
      for k in ("diff", "p_value", "ci95", "p_holm"):
        assert s[k] == c[k], (m, s["a"], k)
  assert doc["paper_table2"] == run_lib.paper_table2()
  for text, d in doc["paper_table2"].items():
    for loss, v in d.items():
      assert papers.entry(f"s000.t2.{text}.{loss}")[0] == f"{v:.3f}"


def _analysis():
  with open(os.path.join(COMMITTED, "analysis.json")) as f:
    return json.load(f)


def _section():
  with open(os.path.join(ROOT, "docs", "results", "seed000_equal_learning.md")) as f:
    page = f.read()
  start = page.index("## Label copying in natural text: Table 2")
  return " ".join(page[start:page.index("## Scale trends: where does the effect appear?")].split())


def test_the_not_reproduced_sentences_hold():
  """'CE does not fail: it copies the label on 96.1% to 99.7% of the test examples, hard as
  well as easy, from scratch and fine-tuned' (every CE mean, all / easy / hard, above 0.95 and
  above the paper's CE); fine-tuned, E1 + warmup is higher on KJV and 'lower rather than
  higher' on Shakespeare; from scratch 'no significant difference either way' (no p, nor
  Holm p, below 0.05 anywhere)."""
  a, section = _analysis(), _section()
  lo, hi = a["ce_test_em_range"]
  assert f"it copies the label on {100 * lo:.1f}% to {100 * hi:.1f}% of the test" in section
  for r in a["table"]:
    if r["loss"] == "ce":
      for m in ("test_em_all", "test_em_easy", "test_em_hard"):
        assert r[m]["mean"] > 0.95, (r["label"], m)
        assert r[m]["mean"] > papers.value(f"s000.t2.{r['text']}.ce"), (r["label"], m)
  d = a["diff"]["test_em_all"]
  assert d["kjv_pretrained"]["diff"] > 0 and d["shakespeare_pretrained"]["diff"] < 0
  said = f"{d['shakespeare_pretrained']['diff']:+.3f} on Shakespeare, lower rather than higher"
  assert said in section
  for m, cs in a["comparisons"].items():
    for c in cs:
      assert c["p_value"] >= 0.05 and c["p_holm"] >= 0.05, (m, c["a"])
  assert "no significant difference either way" in section
  assert "**Not reproduced.**" in section


def test_the_readme_row_says_what_the_analysis_gives():
  a = _analysis()
  with open(os.path.join(ROOT, "README.md")) as f:
    row = next(l for l in f if l.startswith("| 000 Table 2, label copy |"))
  m, d = a["means"], a["diff"]["test_em_all"]
  assert (f"KJV {m['kjv_pretrained_e1_warmup']:.3f} vs {m['kjv_pretrained_ce']:.3f} "
          f"(p {d['kjv_pretrained']['p_value']:.2g})") in row
  assert "CE does not fail" in row


def test_the_committed_analysis_reads_the_committed_table():
  cfg = config_file.get_config("cpu")
  src = sources.Sources(cfg.results_dir, root=ROOT)
  analysis.analyze(src, cfg)
  assert src.read == ["results/label_copy/table.json"]
