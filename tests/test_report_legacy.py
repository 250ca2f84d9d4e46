"""Sentence checks of the results pages that still read the legacy placeholders
(`el_jax/report/legacy.py`): each moves to its experiment's folder with its section."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from el_jax.report import legacy as report
from el_jax.report import stats

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


def test_the_training_change_table_shows_fine_tuning_where_measured(tmp_path):
  """A Figure 1 / 3 file with fine-tuning at both ends gets a fine-tuned row (points, paired
  over model seeds), and one without it keeps its two rows; with three models the paired
  sign-flip p sits at its floor, 0.25, and the table says so and shows no interval."""
  def point(seed, step, trace, probe, ft=None):
    p = {"sgd_step": step, "seed": seed, "trace_b1": trace,
         "probe": {"10": {"test_acc_mean": probe, "test_acc": [probe] * 5}}}
    if ft is not None:
      p["fine_tune"] = {"10": {"test_acc_mean": ft, "test_acc": [ft, ft]}}
    return p
  before = [(10.0, 0.30, 0.57), (11.0, 0.31, 0.56), (9.0, 0.29, 0.58)]
  after = [(8.0, 0.31, 0.62), (9.5, 0.30, 0.61), (7.0, 0.32, 0.63)]
  (tmp_path / report.RESULTS / "mlm_flatness").mkdir(parents=True)
  path = tmp_path / report.RESULTS / "mlm_flatness" / "training_hmm.json"

  def write(with_ft):
    pts = [point(s, x, t, pr, ft if with_ft else None)
           for x, rows in ((0, before), (8, after)) for s, (t, pr, ft) in enumerate(rows)]
    path.write_text(json.dumps({"points": pts, "comparison": {"over": "model seeds"}}))
    return report.TABLES["mlm_training_change"](report.Results(str(tmp_path)), "hmm")

  table = write(False)
  assert "fine-tuned" not in table and table.count("\n") == 3
  assert "| Tr(H) B.1 | 10.0 -> 8.2 | -1.8 | 0 up, 3 down | none at n = 3 | 0.25 (floor of 3 pairs)" in table
  table = write(True)
  assert ("| task 10 fine-tuned (points) | 57.00 -> 62.00 | +5.00 | 3 up, 0 down | none at n = 3 "
          "| 0.25 (floor of 3 pairs) | 0.75 (floor of 3 pairs, Holm over 3) | 3 model seeds |") in table


def test_claims_follow_their_numbers(tmp_path):
  """Sentences that say "met", "not distinguishable", "stays below" or "no ratio" are generated
  from the JSON with their condition: change the numbers and the words change."""
  root = _copy_root(tmp_path)
  # Dyck: the count solution's error above 1% at n = 16 moves its sample need to 32.
  R = report.Results(str(root))
  assert "stays below 1% from n = 32" in report.TABLES["dyck_samples"](R)
  assert report.stays_below({"8": 0.0, "16": 0.0125, "32": 0.0}, 0.01) == 32
  assert report.stays_below({"8": 0.0, "16": 0.0, "32": 0.0}, 0.01) == 8
  assert report.stays_below({"8": 0.0, "16": 0.02}, 0.01) is None
  # B.1 against Hutchinson: no ratio while Hutchinson's estimate is within 2 stderr of 0.
  assert "no ratio" in report.TABLES["b1_vs_hutchinson"](R, "training_pcfg.json", "0")
  assert "a ratio of" in report.TABLES["b1_vs_hutchinson"](R, "training_hmm.json", "0")


def test_the_lstm_6000_step_paragraph_says_what_its_floor_allows():
  """The seed-002 page says the 6000-step LSTMs' "trained above random init" is "not
  significant by design" exactly while the paired sign flip's floor (2 / 2^n) is above 0.05
  (up to 5 models), and "significant at 0.05" exactly when the file's p is below 0.05. The
  README row says its p is at the floor: a model below its init would make that wrong."""
  c = json.load(open(os.path.join(
      ROOT, report.RESULTS, "mlm_flatness", "sharp_bilstm_6k", "pretrained_hmm_sharp.json")))[
      "comparison"]["vs_random_init"]["10"]
  assert c["p_floor"] == pytest.approx(2 / 2 ** c["n"])  # an independent count of the floor
  page = open(os.path.join(DOCS, "seed002_flatness.md")).read()
  text = " ".join(page.split())
  says = '"trained above random init" is not significant by design' in text
  assert says == (c["p_floor"] > 0.05), (c["n"], c["p_floor"])
  # and says it is significant exactly when p is below 0.05 (possible from 6 models on)
  significant = '"trained above random init" is significant at 0.05' in text
  assert significant == (c["p_value"] < 0.05), (c["n"], c["p_value"])
  # the README's index row says the p sits at its floor
  readme = open(os.path.join(ROOT, report.README)).read()
  row = next(l for l in readme.splitlines() if "the paper's LSTM on the same HMM" in l)
  assert f"p {report.pval(c['p_value'])} = floor" in row
  assert c["p_value"] == pytest.approx(c["p_floor"])


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


def test_the_sanity_table_shows_every_row_and_says_when_a_file_has_none(tmp_path):
  """mlm_sanity (issue 34): majority, the block alone, Bayes, the lookup table's and each
  random init's probe, then the trained models' first and last points and fine-tuning, each
  probe with its settings chosen on valid and its features' rank; a file written before the
  sanity rows says so instead of failing; mlm_vs_random_init reads comparison.vs_random_init."""
  def res(acc, whiten=False, rank=None):
    r = {"test_acc_mean": acc, "test_acc_std": 0.01,
         "chosen": {"lr": 0.01, "weight_decay": 0.0, "whiten": whiten}}
    if rank is not None:
      r.update(feature_rank=rank, num_features=2048)
    return r

  def point(seed, step, acc):
    return {"seed": seed, "sgd_step": step, "probe": {"10": res(acc, rank=4)},
            **({"fine_tune": {"10": {"test_acc_mean": 0.05, "test_acc_std": 0.0}}}
               if step != 4 else {})}
  doc = {"figure": "training", "language": "hmm",
         "points": [point(s, t, 0.05 + t / 100) for s in (0, 1) for t in (0, 4, 8)],
         "sanity": {"10": {"num_test": 4000, "majority": 0.01, "block_majority": 0.055,
                           "bayes": 0.105, "lookup_table": res(0.09, True, 2000),
                           "random_init": {"0": res(0.07, True, 2030), "1": res(0.06)},
                           "fine_tune_random_init": {"0": {"test_acc_mean": 0.04,
                                                           "test_acc_std": 0.0}}}},
         "comparison": {"vs_random_init": {"10": {
             "mean_a": 0.13, "mean_b": 0.065, "diff": 0.065, "p_value": 0.5, "n": 2,
             "keys": ["0", "1"], "over": "models and their own inits",
             "trained_above_random_in": 2}}}}
  (tmp_path / report.RESULTS / "mlm_flatness").mkdir(parents=True)
  (tmp_path / report.RESULTS / "mlm_flatness" / "x.json").write_text(json.dumps(doc))
  R = report.Results(str(tmp_path))
  table = report.TABLES["mlm_sanity"](R, "x.json")
  lines = table.splitlines()
  assert lines[0].startswith("| task-10, 4000 test examples |")
  names = [ln.split(" | ")[0][2:] for ln in lines[2:]]
  assert names == ["majority class", "the block alone (majority class of the sentence's block)",
                   "Bayes: posterior of the hidden state (forward-backward)",
                   "lookup table (exact conditionals) probe", "random init (model seed 0) probe",
                   "random init (model seed 1) probe", "trained (model seed 0, step 0) probe",
                   "trained (model seed 0, step 8) probe", "trained (model seed 1, step 0) probe",
                   "trained (model seed 1, step 8) probe",
                   "random init (model seed 0) fine-tuned",
                   "trained (model seed 0, step 0) fine-tuned",
                   "trained (model seed 0, step 8) fine-tuned",
                   "trained (model seed 1, step 0) fine-tuned",
                   "trained (model seed 1, step 8) fine-tuned"]
  assert "| lookup table (exact conditionals) probe | 9.00 (1.00) | whitened, lr 0.01, wd 0 | " \
         "2000 of 2048 |" in table
  assert "| random init (model seed 1) probe | 6.00 (1.00) | standardised, lr 0.01, wd 0 | - |" \
      in table
  assert "| trained (model seed 1, step 8) probe | 13.00 (1.00) | standardised, lr 0.01, wd 0 " \
         "| 4 of 2048 |" in table
  vs = report.TABLES["mlm_vs_random_init"](R, "x.json")
  assert "| task 10 probe: trained - random init | 6.50 -> 13.00 | +6.50 | 0.5 (floor of 2 " \
         "pairs) | 2 of 2 | 2 pairs: models and their own inits |" in vs
  del doc["sanity"]
  (tmp_path / report.RESULTS / "mlm_flatness" / "x.json").write_text(json.dumps(doc))
  assert report.TABLES["mlm_sanity"](report.Results(str(tmp_path)), "x.json").startswith(
      "*No sanity rows*")


def test_a_size_stopped_early_shares_its_architectures_random_init_row(tmp_path):
  """Figures 2 / 5 of several models: a size trained fewer steps ("128/2/4/512@1000") has the
  same random inits as the full one; its init row is shown once, named by the architecture,
  and a size with other inits keeps its own."""
  def res(acc):
    return {"test_acc_mean": acc, "test_acc_std": 0.01, "feature_rank": 9, "num_features": 16}
  sizes = ("64/1/1/256", "128/2/4/512@1000", "128/2/4/512")
  points = [{"size": z, "seed": s, "probe": {"10": res(0.5 + i / 10 + s / 100)}}
            for i, z in enumerate(sizes) for s in (0, 1)]
  inits = {f"{z} seed {s}": res((0.3 if z.startswith("64") else 0.2) + s / 100)
           for z in sizes for s in (0, 1)}
  doc = {"figure": "size", "language": "hmm", "seeds": [0, 1], "points": points,
         "sanity": {"10": {"num_test": 100, "majority": 0.01, "bayes": 0.8,
                           "lookup_table": res(0.6), "random_init": inits}}}
  (tmp_path / report.RESULTS / "mlm_flatness").mkdir(parents=True)
  (tmp_path / report.RESULTS / "mlm_flatness" / "x.json").write_text(json.dumps(doc))
  table = report.TABLES["mlm_sanity"](report.Results(str(tmp_path)), "x.json")
  names = [ln.split(" | ")[0][2:] for ln in table.splitlines()[2:]]
  assert names[-5:] == ["random init (size 64/1/1/256), 2 models probe",
                        "trained, size 64/1/1/256, 2 models probe",
                        "random init (size 128/2/4/512), 2 models probe",
                        "trained, size 128/2/4/512@1000, 2 models probe",
                        "trained, size 128/2/4/512, 2 models probe"], names
  inits["128/2/4/512 seed 1"] = res(0.25)  # other inits: the row is not shared
  (tmp_path / report.RESULTS / "mlm_flatness" / "x.json").write_text(json.dumps(doc))
  table = report.TABLES["mlm_sanity"](report.Results(str(tmp_path)), "x.json")
  names = [ln.split(" | ")[0][2:] for ln in table.splitlines()[2:]]
  assert "random init (size 128/2/4/512@1000), 2 models probe" in names, names
  assert "random init (size 128/2/4/512), 2 models probe" in names, names


def test_probe_tables_show_every_task_of_a_file(tmp_path):
  """--tasks=10,6: mlm_training gives a probe column per task and mlm_sanity a table per task,
  each with that task's numbers (not the first task's twice)."""
  def res(acc):
    return {"test_acc_mean": acc, "test_acc_std": 0.01}

  def point(seed, step):
    return {"seed": seed, "sgd_step": step, "valid_mlm_loss": 3.3, "valid_gap": 0.2,
            "trace_b1": 40.0, "trace_b1_std": 1.0, "trace_hutchinson": 41.0,
            "trace_hutchinson_stderr": 2.0,
            "probe": {"10": res(0.5 + step / 100), "6": res(0.3 + step / 100)}}
  sanity = {t: {"num_test": 4000, "majority": 0.01, "bayes": b, "lookup_table": res(b - 0.1),
                "random_init": {"0": res(b - 0.4)}} for t, b in (("10", 0.8), ("6", 0.7))}
  doc = {"figure": "training", "language": "hmm", "points": [point(0, 0), point(0, 4)],
         "sanity": sanity, "comparison": {}}
  (tmp_path / report.RESULTS / "mlm_flatness").mkdir(parents=True)
  (tmp_path / report.RESULTS / "mlm_flatness" / "x.json").write_text(json.dumps(doc))
  R = report.Results(str(tmp_path))
  training = report.TABLES["mlm_training"](R, "x.json").splitlines()
  assert training[0].endswith("| task 10 probe test acc % (std, 5 seeds) | "
                              "task 6 probe test acc % (std, 5 seeds) |")
  assert training[3].endswith("| 54.00 (1.00) | 34.00 (1.00) |")
  tables = report.TABLES["mlm_sanity"](R, "x.json").split("\n\n")
  assert [tb.splitlines()[0].split(" | ")[0] for tb in tables] == [
      "| task-10, 4000 test examples", "| task-6, 4000 test examples"]
  assert "| Bayes: posterior of the hidden state (forward-backward) | 70.00 |" in tables[1]
  assert "| trained (model seed 0, step 4) probe | 34.00 (1.00) |" in tables[1]
  assert "| trained (model seed 0, step 4) probe | 54.00 (1.00) |" in tables[0]


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


def test_the_hmm_size_sentences_hold():
  """Figures 2 / 5 on the seed-002 page: "every size probes below its own random
  initialisation", "the smaller embedded model is the flatter one" and "the probes are not told
  apart" (p >= 0.05), checked against the committed JSON."""
  res = os.path.join(ROOT, report.RESULTS, "mlm_flatness")
  for name in ("size_hmm.json", "embedded_hmm.json"):
    d = json.load(open(os.path.join(res, name)))
    for p in d["points"]:
      init = d["sanity"]["10"]["random_init"][p["size"]]["test_acc_mean"]
      assert p["probe"]["10"]["test_acc_mean"] < init, (name, p["size"])
  emb = json.load(open(os.path.join(res, "embedded_hmm.json")))["comparison"]
  assert emb["trace_b1"][0] < emb["trace_b1"][1]
  assert emb["probe"]["10"]["p_value"] >= 0.05
  _assert_page_says("seed002_flatness.md",
      "every size probes below its own random initialisation",
      "the smaller embedded model is the flatter one", "the probes are not told apart")


def test_the_hmm_continuation_sentences_hold():
  """Both HMM continuations (SGD, AdamW) on the seed-002 page: the trained models' task-10
  probe at the last checkpoint is "near the block alone's" accuracy (within 1.5 points) and
  "far below the Bayes" one (more than 4 points under), checked against the committed JSON."""
  res = os.path.join(ROOT, report.RESULTS, "mlm_flatness")
  for name in ("training_hmm.json", "training_adamw_hmm.json"):
    d = json.load(open(os.path.join(res, name)))
    c, s = d["comparison"]["vs_random_init"]["10"], d["sanity"]["10"]
    assert abs(c["mean_a"] - s["block_majority"]) < 0.015, name
    assert s["bayes"] - c["mean_a"] > 0.04, name
  text = _page_text("seed002_flatness.md")
  assert text.count("near the block alone's") >= 2 and text.count("far below the Bayes") >= 2


def test_the_init_0_1_continuation_sentences_hold():
  """The seed-002 page's reading of the init-0.1 encoders' continuations, from the committed
  JSON: SGD "the loss stays where AdamW left it" (mean valid loss within 0.005 nats of its
  start) and "Tr(H) does not move" (B.1's Holm p above 0.05, up in at most 4 of 6); AdamW "the
  loss falls a little" (by less than 0.02 nats) and "Tr(H) rises in every model" (6 of 6 up,
  Holm p above 0.05: "not significant after the correction"), "the probes move by less than
  half a point" (the README row: "probes move < 0.5 points", both arms); and every continued model's probe above its random init on both tasks."""
  res = os.path.join(ROOT, report.RESULTS, "mlm_flatness")
  text = _page_text("seed002_flatness.md")
  files = {"sgd": ("sharp_init0.1_sgd/training_hmm_sharp.json", "sgd_step"),
           "adamw": ("sharp_init0.1_adamw/training_adamw_hmm_sharp.json", "adamw_cont_step")}
  got = {}
  for arm, (rel, key) in files.items():
    d = json.load(open(os.path.join(res, rel)))
    first, last = d["comparison"]["valid_mlm_loss"]
    tests = report.mlm_paired(d, key)["tests"]
    got[arm] = (last - first, tests)
    for task in ("10", "6"):
      c = d["comparison"]["vs_random_init"][task]
      assert c["trained_above_random_in"] == c["n"] == 6, (rel, task)
  change, tests = got["sgd"]
  assert abs(change) < 0.005 and tests["trace_b1"]["p_holm"] > 0.05
  assert tests["trace_b1"]["n_up"] <= 4
  assert all(abs(tests[f"probe {t}"]["diff"]) < 0.005 for t in ("10", "6"))  # the README row
  assert "The loss stays where AdamW left it" in text and "Tr(H) does not move" in text
  change, tests = got["adamw"]
  assert -0.02 < change < 0
  assert tests["trace_b1"]["n_up"] == 6 and tests["trace_b1"]["p_holm"] > 0.05
  assert all(abs(tests[f"probe {t}"]["diff"]) < 0.005 for t in ("10", "6"))
  assert "The loss falls a little" in text and "Tr(H) rises in every model" in text
  assert "not significant after the correction" in text
  assert "The probes move by less than half a point" in text


# Fig. 3's protocol (SGD) and Fig. 1's (AdamW) continuing the 12,000-step BERT-masked PCFG
# encoders, task A probed with 100,000 examples: (file, step key, loss bound, B.1's
# (n_up, n_down), the page's phrases).
PCFG_100K_CONTINUATIONS = {
    "sgd": ("pcfg_bert_12k_100k_sgd/training_pcfg.json", "sgd_step", 0.005, (1, 2),
            ("Tr(H) is not told apart", "Two of three models went down, so the prediction "
             "failed on its count", "The probe does not move",
             "Every continued model stays above its random init")),
    "adamw": ("pcfg_bert_12k_100k_adamw/training_adamw_pcfg.json", "adamw_cont_step", 0.01,
              (2, 1), ("Tr(H) is not told apart either",
                       "not lower in two of three models, as predicted",
                       "Neither continuation reproduces Figs. 1 / 3 on the PCFG at this size "
                       "and length")),
}


@pytest.mark.parametrize("arm", sorted(PCFG_100K_CONTINUATIONS))
def test_the_pcfg_100k_continuation_sentences_hold(arm):
  """The seed-002 page's reading of each continuation, from the committed JSON: the loss stays
  where AdamW's pre-training left it (within the bound), Tr(H) B.1 up / down in the counts the
  page gives and its mean change smaller than its own smallest standard deviation over
  repetitions ("not told apart", the README's "inside its spread"), the probe moving by less
  than a point, and every continued model above its random init."""
  rel, key, bound, counts, phrases = PCFG_100K_CONTINUATIONS[arm]
  d = json.load(open(os.path.join(ROOT, report.RESULTS, "mlm_flatness", rel)))
  assert d["pretrain"] == {"data.masking": "bert", "train.num_steps": 12000}
  assert d["args"]["probe_train"] == 100_000 and d["args"]["tasks"] == "A"
  assert d["args"]["continue_with"] == arm
  first, last = d["comparison"]["valid_mlm_loss"]
  assert abs(last - first) < bound
  tests = report.mlm_paired(d, key)["tests"]
  b1 = tests["trace_b1"]
  assert (b1["n_up"], b1["n_down"]) == counts and b1["n"] == 3
  assert abs(b1["diff"]) < min(p["trace_b1_std"] for p in d["points"])
  assert abs(tests["probe A"]["diff"]) < 0.01
  c = d["comparison"]["vs_random_init"]["A"]
  assert c["trained_above_random_in"] == c["n"] == 3
  _assert_page_says("seed002_flatness.md", *phrases)
  with open(os.path.join(ROOT, "README.md")) as f:
    assert "PCFG task A (100k probe), SGD / AdamW: Tr(H) -7.9 / +5.1 (inside its spread)" in f.read()


def test_the_layer_by_layer_probe_sentences_hold():
  """The seed-002 page's layer-by-layer paragraph: on the PCFG the embeddings probe level with
  the random inits' (within a point) and after every block each trained model is below its own
  init by more than 5 points on the mean, with the rank at least halved by the first block; on
  the HMM the trained rank after the first block is 4 and every layer's means are 5-6%."""
  res = os.path.join(ROOT, report.RESULTS, "probe_layers")
  p = json.load(open(os.path.join(res, "pcfg.json")))
  assert abs(p["comparison"]["0"]["C"]["diff"]) < 0.01
  for k in list(p["layers"])[1:]:
    c = p["comparison"][k]["C"]
    assert c["trained_above_random_in"] == 0 and c["diff"] < -0.05, k
  r0 = [v["C"]["feature_rank"] for v in p["layers"]["0"]["trained"].values()]
  r1 = [v["C"]["feature_rank"] for v in p["layers"]["1"]["trained"].values()]
  assert max(r1) < min(r0) / 2
  h = json.load(open(os.path.join(res, "hmm.json")))
  assert {v["10"]["feature_rank"] for v in h["layers"]["1"]["trained"].values()} == {4}
  for c in h["comparison"].values():
    assert 0.05 <= c["10"]["mean_a"] < 0.06 and 0.05 <= c["10"]["mean_b"] < 0.06
  _assert_page_says("seed002_flatness.md",
      "the first block is where the task is lost", "no later block brings it back",
      "every layer of both models probes at 5-6%")


def test_the_sharp_size_sentences_hold():
  """The seed-002 page's reading of Figures 2 / 5 on the sharp HMM's init-0.1 encoders, from
  the committed JSON, recomputed from the per-model points (NumPy means, `stats.compare`):
  "every model probes above its own random init" (both tasks, every size and seed); "at
  near-equal loss the larger model probes worse" (the 1000-step 128-wide models' loss not told
  apart from the 64-wide ones', both tasks' probes lower at Holm p < 0.05); "trained six
  times longer, the larger model reaches a lower loss and probes better" (loss lower at p <
  0.05, both probes higher on the mean); and the Figure 5 sentence's direction."""
  res = os.path.join(ROOT, report.RESULTS, "mlm_flatness", "sharp_init0.1_sizes")
  d = json.load(open(os.path.join(res, "size_hmm_sharp.json")))
  text = _page_text("seed002_flatness.md")
  small, equal, long_ = d["comparison"]["sizes"]
  assert (small, equal, long_) == ("64/1/1/256", "128/2/4/512@1000", "128/2/4/512")
  seeds = d["seeds"]
  assert seeds == [0, 1, 2, 3, 4, 5]
  by = {(p["size"], p["seed"]): p for p in d["points"]}
  for (size, seed), p in by.items():
    for t in ("10", "6"):
      init = d["sanity"][t]["random_init"][f"{size} seed {seed}"]["test_acc_mean"]
      assert p["probe"][t]["test_acc_mean"] > init, (size, seed, t)

  def col(size, fn):
    return [fn(by[size, s]) for s in seeds]

  def vs(size, fn):
    return stats.compare(col(size, fn), col(small, fn))
  got = d["comparison"]["vs_first"]
  for size in (equal, long_):
    for q, fn in (("valid_mlm_loss", lambda p: p["valid_mlm_loss"]),
                  ("probe 10", lambda p: p["probe"]["10"]["test_acc_mean"]),
                  ("probe 6", lambda p: p["probe"]["6"]["test_acc_mean"])):
      want = vs(size, fn)
      assert {k: got[size][q][k] for k in want} == want, (size, q)
      assert got[size][q]["mean_a"] == pytest.approx(sum(col(size, fn)) / len(seeds))
  assert got[equal]["valid_mlm_loss"]["p_value"] >= 0.05
  assert all(got[equal][f"probe {t}"]["diff"] < 0 and got[equal][f"probe {t}"]["p_holm"] < 0.05
             for t in ("10", "6"))
  assert got[long_]["valid_mlm_loss"]["diff"] < 0 and got[long_]["valid_mlm_loss"]["p_value"] < 0.05
  assert all(got[long_][f"probe {t}"]["diff"] > 0 for t in ("10", "6"))
  for phrase in ("Every model probes above its own random init",
                 "At near-equal loss the larger model probes worse",
                 "Trained six times longer, the larger model reaches a lower loss, and its probes "
                 "are higher on the mean",
                 "Fig. 2 **no** (at near-equal loss the larger model probes worse",
                 "the larger natural models are the sharper ones and probe worse",
                 "Fig. 5 **no** (in one parameterisation the larger natural model is the sharper"):
    assert phrase in text, phrase
  # Figure 5: the grown 64-wide models against the natural 128-wide ones at near-equal loss,
  # the same models as above (same losses and probes), Tr(H) measured in the 128-wide
  # architecture: both estimators higher for the natural models at Holm p < 0.05, the grown
  # models' outputs equal to the small ones'.
  e = json.load(open(os.path.join(res, "embedded_hmm_sharp.json")))
  assert e["comparison"]["sizes"] == [small, equal] and e["embedded_into"] == equal
  ge = {(p["size"], p["seed"]): p for p in e["points"]}
  for key, p in ge.items():
    assert p["probe"] == by[key]["probe"] and p["valid_mlm_loss"] == by[key]["valid_mlm_loss"]
    assert p["grown_max_logit_diff"] < 1e-4
  for q in ("trace_b1", "trace_hutchinson"):
    want = stats.compare([ge[equal, s][q] for s in seeds], [ge[small, s][q] for s in seeds])
    c = e["comparison"]["vs_first"][equal][q]
    assert {k: c[k] for k in want} == want and c["diff"] > 0 and c["p_holm"] < 0.05, q
  # the natural larger models, grown into their own architecture, are measured as themselves
  for s in seeds:
    assert ge[equal, s]["trace_b1"] == pytest.approx(by[equal, s]["trace_b1"])


def test_the_pcfg_budget_sentences_hold():
  """The seed-002 page's PCFG budget paragraph, recomputed from the two committed files: the
  same three seeds, the same random inits at both budgets (the same architecture and seeds,
  probed on the same splits), every model's probe lower at 12,000 steps than at 3000 and below
  its random init at both, the valid gap lower at 12,000 in every model; the paired tests
  against `stats.paired_compare` on those numbers; the lookup table above every model."""
  res = os.path.join(ROOT, report.RESULTS, "mlm_flatness")
  a = json.load(open(os.path.join(res, "training_pcfg.json")))
  b = json.load(open(os.path.join(res, "pcfg_12k", "pretrained_pcfg.json")))
  rows, longer, to_init = report.pcfg_budget(a, b)
  assert sorted(rows) == [0, 1, 2] and b["config"]["train"]["num_steps"] == 12000
  assert report._adamw_steps(a) == 3000
  for s in rows:
    short = next(p for p in a["points"] if p["seed"] == s and p["sgd_step"] == 0)
    long_ = next(p for p in b["points"] if p["seed"] == s)
    init_a = a["sanity"]["C"]["random_init"][str(s)]["test_acc_mean"]
    init_b = b["sanity"]["C"]["random_init"][str(s)]["test_acc_mean"]
    assert init_a == pytest.approx(init_b, abs=1e-6)
    pa, pb = short["probe"]["C"]["test_acc_mean"], long_["probe"]["C"]["test_acc_mean"]
    assert rows[s] == (short["valid_gap"], pa, long_["valid_gap"], pb, init_b)
    assert pb < pa < init_b and long_["valid_gap"] < short["valid_gap"]
    assert b["sanity"]["C"]["lookup_table"]["test_acc_mean"] > max(pa, pb)
  assert longer == stats.paired_compare([r[3] for r in rows.values()], [r[1] for r in rows.values()])
  assert longer["n_down"] == 3 and to_init["n_up"] == 3
  _assert_page_says("seed002_flatness.md",
      "the task-C probe is lower, by", "0 of 3 models probe above their random init",
      "as the loss falls it moves away from the random init, not towards it")


def _masking_file(gaps, probes, inits):
  """A pretrained-figure file with per-seed valid gaps, task-A probes and random inits."""
  return {"points": [{"seed": s, "valid_gap": g, "probe": {"A": {"test_acc_mean": p}}}
                     for s, (g, p) in enumerate(zip(gaps, probes))],
          "sanity": {"A": {"random_init": {str(s): {"test_acc_mean": i}
                                           for s, i in enumerate(inits)}}}}


def test_pcfg_masking_pairs_the_two_maskings_by_model_seed():
  """pcfg_masking: per quantity the one-mask and BERT values by seed, the inits, and BERT -
  one mask as stats.paired_compare; the two files must hold the same random inits."""
  one = _masking_file([0.30, 0.29, 0.31], [0.20, 0.22, 0.21], [0.30, 0.31, 0.29])
  bert = _masking_file([0.25, 0.26, 0.24], [0.35, 0.33, 0.28], [0.30, 0.31, 0.29])
  rows, seeds = report.pcfg_masking(one, bert)
  assert seeds == [0, 1, 2] and list(rows) == ["valid gap", "task A"]
  x, y, inits, c = rows["task A"]
  assert (x, y, inits) == ([0.20, 0.22, 0.21], [0.35, 0.33, 0.28], [0.30, 0.31, 0.29])
  assert c == stats.paired_compare(y, x) and c["n_up"] == 3
  assert rows["valid gap"][2] is None
  assert rows["valid gap"][3] == stats.paired_compare([0.25, 0.26, 0.24], [0.30, 0.29, 0.31])
  assert report._above(y, inits) == 2 and report._above(x, inits) == 0
  with pytest.raises(ValueError, match="random inits differ"):
    report.pcfg_masking(one, _masking_file([0.2] * 3, [0.3] * 3, [0.3, 0.3, 0.3]))
  with pytest.raises(ValueError, match=">= 2 model seeds"):
    report.pcfg_masking(one, _masking_file([0.2], [0.3], [0.3]))


def test_pcfg_steps_pairs_two_budgets_by_model_seed(tmp_path):
  """pcfg_steps: pcfg_masking's pairing of two files, its columns named by each file's
  train.num_steps, the longer minus the shorter as stats.paired_compare; the same budget in
  both files is an error."""
  short = _masking_file([0.25, 0.26, 0.24], [0.35, 0.33, 0.28], [0.30, 0.31, 0.29])
  long_ = _masking_file([0.15, 0.14, 0.16], [0.36, 0.35, 0.30], [0.30, 0.31, 0.29])
  folder = tmp_path / report.RESULTS / "mlm_flatness"
  folder.mkdir(parents=True)
  for name, doc, steps in (("a.json", short, 3000), ("b.json", long_, 12000),
                           ("c.json", long_, 3000)):
    (folder / name).write_text(json.dumps({**doc, "config": {"train": {"num_steps": steps}}}))
  R = report.Results(str(tmp_path))
  lines = report.TABLES["pcfg_steps"](R, "a.json", "b.json").splitlines()
  assert lines[0].split(" | ")[1:3] == ["3000 steps (mean (std))", "12000 steps (mean (std))"]
  want = stats.paired_compare([0.36, 0.35, 0.30], [0.35, 0.33, 0.28])
  row = next(l for l in lines if l.startswith("| task A probe %"))
  assert f"{100 * want['diff']:+.2f}" in row and "3 up, 0 down" in row
  assert "| 2 of 3 | 3 of 3 |" in row  # above their inits: 3000 steps, 12000 steps
  with pytest.raises(ValueError, match="both files pre-trained 3000 steps"):
    report.TABLES["pcfg_steps"](R, "a.json", "c.json")


def test_the_pcfg_masking_sentences_hold():
  """The seed-002 page's PCFG tasks / masking paragraph, recomputed from the two committed
  files (issue 34): the same seeds and random inits in both; with one mask every model below
  its init on tasks A, B and C (task B below the majority class); BERT masking above one mask
  in every model and task, within two points of the inits on the mean, not above them on the
  mean; the words-alone row the same in both files, within about a point of the inits on B and
  C and below them on A, above the BERT-masked models on B and C; the phrases on the page."""
  res = os.path.join(ROOT, report.RESULTS, "mlm_flatness")
  one = json.load(open(os.path.join(res, "pcfg_tasks", "pretrained_pcfg.json")))
  bert = json.load(open(os.path.join(res, "pcfg_bert", "pretrained_pcfg.json")))
  assert bert["pretrain"] == {"data.masking": "bert"} and not one["pretrain"]
  assert one["config"]["data"]["masking"] == "one" and bert["config"]["data"]["masking"] == "bert"
  rows, seeds = report.pcfg_masking(one, bert)
  assert seeds == [0, 1, 2]
  for task in "ABC":
    x, y, inits, c = rows[f"task {task}"]
    assert all(a < i for a, i in zip(x, inits)), task
    assert c["n_up"] == 3 and c == stats.paired_compare(y, x), task
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    assert -0.02 < mean(y) - mean(inits) < 0, task
    assert one["sanity"][task]["words"] == bert["sanity"][task]["words"], task
  words = {t: bert["sanity"][t]["words"]["test_acc_mean"] for t in "ABC"}
  init = {t: bert["comparison"]["vs_random_init"][t]["mean_b"] for t in "ABC"}
  trained = {t: bert["comparison"]["vs_random_init"][t]["mean_a"] for t in "ABC"}
  assert all(abs(words[t] - init[t]) < 0.015 and trained[t] < words[t] for t in "BC")
  assert words["A"] < init["A"] - 0.02
  assert one["comparison"]["vs_random_init"]["B"]["mean_a"] < one["sanity"]["B"]["majority"]
  # the same three models at 12,000 steps: a lower gap in every model; tasks A and B up in
  # every model, level with the inits on the mean (seed 0, the pilot, above on both); task C
  # below the init in every model
  long_ = json.load(open(os.path.join(res, "pcfg_bert_12k", "pretrained_pcfg.json")))
  assert [p["seed"] for p in long_["points"]] == [0, 1, 2]
  assert long_["config"]["train"]["num_steps"] == 12000
  assert bert["config"]["train"]["num_steps"] == 3000
  steps, _ = report.pcfg_masking(bert, long_)  # checks that the random inits are the same
  assert steps["valid gap"][3]["n_down"] == 3
  c = long_["comparison"]["vs_random_init"]
  for task in "AB":
    assert steps[f"task {task}"][3]["n_up"] == 3, task
    assert abs(c[task]["diff"]) < 0.005 and c[task]["trained_above_random_in"] == 1, task
    seed0 = long_["points"][0]["probe"][task]["test_acc_mean"]
    assert seed0 > long_["sanity"][task]["random_init"]["0"]["test_acc_mean"], task
  assert c["C"]["n_down"] == 3 and c["C"]["trained_above_random_in"] == 0
  assert (steps["task C"][3]["n_up"], steps["task C"][3]["n_down"]) == (1, 2)
  _assert_page_says("seed002_flatness.md",
      "probe below their own random inits on all three tasks, in every model",
      "the prediction written before seeds 1 and 2 were probed",
      "probes of tasks A and B rise in every model, to level with the random inits",
      "(1 model up, 2 down) and stays below the init in every model",
      "the trained-above-random check of issue 34 is still not met there",
      "raises every task's probe in every model", "to within two points of the inits",
      "but not above them", "the trained-above-random check of issue 34 is not met there")


def _pcfg_probes(rel):
  """A committed pretrained PCFG file under results/mlm_flatness: the document, each task's
  trained models' probe accuracies and their random inits' (by model seed 0, 1, 2)."""
  doc = json.load(open(os.path.join(ROOT, report.RESULTS, "mlm_flatness", rel)))
  trained = {t: [p["probe"][t]["test_acc_mean"] for p in doc["points"]] for t in "ABC"}
  inits = {t: [doc["sanity"][t]["random_init"][k]["test_acc_mean"] for k in "012"]
           for t in "ABC"}
  return doc, trained, inits


def test_the_pcfg_48k_probe_sentences_hold():
  """The seed-002 page's section on the 48,000-step PCFG encoders (issue 34), recomputed from
  its committed file: the same inits as the 12,000-step file (read back from the probe cache);
  every model above its own init on A and B (p at the floor of 3 pairs), one of three on C;
  the words alone below the trained models on A and above every encoder on B and C; the
  lookup table below every init on C; every valid gap above the predicted 0.10 and below its
  12,000-step value; every probe up from 12,000 steps; the phrases on the page."""
  big, trained, inits = _pcfg_probes("pcfg_bert_48k_100k/pretrained_pcfg.json")
  short, before, short_inits = _pcfg_probes("pcfg_bert_12k_100k/pretrained_pcfg.json")
  assert big["pretrain"] == {"data.masking": "bert", "train.num_steps": 48000}
  assert big["args"]["probe_train"] == short["args"]["probe_train"] == 100_000
  assert [p["seed"] for p in big["points"]] == [p["seed"] for p in short["points"]] == [0, 1, 2]
  c, s = big["comparison"]["vs_random_init"], big["sanity"]
  assert inits == short_inits
  for t in "AB":
    assert c[t]["trained_above_random_in"] == 3 and c[t]["p_value"] == c[t]["p_floor"] == 0.25
    assert all(x > i for x, i in zip(trained[t], inits[t]))
  assert short["comparison"]["vs_random_init"]["B"]["trained_above_random_in"] == 1
  assert min(trained["A"]) > s["A"]["words"]["test_acc_mean"]
  for t in "BC":
    assert s[t]["words"]["test_acc_mean"] > max(trained[t] + inits[t])
  assert c["C"]["trained_above_random_in"] == 1 and c["C"]["diff"] < 0
  assert s["C"]["lookup_table"]["test_acc_mean"] < min(inits["C"])
  gaps = [p["valid_gap"] for p in big["points"]]
  assert min(gaps) > 0.10 and all(g < p["valid_gap"] for g, p in zip(gaps, short["points"]))
  assert all(a > b for t in "ABC" for a, b in zip(trained[t], before[t]))
  _assert_page_says("seed002_flatness.md",
      "Tasks A and B: every trained encoder probes above its own random init",
      "Task C: closer to the inits, not above them.",
      "so that part of the prediction failed. Every model's probe rose from 12,000 to 48,000",
      "the trained-above-random check of issue 34 holds on PCFG tasks A and B")


def test_the_pcfg_100k_probe_sentences_hold():
  """The seed-002 page's section on the PCFG probes with 100,000 training examples, recomputed
  from its committed file (issue 34): the three 12,000-step BERT-masked models; on task A every
  model above its own random init (p at the floor of 3 pairs) and above the words alone, where
  with 10,000 examples the same models were level with their inits; on task B one of three
  above, and the words alone above every trained and random encoder; the lookup table below
  every init on A and above their mean on B; on task C (a second run, A and B read back) no
  model above its init (p at the floor), every probe above its 10,000-example value with the
  inits gaining more than the trained models, the words alone above every encoder and the
  lookup table below every init; the phrases on the page."""
  big, trained, inits = _pcfg_probes("pcfg_bert_12k_100k/pretrained_pcfg.json")
  small = json.load(open(os.path.join(ROOT, report.RESULTS, "mlm_flatness", "pcfg_bert_12k",
                                      "pretrained_pcfg.json")))
  assert big["pretrain"] == {"data.masking": "bert", "train.num_steps": 12000}
  assert big["args"]["probe_train"] == 100_000 and small["args"]["probe_train"] == 10_000
  assert [p["seed"] for p in big["points"]] == [0, 1, 2]
  assert sorted(big["sanity"]) == ["A", "B", "C"]
  c, s = big["comparison"]["vs_random_init"], big["sanity"]
  assert c["A"]["trained_above_random_in"] == 3 and c["A"]["p_value"] == c["A"]["p_floor"] == 0.25
  assert all(x > i for x, i in zip(trained["A"], inits["A"]))
  assert min(trained["A"]) > s["A"]["words"]["test_acc_mean"]
  assert abs(small["comparison"]["vs_random_init"]["A"]["diff"]) < 0.005
  assert c["B"]["trained_above_random_in"] == 1 and c["B"]["diff"] < 0
  assert s["B"]["words"]["test_acc_mean"] > max(trained["B"] + inits["B"])
  assert s["A"]["lookup_table"]["test_acc_mean"] < min(inits["A"])
  assert s["B"]["lookup_table"]["test_acc_mean"] > sum(inits["B"]) / 3
  assert c["C"]["trained_above_random_in"] == 0 and c["C"]["p_value"] == c["C"]["p_floor"]
  assert all(x < i for x, i in zip(trained["C"], inits["C"]))
  sc, ss = small["comparison"]["vs_random_init"]["C"], small["sanity"]["C"]
  small_inits = [ss["random_init"][k]["test_acc_mean"] for k in "012"]
  small_trained = [p["probe"]["C"]["test_acc_mean"] for p in small["points"]]
  assert all(b > a for a, b in zip(small_trained + small_inits, trained["C"] + inits["C"]))
  assert c["C"]["mean_b"] - sc["mean_b"] > c["C"]["mean_a"] - sc["mean_a"] > 0
  assert s["C"]["words"]["test_acc_mean"] > max(trained["C"] + inits["C"])
  assert s["C"]["lookup_table"]["test_acc_mean"] < min(inits["C"])
  _assert_page_says("seed002_flatness.md",
      "Task C: the trained encoders fall below their inits.",
      "the random inits more than the trained ones",
      "is below every init: that part of the prediction failed again",
      "the trained-above-random check of issue 34 holds on task A only",
      "Task A: the trained encoders beat their inits.",
      "Every model probes above its own random init",
      "the same models were level with their inits", "Task B: it does not.",
      "beat the trained and the random encoders alike: the prediction holds on A and fails on B",
      "The lookup table stays below the random inits on A")
