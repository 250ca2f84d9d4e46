"""Sentence checks of the results pages that still read the legacy placeholders
(`el_jax/report/legacy.py`): each moves to its experiment's folder with its section."""
import json
import os
import re
import shutil
import pytest
from el_jax.report import legacy as report


ROOT = report.ROOT


DOCS = os.path.join(ROOT, report.DOCS)


def _copy_root(tmp_path):
  """A copy of what the generator reads (results/, docs/results/, the linked docs) under tmp."""
  shutil.copytree(os.path.join(ROOT, report.RESULTS), tmp_path / report.RESULTS)
  shutil.copytree(DOCS, tmp_path / report.DOCS)
  shutil.copy(os.path.join(ROOT, report.README), tmp_path / report.README)
  return tmp_path


def _page_text(page):
  """docs/results/<page> with its whitespace collapsed (a sentence may wrap anywhere)."""
  with open(os.path.join(DOCS, page)) as f:
    return " ".join(f.read().split())


def _assert_page_says(page, *phrases):
  text = _page_text(page)
  for said in phrases:
    assert said in text, said


def _num(s):
  return [float(x) for x in re.findall(r"\d+\.\d+|\d+", s)]


def test_the_papers_numbers_match_the_copies_the_scripts_wrote():
  """report.PAPER (typed from the seed texts) against the `paper` fields some JSON carry."""
  emb = json.load(open(os.path.join(ROOT, "results/mlm_flatness/embedded_hmm.json")))["paper"]
  assert _num(report.PAPER["s002.fig5.trace"][0]) == emb["trace"]
  assert _num(report.PAPER["s002.fig5.probe"][0]) == emb["probe"]


def test_path_language_and_formats():
  data = {"runs": [{"label": "CE k=1", "seed": 2, "m": {"data.k": 55, "v": 0.5}},
                   {"label": "E1 k=1", "seed": 3, "m": {"data.k": 110, "v": 0.25}},
                   {"label": "E1 k=2", "seed": 6, "m": {"data.k": 110, "v": 0.75}}],
          "d": {"a b": [1, 2, 3, 4], "2": "two"}}

  def get(path):
    return report.walk(data, report.parse_path(path), "x.json")[0]
  assert get('runs[label="E1 k=2"].seed') == 6
  assert get("runs[?seed<=3].m.v") == [0.5, 0.25]
  assert get("runs[?label^=E1].m.v") == [0.25, 0.75]
  assert get("runs[?m.data.k>55][seed=3].label") == "E1 k=1"
  assert get('d["a b"][1:3]') == [2, 3]
  assert get("d.2") == "two" and get("d[2]") == "two"
  assert get("runs[*].seed") == [2, 3, 6]
  data["runs"][1]["vs"] = {"p": 0.5, "q": 0.25}
  assert get("runs[?vs].vs[*]") == [0.5, 0.25]  # elements that have the key; [*] flattens
  assert report.apply_ops([2, 3, 6], ["mean", "f2"], "w") == "3.67"
  assert report.apply_ops(0.000123, ["p"], "w") == "0.00012"
  assert report.apply_ops(-0.0004, ["+f3"], "w") == "-0.000"
  assert report.apply_ops({"mean": 0.5, "min": 0.25, "max": 0.75}, ["mr2"], "w") == \
      "0.50 (0.25, 0.75)"
  assert report.apply_ops([0.1, -0.2], ["ci2"], "w") == "[+0.10, -0.20]"
  assert report.apply_ops(list(range(2, 12)), ["seeds"], "w") == "2-11"
  assert report.apply_ops([0, 1], ["seeds"], "w") == "0, 1"
  assert report.apply_ops(1234567, ["int"], "w") == "1,234,567"
  assert report.apply_ops(0.6, ["pct0"], "w") == "60%"
  assert report.apply_ops(1.234, ["x2"], "w") == "1.23x"
  with pytest.raises(report.ReportError, match="matches 2 elements"):
    get("runs[m.data.k=110]")
  with pytest.raises(report.ReportError, match="needs a format"):
    report.apply_ops(0.5, [], "w")
  with pytest.raises(report.ReportError, match="unknown format"):
    report.apply_ops(0.5, ["q7"], "w")


def test_a_list_is_formatted_element_by_element():
  assert report.format_value([0.1, -0.25], "+f3", "x") == "+0.100 / -0.250"
  assert report.format_value(["k=1", "k=2"], "text", "x") == "k=1 / k=2"
  assert report.format_value([0.5, 1e-5], "p", "x") == "0.5 / 1e-05"
  assert report.format_value([2, 3, 4], "seeds", "x") == "2-4"  # seeds take the whole list
  assert report.format_value([-0.01, 0.02], "ci3", "x") == "[-0.010, +0.020]"
  # scaling ops too (100 * a list would repeat the list)
  assert report.apply_ops([0.5617, 0.0002], ["x100", "f1"], "x") == "56.2 / 0.0"
  assert report.apply_ops([120.0, 30.0], ["minutes", "f1"], "x") == "2.0 / 0.5"


def test_claims_follow_their_numbers(tmp_path):
  """Sentences that say "no ratio" are generated from the JSON with their condition: change the
  numbers and the words change."""
  root = _copy_root(tmp_path)
  R = report.Results(str(root))
  # B.1 against Hutchinson: no ratio while Hutchinson's estimate is within 2 stderr of 0.
  assert "no ratio" in report.TABLES["b1_vs_hutchinson"](R, "training_pcfg.json", "0")
  assert "a ratio of" in report.TABLES["b1_vs_hutchinson"](R, "training_hmm.json", "0")


def test_p_values_at_their_floor_say_so():
  c = {"diff": 0.4, "ci95": [0.3, 0.5], "p_value": 2 / 252, "p_holm": 3 * 2 / 252, "n_a": 5,
       "n_b": 5}
  assert report.cmp_cell(c, m=3) == ("+0.400 [+0.300, +0.500], p = 0.0079 (floor of 5 vs 5) "
                                     "(Holm 0.024 (floor of 5 vs 5, Holm over 3))")
  c3 = {"diff": 0.006, "ci95": [0.001, 0.01], "p_value": 0.1, "p_holm": 0.3, "n_a": 3, "n_b": 3}
  assert report.cmp_cell(c3, m=3) == ("+0.006, p = 0.1 (floor of 3 vs 3) "
                                      "(Holm 0.3 (floor of 3 vs 3, Holm over 3))")
  assert report.ci_cell(c3) == "none at n = 3"
  assert report.p_note({**c, "p_value": 0.2}) == "0.2"


def test_the_pcfg_probe_sentences_hold_for_every_model():
  """The seed-002 page says that every trained PCFG model of Figure 3 probes below its own
  random init on task C: checked here against the committed JSON, model by model (Tables 1-2's
  sentences: experiments/adversarial_pretraining)."""
  res = os.path.join(ROOT, report.RESULTS)
  fig3 = json.load(open(os.path.join(res, "mlm_flatness", "training_pcfg.json")))
  last = max(p["sgd_step"] for p in fig3["points"])
  for p in fig3["points"]:
    if p["sgd_step"] == last:
      init = fig3["sanity"]["C"]["random_init"][str(p["seed"])]["test_acc_mean"]
      assert p["probe"]["C"]["test_acc_mean"] < init, p["seed"]
  _assert_page_says("seed002_flatness.md", "Every trained model's task-C probe")

