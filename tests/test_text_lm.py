"""Pretraining text for the small GPT-2 (el_jax.core.tasks.text_lm), its training through the
generic loop, and `export_run` to the Hugging Face layout that `load_gpt2` reads."""
import os

import jax
import numpy as np
import pytest

from el_jax.infra import checkpoint
from el_jax.core.data import gpt2_bpe
from el_jax.core.data import label_copy
from el_jax.core.data import texts
from el_jax.run import job
from el_jax.core.models import decoder
from el_jax.core.models import pretrained
from el_jax.core.tasks import text_lm
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib
import reliability as rel  # tests/reliability.py


def tmp_path_factory_cache(cfg):
  return os.path.join(cfg.data.cache_dir, "label_copy")


def _config(tmp_path, **over):
  cfg = config_lib.get_config("text_lm", "test", over)
  cfg.data.cache_dir = str(tmp_path / "cache")
  return cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("text_lm")
  cfg = _config(tmp)
  with pytest.MonkeyPatch.context() as m:  # the suite's default is 0: the task's plot is checked
    rel.plots_on(m)
    summary = job.train_and_evaluate(cfg, str(tmp / "run"))
  setup = setup_lib.make_setup(cfg)
  trainer = setup_lib.Trainer(setup)
  params, _ = checkpoint.load_params_from(str(tmp / "run"), 0, trainer.abstract_state["params"],
                                     trainer.state_sharding["params"])
  return cfg, tmp, summary, setup, trainer, params


def test_rows_are_the_texts_without_the_label_copy_sentences(trained, capsys):
  cfg, tmp, summary = trained[:3]
  assert (tmp / "run" / "loss.png").stat().st_size > 1000
  rows, n_kept, n_excl = text_lm.build_rows(cfg.data)
  assert rows.dtype == np.int32 and rows.shape[1] == cfg.data.context_len + 1
  distinct = {t for c in cfg.data.corpora for t, _, _ in texts.load_sentences(c)}
  excluded = set()
  for corpus in cfg.data.corpora:
    lc = config_lib.get_config("label_copy", cfg.data.exclude_label_copy).data
    lc.corpus = corpus
    lc.cache_dir = str(tmp_path_factory_cache(cfg))
    sents = texts.load_sentences(corpus)
    for split in label_copy.build(lc).splits.values():
      excluded |= {sents[int(i)][0] for i in split.sentence}
  assert excluded and n_excl == len(excluded & distinct)
  assert n_kept == min(cfg.data.max_sentences or len(distinct), len(distinct) - n_excl)
  # The rows are the stream " " + sentence + <|endoftext|>: every whole piece is a kept text.
  pieces = gpt2_bpe.decode(rows.ravel().tolist()).split("<|endoftext|>")[1:-1]
  assert len(pieces) > 0.9 * n_kept
  assert all(p.startswith(" ") for p in pieces)
  got = {p[1:] for p in pieces}
  assert got <= distinct - excluded
  assert len(got) == len(pieces)  # each distinct text once
  # Cached: the same rows come back from the .npz.
  again = text_lm.build_rows(cfg.data)
  np.testing.assert_array_equal(again[0], rows)
  assert again[1:] == (n_kept, n_excl)
  # A damaged cache is rebuilt (the same rows), with a warning.
  cached = [p for p in os.listdir(cfg.data.cache_dir) if p.startswith("rows_")]
  assert len(cached) == 1
  with open(os.path.join(cfg.data.cache_dir, cached[0]), "wb") as f:
    f.write(b"not an npz")
  rebuilt = text_lm.build_rows(cfg.data)
  np.testing.assert_array_equal(rebuilt[0], rows)
  assert "cannot be read" in capsys.readouterr().err
  t = summary["text_lm"]
  assert t["sentences"] == n_kept and t["excluded_sentences"] == n_excl
  assert sum(t["rows"].values()) == len(rows)


def test_evaluation_is_the_mean_token_cross_entropy(trained):
  cfg, tmp, summary, setup, trainer, params = trained
  rows = setup.task.splits()["valid"]
  got = setup.task.evaluate(trainer, params, rows)
  logits = np.asarray(decoder.apply(trainer.graphdef, params, rows[:, :-1],
                                    np.ones_like(rows[:, :-1])), np.float64)
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  tgt = rows[:, 1:]
  ce = logz - np.take_along_axis(logits, tgt[..., None], -1)[..., 0]
  assert got["n_text"] == tgt.size
  np.testing.assert_allclose(got["ce_text"], ce.mean(), rtol=1e-5)
  np.testing.assert_allclose(got["ppl_text"], np.exp(ce.mean()), rtol=1e-5)
  assert got["acc_text"] == pytest.approx(np.mean(logits.argmax(-1) == tgt))
  assert summary["per_seed"][0]["valid_ce_text"] == pytest.approx(got["ce_text"], rel=1e-6)
  # Six steps from random init lower the training loss below log V.
  assert summary["per_seed"][0]["train_ce_text"] < np.log(gpt2_bpe.VOCAB_SIZE)


def test_export_run_writes_what_load_gpt2_reads_back(trained):
  cfg, tmp, _, _, _, params = trained
  out = tmp / "small_gpt2"
  model_cfg, step = pretrained.export_run(cfg, str(tmp / "run"), str(out))
  assert step == cfg.train.num_steps
  cfg2, params2 = pretrained.load_gpt2(str(out))
  assert (cfg2.num_layers, cfg2.embed_dim, cfg2.vocab_size, cfg2.max_len) == (
      model_cfg.num_layers, model_cfg.embed_dim, gpt2_bpe.VOCAB_SIZE, cfg.data.context_len)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with pytest.raises(ValueError, match="only 'gpt2'"):
    pretrained.export_run(_config(tmp, **{"model.preset": "gpt_neox"}), str(tmp / "run"),
                          str(tmp / "x"))


@pytest.mark.parametrize("field,value,match", [
    ("data.corpora", ("kjv", "quran"), "unknown corpus 'quran'"),
    ("data.corpora", (), "data.corpora is empty"),
    ("data.exclude_label_copy", "gpu", "not a variant of configs/label_copy.py"),
    ("data.context_len", 1, "context_len=1 must be an integer >= 2"),
    ("train.batch_size", 0, "batch_size=0 must be an integer >= 1"),
    ("model.preset", "encoder", "bidirectional"),
])
def test_config_errors_name_the_field(tmp_path, field, value, match):
  cfg = _config(tmp_path)
  config_lib.apply_overrides(cfg, {field: value})
  with pytest.raises(ValueError, match=match):
    text_lm.TextLMTask.validate_config(cfg)
