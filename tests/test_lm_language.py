"""The LM-sampled language of seed 002 (el_jax.core.data.lm_language): exact masked conditionals and
the MLM optimum against a brute-force float64 NumPy GPT-2 over every sentence, the top-K
ranking against the exact token frequencies, the sampler against the exact marginals, its
key / value cache against the decoder, configs/lm_mlm.py:test through the runner, the GLUE loader,
and one-line errors. Nothing is downloaded; the generators are random tiny GPT-2s."""
import itertools
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reliability  # tests/reliability.py
from el_jax.run import runner
from el_jax.run import train
from el_jax.core.data import gpt2_bpe
from el_jax.core.data import lm_language
from el_jax.core.models import decoder
from el_jax.core.models import pretrained
from el_jax.core.tasks import mlm
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib
from test_pretrained import _hf_config, _hf_tensors, _np_gpt2, _write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB, D, LAYERS, HEADS, POS = 10, 8, 2, 2, 8  # the brute-force generator
K, N = 5, 4  # terminals and sentence length: 5^4 = 625 sentences, all enumerated
BOS = VOCAB - 1  # data.bos_id = -1: the last id


def _data_config(generator, cache_dir="", **overrides):
  c = config_lib.get_config("lm_mlm", "test", {"data.generator": str(generator), **overrides})
  c.data.cache_dir = str(cache_dir)
  return c


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
  """(directory, HF tensors) of a random tiny GPT-2 with a vocabulary of 10."""
  t = _hf_tensors(3, d=D, n_layer=LAYERS, vocab=VOCAB, positions=POS, buffers=False)
  t["wte.weight"] *= 0.6  # logits of a few nats: every conditional far from 0 and 1
  hf = _hf_config(vocab_size=VOCAB, n_positions=POS, n_ctx=POS, n_embd=D, n_layer=LAYERS,
                  n_head=HEADS)
  return _write(tmp_path_factory.mktemp("gen") / "gpt2", hf, t), t


def _np_logits(t, tokens):
  return _np_gpt2(t, np.asarray(tokens), HEADS, 1e-5, "gelu_new")


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture(scope="module")
def lang(gen, tmp_path_factory):
  path, _ = gen
  d = _data_config(path, tmp_path_factory.mktemp("cache"), **{"data.top_k": K, "data.length": N, "data.max_len_tokens": N,
                            "data.top_k_samples": 4000, "data.sample_batch": 4000,
                            "data.cond_batch": 4096}).data
  return lm_language.language(d)


@pytest.fixture(scope="module")
def brute(gen, lang):
  """The restricted LM's joint over all K^N sentences [K] * N (float64 NumPy, from the HF
  tensors): log p_R(x) = sum_j log softmax_R(logits_j)[x_j]."""
  _, t = gen
  sents = np.array(list(itertools.product(range(K), repeat=N)), np.int64)  # terminal ids
  ids = lang.vocab_ids.astype(np.int64)
  inp = np.concatenate([np.full((len(sents), 1), BOS), ids[sents[:, :-1]]], axis=1)
  logp = _log_softmax(_np_logits(t, inp)[..., ids])  # [S, N, K] restricted, renormalised
  joint = np.take_along_axis(logp, sents[..., None], -1)[..., 0].sum(1)
  return sents, joint.reshape((K,) * N)


def _exact_conditional(joint, sent, i):
  idx = list(sent)
  idx[i] = slice(None)
  p = np.exp(joint[tuple(idx)])
  return p / p.sum()


def _entropy(p):
  return -(p * np.log(p)).sum(-1)


def test_exact_conditionals_and_optimum_match_brute_force(lang, brute):
  sents, joint = brute
  assert np.exp(joint).sum() == pytest.approx(1.0, abs=1e-12)
  assert lang.bos_id == BOS and lang.vocab_size == K
  # Every sentence at every position: 625 x 4 conditionals = 12,500 forward passes.
  rows = np.repeat(sents, N, axis=0)
  pos = np.tile(np.arange(N), len(sents))
  got = lang.mlm_conditionals(rows, pos)
  want = np.stack([_exact_conditional(joint, s, i) for s, i in zip(rows, pos)])
  assert want.min() > 1e-4 and want.max() < 0.999  # a non-trivial language
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=2e-5)
  # Whole-sentence log-probabilities, and every position of a few sentences at once.
  np.testing.assert_allclose(lang.log_prob_batch(sents[:50]), joint.reshape(-1)[:50],
                             atol=2e-4)
  np.testing.assert_allclose(lang.mlm_conditionals_batch(sents[:7]),
                             want.reshape(len(sents), N, K)[:7], rtol=1e-3, atol=2e-5)
  # The MLM optimum: E_x E_i H(p(. | x_-i)) with x ~ p_R, i uniform, exactly (NumPy) and
  # by mlm_optimum over all (sentence, position) pairs weighted by p(x) / N.
  px = np.exp(joint.reshape(-1))
  exact = float((np.repeat(px, N) / N * _entropy(want)).sum())
  assert lang.mlm_optimum(rows, pos, weights=np.repeat(px, N)) == pytest.approx(exact, abs=1e-5)
  # On a sample with one fixed mask per sentence (what the MLM task reports as true_entropy).
  x = lang.sample(300, [7, 1])
  mask = np.random.default_rng(0).integers(0, N, 300)
  want_ent = np.mean([_entropy(_exact_conditional(joint, s, i)) for s, i in zip(x, mask)])
  assert lang.mlm_optimum(x, mask) == pytest.approx(want_ent, abs=1e-5)
  assert 0.3 < exact < np.log(K)


def test_top_k_is_the_generators_most_frequent_tokens(gen, lang):
  """top_k_by="generator": the expected count per position of each token in the free
  generator's sentences, estimated from 4000 samples, against its exact value over all
  10^4 unrestricted sentences of 4 tokens (NumPy)."""
  _, t = gen
  seqs = np.array(list(itertools.product(range(VOCAB), repeat=N)), np.int64)
  inp = np.concatenate([np.full((len(seqs), 1), BOS), seqs[:, :-1]], axis=1)
  logp = _log_softmax(_np_logits(t, inp))
  px = np.exp(np.take_along_axis(logp, seqs[..., None], -1)[..., 0].sum(1))
  assert px.sum() == pytest.approx(1.0, abs=1e-9)
  exact = np.array([(px * (seqs == v).sum(1)).sum() for v in range(VOCAB)]) / N
  np.testing.assert_allclose(lang.frequency, exact, atol=0.004)  # measured: 0.0011
  order = [v for v in np.argsort(-exact, kind="stable") if v != BOS]
  assert exact[order[K - 1]] - exact[order[K]] > 0.01  # the set is not a near-tie
  assert sorted(lang.vocab_ids) == sorted(order[:K])
  assert list(lang.vocab_ids) == sorted(lang.vocab_ids, key=lambda v: -lang.frequency[v])
  assert lang.coverage() == pytest.approx(exact[lang.vocab_ids].sum(), abs=0.02)
  cfg = pretrained.config_from_hf(_hf_config(vocab_size=VOCAB))
  ids, freq = lm_language.top_k_vocab(cfg, None, 4, "id", bos_id=2, length=N)
  assert list(ids) == [0, 1, 3, 4] and freq is None  # the smallest ids, bos left out


def test_sampler_matches_the_exact_marginals(lang, brute):
  """Each position's token frequencies in 4000 sampled sentences, and the second token after
  the commonest first one, against the exact probabilities: within 4 standard errors."""
  _, joint = brute
  x = lang.sample(4000, [0, 0])
  p = np.exp(joint)
  for i in range(N):
    marg = p.sum(axis=tuple(j for j in range(N) if j != i))
    freq = np.bincount(x[:, i], minlength=K) / len(x)
    se = np.sqrt(marg * (1 - marg) / len(x))
    assert np.all(np.abs(freq - marg) < 4 * se + 1e-9), (i, freq, marg)
  a = int(np.argmax(p.sum(axis=(1, 2, 3))))
  after = x[x[:, 0] == a, 1]
  cond = p[a].sum(axis=(1, 2)) / p[a].sum()
  freq = np.bincount(after, minlength=K) / len(after)
  assert np.all(np.abs(freq - cond) < 4 * np.sqrt(cond * (1 - cond) / len(after)))
  # Deterministic in the seed, and row r does not depend on the batch it was drawn in.
  lang.sample_batch = 16
  try:
    np.testing.assert_array_equal(lang.sample(37, [0, 0]), x[:37])
  finally:
    lang.sample_batch = 4000
  assert not np.array_equal(lang.sample(37, [0, 1]), x[:37])


@pytest.mark.parametrize("preset", ["gpt2", "gpt_neox"])
def test_kv_cache_sampler_gives_the_decoders_distributions(preset):
  """The sampler's summed next-token distributions along its own sentences equal those of
  full forward passes of the decoder (learned and rotary positions, both residuals)."""
  cfg = decoder.preset(preset, vocab_size=12, num_layers=2, num_heads=2, embed_dim=8,
                       mlp_dim=16, max_len=6, init_std=0.5)
  graphdef, params = decoder.init(cfg, 1)
  ids = jnp.asarray([3, 0, 7, 5, 1, 9], jnp.int32)
  fn = jax.jit(lambda p, k, r: lm_language._sample_rows(graphdef, 5, 11, True, p, ids, k, r))
  js, acc = fn(params, jax.random.key(0), jnp.arange(3, dtype=jnp.uint32))
  toks = np.asarray(ids)[np.asarray(js)]
  inp = np.concatenate([np.full((3, 1), 11), toks[:, :-1]], axis=1)
  logits = np.asarray(jax.jit(lambda p, x: decoder.apply(graphdef, p, x))(params, inp))
  logits = logits[..., np.asarray(ids)]
  want = np.exp(_log_softmax(logits.astype(np.float64))).sum(axis=(0, 1))
  np.testing.assert_allclose(np.asarray(acc), want, rtol=1e-5, atol=1e-5)


def test_lm_mlm_test_config_trains_and_reports_the_gap(tmp_path):
  c = config_lib.get_config("lm_mlm", "test", {"num_devices": 1})  # not the 8 test devices: faster
  c.data.cache_dir = str(tmp_path / "cache")
  summary = runner.run_or_reuse(c, str(tmp_path / "run"))
  rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
  evals = [r for r in rows if r.get("kind") == "eval"]
  first, last = evals[0], evals[-1]
  assert (first["step"], last["step"]) == (0, 30)
  assert last["valid_gap"] < first["valid_gap"] - 0.2 and last["valid_kl"] < first["valid_kl"]
  assert last["valid_gap"] == pytest.approx(last["valid_mlm_loss"] - last["valid_true_entropy"])
  assert summary["optimal_loss"] == pytest.approx(last["test_true_entropy"])
  assert summary["vocab_size_terminals"] == 16 and summary["context_len"] == 6
  lang = summary["language"]
  assert lang["name"] == "lm" and lang["generator"] == "tiny-random" and lang["top_k"] == 16
  # The stored conditionals are the language's own at the fixed masks.
  task = mlm.MLMTask(c)  # from the cache now
  assert task.corpus.built_s is None
  v = task.corpus.valid
  np.testing.assert_allclose(v.cond_at_mask, task.language.mlm_conditionals(
      v.tokens[:, :6], v.mask_pos), atol=1e-6)
  assert mlm.MLMTask.abstract_batch_spec(c)["vocab_size"] == 18  # K + MASK + PAD, no generator


def test_every_variant_loads_and_the_planned_ones_validate():
  module = config_lib.load_config_module("lm_mlm")
  for variant in module.VARIANTS:
    c = config_lib.get_config("lm_mlm", variant)
    assert c.task == "mlm" and c.data.language == "lm" and c.data.length == c.data.max_len_tokens
  setup_lib.validate_config(config_lib.get_config("lm_mlm", "test"))
  setup_lib.validate_config(config_lib.get_config("lm_mlm", "paper"))  # generator "" is given at run time
  with open(os.path.join(ROOT, "configs", "lm_mlm.py")) as f:
    lines = [ln for ln in f.read().splitlines() if re.match(r"^  c\.[\w.]+ = ", ln)]
  assert lines and all("  # " in ln for ln in lines)


BAD = {
    "top_k": ({"data.top_k": 100}, r"data\.top_k=100 is larger than the generator's vocabulary "
                                   r".*allowed: 2\.\.63"),
    "directory": ({"data.generator": "/no/such/gpt2"},
                  r"data\.generator='/no/such/gpt2' is not a Hugging Face GPT-2 checkpoint "
                  r"directory .*allowed: .*'tiny-random'"),
    "length": ({"data.length": 1}, r"data\.length=1 must be an integer >= 2"),
    "length_positions": ({"data.length": 40, "data.max_len_tokens": 40},
                         r"data\.length=40 exceeds the generator's 32 positions; allowed: 2\.\.32"),
    "top_k_by": ({"data.top_k_by": "corpus"}, r"data\.top_k_by='corpus'; allowed: "
                                              r"\('generator', 'id'\)"),
    "bos": ({"data.bos_id": 64}, r"data\.bos_id=64 .*allowed: 0\.\.63, or -1"),
    "language": ({"data.language": "opt"}, r"data\.language='opt'; allowed: .*'lm'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inputs_are_one_line_errors(case):
  overrides, pattern = BAD[case]
  c = config_lib.get_config("lm_mlm", "test", overrides)
  with pytest.raises(ValueError) as e:
    setup_lib.validate_config(c)
  assert "\n" not in str(e.value) and re.search(pattern, str(e.value)), str(e.value)


def test_empty_generator_is_refused_when_built(tmp_path):
  with pytest.raises(ValueError, match=r"^data\.generator is empty; give a Hugging Face GPT-2 "
                                       r"checkpoint directory"):
    lm_language.language(_data_config("", tmp_path).data)
  k = lm_language.tiny_random_gpt2()[0]["vocab_size"]
  assert lm_language.generator_header(lm_language.write_tiny_random_gpt2(
      str(tmp_path / "tiny"))) == (k, 32)  # the in-memory generator as a directory


def test_missing_generator_through_the_cli_is_one_line(tmp_path):
  env = reliability.suite_env(dict(os.environ, JAX_PLATFORMS="cpu"))
  proc = subprocess.run([sys.executable, "-m", "el_jax.main", "--config=configs/lm_mlm.py:test",
                         "--config.data.generator=/no/such/gpt2", f"--workdir={tmp_path / 'w'}"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error")]  # after JAX's line
  assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
  assert errors[0].startswith("error: data.generator='/no/such/gpt2' is not a Hugging Face")
  assert not (tmp_path / "w").exists()


# ----------------------------------------------------------------------------
# GLUE through TFDS


def test_glue_absent_or_unreadable_is_one_line_error(tmp_path, lang):
  with pytest.raises(ValueError) as e:
    lm_language.glue_task(lang, "sst2", data_dir=str(tmp_path))
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(f"TFDS data set glue/sst2 is not in the TFDS data "
                                            f"dir {tmp_path}")
  assert f"tfds build glue/sst2 --data_dir={tmp_path} --file_format=array_record" in msg
  with pytest.raises(ValueError, match=r"GLUE task 'mnli'; allowed: \('qnli', 'sst2'\)"):
    lm_language.glue_task(lang, "mnli", data_dir=str(tmp_path))
  info = tmp_path / "glue" / "qnli" / "2.0.0" / "dataset_info.json"
  info.parent.mkdir(parents=True)
  info.write_text(json.dumps({"name": "glue", "fileFormat": "tfrecord"}))
  with pytest.raises(ValueError, match=r"glue/qnli in .* is stored as tfrecord, which needs "
                                       r"TensorFlow to read; prepare it with `tfds build"):
    lm_language.glue_task(lang, "qnli", data_dir=str(tmp_path))


def test_glue_present_is_read_without_tensorflow(tmp_path):
  """A stand-in `glue/sst2` in array_record (GLUE's features, made by a local builder) is read
  into the language's terminals: words outside the top-K dropped, labels kept."""
  import tensorflow_datasets as tfds

  class Glue(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version("2.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="sst2")]

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
          "sentence": tfds.features.Text(), "idx": np.int32,
          "label": tfds.features.ClassLabel(names=["negative", "positive"])}))

    def _split_generators(self, dl_manager):
      return {"train": self._generate_examples(24), "validation": self._generate_examples(6)}

    def _generate_examples(self, n):
      for i in range(n):
        yield i, {"sentence": ["a good film", "the bad film indeed"][i % 2], "label": 1 - i % 2,
                  "idx": i}

  Glue(data_dir=str(tmp_path), config="sst2", file_format="array_record").download_and_prepare()
  words = [gpt2_bpe.encode(w)[0] for w in (" good", " bad", " film", " the", " a")]
  hf, t = lm_language.tiny_random_gpt2(vocab_size=gpt2_bpe.VOCAB_SIZE, n_embd=8, n_layer=1)
  cfg = pretrained.config_from_hf(hf)
  lang = lm_language.LMLanguage(cfg, pretrained.params_from_hf(cfg, t), words, 4,
                                gpt2_bpe.EOT_ID)
  ds = lm_language.glue_task(lang, "sst2", data_dir=str(tmp_path), num_valid=4)
  assert (len(ds.train), len(ds.valid), len(ds.test)) == (20, 4, 6)
  assert ds.num_classes == 2 and ds.vocab_size == 5 and ds.seq_len == 4
  # " a good film" -> a, good, film; " the bad film indeed" -> the, bad, film (indeed dropped)
  good = np.array([4, 0, 2, 6], np.int32)  # PAD = K + 1 = 6
  bad = np.array([3, 1, 2, 6], np.int32)
  for s in (ds.train, ds.valid, ds.test):
    for tok, y in zip(s.tokens, s.labels):
      np.testing.assert_array_equal(tok, good if y == 1 else bad)
