"""experiments/mlm_flatness: the recipes at test size (the grid's rows, the measurements pinned,
the comparisons of analysis.py recomputed by hand), every variant re-running its committed
file, the analysis on the committed files (it agrees with the comparisons the files stored),
and every sentence of the seed-002 page's Figures 1 / 3 and 2 / 5 sections held to its
numbers in results/mlm_flatness/analysis.json."""
import copy
import json
import math
import os
import re
import types

import numpy as np
import pytest

from el_jax import experiment
from el_jax.report import papers
from el_jax.report import render
from el_jax.report import sources
from el_jax.report import stats
from el_jax.run import grid as grid_lib

from experiments.mlm_flatness import analysis
from experiments.mlm_flatness import config as config_file
from experiments.mlm_flatness import run as run_lib
import grid_checks  # tests/grid_checks.py
import pins  # tests/pins.py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RES = os.path.join(ROOT, "results", "mlm_flatness")
PAGE = os.path.join(ROOT, "docs", "results", "seed002_flatness.md")
BLIND = "probe blind (identical across models)"

# The recipe `test` (the pcfg_mlm:test model, the adversarial experiment's test sizes, so that
# their programs compile once per suite): the numbers the script gave before it moved onto the
# grid ({path in the JSON: value}), under the suite's settings (conftest.py), which give the
# same numbers on any x86-64 CPU with AVX2 and FMA (docs/testing.md, "Across CPUs"); recorded
# with the suite's 8 CPU devices (`all_devices`; on one device the Hutchinson traces of the AdamW
# models moved in their last digits between a Cascade Lake and a Zen 5).
MLM_PINS = {
    ("sgd_lr",): 0.1,
    ("pilot_start_valid_loss",): 4.980695128440857,
    ("pilot", "0.03", "valid_mlm_loss"): 4.972648236900568,
    ("pilot", "0.1", "valid_mlm_loss"): 4.968717016279697,
    ("points", 0, "sgd_step"): 0,
    ("points", 0, "valid_mlm_loss"): 4.980695128440857,
    ("points", 0, "valid_gap"): 0.7790016578445433,
    ("points", 0, "trace_b1_reps"): [47.37702178955078, 43.547871589660645],
    ("points", 0, "trace_hutchinson"): -15.671121597290039,
    ("points", 0, "trace_hutchinson_stderr"): 35.635928756452536,
    ("points", 0, "probe", "A", "test_acc"): [0.09375, 0.3125, 0.15625, 0.09375, 0.1875],
    ("points", 1, "sgd_step"): 4,
    ("points", 1, "valid_mlm_loss"): 4.951388493180275,
    ("points", 1, "valid_gap"): 0.7496950225839614,
    ("points", 1, "trace_b1_reps"): [43.137224197387695, 41.28598880767822],
    ("points", 1, "trace_hutchinson"): 10.415760040283203,
    ("points", 1, "trace_hutchinson_stderr"): 11.868420032737564,
    ("points", 1, "probe", "A", "test_acc"): [0.125, 0.25, 0.1875, 0.0625, 0.21875],
}
DISCRETE = {"sgd_lr", "sgd_step", "step", "test_acc"}


def _at(doc, path):
  for k in path:
    doc = doc[k]
  return doc


def _close(got, want, exact=False):
  if isinstance(want, list) and not exact:  # (a list's own spread: tests/pins.py)
    return pins.close(got, want, "mlm_flatness")
  if isinstance(want, list):
    return len(got) == len(want) and all(_close(g, w, exact) for g, w in zip(got, want))
  if exact or not isinstance(want, float):
    return got == want
  return pins.close(got, want, "mlm_flatness")  # 1e-6; another JAX line: tests/pins.py


def _test_config(tmp_path, **fields):
  cfg = config_file.get_config("test")
  cfg.results_dir = str(tmp_path / "out")
  cfg.runs = str(tmp_path / "runs")
  cfg.update(fields)
  return cfg


def _analyze(folder):
  return analysis.analyze(sources.Sources(str(folder), root=ROOT), None)


# ----------------------------------------------------------------------------
# The recipes at test size


@pytest.mark.all_devices  # the measurements sharded over the suite's 8 devices: the pins' setting
def test_the_training_figure_at_test_size(tmp_path):
  """Variant `test`: the AdamW run, two pilot runs and the SGD run (from the AdamW run's
  parameters) as one grid; the points as before the grid (pinned); the analysis: the last
  checkpoint against the first over the one model's Tr(H) repetitions and probe seeds, paired,
  Holm over the table with fine-tuning; the SGD row against a direct run."""
  cfg = _test_config(tmp_path)
  out = run_lib.run(cfg)
  with open(tmp_path / "out" / "training_pcfg.json") as f:
    doc = json.load(f)
  assert doc == json.loads(json.dumps(out, default=float))
  assert doc["command"] == f"{run_lib.COMMAND} (fields of no single variant: see `args`)"
  assert config_file.get_config("test").results_dir == "runs/mlm_flatness_test"
  rows = grid_checks.check_rows(doc, ["pcfg_adamw", "pcfg_pilot_lr0.03", "pcfg_pilot_lr0.1",
                                     "pcfg_sgd"])
  for label, r in rows.items():
    assert r["workdir"] == os.path.join(cfg.runs, label) and r["seeds"] == [0]
    assert r["config_name"] == "pcfg_mlm" and r["variant"] == "test"
  adamw, sgd = rows["pcfg_adamw"], rows["pcfg_sgd"]
  assert adamw["overrides"] == {} and adamw["phase"] == "adamw"
  assert sgd["overrides"]["train.init_from"] == adamw["workdir"] == doc["adamw_run"]
  assert (sgd["phase"], sgd["sgd_lr"], sgd["workdir"]) == ("sgd", doc["sgd_lr"], doc["sgd_run"])
  assert sgd["config"] == doc["config"]
  assert [(p["seed"], p["sgd_step"]) for p in doc["points"]] == [(0, 0), (0, 4)]
  for path, want in MLM_PINS.items():
    got = _at(doc, path)
    assert _close(got, want, exact=path[-1] in DISCRETE), (path, got, want)
  first, last = doc["points"]
  # the committed test's unpaired p-values, fixed by the pinned repetitions and probe seeds
  assert stats.compare(last["trace_b1_reps"], first["trace_b1_reps"])["p_value"] == \
      pytest.approx(1 / 3)
  assert stats.compare(last["probe"]["A"]["test_acc"], first["probe"]["A"]["test_acc"])[
      "p_value"] == 1.0
  for p in (first, last):  # fine-tuning (the paper's protocol) at the first and last checkpoint
    ft = p["fine_tune"]["A"]
    assert len(ft["test_acc"]) == 2 and ft["epoch"] == [1, 1]
    assert ft["test_acc_mean"] == pytest.approx(np.mean(ft["test_acc"]))
  a = _analyze(tmp_path / "out")
  f = a["files"]["training_pcfg"]
  tests = f["trend"]["tests"]
  assert list(tests) == ["trace_b1", "probe A", "fine_tune A"] and f["trend"]["holm_m"] == 3
  want = stats.family([("trace_b1", last["trace_b1_reps"], "b", first["trace_b1_reps"]),
                       ("probe A", last["probe"]["A"]["test_acc"], "b",
                        first["probe"]["A"]["test_acc"]),
                       ("fine_tune A", last["fine_tune"]["A"]["test_acc"], "b",
                        first["fine_tune"]["A"]["test_acc"])], paired=True)
  for (q, c), w in zip(tests.items(), want):
    assert {k: c[k] for k in ("diff", "p_value", "p_holm", "n", "n_up")} == \
        {k: w[k] for k in ("diff", "p_value", "p_holm", "n", "n_up")}, q
    assert not c["blind"]
  assert tests["trace_b1"]["over"] == "repetitions (same inputs)"
  assert os.path.exists(tmp_path / "out" / "training_pcfg.png")
  # the entry point's analyze stage on the same folder: the same analysis, with its sources
  code = experiment.main(["el_jax.experiment",
                          f"--config={ROOT}/experiments/mlm_flatness/config.py:test",
                          f"--config.results_dir={tmp_path / 'out'}", "--stage=analyze"])
  assert code in (None, 0)
  with open(tmp_path / "out" / "analysis.json") as fh:
    written = json.load(fh)
  assert written["sources"] == [os.path.relpath(tmp_path / "out" / "training_pcfg.json", ROOT)]
  assert written["files"]["training_pcfg"]["trend"] == json.loads(json.dumps(f["trend"]))
  pins.check("mlm_flatness/training", doc["rows"])
  grid_checks.same_as_a_direct_run(sgd, tmp_path / "direct")


def test_the_pretrained_figure_and_its_continuation_at_test_size(tmp_path):
  """figure=pretrained: the AdamW pre-training alone (two model seeds, the `pretrain` overrides
  in the grid row and the config, the run named apart, here the bidirectional LSTM), each
  model's probe at its end and the sanity rows; the analysis' trained-against-init test is
  `stats.vs_random_init` of them. The training figure then continues that run (read back, not
  trained again) for seed 1 of its pretrain_seeds 0, 1, with the LSTM and the pre-training's
  batch in the pilot and the continuation, and measures seed 1 from the pre-trained model."""
  pretrain = "model.preset=bilstm,train.num_steps=30,optim.lr=0.003"
  common = dict(language="hmm", tasks="", probe_train=120, probe_valid=60, probe_test=60,
                probe_epochs=2, flat_inputs=10, flat_reps=2, fine_tune_seeds=(),
                pretrain=pretrain)
  doc = run_lib.run(_test_config(tmp_path, figure="pretrained", seeds=(0, 1), **common))
  with open(tmp_path / "out" / "pretrained_hmm.json") as f:
    assert json.load(f) == json.loads(json.dumps(doc, default=float))
  (row,) = doc["rows"]
  assert row["label"] == "hmm_adamw_pretrain_bilstm" and row["seeds"] == [0, 1]
  assert row["overrides"] == {"model.preset": "bilstm", "train.num_steps": 30, "optim.lr": 0.003}
  assert doc["config"]["train"]["num_steps"] == 30 and doc["config"]["model"]["preset"] == "bilstm"
  assert [(p["seed"], p["step"]) for p in doc["points"]] == [(0, 30), (1, 30)]
  s = doc["sanity"]["10"]
  assert set(s["random_init"]) == {"0", "1"} and s["majority"] <= s["bayes"]
  f = _analyze(tmp_path / "out")["files"]["pretrained_hmm"]
  want = stats.vs_random_init({str(p["seed"]): p for p in doc["points"]}, doc["sanity"])
  assert {k: f["vs_random_init"]["10"][k] for k in want["10"]} == want["10"]
  # two independently pre-trained models: different per-seed probe results
  assert doc["points"][0]["probe"]["10"]["test_acc"] != doc["points"][1]["probe"]["10"]["test_acc"]
  assert os.path.exists(tmp_path / "out" / "pretrained_hmm.png")
  base_dir = doc["adamw_run"]
  with open(os.path.join(base_dir, "metrics.jsonl"), "rb") as fh:
    before = fh.read()
  out = run_lib.run(_test_config(
      tmp_path, figure="training", seeds=(1,), pretrain_seeds=(0, 1), sgd_lrs="0.01,0.1",
      pilot_steps=4, sgd_steps=8, every=4, sgd_warmup=2, pilot_tol=10.0, **common))
  with open(os.path.join(base_dir, "metrics.jsonl"), "rb") as fh:
    assert fh.read() == before
  assert [r["label"] for r in out["rows"]] == [
      "hmm_adamw_pretrain_bilstm", "hmm_pilot_lr0.01_pretrain_bilstm",
      "hmm_pilot_lr0.1_pretrain_bilstm", "hmm_sgd_pretrain_bilstm"]
  assert out["rows"][0]["workdir"] == base_dir and out["rows"][0]["seeds"] == [0, 1]
  for r in out["rows"][1:]:
    assert r["seeds"] == [1] and r["config"]["model"]["preset"] == "bilstm"
    assert r["config"]["train"]["batch_size"] == doc["config"]["train"]["batch_size"]
    assert r["config"]["optim"]["name"] == "sgd"
  assert out["pretrain"] == row["overrides"] and out["sgd_lr"] == 0.1
  assert [(p["seed"], p["sgd_step"]) for p in out["points"]] == [(1, 0), (1, 4), (1, 8)]
  # step 0 is the pre-trained model itself: the same probe as the pretrained figure's seed 1
  assert out["points"][0]["probe"]["10"]["test_acc"] == doc["points"][1]["probe"]["10"]["test_acc"]


def test_the_size_figures_over_model_seeds_at_test_size(tmp_path):
  """Figures 2 / 5 with two model seeds and `pretrain`: every size (one with its own @steps)
  and model seed trained under names with the overrides' suffix and measured at its end; the
  sanity rows hold every size's and seed's random init; the analysis: every size against the
  first over the models (`stats.compare`, Holm over Tr(H) and the probes, the loss outside),
  the trained models against their inits per size; the embedded figure reads the same runs
  back and grows each model into the largest."""
  sizes = "16/1/1/32,32/2/2/64@6,32/2/2/64"
  fields = dict(language="hmm", seeds=(0, 1), sizes=sizes, tasks="10,6", fine_tune_seeds=(),
                pretrain="model.init_std=0.1,train.num_steps=12", probe_train=80,
                probe_valid=40, probe_test=40, probe_epochs=2, flat_inputs=4, flat_reps=2,
                fisher_samples=2, hutchinson_probes=2)
  out = run_lib.run(_test_config(tmp_path, figure="size", **fields))
  assert [r["label"] for r in out["rows"]] == [
      "hmm_size_16-1-1-32_pretrain_init0.1", "hmm_size_32-2-2-64-6steps_pretrain_init0.1",
      "hmm_size_32-2-2-64_pretrain_init0.1"]
  assert [r["config"]["train"]["num_steps"] for r in out["rows"]] == [12, 6, 12]
  assert all(r["seeds"] == [0, 1] and r["config"]["model"]["init_std"] == 0.1
             for r in out["rows"])
  names = sizes.split(",")
  assert [(p["size"], p["seed"], p["step"]) for p in out["points"]] == [
      (s, seed, 6 if "@" in s else 12) for s in names for seed in (0, 1)]
  for task in ("10", "6"):
    assert set(out["sanity"][task]["random_init"]) == {f"{s} seed {k}" for s in names
                                                       for k in (0, 1)}
  f = _analyze(tmp_path / "out")["files"]["size_hmm"]
  c = f["sizes"]
  assert c["over"] == "model seeds" and c["sizes"] == names and list(c["vs_first"]) == names[1:]
  by = {(p["size"], p["seed"]): p for p in out["points"]}
  fam = []
  for s in names[1:]:
    for q, fn in (("trace_b1", lambda p: p["trace_b1"]),
                  ("probe 6", lambda p: p["probe"]["6"]["test_acc_mean"]),
                  ("valid_mlm_loss", lambda p: p["valid_mlm_loss"])):
      want = stats.compare([fn(by[s, k]) for k in (0, 1)], [fn(by[names[0], k]) for k in (0, 1)])
      assert {k: c["vs_first"][s][q][k] for k in want} == want, (s, q)
    assert not c["vs_first"][s]["valid_mlm_loss"]["in_family"]
    fam += [x for q, x in c["vs_first"][s].items() if q != "valid_mlm_loss"]
  assert [x["p_holm"] for x in fam] == stats.holm([x["p_value"] for x in fam])
  assert c["holm_m"] == 2 * 4
  for s in names:  # per size: each model with its own init
    want = stats.vs_random_init({f"{s} seed {k}": by[s, k] for k in (0, 1)},
                                {t: {"random_init": {f"{s} seed {k}": out["sanity"][t][
                                    "random_init"][f"{s} seed {k}"] for k in (0, 1)}}
                                 for t in ("10", "6")})
    assert {k: f["vs_random_init"][s]["6"][k] for k in want["6"]} == want["6"]
  assert f["vs_random_init_total"]["6"]["models"] == 6
  assert f["vs_random_init_total"]["6"]["inits"] == 4  # 32/2/2/64 and its @6 share theirs
  assert os.path.exists(tmp_path / "out" / "size_hmm.png")
  emb = run_lib.run(_test_config(tmp_path, figure="embedded", **fields))
  assert [r["workdir"] for r in emb["rows"]] == [r["workdir"] for r in out["rows"]]
  for p, q in zip(emb["points"], out["points"]):
    assert p["probe"] == q["probe"] and p["num_params_embedded"] == by[names[-1], 0]["num_params"]
    assert p["grown_max_logit_diff"] < 1e-4
  # the largest architecture grown into itself: the same model, the same Tr(H) inputs
  assert emb["points"][-1]["trace_b1_reps"] == pytest.approx(out["points"][-1]["trace_b1_reps"])


def test_bad_recipes_are_refused_before_any_training(tmp_path):
  def bad(**fields):
    return _test_config(tmp_path, **{"fine_tune_seeds": (), **fields})
  for fields, says in (
      (dict(figure="size", sizes="64/1/1/256,64/1/x"), r"config.sizes item '64/1/x' is not"),
      (dict(seeds=(1, 1)), "must be distinct integers"),
      (dict(figure="size", fine_tune_seeds=(0,)), "fine_tune_seeds is for config.figure"),
      (dict(figure="size", continue_with="adamw"), "continue_with is for config.figure"),
      (dict(continue_with="adafactor"), "allowed: sgd, adamw"),
      (dict(pretrain_seeds=(1,), seeds=(0,)), "that contain every config.seeds"),
      (dict(pretrain="train.num_steps"), "is not key=value"),
      (dict(pretrain="data.length=3"), "is not a train.*"),
      (dict(figure="x"), "allowed: training, pretrained, size, embedded")):
    with pytest.raises(ValueError, match=re.escape(says) if "*" in says else says):
      run_lib.run(bad(**fields))
  assert not os.path.exists(tmp_path / "runs")


def test_the_continuation_is_sgd_or_adamw():
  """Fig. 3 continues with plain SGD (no momentum, no weight decay), Fig. 1 with AdamW (the
  pre-training's betas and weight decay kept): both from the converged run's parameters with a
  fresh optimizer, warmup then a constant rate."""
  a = types.SimpleNamespace(sgd_warmup=7)
  sgd = run_lib.continue_overrides(a, "base", 0.1, 40, 10, "sgd")
  adamw = run_lib.continue_overrides(a, "base", 3e-4, 40, 10, "adamw")
  common = {"optim.warmup_steps": 7, "optim.decay": "constant", "train.num_steps": 40,
            "train.checkpoint_every": 10, "train.eval_every": 10, "train.keep_checkpoints": 0,
            "train.init_from": "base"}
  assert sgd == {**common, "optim.name": "sgd", "optim.lr": 0.1, "optim.momentum": 0.0,
                 "optim.weight_decay": 0.0}
  assert adamw == {**common, "optim.name": "adamw", "optim.lr": 3e-4}
  cfg = grid_lib.make_config("hmm_mlm", "cpu", adamw, (0,))
  base = grid_lib.make_config("hmm_mlm", "cpu", {}, (0,))
  assert (cfg.optim.weight_decay, cfg.optim.b1, cfg.optim.b2) == \
      (base.optim.weight_decay, base.optim.b1, base.optim.b2)
  with pytest.raises(ValueError, match=r"unknown continuation optimizer 'adam'; allowed"):
    run_lib.continue_overrides(a, "base", 0.1, 40, 10, "adam")


# ----------------------------------------------------------------------------
# Every variant re-runs its committed file


# Recipe fields added after the first files were written, at the value every run had before.
LATER_FIELDS = {"pretrain": "", "pretrain_seeds": [], "probe_cache": ""}


def test_every_recipe_is_its_committed_files_recipe():
  """Each recipe variant's settings are the `args` its committed file was written with (a field
  a file lacks was added later, at the value every run had before), so naming the variant
  re-runs that file; `cpu` is training_hmm's recipe; every committed file has its variant."""
  files = set()
  for v in config_file.RECIPES:
    a = run_lib.settings(config_file.get_config(v))
    rel = os.path.relpath(os.path.join(a.out, run_lib.out_stem(a) + ".json"),
                          "results/mlm_flatness")
    files.add(rel)
    with open(os.path.join(RES, rel)) as f:
      stored = json.load(f)["args"]
    got = json.loads(json.dumps(run_lib.args_record(a)))
    for k, want in got.items():
      assert stored.get(k, LATER_FIELDS.get(k)) == want, (v, k, want, stored.get(k))
  committed = {p for p in sources.Sources(RES, root=ROOT).files("") if p != "analysis.json"}
  assert files == committed
  assert config_file.get_config("cpu").to_dict() == config_file.get_config("training_hmm").to_dict()
  assert run_lib.variant_of(config_file.get_config("sharp_init0.1")) == "sharp_init0.1"


def test_the_papers_numbers_are_those_the_files_carry():
  """papers.PAPER (typed from the seed text) against the `paper` fields the committed files
  carry: Fig. 5's Tr(H) and probe, Fig. 3's gains, Fig. 1's claim."""
  def num(s):
    return [float(x) for x in re.findall(r"\d+\.\d+|\d+", s)]
  with open(os.path.join(RES, "embedded_hmm.json")) as f:
    emb = json.load(f)["paper"]
  assert num(papers.PAPER["s002.fig5.trace"][0]) == emb["trace"]
  assert num(papers.PAPER["s002.fig5.probe"][0]) == emb["probe"]
  with open(os.path.join(RES, "training_pcfg.json")) as f:
    tr = json.load(f)["paper"]
  assert papers.value("s002.fig3.pcfg_gain") == tr["pcfg_task_C_gain"]
  assert papers.value("s002.fig3.hmm_gain") == tr["hmm_task_10_gain"]
  assert tr["source"] == run_lib.paper("training")["source"]
  with open(os.path.join(RES, "training_adamw_hmm.json")) as f:
    assert json.load(f)["paper"]["source"] == run_lib.paper("training_adamw")["source"]
  for fig in ("size", "embedded"):
    with open(os.path.join(RES, f"{fig}_hmm.json")) as f:
      assert json.load(f)["paper"]["source"] == run_lib.paper(fig)["source"]


# ----------------------------------------------------------------------------
# The analysis: its statistics, and the committed files' stored comparisons


def _point(seed, step, trace, acc, ft=None):
  p = {"seed": seed, "sgd_step": step, "trace_b1": trace, "trace_hutchinson": 2 * trace,
       "valid_mlm_loss": 4.0 - step / 1000,
       "probe": {"C": {"test_acc_mean": acc, "test_acc": [acc, acc + 0.01, acc - 0.01],
                       "epoch": [seed, 2, 3]}}}
  if ft is not None:
    p["fine_tune"] = {"C": {"test_acc_mean": ft, "test_acc": [ft, ft]}}
  return p


def test_the_trend_compares_over_model_seeds_paired():
  """Several models: the first against the last checkpoint over the pre-trained models (one
  value each), paired (a sign flip), Holm over Tr(H), the probe and fine-tuning; a model
  missing at either end is an error."""
  traces = {(0, 0): 10.0, (1, 0): 12.0, (2, 0): 11.0, (0, 8): 7.0, (1, 8): 8.5, (2, 8): 6.0}
  accs = {(0, 0): 0.30, (1, 0): 0.32, (2, 0): 0.31, (0, 8): 0.35, (1, 8): 0.36, (2, 8): 0.40}
  ft = {(0, 0): 0.5, (1, 0): 0.55, (2, 0): 0.6, (0, 8): 0.7, (1, 8): 0.65, (2, 8): 0.75}
  points = [_point(s, t, traces[s, t], accs[s, t], ft[s, t]) for s in range(3) for t in (0, 8)]
  points.append(_point(1, 4, 9.0, 0.33))
  d = {"figure": "training", "points": points}
  c = analysis.trend(d, "sgd_step")
  assert c["over"] == "model seeds" and c["x"] == [0, 8] and c["holm_m"] == 3
  tests = c["tests"]
  want = stats.family([("t", [7.0, 8.5, 6.0], "", [10.0, 12.0, 11.0]),
                       ("p", [0.35, 0.36, 0.40], "", [0.30, 0.32, 0.31]),
                       ("f", [0.7, 0.65, 0.75], "", [0.5, 0.55, 0.6])], paired=True)
  for q, w in zip(("trace_b1", "probe C", "fine_tune C"), want):
    assert {k: tests[q][k] for k in ("diff", "p_value", "p_floor", "n_up", "n_down", "p_holm")} \
        == {k: w[k] for k in ("diff", "p_value", "p_floor", "n_up", "n_down", "p_holm")}, q
    assert tests[q]["over"] == "model seeds" and not tests[q]["blind"]
  assert tests["trace_b1"]["p_value"] == pytest.approx(0.25) and tests["trace_b1"]["at_floor"]
  assert tests["trace_b1"]["n_down"] == 3 and tests["probe C"]["diff_s"] == pytest.approx(
      100 * tests["probe C"]["diff"])
  assert c["means"]["trace_b1"] == pytest.approx([11.0, 21.5 / 3])
  with pytest.raises(ValueError, match=r"not measured"):
    analysis.trend({"figure": "training", "points": points[:-2]}, "sgd_step")


def test_a_probe_that_gives_the_same_per_seed_results_for_two_models_is_blind():
  """Two models with the same test accuracy and epoch on two probe seeds: the probe is blind,
  its paired test has no p and leaves the Holm family; with distinct results it is tested."""
  def pts(same):
    out = []
    for s in range(3):
      for t, trace in ((0, 10.0 + s), (8, 12.0 + s)):
        p = _point(s, t, trace, 0.3 + s / 100 + t / 1000)
        p["probe"]["C"]["test_acc"] = ([0.5, 0.4, 0.1 * s] if same and s < 2 else
                                       [0.5 + s / 100, 0.4 + t / 100 + s / 100, 0.1 * s])
        p["probe"]["C"]["epoch"] = [1, 2, s]
        out.append(p)
    return out
  blind = analysis.trend({"figure": "training", "points": pts(True)}, "sgd_step")
  assert blind["tests"]["probe C"]["blind"] and "p_value" not in blind["tests"]["probe C"]
  assert blind["holm_m"] == 1 and blind["tests"]["trace_b1"]["p_holm"] == \
      blind["tests"]["trace_b1"]["p_value"]
  seen = analysis.trend({"figure": "training", "points": pts(False)}, "sgd_step")
  assert not seen["tests"]["probe C"]["blind"] and seen["holm_m"] == 2


def test_the_blind_probes_are_the_three_files_whose_models_share_per_seed_results():
  """On the committed files the data decide which probes are blind: task 10 of training_hmm,
  training_adamw_hmm (at 4,500 and 9,000 steps every model gives the same results on three
  probe seeds) and sanity/training_hmm, no other; their paired rows on the page carry no p."""
  a = _analysis_json()
  blind = {k for k, f in a["files"].items() if f["figure"] == "training"
           and any(c["blind"] for c in f["trend"]["tests"].values())}
  blind |= {k for k, f in a["files"].items() if "vs_random_init_total" not in f
            and any(c["blind"] for c in f["vs_random_init"].values())}
  assert blind == {"training_hmm", "training_adamw_hmm", "sanity/training_hmm"}
  with open(os.path.join(RES, "training_adamw_hmm.json")) as fh:
    d = json.load(fh)
  for step in (4500, 9000):
    at = [p for p in d["points"] if p["adamw_cont_step"] == step]
    res = [list(zip(p["probe"]["10"]["test_acc"], p["probe"]["10"]["epoch"])) for p in at]
    assert sum(all(r[i] == res[0][i] for r in res) for i in range(5)) == 3, step
  text = _page_text()
  assert text.count(f"| {BLIND} |") == 4  # two change tables, two vs-init tables
  for c in ("training_hmm", "training_adamw_hmm"):
    t = a["files"][c]["trend"]
    assert "p_value" not in t["tests"]["probe 10"] and t["holm_m"] == 2
  assert f"up; {BLIND}, no p) points and fine-tuning by" in text


def test_the_committed_files_stored_comparisons_are_what_the_analysis_computes():
  """The comparisons the experiment's files stored when they were written (one implementation
  now: analysis.py) against the analysis on the same points: the paired first-vs-last tests
  (Holm where no probe is blind), the means, the sizes' tests and the trained-vs-init tests."""
  a = _analysis_json()
  checked = 0
  for key, f in a["files"].items():
    with open(os.path.join(RES, key + ".json")) as fh:
      c = json.load(fh)["comparison"]
    if f["figure"] == "training":
      t = f["trend"]
      blind = any(x["blind"] for x in t["tests"].values())
      for q, stored in c.get("paired", {}).items():  # (sanity/: written before `paired`)
        keys = ["diff", "n_up", "n_down", "n", "mean_a", "mean_b"] + (
            [] if t["tests"][q]["blind"] else ["p_value"]) + ([] if blind else ["p_holm"])
        assert {k: t["tests"][q][k] for k in keys} == {k: stored[k] for k in keys}, (key, q)
      for k in ("trace_b1", "trace_hutchinson", "valid_mlm_loss"):
        assert t["means"][k] == pytest.approx(c[k], rel=1e-12), (key, k)
      checked += 1
    elif f["figure"] in ("size", "embedded") and "vs_first" in c:
      for s, qs in c["vs_first"].items():
        for q, stored in qs.items():
          got = f["sizes"]["vs_first"][s][q]
          assert {k: got[k] for k in stored} == stored, (key, s, q)
      assert f["sizes"]["holm_m"] == c["holm_family"]
      checked += 1
    elif f["figure"] in ("size", "embedded"):
      for q, stored in (("trace_b1", c["trace_b1_change"]),
                        *((f"probe {t}", x) for t, x in c["probe"].items())):
        got = f["sizes"]["tests"][q]
        assert {k: got[k] for k in stored if k != "acc"} == \
            {k: v for k, v in stored.items() if k != "acc"}, (key, q)
      checked += 1
    if "vs_random_init_total" not in f:
      for t, stored in c["vs_random_init"].items():
        got = f["vs_random_init"][t]
        assert {k: got[k] for k in stored} == stored, (key, t)
  assert checked == len(a["files"]) - 10  # the 10 pretrained files store only vs_random_init


def test_the_sanity_rows_are_what_their_own_numbers_give():
  """Every committed probe's chosen setting is the best on valid of its selection, five probe
  seeds each; majority <= block alone <= Bayes (sanity/training_hmm.json, the HMM)."""
  with open(os.path.join(RES, "sanity", "training_hmm.json")) as f:
    doc = json.load(f)
  s = doc["sanity"]["10"]
  probes = [p["probe"]["10"] for p in doc["points"]] + [s["lookup_table"],
                                                         *s["random_init"].values()]
  for r in probes:
    best = max(r["selection"], key=lambda g: g["valid_acc_mean"])
    assert r["chosen"] == {k: best[k] for k in ("lr", "weight_decay", "whiten")}
    assert r["valid_acc_mean"] == best["valid_acc_mean"] and len(r["test_acc"]) == 5
  assert s["majority"] <= s["block_majority"] <= s["bayes"]
  assert set(s["random_init"]) == {str(x) for x in doc["args"]["seeds"]}


def test_trained_models_against_their_random_inits():
  """One model against its own init over its probe seeds (unpaired); several over the models
  (one mean each), each paired with its own init (a sign flip), with how many are above."""
  def probe_row(accs):
    return {"test_acc": accs, "test_acc_mean": float(np.mean(accs))}
  sanity = {"C": {"random_init": {"0": probe_row([0.2, 0.3]), "1": probe_row([0.5, 0.5]),
                                  "2": probe_row([0.1, 0.1])}}}
  pts = {k: {"probe": {"C": probe_row(a)}} for k, a in
         (("0", [0.4, 0.5]), ("1", [0.3, 0.4]), ("2", [0.2, 0.2]))}
  c = analysis.vs_random_init(pts, sanity)["C"]
  want = stats.paired_compare([pts[k]["probe"]["C"]["test_acc_mean"] for k in "012"],
                              [sanity["C"]["random_init"][k]["test_acc_mean"] for k in "012"])
  assert {k: c[k] for k in want} == want
  # diffs +0.2, -0.15, +0.1 (mean 0.05): 6 of the 8 sign vectors give |mean| >= 0.05
  assert c["test"] == "paired sign flip" and c["p_value"] == pytest.approx(6 / 8)
  assert (c["n"], c["p_floor"], c["ci95"], c["paired"]) == (3, 0.25, None, True)
  assert (c["over"], c["keys"], c["trained_above_random_in"]) == (
      "models and their own inits", ["0", "1", "2"], 2)
  one = analysis.vs_random_init({"0": pts["0"]}, sanity)["C"]
  want = stats.compare([0.4, 0.5], [0.2, 0.3])
  assert {k: one[k] for k in want} == want and not one["paired"]
  assert (one["over"], one["trained_above_random_in"]) == ("probe seeds of one model", 1)


def _masking_file(gaps, probes, inits):
  """A pretrained-figure file with per-seed valid gaps, task-A probes and random inits."""
  return {"points": [{"seed": s, "valid_gap": g, "probe": {"A": {"test_acc_mean": p}}}
                     for s, (g, p) in enumerate(zip(gaps, probes))],
          "sanity": {"A": {"random_init": {str(s): {"test_acc_mean": i}
                                           for s, i in enumerate(inits)}}}}


def test_two_files_are_paired_by_model_seed():
  """paired_by_seed (two maskings, or two budgets): per quantity the two files' values by
  seed, the inits, how many above them, and the second minus the first as
  stats.paired_compare; the two files must hold the same random inits."""
  one = _masking_file([0.30, 0.29, 0.31], [0.20, 0.22, 0.21], [0.30, 0.31, 0.29])
  bert = _masking_file([0.25, 0.26, 0.24], [0.35, 0.33, 0.28], [0.30, 0.31, 0.29])
  x = analysis.paired_by_seed(one, bert, "one mask", "BERT masking")
  assert x["seeds"] == [0, 1, 2] and [r["quantity"] for r in x["rows"]] == ["valid gap", "task A"]
  gap, task = x["rows"]
  assert (task["values_a"], task["values_b"], task["init_values"]) == (
      [0.20, 0.22, 0.21], [0.35, 0.33, 0.28], [0.30, 0.31, 0.29])
  want = stats.paired_compare([0.35, 0.33, 0.28], [0.20, 0.22, 0.21])
  assert {k: task["test"][k] for k in want} == want and task["test"]["n_up"] == 3
  assert (task["above_b"], task["above_a"]) == (2, 0) and not gap["probe"]
  want = stats.paired_compare([0.25, 0.26, 0.24], [0.30, 0.29, 0.31])
  assert {k: gap["test"][k] for k in want} == want
  with pytest.raises(ValueError, match="random inits differ"):
    analysis.paired_by_seed(one, _masking_file([0.2] * 3, [0.3] * 3, [0.3] * 3), "a", "b")
  with pytest.raises(ValueError, match=">= 2 model seeds"):
    analysis.paired_by_seed(one, _masking_file([0.2], [0.3], [0.3]), "a", "b")


def test_b1_against_hutchinson_gives_a_ratio_only_where_hutchinson_is_above_zero():
  a = _analysis_json()["b1_vs_hutchinson"]
  assert a["training_pcfg"]["ratio"] is None and a["training_hmm"]["ratio"] is not None
  p = {"trace_b1": 10.0, "trace_b1_reps": [9.0, 11.0], "trace_b1_std": 1.0,
       "trace_hutchinson": 5.0, "trace_hutchinson_stderr": 3.0}
  assert analysis.b1_vs_hutchinson({"points": [p]})["ratio"] is None  # 5 - 2 x 3 < 0
  p["trace_hutchinson_stderr"] = 2.0
  x = analysis.b1_vs_hutchinson({"points": [p]})
  assert x["ratio"] == 2.0 and x["z_abs"] == pytest.approx(5 / math.sqrt(0.5 + 4))
  text = _page_text()
  assert (", and no ratio: Hutchinson's estimate is within two of its standard errors of "
          "zero") in text
  assert f"a ratio of {a['training_hmm']['ratio']:.2f}" in text


# ----------------------------------------------------------------------------
# The tables: each macro of tables.md on the analysis of a file made here


def _table(macro, f):
  env = render.environment(ROOT)
  return env.from_string('{% import "mlm_flatness/tables.md" as T %}'
                         f"{{{{ T.{macro}(f) }}}}").render(f=f)


def _write(tmp_path, doc, name="x.json"):
  folder = tmp_path / "r"
  folder.mkdir(exist_ok=True)
  (folder / name).write_text(json.dumps(doc))
  return _analyze(folder)["files"][name[:-5]]


def _res(acc, whiten=False, rank=None, std=0.01):
  r = {"test_acc_mean": acc, "test_acc_std": std, "test_acc": [acc] * 5, "epoch": [1] * 5,
       "chosen": {"lr": 0.01, "weight_decay": 0.0, "whiten": whiten}}
  if rank is not None:
    r.update(feature_rank=rank, num_features=2048)
  return r


def _training_doc(points, sanity, **extra):
  return {"figure": "training", "language": "hmm", "points": points, "sanity": sanity,
          "args": {"pilot_steps": 4}, "pilot": {"0.1": {"valid_mlm_loss": 3.0, "change": 0.01}},
          "sgd_lr": 0.1, "pilot_start_valid_loss": 2.99, "config": {"train": {
              "batch_size": 64, "num_steps": 8}}, **extra}


def test_the_change_table_shows_fine_tuning_where_measured(tmp_path):
  """A Figure 1 / 3 file with fine-tuning at both ends gets a fine-tuned row (points, paired
  over model seeds), and one without it keeps its two rows; with three models the paired
  sign-flip p sits at its floor, 0.25, and the table says so and shows no interval."""
  def point(seed, step, trace, probe, ft=None):
    p = {"sgd_step": step, "seed": seed, "trace_b1": trace, "trace_b1_std": 0.1,
         "trace_hutchinson": trace, "trace_hutchinson_stderr": 0.1, "valid_mlm_loss": 3.0,
         "valid_gap": 0.1, "probe": {"10": {**_res(probe), "test_acc": [
             probe + (seed + 1) * (k + 1) / 10000 for k in range(5)]}}}
    if ft is not None:
      p["fine_tune"] = {"10": {"test_acc_mean": ft, "test_acc_std": 0.0, "test_acc": [ft, ft]}}
    return p
  before = [(10.0, 0.30, 0.57), (11.0, 0.31, 0.56), (9.0, 0.29, 0.58)]
  after = [(8.0, 0.31, 0.62), (9.5, 0.30, 0.61), (7.0, 0.32, 0.63)]
  sanity = {"10": {"num_test": 100, "majority": 0.01, "bayes": 0.5, "lookup_table": _res(0.4),
                   "random_init": {str(s): _res(0.2) for s in range(3)}}}

  def table(with_ft):
    pts = [point(s, x, t, pr, ft if with_ft else None)
           for x, rows in ((0, before), (8, after)) for s, (t, pr, ft) in enumerate(rows)]
    return _table("change", _write(tmp_path, _training_doc(pts, sanity)))
  t = table(False)
  assert "fine-tuned" not in t and t.count("\n") == 5  # header, rule, 2 rows, blank, ran on
  assert ("| Tr(H) B.1 | 10.0 -> 8.2 | -1.8 | 0 up, 3 down | none at n = 3 | 0.25 (floor of 3 "
          "pairs)") in t
  t = table(True)
  assert ("| task 10 fine-tuned (points) | 57.00 -> 62.00 | +5.00 | 3 up, 0 down | none at n = 3 "
          "| 0.25 (floor of 3 pairs) | 0.75 (floor of 3 pairs, Holm over 3) | 3 model seeds |") in t


def test_the_sanity_table_shows_every_row(tmp_path):
  """The sanity rows: majority, the block alone, Bayes, the lookup table's and each random
  init's probe, the trained models' first and last points and fine-tuning, each probe with its
  settings chosen on valid and its features' rank; the vs-init table reads the analysis."""
  def point(seed, step, acc):
    return {"seed": seed, "sgd_step": step, "probe": {"10": _res(acc, rank=4)},
            **({"fine_tune": {"10": {"test_acc_mean": 0.05, "test_acc_std": 0.0}}}
               if step != 4 else {})}
  doc = {"figure": "training", "language": "hmm",
         "points": [point(s, t, 0.05 + t / 100 + s / 1000) for s in (0, 1) for t in (0, 4, 8)],
         "sanity": {"10": {"num_test": 4000, "majority": 0.01, "block_majority": 0.055,
                           "bayes": 0.105, "lookup_table": _res(0.09, True, 2000),
                           "random_init": {"0": _res(0.07, True, 2030), "1": _res(0.06)},
                           "fine_tune_random_init": {"0": {"test_acc_mean": 0.04,
                                                           "test_acc_std": 0.0}}}}}
  f = {"sanity": analysis.sanity_summary(doc, "sgd_step"), "ran_on": []}
  lines = _table("sanity", f).splitlines()
  assert lines[0].startswith("| task-10, 4000 test examples |")
  names = [ln.split(" | ")[0][2:] for ln in lines[2:] if ln]
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
  table = "\n".join(lines)
  assert "| lookup table (exact conditionals) probe | 9.00 (1.00) | whitened, lr 0.01, wd 0 | " \
         "2000 of 2048 |" in table
  assert "| random init (model seed 1) probe | 6.00 (1.00) | standardised, lr 0.01, wd 0 | - |" \
      in table
  assert "| trained (model seed 1, step 8) probe | 13.10 (1.00) | standardised, lr 0.01, wd 0 " \
         "| 4 of 2048 |" in table
  lasts = {str(p["seed"]): p for p in doc["points"] if p["sgd_step"] == 8}
  vs = _table("vs_random_init", {"vs_random_init": analysis.vs_random_init(lasts, doc["sanity"]),
                                 "ran_on": []})
  assert "| task 10 probe: trained - random init | 6.50 -> 13.05 | +6.55 | 0.5 (floor of 2 " \
         "pairs) | 2 of 2 | 2 pairs: models and their own inits |" in vs


def test_a_size_stopped_early_shares_its_architectures_random_init_row():
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

  def names():
    table = analysis.sanity_table(doc, "10", doc["sanity"]["10"], "size")
    return [r["label"] for r in table["rows"]]
  assert names()[-5:] == ["random init (size 64/1/1/256), 2 models probe",
                          "trained, size 64/1/1/256, 2 models probe",
                          "random init (size 128/2/4/512), 2 models probe",
                          "trained, size 128/2/4/512@1000, 2 models probe",
                          "trained, size 128/2/4/512, 2 models probe"]
  inits["128/2/4/512 seed 1"] = res(0.25)  # other inits: the row is not shared
  assert "random init (size 128/2/4/512@1000), 2 models probe" in names()
  assert "random init (size 128/2/4/512), 2 models probe" in names()


def test_the_training_table_shows_every_task_of_a_file(tmp_path):
  """tasks=10,6: the training table has a probe column per task and the sanity rows a table
  per task, each with that task's numbers (not the first task's twice)."""
  def point(seed, step):
    return {"seed": seed, "sgd_step": step, "valid_mlm_loss": 3.3, "valid_gap": 0.2,
            "trace_b1": 40.0, "trace_b1_std": 1.0, "trace_hutchinson": 41.0,
            "trace_hutchinson_stderr": 2.0, "trace_b1_reps": [39.0, 41.0],
            "probe": {"10": _res(0.5 + step / 100), "6": _res(0.3 + step / 100)}}
  sanity = {t: {"num_test": 4000, "majority": 0.01, "bayes": b, "lookup_table": _res(b - 0.1),
                "random_init": {"0": _res(b - 0.4)}} for t, b in (("10", 0.8), ("6", 0.7))}
  f = _write(tmp_path, _training_doc([point(0, 0), point(0, 4)], sanity))
  training = _table("training", f).splitlines()
  assert training[0].endswith("| task 10 probe test acc % (std, 5 seeds) | "
                              "task 6 probe test acc % (std, 5 seeds) |")
  assert training[3].endswith("| 54.00 (1.00) | 34.00 (1.00) |")
  tables = _table("sanity", f).split("\n\n")
  assert [tb.splitlines()[0].split(" | ")[0] for tb in tables[:2]] == [
      "| task-10, 4000 test examples", "| task-6, 4000 test examples"]
  assert "| Bayes: posterior of the hidden state (forward-backward) | 70.00 |" in tables[1]
  assert "| trained (model seed 0, step 4) probe | 34.00 (1.00) |" in tables[1]
  assert "| trained (model seed 0, step 4) probe | 54.00 (1.00) |" in tables[0]


# ----------------------------------------------------------------------------
# The page's sentences, held to analysis.json


def _analysis_json():
  with open(os.path.join(RES, "analysis.json")) as f:
    return json.load(f)


def _page_text():
  with open(PAGE) as f:
    return " ".join(f.read().split())


def _says(*phrases):
  text = _page_text()
  for p in phrases:
    assert p in text, p


def _readme_row(start):
  with open(os.path.join(ROOT, "README.md")) as f:
    return next(l for l in f.read().splitlines() if l.startswith(start))


def test_the_page_rows_are_the_files_rounded():
  """Every row of the Figure 1 / 3 tables (SGD and AdamW continuations) on the page is the
  committed JSON rounded."""
  text = open(PAGE).read()
  for name in ("training_pcfg", "training_hmm", "training_adamw_hmm"):
    with open(os.path.join(RES, f"{name}.json")) as f:
      r = json.load(f)
    x = "adamw_cont_step" if r.get("continued_with") == "adamw" else "sgd_step"
    for p in r["points"]:
      pr = next(iter(p["probe"].values()))
      row = (f"| {p[x]} (seed {p['seed']}) | {p['valid_mlm_loss']:.4f} | {p['valid_gap']:.4f} | "
             f"{p['trace_b1']:.1f} ({p['trace_b1_std']:.1f}) | {p['trace_hutchinson']:.1f} "
             f"({p['trace_hutchinson_stderr']:.1f}) | {100 * pr['test_acc_mean']:.2f} "
             f"({100 * pr['test_acc_std']:.2f}) |")
      assert row in text, row


def test_the_pcfg_figure_3_models_probe_below_their_inits():
  """"Every trained model's task-C probe ... is below its own random initialisation's": each
  model of training_pcfg at its last checkpoint, below its init."""
  f = _analysis_json()["files"]["training_pcfg"]
  last = f["trend"]["x"][1]
  for p in f["points"]:
    if p["x"] == last:
      assert p["probe"]["C"]["pct"][0] < f["sanity"]["C"]["random_init"]["pct"][p["seed"]]
  assert f["vs_random_init"]["C"]["trained_above_random_in"] == 0
  _says("Every trained model's task-C probe")


def test_the_hmm_continuation_sentences_hold():
  """Both HMM continuations (SGD, AdamW): the trained models' task-10 probe at the last
  checkpoint is "near the block alone's" accuracy (within 1.5 points) and "far below the
  Bayes" one (more than 4 points under)."""
  a = _analysis_json()["files"]
  for name in ("training_hmm", "training_adamw_hmm"):
    c, s = a[name]["vs_random_init"]["10"], a[name]["sanity"]["10"]
    assert abs(c["mean_a_pct"] - s["block_majority_pct"]) < 1.5, name
    assert s["bayes_pct"] - c["mean_a_pct"] > 4, name
  text = _page_text()
  assert text.count("near the block alone's") >= 2 and text.count("far below the Bayes") >= 2


def test_the_hmm_size_sentences_hold():
  """Figures 2 / 5 on the default HMM: "every size probes below its own random
  initialisation", "the smaller embedded model is the flatter one" and "the probes are not told
  apart" (p >= 0.05)."""
  a = _analysis_json()["files"]
  for name in ("size_hmm", "embedded_hmm"):
    c = a[name]["vs_random_init"]["10"]
    assert c["trained_above_random_in"] == 0 and c["n_keys"] == len(a[name]["points"]), name
  emb = a["embedded_hmm"]["sizes"]
  assert emb["means"]["trace_b1"][0] < emb["means"]["trace_b1"][1]
  assert emb["tests"]["probe 10"]["p_value"] >= 0.05
  _says("every size probes below its own random initialisation",
        "the smaller embedded model is the flatter one", "the probes are not told apart")


def test_the_init_0_1_continuation_sentences_hold():
  """The init-0.1 encoders' continuations: SGD "the loss stays where AdamW left it" (within
  0.005 nats) and "Tr(H) does not move" (Holm p above 0.05, up in at most 4 of 6); AdamW "the
  loss falls a little" (by less than 0.02 nats) and "Tr(H) rises in every model" (6 of 6,
  "not significant after the correction"); "the probes move by less than half a point" (the
  README row's "probes move < 0.5 points"), every continued model above its init on both
  tasks; and Fig. 1's claim is transfer, not Tr(H)."""
  a = _analysis_json()["files"]
  got = {}
  for arm, key in (("sgd", "sharp_init0.1_sgd/training_hmm_sharp"),
                   ("adamw", "sharp_init0.1_adamw/training_adamw_hmm_sharp")):
    first, last = a[key]["trend"]["means"]["valid_mlm_loss"]
    got[arm] = (last - first, a[key]["trend"]["tests"])
    for task in ("10", "6"):
      c = a[key]["vs_random_init"][task]
      assert c["trained_above_random_in"] == c["n"] == 6, (key, task)
    assert all(abs(got[arm][1][f"probe {t}"]["diff"]) < 0.005 for t in ("10", "6"))
  change, tests = got["sgd"]
  assert abs(change) < 0.005 and tests["trace_b1"]["p_holm"] > 0.05
  assert tests["trace_b1"]["n_up"] <= 4
  change, tests = got["adamw"]
  assert -0.02 < change < 0
  assert tests["trace_b1"]["n_up"] == 6 and tests["trace_b1"]["p_holm"] > 0.05
  _says("The loss stays where AdamW left it", "Tr(H) does not move", "The loss falls a little",
        "Tr(H) rises in every model", "not significant after the correction",
        "The probes move by less than half a point",
        "The paper's Fig. 1 shows downstream accuracy rising as AdamW goes on at the converged "
        "loss, not Tr(H) (its fall of Tr(H) is Fig. 3's, with SGD)")
  assert "downstream accuracy" in papers.PAPER["s002.fig1"][0]
  assert "Tr(H)" in papers.PAPER["s002.fig3"][0] and "Tr(H)" not in papers.PAPER["s002.fig1"][0]
  assert "The paper's Fig. 1 has Tr(H)" not in _page_text()
  row = _readme_row("| 002 Figures 1 / 3, Tr(H)")
  assert "probes move < 0.5 points" in row and "paper: a fall" not in row
  assert "paper: Tr(H) falls along SGD (Fig. 3), transfer rises along AdamW (Fig. 1)" in row
  assert f"+{tests['trace_b1']['diff']:.1f} with AdamW (6 of 6 up, Holm p " \
         f"{tests['trace_b1']['p_holm']:.2g})" in row


# Fig. 3's protocol (SGD) and Fig. 1's (AdamW) continuing the 12,000-step BERT-masked PCFG
# encoders, task A probed with 100,000 examples: (file, loss bound, B.1's (n_up, n_down), the
# page's phrases).
PCFG_100K_CONTINUATIONS = {
    "sgd": ("pcfg_bert_12k_100k_sgd/training_pcfg", 0.005, (1, 2),
            ("Tr(H) is not told apart", "Two of three models went down, so the prediction "
             "failed on its count", "The probe does not move",
             "Every continued model stays above its random init")),
    "adamw": ("pcfg_bert_12k_100k_adamw/training_adamw_pcfg", 0.01, (2, 1),
              ("Tr(H) is not told apart either",
               "not lower in two of three models, as predicted",
               "Neither continuation reproduces Figs. 1 / 3 on the PCFG at this size "
               "and length")),
}


@pytest.mark.parametrize("arm", sorted(PCFG_100K_CONTINUATIONS))
def test_the_pcfg_100k_continuation_sentences_hold(arm):
  """Each PCFG continuation: the loss stays where AdamW left it (within the bound), Tr(H) B.1
  up / down in the counts the page gives and its mean change smaller than its smallest
  standard deviation over repetitions ("not told apart", "inside its spread"), the probe
  moving by less than a point, and every continued model above its random init."""
  key, bound, counts, phrases = PCFG_100K_CONTINUATIONS[arm]
  f = _analysis_json()["files"][key]
  assert f["args"]["probe_train"] == 100_000 and f["args"]["tasks"] == "A"
  assert f["args"]["continue_with"] == arm
  first, last = f["trend"]["means"]["valid_mlm_loss"]
  assert abs(last - first) < bound
  b1 = f["trend"]["tests"]["trace_b1"]
  assert (b1["n_up"], b1["n_down"]) == counts and b1["n"] == 3
  assert abs(b1["diff"]) < f["ranges"]["trace_b1_std"]["min"]
  assert abs(f["trend"]["tests"]["probe A"]["diff"]) < 0.01
  c = f["vs_random_init"]["A"]
  assert c["trained_above_random_in"] == c["n"] == 3
  _says(*phrases)


def test_the_sharp_size_sentences_hold():
  """Figures 2 / 5 on the sharp HMM's init-0.1 encoders: "every model probes above its own
  random init" (both tasks, every size and seed; tested per size, 6 pairs each, since two sizes
  share their 6 inits: 12 distinct inits); "at near-equal loss the larger model probes worse"
  (the loss not told apart, both probes lower at Holm p < 0.05); "trained six times longer, the
  larger model reaches a lower loss and its probes are higher on the mean"; Figure 5: both
  estimators higher for the natural larger models at Holm p < 0.05."""
  a = _analysis_json()["files"]
  f = a["sharp_init0.1_sizes/size_hmm_sharp"]
  small, equal, long_ = f["sizes"]["sizes"]
  assert (small, equal, long_) == ("64/1/1/256", "128/2/4/512@1000", "128/2/4/512")
  for t in ("10", "6"):
    total = f["vs_random_init_total"][t]
    assert total["above"] == total["models"] == 18 and total["inits"] == 12
    for size, by_task in f["vs_random_init"].items():
      c = by_task[t]
      assert c["n"] == 6 and c["trained_above_random_in"] == 6 and c["at_floor"], (size, t)
  got = f["sizes"]["vs_first"]
  assert got[equal]["valid_mlm_loss"]["p_value"] >= 0.05
  assert all(got[equal][f"probe {t}"]["diff"] < 0 and got[equal][f"probe {t}"]["p_holm"] < 0.05
             for t in ("10", "6"))
  assert got[long_]["valid_mlm_loss"]["diff"] < 0 and got[long_]["valid_mlm_loss"]["p_value"] < 0.05
  assert all(got[long_][f"probe {t}"]["diff"] > 0 for t in ("10", "6"))
  e = a["sharp_init0.1_sizes/embedded_hmm_sharp"]
  assert e["sizes"]["sizes"] == [small, equal] and e["embedded_into"] == equal
  for q in ("trace_b1", "trace_hutchinson"):
    c = e["sizes"]["vs_first"][equal][q]
    assert c["diff"] > 0 and c["p_holm"] < 0.05, q
  assert e["ranges"]["grown_max_logit_diff"]["max"] < 1e-4
  text = _page_text()
  for phrase in ("Every model probes above its own random init",
                 "At near-equal loss the larger model probes worse",
                 "Trained six times longer, the larger model reaches a lower loss, and its probes "
                 "are higher on the mean",
                 "Fig. 2 **no** (at near-equal loss the larger model probes worse",
                 "the larger natural models are the sharper ones and probe worse",
                 "Fig. 5 **no** (in one parameterisation the larger natural model is the sharper",
                 "(both tasks, 18 of 18 models)",
                 "| task 10 probe, size 128/2/4/512@1000: trained - random init |"):
    assert phrase in text, phrase
  assert "18 pairs" not in text and "7.6e-06" not in text
  row = _readme_row("| 002 Figures 2 / 5")
  c = got[equal]["probe 10"]
  assert f"probe {100 * c['diff']:+.1f} points against the 64-wide (Holm p {c['p_holm']:.2g})" \
      in row
  c = e["sizes"]["vs_first"][equal]["trace_b1"]
  assert f"are sharper, Tr(H) {c['diff']:+.0f} in one parameterisation (Holm p " \
         f"{c['p_holm']:.2g} (floor of 6 vs 6, Holm over {e['sizes']['holm_m']}))" in row
  assert stats.at_floor(c["p_holm"], stats.p_floor("unpaired", 6, 6, m=e["sizes"]["holm_m"]))


def test_the_pcfg_budget_sentences_hold():
  """The PCFG budget paragraph: the same three seeds and random inits at both budgets, every
  model's probe lower at 12,000 steps than at 3000 and below its init at both, the valid gap
  lower at 12,000 in every model; the paired tests; the lookup table above every model."""
  b = _analysis_json()["pcfg_budget"]
  assert [r["seed"] for r in b["rows"]] == [0, 1, 2] and b["steps"] == [3000, 12000]
  with open(os.path.join(RES, "training_pcfg.json")) as f:
    short = json.load(f)
  with open(os.path.join(RES, "pcfg_12k", "pretrained_pcfg.json")) as f:
    long_ = json.load(f)
  for r in b["rows"]:
    s = r["seed"]
    assert short["sanity"]["C"]["random_init"][str(s)]["test_acc_mean"] == pytest.approx(
        r["random_init"], abs=1e-6)
    assert r["probe_long"] < r["probe_short"] < r["random_init"]
    assert r["gap_long"] < r["gap_short"]
    assert long_["sanity"]["C"]["lookup_table"]["test_acc_mean"] > r["probe_short"]
  want = stats.paired_compare([r["probe_long"] for r in b["rows"]],
                              [r["probe_short"] for r in b["rows"]])
  assert {k: b["longer"][k] for k in want} == want
  assert b["longer"]["n_down"] == 3 and b["to_init"]["n_up"] == 3 and b["above_long"] == 0
  _says("the task-C probe is lower, by", "0 of 3 models probe above their random init",
        "as the loss falls it moves away from the random init, not towards it")


def test_the_pcfg_masking_sentences_hold():
  """The PCFG tasks / masking paragraph: the same seeds and inits in both files; with one mask
  every model below its init on A, B and C (B below the majority class); BERT masking above one
  mask in every model and task, within two points of the inits on the mean, not above them;
  the words alone within about a point of the inits on B and C, below them on A, above the
  BERT-masked models on B and C; at 12,000 steps A and B up in every model, level with the
  inits; C below in every model; the predictions first committed with the results."""
  a = _analysis_json()
  m = a["pcfg_masking"]
  assert m["seeds"] == [0, 1, 2]
  rows = {r["quantity"]: r for r in m["rows"]}
  for task in "ABC":
    r = rows[f"task {task}"]
    assert all(x < i for x, i in zip(r["values_a"], r["init_values"])), task
    assert r["test"]["n_up"] == 3, task
    assert -0.02 < statistics_mean(r["values_b"]) - statistics_mean(r["init_values"]) < 0, task
  f = a["files"]
  bert, one = f["pcfg_bert/pretrained_pcfg"], f["pcfg_tasks/pretrained_pcfg"]
  for t in "BC":
    assert abs(bert["sanity"][t]["words_pct"] - bert["vs_random_init"][t]["mean_b_pct"]) < 1.5
    assert bert["vs_random_init"][t]["mean_a_pct"] < bert["sanity"][t]["words_pct"]
  assert bert["sanity"]["A"]["words_pct"] < bert["vs_random_init"]["A"]["mean_b_pct"] - 2
  assert one["vs_random_init"]["B"]["mean_a_pct"] < one["sanity"]["B"]["majority_pct"]
  steps = {r["quantity"]: r for r in a["pcfg_steps"]["12k"]["rows"]}
  assert a["pcfg_steps"]["12k"]["la"] == "3000 steps" and steps["valid gap"]["test"]["n_down"] == 3
  long_ = f["pcfg_bert_12k/pretrained_pcfg"]
  for task in "AB":
    assert steps[f"task {task}"]["test"]["n_up"] == 3, task
    c = long_["vs_random_init"][task]
    assert abs(c["diff"]) < 0.005 and c["trained_above_random_in"] == 1, task
  assert long_["vs_random_init"]["C"]["n_down"] == 3
  assert long_["vs_random_init"]["C"]["trained_above_random_in"] == 0
  assert (steps["task C"]["test"]["n_up"], steps["task C"]["test"]["n_down"]) == (1, 2)
  _says("probe below their own random inits on all three tasks, in every model",
        "the prediction for seeds 1 and 2 (above the inits on A and B in 3 of 3 models, below "
        "on C in at least 2; first committed with the results) failed",
        "probes of tasks A and B rise in every model, to level with the random inits",
        "(1 model up, 2 down) and stays below the init in every model",
        "the trained-above-random check of issue 34 is still not met there",
        "raises every task's probe in every model", "to within two points of the inits",
        "but not above them: the prediction (first committed with the results) does not hold",
        "The prediction, first committed with the results: if the objective is the cause",
        "the trained-above-random check of issue 34 is not met there")


def statistics_mean(xs):
  return sum(xs) / len(xs)


def test_the_pcfg_100k_probe_sentences_hold():
  """The PCFG probes with 100,000 examples: on task A every model above its own init (3 of 3,
  p at the floor of 3 pairs: "untested") and above the words alone, where with 10,000 examples
  the same models were level with their inits; on task B one of three above, the words above
  every encoder; the lookup table below every init on A; on task C no model above its init,
  every probe up from 10,000 examples with the inits gaining more; the predictions first
  committed with the results."""
  f = _analysis_json()["files"]
  big, small = f["pcfg_bert_12k_100k/pretrained_pcfg"], f["pcfg_bert_12k/pretrained_pcfg"]
  c, s = big["vs_random_init"], big["sanity"]
  assert c["A"]["trained_above_random_in"] == c["A"]["n"] == 3
  assert c["A"]["p_value"] == c["A"]["p_floor"] == 0.25 and c["A"]["at_floor"]
  assert big["probe"]["A"]["min_pct"] > s["A"]["words_pct"]
  assert abs(small["vs_random_init"]["A"]["diff"]) < 0.005
  assert c["B"]["trained_above_random_in"] == 1 and c["B"]["diff"] < 0
  assert s["B"]["words_pct"] > max(big["probe"]["B"]["max_pct"], s["B"]["random_init"]["max_pct"])
  assert s["A"]["lookup_pct"] < s["A"]["random_init"]["min_pct"]
  assert c["C"]["trained_above_random_in"] == 0 and c["C"]["p_value"] == c["C"]["p_floor"]
  assert c["C"]["mean_b"] - small["vs_random_init"]["C"]["mean_b"] > \
      c["C"]["mean_a"] - small["vs_random_init"]["C"]["mean_a"] > 0
  assert s["C"]["lookup_pct"] < s["C"]["random_init"]["min_pct"]
  _says("Task C: the trained encoders fall below their inits.",
        "the random inits more than the trained ones",
        "is below every init: that part of the prediction failed again",
        "the trained-above-random check of issue 34 comes out 3 of 3 above on task A only "
        "(p 0.25, the floor; untested)",
        "in which the trained-above-random check of issue 34 comes out 3 of 3 above, on one "
        "task (p 0.25, the floor; untested)",
        "Task A: the trained encoders beat their inits.",
        "the same models were level with their inits", "Task B: it does not.",
        "beat the trained and the random encoders alike: the prediction holds on A and fails on B",
        "The lookup table stays below the random inits on A",
        "with a prediction first committed with the results: each task's models",
        "its prediction first committed with the results: the trained models above their inits")


def test_the_pcfg_48k_probe_sentences_hold():
  """The 48,000-step PCFG encoders: the same inits as at 12,000 steps; every model above its
  own init on A and B, "3 of 3 above (p 0.25, the floor; untested)"; one of three on C; the
  words alone below the trained models on A and above every encoder on B and C; the lookup
  table below every init on C; every valid gap above the predicted 0.10 and below its 12,000-step
  value; every probe up from 12,000 steps; the prediction first committed with the results."""
  a = _analysis_json()
  f = a["files"]
  big, short = f["pcfg_bert_48k_100k/pretrained_pcfg"], f["pcfg_bert_12k_100k/pretrained_pcfg"]
  assert big["args"]["pretrain"] == "data.masking=bert,train.num_steps=48000"
  c, s = big["vs_random_init"], big["sanity"]
  for t in "ABC":
    assert s[t]["random_init"]["pct"] == short["sanity"][t]["random_init"]["pct"], t
  for t in "AB":
    assert c[t]["trained_above_random_in"] == c[t]["n"] == 3
    assert c[t]["p_value"] == c[t]["p_floor"] == 0.25 and c[t]["at_floor"]
  assert short["vs_random_init"]["B"]["trained_above_random_in"] == 1
  assert big["probe"]["A"]["min_pct"] > s["A"]["words_pct"]
  for t in "BC":
    assert s[t]["words_pct"] > max(big["probe"][t]["max_pct"], s[t]["random_init"]["max_pct"])
  assert c["C"]["trained_above_random_in"] == 1 and c["C"]["diff"] < 0
  assert s["C"]["lookup_pct"] < s["C"]["random_init"]["min_pct"]
  gaps, before = big["ranges"]["valid_gap"]["values"], short["ranges"]["valid_gap"]["values"]
  assert min(gaps) > 0.10 and all(g < b for g, b in zip(gaps, before))
  rows = a["pcfg_steps"]["48k"]["rows"]
  assert all(r["test"]["n_up"] == 3 for r in rows if r["probe"])
  _says("Tasks A and B: every trained encoder probes above its own random init",
        "Task C: closer to the inits, not above them.",
        "so that part of the prediction failed. Every model's probe rose from 12,000 to 48,000",
        "the trained-above-random check of issue 34 comes out 3 of 3 above on PCFG tasks A and "
        "B (p 0.25, the floor; untested) and 1 of 3 on task C",
        "The prediction, first committed with the results: the valid gap below 0.10 nats")
  assert "Written on 2026-11-29" not in _page_text()


def test_the_continuations_predictions_say_when_they_were_committed():
  """The two PCFG continuations' predictions first appear in git with their results: the page
  says so, and "written before the run" nowhere in the section."""
  text = _page_text()
  assert text.count("The prediction, first committed with the results: Tr(H) (B.1) not lower "
                    "in at least 2 of 3 models") == 2
  section = text.split("## Figures 1 / 3")[1].split("## Tables 1-2")[0]
  for old in ("Written before the run", "written before their probes", "Stated before",
              "planned before any was probed", "Six was the count planned"):
    assert old not in section, old


def test_the_lstm_6000_step_paragraph_says_what_its_floor_allows():
  """The page says the 6000-step LSTMs' "trained above random init" is "significant at 0.05"
  exactly when the file's p is below 0.05 (possible from 6 models on) and "not significant by
  design" exactly while the floor (2 / 2^n) is above 0.05; the README row says its p is at
  its floor."""
  c = _analysis_json()["files"]["sharp_bilstm_6k/pretrained_hmm_sharp"]["vs_random_init"]["10"]
  assert c["p_floor"] == pytest.approx(2 / 2 ** c["n"])  # an independent count of the floor
  text = _page_text()
  says = '"trained above random init" is not significant by design' in text
  assert says == (c["p_floor"] > 0.05), (c["n"], c["p_floor"])
  significant = '"trained above random init" is significant at 0.05' in text
  assert significant == (c["p_value"] < 0.05), (c["n"], c["p_value"])
  assert c["p_value"] == pytest.approx(c["p_floor"]) and c["at_floor"]
  row = _readme_row("| 002 probe sanity")
  assert f"the paper's LSTM {c['trained_above_random_in']} of {c['n']} (p {c['p_value']:.2g}, " \
         f"the floor)" in row
  _says("Six is the smallest count whose floor is below 0.05; the plan to stop there was first "
        "committed with the results")


def test_the_init_scale_sentences_hold():
  """The init-0.1 encoders leave the block (valid KL below the init-0.02 encoder's, which stays
  at the context's worth), probe above their inits (6 of 6, p at the floor), and read their
  neighbours where the init-0.02 encoder does not: one other initialisation was tried, so the
  page says the plateau is "consistent with" the attention's optimisation from the small
  initialisation."""
  f = _analysis_json()["files"]["sharp_init0.1/pretrained_hmm_sharp"]
  with open(os.path.join(ROOT, "results", "attention_reach", "analysis.json")) as fh:
    reach = json.load(fh)["files"]
  assert sorted(reach) == ["hmm_sharp_init0.02", "hmm_sharp_init0.1"]  # two inits, no more
  kl02 = reach["hmm_sharp_init0.02"]["eval"]["0"]["valid_kl"]
  assert f["ranges"]["valid_kl"]["max"] < kl02
  assert abs(kl02 - f["sanity"]["10"]["context_value"]["context_value"]) < 0.01
  c = f["vs_random_init"]["10"]
  assert c["trained_above_random_in"] == c["n"] == 6 and c["at_floor"]
  assert reach["hmm_sharp_init0.1"]["best_head"]["trained"][0]["min"] > \
      2 * reach["hmm_sharp_init0.02"]["best_head"]["trained"][0]["max"]
  text = _page_text()
  assert "the plateau is consistent with the optimisation of the attention from GPT-2's small " \
         "initialisation rather than the data or the architecture (one other initialisation, " \
         "0.1, was tried)" in text
  assert "the plateau was the optimisation" not in text
  row = _readme_row("| 002 probe sanity")
  assert f"sharp-HMM encoders at init 0.1 {c['trained_above_random_in']} of {c['n']} (p " \
         f"{c['p_value']:.2g}, the floor)" in row
  a = _analysis_json()["files"]
  low = a["sharp/pretrained_hmm_sharp"]["vs_random_init"]["10"]
  assert low["trained_above_random_in"] == 0 and low["n"] == 2  # init 0.02: below its inits
  assert f"encoders at init 0.02 {low['trained_above_random_in']} of {low['n']};" in row
  pcfg = a["pcfg_bert_48k_100k/pretrained_pcfg"]["vs_random_init"]
  above = " / ".join(str(pcfg[t]["trained_above_random_in"]) for t in "ABC")
  assert f"PCFG at 48,000 steps, tasks A / B / C: {above} of 3" in row and above == "3 / 3 / 1"


def test_the_changed_analysis_changes_the_page(tmp_path):
  """The page is the analysis formatted: a blind probe's row loses its p, and a probe that is
  not blind gets one (the analysis of a copy of the files whose per-seed results differ)."""
  folder = tmp_path / "r"
  os.makedirs(folder / "sanity")
  with open(os.path.join(RES, "sanity", "training_hmm.json")) as f:
    doc = json.load(f)
  f = _write(tmp_path, copy.deepcopy(doc), "sanity/training_hmm.json")
  assert f["vs_random_init"]["10"]["blind"]
  assert BLIND in _table("vs_random_init", f)
  for i, p in enumerate(doc["points"]):
    p["probe"]["10"]["test_acc"] = [x + i / 1000 + k / 10000 for k, x in
                                    enumerate(p["probe"]["10"]["test_acc"])]
  f = _write(tmp_path, doc, "sanity/training_hmm.json")
  assert not f["vs_random_init"]["10"]["blind"]
  assert BLIND not in _table("vs_random_init", f) and "(floor of 2 pairs)" in _table(
      "vs_random_init", f)


def test_the_included_sections_stand_where_the_argument_needs_them():
  """The layer-by-layer probe and the attention reach are their own experiments' sections,
  included by this one's page.md: the renderer counts them as included (not appended to the
  page's end) and they stand inside the Figures 1 / 3 section, in their places."""
  assert render.unincluded("seed002_flatness", ROOT) == []
  text = open(PAGE).read()
  order = ["## Figures 1 / 3: Tr(H) and transfer after the loss converges",
           "### Layer by layer: where the encoder's probe falls below its random init",
           "### The PCFG encoders trained four times longer",
           "- **The encoders leave the block**", "- **What they learned: to read the neighbours.**",
           "### The init-0.1 encoders continued with SGD", "## Figures 2 and 5",
           "## Tables 1-2: adversarial pretraining"]
  where = [text.index(h) for h in order]
  assert where == sorted(where), where
