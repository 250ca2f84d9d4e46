"""experiments/attention_reach: at test size it trains its run (as mlm_flatness names it) and
reads each block's attention at the masked query, equal to a loop over the sentences of
`decoder.attention_probs`; a head with zero queries and keys gives exactly the uniform
baseline; the variants re-run the committed files; the analysis takes each block's best head."""
import json
import os

import numpy as np
import pytest

from el_jax.report import sources
from el_jax.run import config as config_lib

from experiments.attention_reach import analysis
from experiments.attention_reach import config as config_file
from experiments.attention_reach import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RES = os.path.join(ROOT, "results", "attention_reach")


def test_the_masked_queries_weights_at_test_size(tmp_path, monkeypatch):
  import jax
  from el_jax.core.models import decoder
  from el_jax.infra import checkpoint
  monkeypatch.setenv("EL_JAX_CACHE", str(tmp_path / "cache"))
  cfg = config_file.get_config("test")
  cfg.results_dir, cfg.runs = str(tmp_path / "out"), str(tmp_path / "runs")
  doc = run_lib.run(cfg)["test"]
  with open(tmp_path / "out" / "test.json") as f:
    assert json.load(f)["models"].keys() == {"trained", "random_init"}
  run_cfg = config_lib.get_config("hmm_mlm", "test", {"seeds": (0,)})
  (row,) = doc["rows"]
  assert row["label"] == "hmm_adamw" and doc["step"] == run_cfg.train.num_steps
  setup = run_lib.Setup(config_lib.get_config("hmm_mlm", "test", {"seeds": (0,)}))
  trainer = run_lib.Trainer(setup)
  params = checkpoint.restore_params(trainer, row["workdir"], 0, doc["step"])
  v = setup.task.corpus.valid.subset(np.arange(40))
  x, seg, lengths, pos = (v.masked_inputs(setup.task.corpus.mask_id), v.segment_ids, v.lengths,
                          v.mask_pos)
  probs = [np.asarray(p) for p in decoder.attention_probs(trainer.graphdef, params, x, seg)]
  blocks = doc["models"]["trained"]["0"]
  assert doc["eval"]["0"]["valid_kl"] > 0 and len(blocks) == run_cfg.model.num_layers
  a = analysis.analyze(sources.Sources(str(tmp_path / "out"), root=ROOT), cfg)["files"]["test"]
  assert [b["values"] for b in a["best_head"]["trained"]] == [
      [max(b["neighbour_mass"])] for b in blocks]
  for k, b in enumerate(blocks):
    for h in range(run_cfg.model.num_heads):
      want = np.mean([sum(probs[k][n, h, pos[n], pos[n] + d] for d in (-1, 1)
                          if 0 <= pos[n] + d < lengths[n]) for n in range(40)])
      assert b["neighbour_mass"][h] == pytest.approx(want, rel=1e-5)
      left = [probs[k][n, h, pos[n], pos[n] - 1] for n in range(40) if pos[n] >= 1]
      assert b["by_offset"]["-1"][h] == pytest.approx(np.mean(left), rel=1e-5)
  # q = k = 0: every score 0, the weights uniform over the sentence -> exactly `uniform`
  d = run_cfg.model.embed_dim

  def zero_qk(path, arr):  # the QKV kernel / bias columns of q and k (the first 2 * d)
    return arr.at[..., :2 * d].set(0.0) if "qkv" in jax.tree_util.keystr(path) else arr
  flat = jax.tree_util.tree_map_with_path(zero_qk, params)
  for b in run_lib.reach(trainer.graphdef, flat, x, seg, lengths, pos):
    assert b["uniform"] == pytest.approx(np.mean([sum(0 <= p + o < n for o in (-1, 1)) / n
                                                  for p, n in zip(pos, lengths)]))
    np.testing.assert_allclose(b["neighbour_mass"], b["uniform"], rtol=1e-5)


def test_an_lstm_run_or_a_bad_config_is_refused(tmp_path):
  cfg = config_file.get_config("test")
  cfg.results_dir, cfg.runs = str(tmp_path / "out"), str(tmp_path / "runs")
  cfg.sentences = 0
  with pytest.raises(ValueError, match="config.sentences=0 must be >= 1"):
    run_lib.run(cfg)
  cfg.sentences, cfg.model_seeds = 40, ("0", "1")
  with pytest.raises(ValueError, match="one entry per file"):
    run_lib.run(cfg)
  os.makedirs(tmp_path / "lstm")
  with open(tmp_path / "lstm" / "config.json", "w") as f:
    json.dump(config_lib.get_config("hmm_mlm", "test", {"model.preset": "bilstm"}).to_dict(), f)
  from el_jax.run import mlm_measure
  with pytest.raises(ValueError, match=r"model\.preset 'bilstm'; attention weights need an MLM "
                     r"run of the transformer encoder"):
    mlm_measure.encoder_run_config(str(tmp_path / "lstm"), "attention weights")


def test_the_variants_are_the_committed_runs():
  """`init0.1` and `init0.02` name the committed files' runs: their seeds, step (the recipe's
  6000), sentences, and the sharp HMM's data."""
  for variant, name in (("init0.1", "hmm_sharp_init0.1"), ("init0.02", "hmm_sharp_init0.02")):
    cfg = config_file.get_config(variant)
    with open(os.path.join(RES, f"{name}.json")) as f:
      d = json.load(f)
    assert cfg.files == (name,) and d["seeds"] == [int(s) for s in cfg.model_seeds[0].split(",")]
    assert d["step"] == 6000 and "train.num_steps=6000" in cfg.pretrain[0]
    assert d["sentences"] == cfg.sentences
    for item in cfg.data.split(","):
      key, value = item.split("=")
      assert d["data"][key.split(".")[1]] == float(value), item
    want = 0.1 if variant == "init0.1" else 0.02
    assert d["model"].get("init_std", 0.02) == want and f"model.init_std={want}" in cfg.pretrain[0]
  assert config_file.get_config("cpu").files == ("hmm_sharp_init0.1", "hmm_sharp_init0.02")


def test_the_best_heads_are_the_committed_summaries():
  """The analysis' best head per block and seed is the summary the committed files stored."""
  with open(os.path.join(RES, "analysis.json")) as f:
    a = json.load(f)["files"]
  for name, f in a.items():
    with open(os.path.join(RES, f"{name}.json")) as fh:
      summary = json.load(fh)["summary"]
    for kind, blocks in summary.items():
      for b, got in zip(blocks, f["best_head"][kind]):
        assert got["values"] == b["best_head_neighbour_mass"] and got["uniform"] == b["uniform"]
