"""Masked-LM task (seed 002): bidirectional encoder, padding, masking, exact-KL evaluation,
the corpus cache, and end-to-end training on the `test` configs."""
import functools
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from el_jax.core.data import hmm as hmm_lib
from el_jax.core.data import mlm_data
from el_jax.core.data import pcfg as pcfg_lib
from el_jax.run import job
from el_jax.core.models import decoder
from el_jax.core.tasks import mlm
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(name="pcfg_mlm", cache_dir=None, **overrides):
  c = config_lib.get_config(name, "test", overrides)
  c.data.cache_dir = str(cache_dir)
  return c


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return tmp_path_factory.mktemp("mlm_cache")


@pytest.fixture(scope="module")
def pcfg_setup(cache):
  return setup_lib.Setup(_config(cache_dir=cache))


# ----------------------------------------------------------------------------
# Model: who sees whom


def _input_sensitivity(cfg, tokens_1xT, segment_1xT, monkeypatch):
  """[T, T] max |d (logits[t] . r) / d input embedding[s]| for a random r.

  The input embedding is shifted after the lookup, so the tied unembedding
  (the same table) does not count.
  """
  graphdef, params = decoder.init(cfg, 0)
  r_V = jnp.asarray(np.random.default_rng(1).normal(size=cfg.vocab_size), jnp.float32)
  shift = {}
  embed_call = nnx.Embed.__call__
  monkeypatch.setattr(nnx.Embed, "__call__",
                      lambda self, ids, *a, **kw: embed_call(self, ids, *a, **kw) + shift["x"])

  def projected_logits(x_1xTxD):
    shift["x"] = x_1xTxD
    return decoder.apply(graphdef, params, tokens_1xT, segment_1xT)[0] @ r_V  # [T]

  t = tokens_1xT.shape[1]
  jac = jax.jit(jax.jacrev(projected_logits))(jnp.zeros((1, t, cfg.embed_dim), jnp.float32))
  return np.abs(np.asarray(jac)).max(axis=(1, 3))  # [T, 1, T, D] -> [T, T]


@pytest.mark.parametrize("preset", ["encoder", "gpt_neox"])
def test_encoder_sees_both_sides_decoder_only_the_past(preset, monkeypatch):
  t = 8
  cfg = decoder.preset(preset, vocab_size=12, num_layers=2, num_heads=2, embed_dim=16, mlp_dim=32,
                       max_len=t, doc_mask=True)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 10, (1, t)), jnp.int32)
  sens = _input_sensitivity(cfg, tokens, jnp.ones((1, t), jnp.int32), monkeypatch)
  future = sens[np.triu_indices(t, k=1)]
  past = sens[np.tril_indices(t)]
  assert np.all(past > 0), sens
  assert sens[3, 5] > 0 if preset == "encoder" else sens[3, 5] == 0  # logit at t vs input at t+2
  if preset == "encoder":
    assert np.all(future > 0), sens
  else:
    assert np.all(future == 0), sens


def test_padding_is_never_attended(monkeypatch):
  """With doc_mask and segment 0 on padding, PAD positions' tokens do not change real logits."""
  t, length = 8, 5
  cfg = decoder.preset("encoder", vocab_size=12, num_layers=2, num_heads=2, embed_dim=16,
                       mlp_dim=32, max_len=t, doc_mask=True)
  graphdef, params = decoder.init(cfg, 1)
  rng = np.random.default_rng(0)
  tokens = np.full((2, t), 11, np.int32)
  tokens[:, :length] = rng.integers(0, 10, (2, length))
  other = tokens.copy()
  other[:, length:] = rng.integers(0, 10, (2, t - length))
  seg = (np.arange(t)[None] < length).astype(np.int32).repeat(2, 0)
  a = np.asarray(decoder.apply(graphdef, params, tokens, seg))
  b = np.asarray(decoder.apply(graphdef, params, other, seg))
  np.testing.assert_allclose(a[:, :length], b[:, :length], rtol=0, atol=1e-6)
  # Sensitivity check: without the mask the padding does leak in.
  open_cfg = decoder.preset("encoder", vocab_size=12, num_layers=2, num_heads=2, embed_dim=16,
                            mlp_dim=32, max_len=t, doc_mask=False)
  open_graphdef = decoder.init(open_cfg, 1)[0]
  a = np.asarray(decoder.apply(open_graphdef, params, tokens))
  b = np.asarray(decoder.apply(open_graphdef, params, other))
  assert np.abs(a[:, :length] - b[:, :length]).max() > 1e-4




@pytest.mark.parametrize("preset", ["encoder", "bilstm"])
def test_encoder_learns_to_read_the_masked_tokens_neighbour(preset):
  """Each bidirectional preset (the transformer encoder; the LSTM of el_jax.core.models.lstm) can
  learn a position-relative lookup: target = the word left of the
  one masked position (uniform random words, so nothing else predicts it; chance ln 50 = 3.9
  nats). Trained with AdamW as the MLM task trains it, it gets there in a few hundred steps
  (at most 400; training stops at a batch loss below 0.05, then a fresh batch is scored),
  so an MLM model that stays at its language's block level (docs/results/seed002_flatness.md)
  is on an optimisation plateau, not blind to positions. Also after shuffling the
  other words the same model is wrong: it reads the neighbour, not a bag of words."""
  import optax
  v, t, b = 50, 16, 64
  cfg = decoder.preset(preset, vocab_size=v + 1, num_layers=2, num_heads=2, embed_dim=64,
                       mlp_dim=256, max_len=t, doc_mask=False)
  graphdef, params = decoder.init(cfg, 0)
  opt = optax.adamw(3e-3)
  state = opt.init(params)
  rng = np.random.default_rng(0)

  def batch():
    tok = rng.integers(0, v, (b, t))
    pos = rng.integers(1, t, b)
    target = tok[np.arange(b), pos - 1]
    tok[np.arange(b), pos] = v  # MASK
    return jnp.asarray(tok), jnp.asarray(pos), jnp.asarray(target)

  def loss(p, tok, pos, target):
    logits = decoder.apply(graphdef, p, tok)[jnp.arange(b), pos, :v]
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), target[:, None], 1).mean()

  # Hundreds of steps: LLVM's optimisation back on for this program (the suite compiles with
  # it off, conftest.py, which makes these steps 2-3x slower than the compile it saves).
  @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 2})
  def step(p, s, tok, pos, target):
    value, grad = jax.value_and_grad(loss)(p, tok, pos, target)
    updates, s = opt.update(grad, s, p)
    return optax.apply_updates(p, updates), s, value

  first = None
  for _ in range(400):  # until a batch's loss is below 0.05 (~230 steps encoder, ~50 LSTM)
    params, state, value = step(params, state, *batch())
    first = float(value) if first is None else first
    if float(value) < 0.05:
      break
  tok, pos, target = batch()  # a fresh batch
  assert first > 3.5 and float(loss(params, tok, pos, target)) < 0.3, (first, float(value))
  # the neighbour, not the bag: move each masked row's left neighbour elsewhere
  moved = np.asarray(tok).copy()
  for i, p_ in enumerate(np.asarray(pos)):
    j = rng.choice([k for k in range(t) if k not in (p_ - 1, p_)])
    moved[i, p_ - 1], moved[i, j] = moved[i, j], moved[i, p_ - 1]
  assert float(loss(params, jnp.asarray(moved), pos, target)) > 2.0
# ----------------------------------------------------------------------------
# Masking


def test_masking_one_is_one_real_position_and_deterministic(pcfg_setup):
  task = pcfg_setup.task
  mask_id, v = task.corpus.mask_id, task.num_terminals
  b = task.batch(0, 3)
  assert set(b) == {"inputs", "targets", "segment_ids", "loss_mask", "mask_masked"}
  assert b["inputs"].dtype == np.int32 and b["loss_mask"].dtype == np.float32
  is_mask = b["inputs"] == mask_id
  assert np.all(is_mask.sum(1) == 1)
  assert np.all(b["segment_ids"][is_mask] == 1)  # at a real position
  np.testing.assert_array_equal(b["loss_mask"], is_mask.astype(np.float32))
  np.testing.assert_array_equal(b["mask_masked"], b["loss_mask"])
  assert np.all(b["targets"][is_mask] < v)  # the original word
  np.testing.assert_array_equal(b["inputs"][~is_mask], b["targets"][~is_mask])
  assert np.all((b["targets"] == task.corpus.pad_id) == (b["segment_ids"] == 0))
  again = task.batch(0, 3)
  for k in b:
    np.testing.assert_array_equal(b[k], again[k])
  assert not np.array_equal(task.batch(0, 4)["loss_mask"], b["loss_mask"])
  assert not np.array_equal(task.batch(1, 3)["loss_mask"], b["loss_mask"])


def test_masking_bert_rates(pcfg_setup):
  """15% of real positions (plus one forced where none was chosen), split 80/10/10."""
  c = pcfg_setup.task.corpus
  tr = c.train
  reps = 40  # 512 sentences x 40 draws
  tokens, lengths = np.tile(tr.tokens, (reps, 1)), np.tile(tr.lengths, reps)
  inputs, chosen = mlm.mask_bert(tokens, lengths, np.random.default_rng(0), c.mask_id,
                                 c.vocab_size)
  real = np.arange(tokens.shape[1])[None] < lengths[:, None]
  assert not np.any(chosen & ~real) and np.all(chosen.any(1))
  np.testing.assert_array_equal(inputs[~chosen], tokens[~chosen])
  counts = chosen.sum(1)
  expected = mlm.BERT_RATE * lengths + (1 - mlm.BERT_RATE) ** lengths  # forced one if none
  se = counts.std() / np.sqrt(len(counts))
  assert abs(counts.mean() - expected.mean()) < 4 * se, (counts.mean(), expected.mean(), se)
  assert 0.15 < counts.sum() / lengths.sum() < 0.2
  m = chosen.sum()
  was, now = tokens[chosen], inputs[chosen]
  v = c.vocab_size
  for frac, want in (((now == c.mask_id).mean(), 0.8),
                     (((now != c.mask_id) & (now != was)).mean(), 0.1 * (v - 1) / v),
                     ((now == was).mean(), 0.1 + 0.1 / v)):
    assert abs(frac - want) < 4 * np.sqrt(want * (1 - want) / m), (frac, want)
  assert np.all(now[now != c.mask_id] < v)  # random replacements are terminals


def test_task_batch_with_bert_masking(cache):
  task = setup_lib.Setup(_config(cache_dir=cache, **{"data.masking": "bert"})).task
  b = task.batch(2, 5)
  chosen = b["loss_mask"] > 0
  assert np.all(chosen.sum(1) >= 1) and np.all(b["segment_ids"][chosen] == 1)
  assert (b["inputs"][chosen] == task.corpus.mask_id).any()
  np.testing.assert_array_equal(b["inputs"][~chosen], b["targets"][~chosen])


# ----------------------------------------------------------------------------
# Evaluation


def test_evaluation_kl_matches_numpy(pcfg_setup):
  trainer = setup_lib.Trainer(pcfg_setup)
  params = trainer.init(0)["params"]
  task = pcfg_setup.task
  split = task.corpus.valid
  out = trainer.evaluate(params, split)
  inputs = split.masked_inputs(task.corpus.mask_id)
  logits = np.asarray(decoder.apply(trainer.graphdef, params, inputs, split.segment_ids),
                      np.float64)
  n, v = len(split), task.num_terminals
  z = logits[np.arange(n), split.mask_pos, :v]
  logq = z - z.max(1, keepdims=True)
  logq -= np.log(np.exp(logq).sum(1, keepdims=True))
  p = split.cond[np.arange(n), split.mask_pos].astype(np.float64)
  assert np.allclose(p.sum(1), 1, atol=1e-5)
  with np.errstate(divide="ignore", invalid="ignore"):
    kl = np.nansum(np.where(p > 0, p * (np.log(p) - logq), 0.0), 1).mean()
    ent = -np.nansum(np.where(p > 0, p * np.log(p), 0.0), 1).mean()
  nll = -logq[np.arange(n), split.tokens[np.arange(n), split.mask_pos]].mean()
  assert out["kl"] == pytest.approx(kl, rel=1e-5)
  assert out["true_entropy"] == pytest.approx(ent, rel=1e-6)
  assert out["mlm_loss"] == pytest.approx(nll, rel=1e-5)
  assert out["gap"] == pytest.approx(nll - ent, abs=1e-5)
  assert out["n"] == n and 0 <= out["acc"] <= 1
  # The stored conditionals are the language's own.
  lang = task.language
  i = 5
  want = lang.mlm_conditional(split.tokens[i, :split.lengths[i]], int(split.mask_pos[i]))
  np.testing.assert_allclose(split.cond_at_mask[i], want, rtol=1e-5, atol=1e-7)


def test_fixed_eval_masks_are_uniform_real_positions(pcfg_setup):
  c = pcfg_setup.task.corpus
  for s in (c.valid, c.test, pcfg_setup.task.train_eval):
    assert np.all((0 <= s.mask_pos) & (s.mask_pos < s.lengths))
    assert np.all(s.cond[~s.real] == 0)
  assert not np.array_equal(c.valid.mask_pos, c.test.mask_pos)


# ----------------------------------------------------------------------------
# Cache


def test_cache_is_written_once_reused_and_rebuilt_when_damaged(tmp_path, monkeypatch, capsys):
  d = _config(cache_dir=tmp_path / "c").data
  first = mlm_data.build(d)
  assert first.built_s is not None and os.path.exists(first.path)
  assert os.listdir(tmp_path / "c") == [os.path.basename(first.path)]  # no temp files left
  capsys.readouterr()

  def boom(*a, **kw):
    raise AssertionError("the cached corpus was recomputed")

  with monkeypatch.context() as m:
    m.setattr(pcfg_lib.PCFG, "mlm_conditionals_batch", boom)
    m.setattr(pcfg_lib.PCFG, "sample", boom)
    second = mlm_data.build(d)
  assert second.built_s is None and capsys.readouterr().err == ""
  for name in mlm_data.SPLITS:
    a, b = first.splits[name], second.splits[name]
    for field in ("tokens", "lengths", "mask_pos", "cond"):
      x, y = getattr(a, field), getattr(b, field)
      assert (x is None) == (y is None)
      if x is not None:
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
  # The cache dir is not part of the key; the content fields are.
  assert os.path.basename(mlm_data.cache_path(_config(cache_dir="/elsewhere").data)) == \
      os.path.basename(first.path)
  assert mlm_data.cache_path(_config(cache_dir=tmp_path, **{"data.num_test": 65}).data) != \
      mlm_data.cache_path(d)

  size = os.path.getsize(first.path)
  for damage in (b"not a zip file", None):
    if damage is None:  # truncated
      with open(first.path, "r+b") as f:
        f.truncate(size // 2)
    else:
      with open(first.path, "wb") as f:
        f.write(damage)
    rebuilt = mlm_data.build(d)
    err = capsys.readouterr().err
    assert "damaged" in err and "rebuilding" in err and first.path in err
    assert rebuilt.built_s is not None
    np.testing.assert_array_equal(rebuilt.valid.cond, first.valid.cond)
    assert mlm_data.build(d).built_s is None  # and cached again


def test_hmm_corpus_conventions(tmp_path):
  c = mlm_data.build(_config("hmm_mlm", tmp_path).data)
  v = c.vocab_size
  assert (c.mask_id, c.pad_id, c.model_vocab_size) == (v, v + 1, v + 2)
  assert c.train.tokens.shape == (512, 16) and np.all(c.train.lengths == 16)
  assert c.train.states.shape == (512, 16) and c.train.states.min() >= 0
  lang = hmm_lib.HMM.random_block_diagonal(20, 40, 4, seed=0)
  np.testing.assert_allclose(c.test.cond, lang.mlm_conditionals_batch(c.test.tokens), atol=1e-6)
  # The words of a sentence come from the block of its (first) hidden state.
  blocks_s = hmm_lib.HMM.block_of_state(20, 4)[c.valid.states]
  blocks_w = hmm_lib.HMM.block_of_state(40, 4)[c.valid.tokens]
  np.testing.assert_array_equal(blocks_s, blocks_w)


# ----------------------------------------------------------------------------
# End to end and configs


@pytest.mark.parametrize("name,preset", [("pcfg_mlm", "encoder"), ("hmm_mlm", "encoder"),
                                         ("hmm_mlm", "bilstm")])
@pytest.mark.plots  # its valid_gap.png is checked
def test_train_and_evaluate_lowers_the_gap(name, preset, cache, tmp_path):
  # One device: the loop's 8-device sharding is tested elsewhere, and compiles slower.
  c = _config(name, cache, num_devices=1, **{"model.preset": preset})
  summary = job.train_and_evaluate(c, str(tmp_path / "run"))
  with open(tmp_path / "run" / "metrics.jsonl") as f:
    evals = [r for r in map(json.loads, f) if r["kind"] == "eval"]
  first, last = evals[0], evals[-1]
  assert first["step"] == 0 and last["step"] == summary["per_seed"][0]["step"]
  assert last["valid_gap"] < first["valid_gap"] - 0.1, (first["valid_gap"], last["valid_gap"])
  assert last["valid_kl"] < first["valid_kl"]
  assert summary["optimal_loss"] == pytest.approx(last["test_true_entropy"])
  assert summary["vocab_size_terminals"] in (200, 40) and summary["context_len"] == 16
  assert {"valid_gap", "valid_kl", "train_gap", "test_mlm_loss"} <= set(summary["aggregate"])
  assert (tmp_path / "run" / "valid_gap.png").exists()


@pytest.mark.parametrize("name", ["pcfg_mlm", "hmm_mlm"])
def test_every_variant_loads_and_validates(name):
  module = config_lib.load_config_module(name)
  for variant in module.VARIANTS:
    c = config_lib.get_config(name, variant)
    assert c.task == "mlm" and c.model.preset == "encoder" and c.model.doc_mask
    setup_lib.validate_config(c)  # builds nothing
  # Every field has its one-line comment (as tests/test_cli.py checks for the older configs).
  with open(os.path.join(ROOT, "configs", f"{name}.py")) as f:
    lines = [ln for ln in f.read().splitlines() if re.match(r"^  c\.[\w.]+ = ", ln)]
  assert lines and all("  # " in ln or "ConfigDict()" in ln for ln in lines)


MLM_CONFIG_ERRORS = {
    "language": ({"data.language": "dyck"}, ["data.language='dyck'", "'pcfg'", "'hmm'"]),
    "masking": ({"data.masking": "all"}, ["data.masking='all'", "'one'", "'bert'"]),
    "causal": ({"model.preset": "gpt2"}, ["model.preset='gpt2'", "'encoder'"]),
    "doc_mask": ({"model.doc_mask": False}, ["model.doc_mask=False"]),
    "batch": ({"train.batch_size": 1024}, ["data.num_train=512", "train.batch_size=1024"]),
    "grammar": ({"data.grammar": "/no/such.txt"}, ["data.grammar='/no/such.txt'"]),
    "max_len": ({"data.max_len_tokens": 1}, ["data.max_len_tokens=1", ">= 2"]),
}


@pytest.mark.parametrize("case", sorted(MLM_CONFIG_ERRORS))
def test_config_errors_name_the_field(case, tmp_path):
  overrides, fragments = MLM_CONFIG_ERRORS[case]
  with pytest.raises(ValueError) as e:
    setup_lib.validate_config(_config(cache_dir=tmp_path, **overrides))
  for frag in fragments:
    assert frag in str(e.value), str(e.value)
  with pytest.raises(ValueError, match=r"data.length=17 .* <= data.max_len_tokens=16"):
    setup_lib.validate_config(_config("hmm_mlm", tmp_path, **{"data.length": 17}))


def test_hmm_concentrations_default_to_the_uniform_draw_everywhere():
  """data.trans_concentration / emit_concentration = 0 is the draw every run before
  them used: same language, same corpus cache key, and configs written without the fields
  compare equal (inert); a nonzero value is a different HMM, key and config."""
  from el_jax.run import config as config_lib
  new = config_lib.get_config("hmm_mlm", "cpu")
  assert new.data.trans_concentration == new.data.emit_concentration == 0.0
  flat = config_lib.flatten(config_lib.config_dict(new))
  old = {k: v for k, v in flat.items() if "concentration" not in k}
  assert not config_lib.config_diff(old, flat)
  import ml_collections
  d_old = ml_collections.ConfigDict({k: v for k, v in new.data.items()
                                     if "concentration" not in k})
  assert mlm_data.cache_key(new.data) == mlm_data.cache_key(d_old)
  lang = mlm_data.language(new.data)
  np.testing.assert_array_equal(lang.trans, hmm_lib.HMM.random_block_diagonal(
      100, 200, 5, seed=0).trans)
  ctx = config_lib.get_config("hmm_mlm", "cpu", {"data.trans_concentration": 0.1})
  assert config_lib.config_diff(flat, config_lib.flatten(config_lib.config_dict(ctx))) == \
      ["data.trans_concentration"]
  assert mlm_data.cache_key(ctx.data)["trans_concentration"] == 0.1
  with pytest.raises(ValueError, match="data.emit_concentration=-1.0 must be a number >= 0"):
    mlm_data.check_data_config(config_lib.get_config(
        "hmm_mlm", "cpu", {"data.emit_concentration": -1.0}).data)


def test_init_std_reaches_the_model_and_the_default_is_inert():
  """`model.init_std` (the sharp HMM's block plateau) sets the std of the encoder's
  normal initialisations; 0.02 (every committed run's) is inert against configs written before
  the field, any other value is a different run."""
  from el_jax.run import config as config_lib
  for std in (0.02, 0.1):
    c = config_lib.get_config("hmm_mlm", "test", {"model.init_std": std})
    setup_lib.validate_config(c)
    cfg = decoder.config_from(c.model, 40, 16)
    assert cfg.init_std == std
    _, params = decoder.init(cfg, 0)
    for w in (params["embed"]["embedding"].value, params["blocks"][0]["attn"]["qkv"]["kernel"].value):
      w = np.asarray(w, np.float64).ravel()
      # the sample std of n normals has standard error std / sqrt(2n)
      assert abs(w.std() - std) < 5 * std / np.sqrt(2 * w.size), (std, w.std(), w.size)
  new = config_lib.flatten(config_lib.config_dict(config_lib.get_config("hmm_mlm", "cpu")))
  old = {k: v for k, v in new.items() if k != "model.init_std"}
  assert not config_lib.config_diff(old, new)
  other = dict(new, **{"model.init_std": 0.1})
  assert config_lib.config_diff(old, other) == ["model.init_std"]
