"""Linear probe, fine-tuning and the downstream data of seed paper 002."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from el_jax.core import probe
from el_jax.core.data import PCFG_GRAMMAR
from el_jax.core.data import downstream
from el_jax.core.data import hmm as hmm_lib
from el_jax.core.data import pcfg
from el_jax.core.models import decoder

GRAMMAR = PCFG_GRAMMAR  # the paper's grammar, shipped with el_jax


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
  """Downstream caches go to a temporary folder, never to ~/.cache."""
  monkeypatch.setenv("EL_JAX_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def grammar():
  return pcfg.PCFG.from_file(GRAMMAR)


@pytest.fixture(scope="module")
def hmm():
  return hmm_lib.HMM.random_block_diagonal(num_states=20, vocab_size=30, num_blocks=2, seed=3)


def _blobs(rng, n, means, noise):
  y = rng.integers(0, means.shape[0], n)
  return (means[y] + noise * rng.normal(size=(n, means.shape[1]))).astype(np.float32), y


# ----------------------------------------------------------------------------
# Linear probe


# The two tests below share shapes and settings, so they share one compilation.
_TOY = dict(seeds=(0, 1, 2), epochs=10, batch_size=32)


def test_probe_separable_reaches_full_accuracy():
  rng = np.random.default_rng(0)
  means = 3.0 * rng.normal(size=(4, 16))
  sets = [_blobs(rng, n, means, 0.5) for n in (600, 400, 400)]
  res = probe.linear_probe(*sets[0], *sets[1], *sets[2], 4, **_TOY)
  assert res["test_acc_mean"] >= 0.99, res["test_acc"]
  assert len(res["test_acc"]) == 3 and res["seeds"] == [0, 1, 2]
  assert res["test_acc_std"] == pytest.approx(np.std(res["test_acc"], ddof=1))
  assert all(1 <= e <= 10 for e in res["epoch"])
  assert res["train_loss"].shape == (3, 10) and res["valid_curve"].shape == (3, 10)
  assert "test_curve" not in res  # test is evaluated on the selected head only


def test_probe_random_labels_is_at_chance():
  rng = np.random.default_rng(1)
  c = 4
  sets = [(rng.normal(size=(n, 16)).astype(np.float32), rng.integers(0, c, n))
          for n in (600, 400, 400)]
  res = probe.linear_probe(*sets[0], *sets[1], *sets[2], c, **_TOY)
  se = np.sqrt(0.25 * 0.75 / 400)
  for acc in res["test_acc"]:
    assert abs(acc - 0.25) < 4 * se, res["test_acc"]
  assert res["train_loss"][:, -1].mean() < res["train_loss"][:, 0].mean()  # it does fit train


def _numpy_adamw_step(w, b, x, y, weights, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
  """One AdamW step from zero moments on the weighted mean cross-entropy, in float64."""
  logits = x @ w.T + b
  p = np.exp(logits - logits.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  g = p.copy()
  g[np.arange(len(y)), y] -= 1.0
  g *= weights[:, None] / weights.sum()
  out = []
  for param, grad in ((w, g.T @ x), (b, g.sum(0))):
    m, v = (1 - b1) * grad, (1 - b2) * grad ** 2
    mhat, vhat = m / (1 - b1), v / (1 - b2)
    out.append(param - lr * (mhat / (np.sqrt(vhat) + eps) + wd * param))
  return out


def test_probe_step_equals_numpy_adamw():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(5, 3))
  y = np.array([0, 3, 1, 1, 2])
  weights = np.array([1.0, 1.0, 0.0, 1.0, 1.0])  # a padding row must not count
  head = probe.init_head(jax.random.key(7), 3, 4)
  w0, b0 = np.asarray(head["w"], np.float64), np.asarray(head["b"], np.float64)
  tx = probe.probe_optimizer(lr=1e-2, weight_decay=0.1)
  step = jax.jit(lambda h, o, *a: probe.probe_train_step(tx, h, o, *a))
  new, _, loss = step(head, tx.init(head), jnp.asarray(x, jnp.float32), jnp.asarray(y),
                      jnp.asarray(weights, jnp.float32))
  w1, b1 = _numpy_adamw_step(w0, b0, x, y, weights, 1e-2, 0.1)
  np.testing.assert_allclose(np.asarray(new["w"]), w1, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(new["b"]), b1, rtol=1e-5, atol=1e-6)
  logits = x @ w0.T + b0
  ce = np.log(np.exp(logits).sum(1)) - logits[np.arange(5), y]
  assert float(loss) == pytest.approx((ce * weights).sum() / weights.sum(), rel=1e-5)


def test_linear_probe_one_full_batch_epoch_is_one_numpy_step():
  """The whole pipeline (init from the seed, one epoch of one batch) = one AdamW step."""
  rng = np.random.default_rng(3)
  x, y = rng.normal(size=(6, 4)).astype(np.float32), np.array([0, 1, 2, 0, 1, 2])
  res = probe.linear_probe(x, y, x, y, x, y, 3, seeds=(5,), epochs=1, batch_size=6, lr=1e-2,
                           weight_decay=0.05, standardize=False, return_params=True)
  head = probe.init_head(probe.seed_keys(5)[0], 4, 3)
  w1, b1 = _numpy_adamw_step(np.asarray(head["w"], np.float64), np.asarray(head["b"], np.float64),
                             x.astype(np.float64), y, np.ones(6), 1e-2, 0.05)
  np.testing.assert_allclose(res["head"]["w"][0], w1, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(res["head"]["b"][0], b1, rtol=1e-5, atol=1e-6)
  assert res["head"]["w"].shape == (1, 3, 4) and res["num_features"] == 4
  assert np.isnan(res["test_acc_std"])  # one seed: no sample std


def test_projection_is_a_fixed_seeded_matrix():
  r0 = np.asarray(probe.random_projection(30, 8, 0))
  assert r0.shape == (30, 8)
  np.testing.assert_array_equal(r0, np.asarray(probe.random_projection(30, 8, 0)))
  assert not np.allclose(r0, np.asarray(probe.random_projection(30, 8, 1)))
  rng = np.random.default_rng(4)
  means = 2.0 * rng.normal(size=(3, 30))
  sets = [_blobs(rng, n, means, 1.0) for n in (300, 100, 100)]
  args = [a for s in sets for a in s]
  kw = dict(epochs=3, standardize=False)
  a = probe.linear_probe(*args, 3, seeds=(0, 1), projection_dim=8, **kw)
  b = probe.linear_probe(*args, 3, seeds=(0, 1), projection_dim=8, **kw)
  assert a["num_features"] == 8
  np.testing.assert_array_equal(a["train_loss"], b["train_loss"])
  assert a["test_acc"] == b["test_acc"]
  # Seed 0 with the projection = the probe of seed 0 on x @ R_0 without one.
  proj = [(x @ r0, y) for x, y in sets]
  c = probe.linear_probe(*[v for s in proj for v in s], 3, seeds=(0,), **kw)
  assert c["num_features"] == 8
  np.testing.assert_allclose(a["train_loss"][0], c["train_loss"][0], rtol=1e-4)


def test_selection_uses_valid_not_test():
  """Valid = some training points, test = the same points with the other label:
  valid accuracy rises with training while test accuracy falls, so the two
  argmaxes differ and the reported epoch must be valid's."""
  rng = np.random.default_rng(5)
  x = rng.normal(size=(400, 10)).astype(np.float32)
  y = (x[:, 0] + 0.7 * rng.normal(size=400) > 0).astype(np.int64)
  xv, yv = x[:200], y[:200]
  res = probe.linear_probe(x, y, xv, yv, xv, 1 - yv, 2, seeds=(0, 1), epochs=12, lr=3e-4,
                           batch_size=50, test_curve=True)
  for s in range(2):
    va, te = res["valid_curve"][s], res["test_curve"][s]
    assert np.argmax(va) != np.argmax(te)  # the construction really disagrees
    assert res["epoch"][s] == int(np.argmax(va)) + 1
    assert res["valid_acc"][s] == pytest.approx(va.max())
    assert res["test_acc"][s] == pytest.approx(te[res["epoch"][s] - 1])
    assert res["test_acc"][s] < te.max()


def test_probe_bad_inputs():
  x, y = np.zeros((4, 3), np.float32), np.array([0, 1, 0, 1])
  ok = dict(x_train=x, y_train=y, x_valid=x, y_valid=y, x_test=x, y_test=y, num_classes=2)

  def call(**kw):
    return probe.linear_probe(**{**ok, **kw})
  with pytest.raises(ValueError, match="y_train has label 2"):
    call(y_train=np.array([0, 1, 2, 1]))
  with pytest.raises(ValueError, match="y_valid has label -1"):
    call(y_valid=np.array([0, -1, 0, 1]))
  with pytest.raises(ValueError, match="y_test has 3 labels"):
    call(y_test=y[:3])
  with pytest.raises(ValueError, match="x_valid has 5 features"):
    call(x_valid=np.zeros((4, 5)))
  with pytest.raises(ValueError, match="x_test is empty"):
    call(x_test=np.zeros((0, 3)), y_test=y[:0])
  with pytest.raises(ValueError, match="x_train must be a 2-D"):
    call(x_train=np.zeros(4))
  with pytest.raises(ValueError, match="non-finite"):
    call(x_train=np.full((4, 3), np.nan))
  with pytest.raises(ValueError, match="seeds is empty"):
    call(seeds=())
  with pytest.raises(ValueError, match="integer class ids"):
    call(y_train=y.astype(np.float32))
  with pytest.raises(ValueError, match="projection_dim"):
    call(projection_dim=0)
  with pytest.raises(ValueError, match="lr"):
    call(lr=-1.0)


# ----------------------------------------------------------------------------
# Encoder features and fine-tuning


def _tiny_encoder(vocab, max_len=8, seed=0):
  cfg = decoder.preset("encoder", vocab_size=vocab, num_layers=1, num_heads=2, embed_dim=16,
                       mlp_dim=32, max_len=max_len, doc_mask=True)
  return decoder.init(cfg, seed)


def _first_token_task(rng, n, v, t, classes):
  """Label = the first token (one of `classes` ids); variable lengths, PAD = v + 1."""
  lengths = rng.integers(2, t + 1, n)
  tokens = rng.integers(0, v, (n, t)).astype(np.int32)
  tokens[:, 0] = rng.integers(0, classes, n)
  seg = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int32)
  tokens[seg == 0] = v + 1
  return tokens, seg, tokens[:, 0].astype(np.int64)


def test_encode_equals_features_with_padding_zeroed():
  graphdef, params = _tiny_encoder(8)
  tokens, seg, _ = _first_token_task(np.random.default_rng(6), 7, 6, 8, 3)
  got = probe.encode(graphdef, params, tokens, seg, batch_size=3)  # 3 batches, last padded
  h = np.asarray(jax.jit(decoder.features, static_argnums=0)(graphdef, params, tokens, seg))
  h = h * seg[:, :, None]
  assert got.shape == (7, 8 * 16) and got.dtype == np.float32
  np.testing.assert_allclose(got, h.reshape(7, -1), rtol=1e-5, atol=1e-6)
  assert np.all(got.reshape(7, 8, 16)[seg == 0] == 0)
  with pytest.raises(ValueError, match="segment_ids has shape"):
    probe.encode(graphdef, params, tokens, seg[:, :4])
  with pytest.raises(ValueError, match="vocab_size=8"):
    probe.encode(graphdef, params, tokens + 8, seg)
  with pytest.raises(ValueError, match="empty"):
    probe.encode(graphdef, params, tokens[:0], seg[:0])


def test_fine_tune_learns_first_token():
  rng = np.random.default_rng(7)
  v, t, c = 6, 8, 4
  graphdef, params = _tiny_encoder(v + 2, max_len=t)
  before = jax.tree.map(np.array, params)
  train, valid, test = (_first_token_task(rng, n, v, t, c) for n in (384, 128, 128))
  res = probe.fine_tune(graphdef, params, train, valid, test, c, seeds=(0, 1), lr=3e-3,
                        warmup_steps=10, epochs=3, batch_size=32)
  assert res["test_acc_mean"] > 0.6, res  # chance is 0.25
  assert res["steps"] == 3 * 12 and len(res["epoch"]) == 2
  for s in range(2):
    assert res["epoch"][s] == int(np.argmax(res["valid_curve"][s])) + 1
    assert res["test_acc"][s] == res["test_curve"][s][res["epoch"][s] - 1]
  # The caller's params are untouched (each seed trains a copy; the step donates it).
  jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.array, params))
  # head="mean": the mean of the real positions' final hidden states.
  head = {"w": jnp.asarray(rng.normal(size=(c, 16)), jnp.float32),
          "b": jnp.arange(c, dtype=jnp.float32)}
  feats = np.asarray(jax.jit(decoder.features, static_argnums=0)(graphdef, params, *train[:2]))
  mean = (feats * train[1][:, :, None]).sum(1) / train[1].sum(1, keepdims=True)
  logits = jax.jit(probe.ft_logits, static_argnums=(0, 1))(
      graphdef, "mean", {"encoder": params, "head": head}, *train[:2])
  np.testing.assert_allclose(np.asarray(logits), mean @ np.asarray(head["w"]).T + np.arange(c),
                             rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="head="):
    probe.fine_tune(graphdef, params, train, valid, test, c, head="max")
  with pytest.raises(ValueError, match="valid labels has label 4"):
    probe.fine_tune(graphdef, params, train, (valid[0], valid[1], valid[2] + 1), test, c)


# ----------------------------------------------------------------------------
# Downstream data


def test_hmm_task_labels_are_the_kth_state(hmm):
  data = downstream.hmm_task(hmm, 6, 50, 20, 30, seed=4, length=12)
  assert data.num_classes == 20 and data.name == "hmm_task6" and data.seq_len == 12
  for split in downstream.SPLITS:
    d = data.split(split)
    tokens, states = hmm.sample(len(d), 12, downstream.split_seed(4, split))
    np.testing.assert_array_equal(d.tokens, tokens)
    np.testing.assert_array_equal(d.labels, states[:, 5])  # task-6: the 6th state, 1-based
    assert np.all(d.segment_ids == 1) and np.all(d.lengths == 12)
  assert not np.array_equal(data.train.tokens[:20], data.valid.tokens)
  with pytest.raises(ValueError, match="1..length=12"):
    downstream.hmm_task(hmm, 13, 5, 5, 5, length=12)
  with pytest.raises(ValueError, match="num_valid"):
    downstream.hmm_task(hmm, 1, 5, 0, 5)


@pytest.mark.parametrize("task", ["A", "B", "C"])
def test_pcfg_task_labels_match_task_labels(grammar, task):
  data = downstream.pcfg_task(grammar, task, 120, 40, 40, seed=1, seq_len=20)
  v = grammar.vocab_size
  assert data.num_classes == (9 if task == "A" else 50)
  assert data.pad_id == v + 1 and data.mask_id == v and data.model_vocab_size == v + 2
  for split in downstream.SPLITS:
    d = data.split(split)
    assert d.tokens.shape == (len(d), 20)
    assert np.all((d.lengths > 4) & (d.lengths < 32) & (d.lengths <= 20))
    real = np.arange(20)[None, :] < d.lengths[:, None]
    np.testing.assert_array_equal(d.segment_ids, real.astype(np.int32))
    assert np.all(d.tokens[~real] == v + 1) and np.all(d.tokens[real] < v)
    sentences = [d.tokens[i, :d.lengths[i]] for i in range(len(d))]
    kept, labels, names = pcfg.task_labels(grammar, sentences, task)
    assert len(kept) == len(d)
    np.testing.assert_array_equal(d.labels, labels)
    assert tuple(names) == data.class_names
    assert d.labels.min() >= 0 and d.labels.max() < data.num_classes


def test_lookup_table_features(grammar, hmm):
  data = downstream.pcfg_task(grammar, "C", 30, 5, 5, seed=2, seq_len=18)
  d, v = data.train, grammar.vocab_size
  feats = downstream.lookup_table_features(grammar, d.tokens, d.lengths)
  assert feats.shape == (30, 18 * v) and feats.dtype == np.float32
  per_pos = feats.reshape(30, 18, v)
  real = d.segment_ids == 1
  np.testing.assert_allclose(per_pos.sum(-1)[real], 1.0, atol=1e-5)
  assert np.all(per_pos[~real] == 0)
  for i, t in ((0, 0), (3, 2), (7, int(d.lengths[7]) - 1)):
    exact = grammar.mlm_conditional(d.tokens[i, :d.lengths[i]], t)
    np.testing.assert_allclose(per_pos[i, t], exact, rtol=1e-5, atol=1e-7)
  h = downstream.hmm_task(hmm, 3, 10, 5, 5, seed=0, length=6, seq_len=9)
  f = downstream.lookup_table_features(hmm, h.train.tokens, h.train.lengths).reshape(10, 9, -1)
  np.testing.assert_allclose(f[:, :6].sum(-1), 1.0, atol=1e-5)
  assert np.all(f[:, 6:] == 0)
  np.testing.assert_allclose(f[2, 4], hmm.mlm_conditional(h.train.tokens[2, :6], 4), rtol=1e-5)
  with pytest.raises(ValueError, match="lengths must have shape"):
    downstream.lookup_table_features(hmm, h.train.tokens, h.train.lengths[:3])


def test_word_features_are_the_one_hot_words_by_position(grammar):
  """The words-alone representation against a loop over sentences and positions; padding is
  zeros; a word outside the vocabulary inside the real length is an error."""
  data = downstream.pcfg_task(grammar, "C", 25, 5, 5, seed=4, seq_len=18)
  d, v = data.train, grammar.vocab_size
  feats = downstream.word_features(v, d.tokens, d.lengths)
  want = np.zeros((25, 18 * v), np.float32)
  for i in range(25):
    for t in range(int(d.lengths[i])):
      want[i, t * v + int(d.tokens[i, t])] = 1.0
  np.testing.assert_array_equal(feats, want)
  bad = d.tokens.copy()
  bad[3, 1] = v
  with pytest.raises(ValueError, match=rf"outside 0..{v - 1}"):
    downstream.word_features(v, bad, d.lengths)
  with pytest.raises(ValueError, match="lengths must be integers in 1..T=18"):
    downstream.word_features(v, d.tokens, np.full(25, 19))


def test_downstream_cache_roundtrip_and_damage(hmm, tmp_path, capsys):
  folder = tmp_path / "dcache"
  a = downstream.hmm_task(hmm, 2, 20, 5, 5, seed=9, length=5, cache=str(folder))
  files = list(folder.iterdir())
  assert len(files) == 1 and files[0].suffix == ".npz"
  b = downstream.hmm_task(hmm, 2, 20, 5, 5, seed=9, length=5, cache=str(folder))
  for s in downstream.SPLITS:
    for f in ("tokens", "segment_ids", "lengths", "labels"):
      np.testing.assert_array_equal(getattr(a.split(s), f), getattr(b.split(s), f))
  assert b.class_names == a.class_names and b.num_classes == a.num_classes
  files[0].write_bytes(b"not a zip file")
  c = downstream.hmm_task(hmm, 2, 20, 5, 5, seed=9, length=5, cache=str(folder))
  assert "damaged" in capsys.readouterr().err
  np.testing.assert_array_equal(c.train.labels, a.train.labels)
  d = downstream.hmm_task(hmm, 2, 20, 5, 5, seed=9, length=5, cache=str(folder))
  assert capsys.readouterr().err == ""  # rebuilt file is good
  np.testing.assert_array_equal(d.test.tokens, a.test.tokens)
  # Other arguments, other file; the environment variable sets the default folder.
  downstream.hmm_task(hmm, 3, 20, 5, 5, seed=9, length=5)
  assert len(list((tmp_path / "cache" / "downstream").iterdir())) == 1


# ----------------------------------------------------------------------------
# Sanity rows: the Bayes classifier, the majority class


def _brute_force_posteriors(h, tokens):
  """[T, K] p(z_t = k | x) by enumerating every state sequence (independent of
  forward-backward: the joint of each path, summed)."""
  import itertools
  t, k = len(tokens), h.num_states
  post = np.zeros((t, k))
  for path in itertools.product(range(k), repeat=t):
    p = h.init[path[0]] * h.emit[path[0], tokens[0]]
    for i in range(1, t):
      p *= h.trans[path[i - 1], path[i]] * h.emit[path[i], tokens[i]]
    for i, z in enumerate(path):
      post[i, z] += p
  return post / post.sum(1, keepdims=True)


def test_state_posteriors_equal_brute_force_enumeration():
  rng = np.random.default_rng(5)
  k, v = 3, 4
  init = rng.dirichlet(np.ones(k))
  trans = rng.dirichlet(0.5 * np.ones(k), size=k)
  emit = rng.dirichlet(0.7 * np.ones(v), size=k)
  h = hmm_lib.HMM(init, trans, emit)
  tokens, _ = h.sample(6, 5, seed=1)
  post = h.state_posteriors_batch(tokens, chunk=4)
  assert post.shape == (6, 5, k)
  for i in range(6):
    np.testing.assert_allclose(post[i], _brute_force_posteriors(h, tokens[i]), rtol=1e-10)


def test_bayes_accuracy_hmm_is_the_posterior_argmax_and_beats_the_majority():
  h = hmm_lib.HMM.random_block_diagonal(6, 8, 2, seed=1, trans_concentration=0.2,
                                        emit_concentration=0.5)
  data = downstream.hmm_task(h, 3, 200, 50, 400, seed=2, length=5, seq_len=7, cache=False)
  pred = downstream.bayes_predictions(h, data)
  want = [np.argmax(_brute_force_posteriors(h, data.test.tokens[i, :5])[2]) for i in range(40)]
  np.testing.assert_array_equal(pred[:40], want)
  acc = downstream.bayes_accuracy(h, data)
  assert acc == np.mean(pred == data.test.labels)
  top = np.bincount(data.train.labels, minlength=6).argmax()
  assert downstream.majority_accuracy(data) == np.mean(data.test.labels == top)
  assert acc > downstream.majority_accuracy(data) + 0.2


def test_bayes_accuracy_pcfg_is_one(grammar):
  data = downstream.pcfg_task(grammar, "C", 20, 5, 30, seed=3, seq_len=20, cache=False)
  assert downstream.bayes_accuracy(grammar, data) == 1.0


def test_random_block_diagonal_default_is_the_uniform_draw_and_concentration_peaks_rows():
  a = hmm_lib.HMM.random_block_diagonal(20, 30, 2, seed=3)
  rng = np.random.default_rng(3)  # the draw every committed result used: Uniform(0, 1) weights
  sb, vb = hmm_lib.HMM.block_of_state(20, 2), hmm_lib.HMM.block_of_state(30, 2)
  trans = rng.random((20, 20)) * (sb[:, None] == sb[None, :])
  emit = rng.random((20, 30)) * (sb[:, None] == vb[None, :])
  np.testing.assert_array_equal(a.trans, trans / trans.sum(1, keepdims=True))
  np.testing.assert_array_equal(a.emit, emit / emit.sum(1, keepdims=True))
  b = hmm_lib.HMM.random_block_diagonal(20, 30, 2, seed=3, trans_concentration=0.1)
  assert np.all((b.trans > 0) <= (sb[:, None] == sb[None, :]))
  assert b.trans.max(1).mean() > 2 * a.trans.max(1).mean()  # peaked rows
  with pytest.raises(ValueError, match="trans_concentration"):
    hmm_lib.HMM.random_block_diagonal(20, 30, 2, trans_concentration=-1.0)


def test_linear_probe_selected_chooses_on_valid_only():
  """The grid's setting with the best mean valid accuracy is kept (test takes no part: the
  same choice whatever the test labels), its own result returned, every setting's valid
  accuracy listed."""
  rng = np.random.default_rng(1)
  means = 3.0 * rng.normal(size=(4, 16))
  sets = [_blobs(rng, n, means, 2.0) for n in (300, 200, 200)]
  grid = probe.parse_grid("1e-5,0.03", "0")
  assert grid == [{"lr": 1e-5, "weight_decay": 0.0, "whiten": False},
                  {"lr": 0.03, "weight_decay": 0.0, "whiten": False}]
  assert [g["whiten"] for g in probe.parse_grid("0.1", "0,0.01", "standardize,whiten")] == \
      [False, False, True, True]
  with pytest.raises(ValueError, match="normalisation 'pca'"):
    probe.parse_grid("0.1", "0", "pca")
  kw = dict(seeds=(0, 1), epochs=3, batch_size=32, grid=grid)
  res = probe.linear_probe_selected(*sets[0], *sets[1], *sets[2], 4, **kw)
  valid = [s["valid_acc_mean"] for s in res["selection"]]
  assert res["chosen"] == grid[int(np.argmax(valid))] == grid[1]  # lr 1e-5 barely moves
  direct = probe.linear_probe(*sets[0], *sets[1], *sets[2], 4, seeds=(0, 1), epochs=3,
                              batch_size=32, **grid[1])
  assert res["test_acc"] == direct["test_acc"] and res["valid_acc_mean"] == max(valid)
  x_te, y_te = sets[2]
  flipped = probe.linear_probe_selected(*sets[0], *sets[1], x_te, (y_te + 1) % 4, 4, **kw)
  assert flipped["chosen"] == res["chosen"] and flipped["selection"] == res["selection"]
  with pytest.raises(ValueError, match="both in the grid"):
    probe.linear_probe_selected(*sets[0], *sets[1], *sets[2], 4, grid=grid, lr=0.1)
  with pytest.raises(ValueError, match="empty"):
    probe.parse_grid("", "0")


def test_whitening_makes_the_probe_blind_to_how_the_features_are_scaled():
  """Whitened, features and any invertible linear map of them give the same probe (up to
  rounding); the map here buries the classes under one huge direction, as trained models of
  the default HMM do, and the standardised probe loses them while the whitened one does not."""
  rng = np.random.default_rng(2)
  means = 2.0 * rng.normal(size=(4, 12))
  sets = [_blobs(rng, n, means, 1.0) for n in (400, 200, 200)]
  big = rng.normal(size=12)
  a = np.eye(12) * 1e-2 + 1e2 * np.outer(np.ones(12), big)  # invertible, ill-conditioned
  bent = [((x @ a) + 1e2 * rng.integers(0, 2, (len(x), 1)) * big).astype(np.float32)
          for x, _ in sets]
  kw = dict(seeds=(0, 1), epochs=20, batch_size=32, lr=0.01)
  plain = probe.linear_probe(*sets[0], *sets[1], *sets[2], 4, whiten=True, **kw)
  white = probe.linear_probe(bent[0], sets[0][1], bent[1], sets[1][1], bent[2], sets[2][1], 4,
                             whiten=True, **kw)
  std = probe.linear_probe(bent[0], sets[0][1], bent[1], sets[1][1], bent[2], sets[2][1], 4, **kw)
  assert plain["test_acc_mean"] > 0.9
  assert abs(white["test_acc_mean"] - plain["test_acc_mean"]) <= 0.03
  assert std["test_acc_mean"] < plain["test_acc_mean"] - 0.2
  mu, w = probe.whitening(sets[0][0])
  z = (sets[0][0] - mu) @ w
  np.testing.assert_allclose(z.T @ z / len(z), np.eye(w.shape[1]), atol=1e-8)
  # At 1e-6 of the largest covariance eigenvalue the bent features look like rank 1, as the
  # HMM models' did (their blocks - 1); the information below that is still there.
  assert probe.feature_rank(bent[0]) == 1 and probe.feature_rank(sets[0][0]) == 12
  assert probe.feature_rank(np.ones((5, 3))) == 0


def test_block_majority_and_the_value_of_the_context():
  """block_majority_accuracy: the most frequent training label of the sentence's block;
  hmm_context_value: ~0 when the states of a block emit alike (knowing the block is all the
  MLM objective needs, as on the default HMM), large when they do not."""
  peaked = hmm_lib.HMM.random_block_diagonal(8, 12, 2, seed=4, trans_concentration=0.1,
                                             emit_concentration=0.2)
  comp, words = downstream.hmm_blocks(peaked)
  np.testing.assert_array_equal(comp, hmm_lib.HMM.block_of_state(8, 2))
  np.testing.assert_array_equal(words, hmm_lib.HMM.block_of_state(12, 2))
  data = downstream.hmm_task(peaked, 3, 400, 50, 300, seed=1, length=6, cache=False)
  b_tr = words[data.train.tokens[:, 0]]
  top = {b: np.bincount(data.train.labels[b_tr == b], minlength=8).argmax() for b in (0, 1)}
  want = np.mean([top[b] == y for b, y in zip(words[data.test.tokens[:, 0]], data.test.labels)])
  assert downstream.block_majority_accuracy(peaked, data) == want
  assert downstream.hmm_context_value(peaked, data)["context_value"] > 0.1
  alike = hmm_lib.HMM(peaked.init, peaked.trans,
                      np.repeat(peaked.emit[[0, 4]], 4, axis=0))  # one emission row per block
  data = downstream.hmm_task(alike, 3, 2000, 50, 300, seed=1, length=6, cache=False)
  v = downstream.hmm_context_value(alike, data)
  assert abs(v["context_value"]) < 0.02
  assert v["context_value"] == v["block_unigram_mlm_loss"] - v["optimal_mlm_loss"]
  mixed = hmm_lib.HMM(np.full(3, 1 / 3), np.full((3, 3), 1 / 3), np.full((3, 2), 0.5))
  with pytest.raises(ValueError, match="not a block-diagonal"):
    downstream.hmm_blocks(hmm_lib.HMM(np.full(2, 0.5), np.eye(2), np.full((2, 2), 0.5)))
  assert downstream.hmm_blocks(mixed)[0].tolist() == [0, 0, 0]


def test_identical_per_seed_probe_results_mean_the_features_carry_the_same_information():
  """The blind-probe symptom, reproduced: two different representations that both encode only the
  block of a sentence (here a one-hot block code, scaled and rotated differently, as two
  collapsed models' features were) give the same test accuracy per probe seed on a task-k
  whose answer needs more than the block; features that carry the words do better, and two
  such representations give different per-seed results."""
  h = hmm_lib.HMM.random_block_diagonal(12, 16, 3, seed=2, trans_concentration=0.1,
                                        emit_concentration=0.3)
  data = downstream.hmm_task(h, 4, 600, 200, 400, seed=3, length=8, cache=False)
  _, words = downstream.hmm_blocks(h)
  rng = np.random.default_rng(0)

  def block_code(proj, sp):
    return (np.eye(3)[words[sp.tokens[:, 0]]] @ proj).astype(np.float32)

  def word_code(emb, sp):
    return emb[sp.tokens].reshape(len(sp), -1).astype(np.float32)

  def run(fn):
    x = [fn(data.split(s)) for s in downstream.SPLITS]
    return probe.linear_probe(x[0], data.train.labels, x[1], data.valid.labels, x[2],
                              data.test.labels, 12, seeds=(0, 1, 2), epochs=15, batch_size=64,
                              lr=0.01)
  p1, p2 = rng.normal(size=(3, 24)), 50.0 * rng.normal(size=(3, 24))
  a = run(lambda sp: block_code(p1, sp))
  b = run(lambda sp: block_code(p2, sp))
  assert a["test_acc"] == b["test_acc"]  # two codes of the block alone
  assert a["test_acc_mean"] <= downstream.block_majority_accuracy(h, data) + 0.02
  e1, e2 = rng.normal(size=(16, 6)), rng.normal(size=(16, 6))
  c, d = run(lambda sp: word_code(e1, sp)), run(lambda sp: word_code(e2, sp))
  assert c["test_acc"] != d["test_acc"]
  assert min(c["test_acc_mean"], d["test_acc_mean"]) > a["test_acc_mean"] + 0.1


def test_encode_reads_each_layer_of_the_residual_stream():
  """`probe.encode(layer=k)` (experiments/probe_layers/): k = 0 is the embeddings
  plus the learned positions (NumPy from the tables), the last state through the final
  LayerNorm (NumPy) is `features`, each layer masked and flattened as the final features are;
  a layer out of range, or an LSTM, is refused with what is allowed."""
  from flax import nnx
  cfg = decoder.preset("encoder", vocab_size=11, num_layers=2, num_heads=2, embed_dim=8,
                       mlp_dim=16, max_len=6)
  graphdef, params = decoder.init(cfg, 0)
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, 11, size=(3, 6)).astype(np.int32)
  seg = np.ones((3, 6), np.int32)
  seg[1, 4:] = 0
  states = [np.asarray(h) for h in nnx.merge(graphdef, params).hidden_states(tokens, seg)]
  assert len(states) == 3
  emb, pos = np.asarray(params["embed"]["embedding"]), np.asarray(params["pos_embed"])
  np.testing.assert_allclose(states[0], emb[tokens] + pos[None, :6], rtol=1e-6, atol=1e-7)
  x = states[-1].astype(np.float64)
  ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + cfg.layer_norm_eps)
  ln = ln * np.asarray(params["ln_f"]["scale"]) + np.asarray(params["ln_f"]["bias"])
  final = np.asarray(decoder.features(graphdef, params, tokens, seg))
  np.testing.assert_allclose(final, ln, rtol=1e-4, atol=1e-5)
  mask = (seg > 0)[:, :, None]
  for k, want in enumerate(states):
    got = probe.encode(graphdef, params, tokens, seg, batch_size=2, layer=k)
    np.testing.assert_allclose(got, (want * mask).reshape(3, -1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(probe.encode(graphdef, params, tokens, seg),
                             (final * mask).reshape(3, -1), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match=r"layer=3 must be in 0\.\.2"):
    probe.encode(graphdef, params, tokens, seg, layer=3)
  lstm = decoder.preset("bilstm", vocab_size=11, num_layers=1, embed_dim=8, max_len=6)
  lg, lp = decoder.init(lstm, 0)
  with pytest.raises(ValueError, match="per-layer states are the transformer's"):
    probe.encode(lg, lp, tokens, seg, layer=0)


def test_attention_probs_equal_numpy_and_average_the_values():
  """`decoder.attention_probs` (experiments/attention_reach/): each block's weights
  are softmax(q k^T / sqrt(K)) over the keys of the query's own sentence, from the block's
  LayerNorm and QKV (NumPy, float64), and the block's attention output is the value average
  with those weights through the output projection; an LSTM is refused."""
  from flax import nnx
  cfg = decoder.preset("encoder", vocab_size=11, num_layers=2, num_heads=2, embed_dim=8,
                       mlp_dim=16, max_len=6, doc_mask=True, init_std=0.5)
  graphdef, params = decoder.init(cfg, 0)
  rng = np.random.default_rng(1)
  tokens = rng.integers(1, 11, size=(3, 6)).astype(np.int32)
  seg = np.ones((3, 6), np.int32)
  seg[1, 4:] = 0
  model = nnx.merge(graphdef, params)
  states = [np.asarray(h, np.float64) for h in model.hidden_states(tokens, seg)]
  got = [np.asarray(p) for p in decoder.attention_probs(graphdef, params, tokens, seg)]
  assert len(got) == 2 and got[0].shape == (3, 2, 6, 6)
  allowed = seg[:, :, None] == seg[:, None, :]
  for k, (p_got, x) in enumerate(zip(got, states)):
    blk = params["blocks"][k]
    a = lambda *path: np.asarray(functools.reduce(lambda d, n: d[n], path, blk), np.float64)  # noqa: E731
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + cfg.layer_norm_eps)
    ln = ln * a("ln1", "scale") + a("ln1", "bias")
    qkv = (ln @ a("attn", "qkv", "kernel") + a("attn", "qkv", "bias")).reshape(3, 6, 3, 2, 4)
    q, kk, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    s = np.einsum("bqhd,bshd->bhqs", q, kk) / 2.0  # sqrt(head dim 4)
    s = np.where(allowed[:, None], s, -np.inf)
    want = np.exp(s - s.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(p_got, want, rtol=1e-4, atol=1e-6)
    assert np.all(p_got[allowed[:, None].repeat(2, 1) == False] == 0)  # noqa: E712
    assert want.std(-1).max() > 0.05  # far from uniform: the comparison can fail
    y = np.einsum("bhqs,bshd->bqhd", want, v).reshape(3, 6, 8)
    out = y @ a("attn", "out", "kernel") + a("attn", "out", "bias")
    attn = np.asarray(model.blocks[k].attn(model.blocks[k].ln1(states[k].astype(np.float32)),
                                           jnp.asarray(allowed)))
    np.testing.assert_allclose(attn, out, rtol=1e-4, atol=1e-5)
  lstm = decoder.preset("bilstm", vocab_size=11, num_layers=1, embed_dim=8, max_len=6)
  lg, lp = decoder.init(lstm, 0)
  with pytest.raises(ValueError, match="attention weights are the transformer's"):
    decoder.attention_probs(lg, lp, tokens, seg)
