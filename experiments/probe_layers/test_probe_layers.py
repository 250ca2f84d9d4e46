"""experiments/probe_layers: at test size it trains the pre-training run (as mlm_flatness names
it) and probes every layer of the trained models and their random inits; "final" is what the
figures' probe gives; the analysis compares each layer paired over the models; the seed-002
page's layer-by-layer sentences hold to results/probe_layers/analysis.json."""
import json
import os

import pytest

from el_jax.report import sources
from el_jax.report import stats
from el_jax.run import config as config_lib
from el_jax.run import mlm_measure

from experiments.probe_layers import analysis
from experiments.probe_layers import config as config_file
from experiments.probe_layers import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RES = os.path.join(ROOT, "results", "probe_layers")


def test_every_layer_of_trained_and_random_models_at_test_size(tmp_path, monkeypatch):
  """Variant `test`: the hmm_mlm:test pre-training (seeds 0, 1) trained under `runs` as
  `hmm_adamw`; for each model seed the probe of layers 0..L and "final" of the trained model
  and its random init; "final" is `Measurer.probes` on the same model; per layer the paired
  comparison over the seeds."""
  monkeypatch.setenv("EL_JAX_CACHE", str(tmp_path / "cache"))
  cfg = config_file.get_config("test")
  cfg.results_dir, cfg.runs = str(tmp_path / "out"), str(tmp_path / "runs")
  out = run_lib.run(cfg)
  doc = out["hmm"]
  with open(tmp_path / "out" / "hmm.json") as f:
    assert json.load(f)["layers"].keys() == doc["layers"].keys()
  (row,) = doc["rows"]
  assert row["label"] == "hmm_adamw" and row["workdir"] == os.path.join(cfg.runs, "hmm_adamw")
  run_cfg = config_lib.get_config("hmm_mlm", "test", {"seeds": (0, 1)})
  names = [str(k) for k in range(run_cfg.model.num_layers + 1)] + ["final"]
  assert list(doc["layers"]) == names and doc["seeds"] == [0, 1]
  assert doc["step"] == run_cfg.train.num_steps
  a = analysis.analyze(sources.Sources(str(tmp_path / "out"), root=ROOT), cfg)["files"]["hmm"]
  for k in names:
    for kind in ("trained", "random_init"):
      assert set(doc["layers"][k][kind]) == {"0", "1"}
    c = a["layers"][k]["6"]
    assert c["n"] == 2 and c["test"] == "paired sign flip"
    layer = doc["layers"][k]
    want = stats.paired_compare([layer["trained"][s]["6"]["test_acc_mean"] for s in "01"],
                                [layer["random_init"][s]["6"]["test_acc_mean"] for s in "01"])
    assert {x: c[x] for x in want} == want
  m = mlm_measure.Measurer(run_cfg, mlm_measure.Settings(
      tasks="6", probe_train=64, probe_valid=32, probe_test=32, probe_epochs=2,
      probe_lrs="0.01", flat_inputs=1, flat_reps=1), "hmm")
  want = m.probes(m.trainer.graphdef, m.params(row["workdir"], doc["step"], 1))["6"]
  assert doc["layers"]["final"]["trained"]["1"]["6"]["test_acc_mean"] == want["test_acc_mean"]
  bad = config_file.get_config("test")
  bad.probe_normalizations = "pca"
  with pytest.raises(ValueError, match=r"--probe_lrs=.*'pca'.*allowed"):
    run_lib.run(bad)
  bad.probe_normalizations, bad.languages = "standardize", ("dyck",)
  with pytest.raises(ValueError, match=r"config.languages=\('dyck',\).*allowed: hmm, pcfg"):
    run_lib.run(bad)


def test_the_variants_are_the_committed_runs():
  """`pcfg` and `hmm` re-run the committed files: the same workdir (runs/mlm_flatness/
  <language>_adamw), step (its run's end, 3000), seeds and probe settings."""
  for language in ("pcfg", "hmm"):
    cfg = config_file.get_config(language)
    assert cfg.languages == (language,)
    with open(os.path.join(RES, f"{language}.json")) as f:
      d = json.load(f)
    assert d["workdir"] == os.path.join(cfg.runs, f"{language}_adamw") and d["step"] == 3000
    assert d["seeds"] == list(cfg.seeds)
    for k in ("probe_train", "probe_valid", "probe_test", "probe_epochs", "probe_lrs",
              "probe_normalizations", "probe_cache"):
      assert d["settings"][k] == cfg[k], (language, k)
    assert d["tasks"] == [{"pcfg": "C", "hmm": "10"}[language]]
  assert config_file.get_config("cpu").languages == ("pcfg", "hmm")


def test_the_layer_by_layer_sentences_hold():
  """On the PCFG the embeddings probe level with the random inits' (within a point) and after
  every block each trained model is below its own init by more than 5 points on the mean, with
  the rank at least halved by the first block; on the HMM the trained rank after the first
  block is 4 and every layer's means are 5-6%; the stored comparisons are the analysis'."""
  with open(os.path.join(RES, "analysis.json")) as f:
    a = json.load(f)["files"]
  p = a["pcfg"]["layers"]
  assert abs(p["0"]["C"]["diff"]) < 0.01
  for k in list(p)[1:]:
    assert p[k]["C"]["trained_above_random_in"] == 0 and p[k]["C"]["diff"] < -0.05, k
  assert p["1"]["C"]["rank"]["trained"]["max"] < p["0"]["C"]["rank"]["trained"]["min"] / 2
  h = a["hmm"]["layers"]
  assert h["1"]["10"]["rank"]["trained"]["min"] == h["1"]["10"]["rank"]["trained"]["max"] == 4
  for c in h.values():
    assert 0.05 <= c["10"]["mean_a"] < 0.06 and 0.05 <= c["10"]["mean_b"] < 0.06
  for language in ("pcfg", "hmm"):
    with open(os.path.join(RES, f"{language}.json")) as f:
      stored = json.load(f)["comparison"]
    for k, by_task in stored.items():
      for t, c in by_task.items():
        assert {x: a[language]["layers"][k][t][x] for x in c} == c, (language, k, t)
  with open(os.path.join(ROOT, "docs", "results", "seed002_flatness.md")) as f:
    text = " ".join(f.read().split())
  for phrase in ("the first block is where the task is lost", "no later block brings it back",
                 "every layer of both models probes at 5-6%"):
    assert phrase in text, phrase
