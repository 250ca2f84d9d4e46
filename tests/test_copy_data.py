"""The padded-shifted copy task: layout, easy/hard padding, packing, masks."""
import time

import numpy as np
import pytest

from el_jax.core.data import copy_task as ct
from el_jax.core.tasks import base


def _ids(word):
  return np.array([ord(ch) - ord("a") for ch in word], np.int32)


SMALL = ct.CopyTaskSpec(seq_len=3, pad_len=12)


def test_spec_properties_and_paper_lengths():
  assert (SMALL.bos_id, SMALL.cls_id, SMALL.eos_id, SMALL.vocab_size) == (
      26, 27, 28, 29)
  assert SMALL.string_len == 1 + 3 + 12 + 1 + 3 + 1
  assert SMALL.answer_start == 1 + 3 + 12 + 1
  assert ct.CopyTaskSpec(seq_len=5, pad_len=2000).string_len == 2013
  assert 8 * ct.CopyTaskSpec(seq_len=1, pad_len=50).string_len == 440


def test_caesar_shift():
  assert np.array_equal(ct.caesar_shift(_ids("gravity"), 26), _ids("hsbwjuz"))
  assert np.array_equal(ct.caesar_shift([0, 4, 5], 6), [1, 5, 0])


def test_string_layout():
  train, _ = ct.make_datasets(SMALL, num_train=200, num_test=10, seed=1)
  tok, s = train.tokens, SMALL
  assert tok.dtype == np.int32 and tok.shape == (200, s.string_len)
  assert train.easy.dtype == np.bool_ and train.easy.shape == (200,)
  assert np.all(tok[:, 0] == s.bos_id)
  assert np.all(tok[:, s.answer_start - 1] == s.cls_id)
  assert np.all(tok[:, -1] == s.eos_id)
  body = np.delete(tok, [0, s.answer_start - 1, s.string_len - 1], axis=1)
  assert body.min() >= 0 and body.max() < s.num_letters  # only letters else
  seq = tok[:, 1:1 + s.seq_len]
  assert np.array_equal(tok[:, ct.answer_positions(s)], seq)
  assert np.array_equal(train.answers, seq)
  assert ct.decode_string(tok[0], s).startswith("<BOS>")
  assert ct.decode_string(tok[0], s).endswith("<EOS>")


def test_easy_padding_is_shifted_seq_and_hard_is_not():
  spec = ct.CopyTaskSpec(seq_len=4, pad_len=40)
  train, _ = ct.make_datasets(spec, num_train=500, num_test=10, seed=2)
  seq = train.tokens[:, 1:5]
  pad = train.tokens[:, 5:45]
  shifted = np.tile(ct.caesar_shift(seq, 26), (1, 10))
  assert np.array_equal(pad[train.easy], shifted[train.easy])
  # 40 uniform letters match the shifted pattern with probability 26^-40.
  assert not np.any(np.all(pad[~train.easy] == shifted[~train.easy], axis=1))
  # Hard padding letters look uniform: every letter shows up.
  assert len(np.unique(pad[~train.easy])) == 26


def test_decode_string_example():
  spec = ct.CopyTaskSpec(seq_len=2, pad_len=4, p_easy=1.0)
  train, _ = ct.make_datasets(spec, num_train=1, num_test=1, seed=0)
  a, b = (chr(ord("a") + t) for t in train.tokens[0, 1:3])
  sa, sb = (chr(ord("a") + (t + 1) % 26) for t in train.tokens[0, 1:3])
  assert ct.decode_string(train.tokens[0], spec) == (
      f"<BOS>{a}{b}{sa}{sb}{sa}{sb}<CLS>{a}{b}<EOS>")


def test_easy_fraction_within_four_standard_errors():
  spec = ct.CopyTaskSpec(seq_len=1, pad_len=5)
  train, test = ct.make_datasets(spec, num_train=2000, num_test=3000, seed=3)
  for ds in (train, test):
    n = len(ds)
    se = np.sqrt(0.8 * 0.2 / n)
    assert abs(ds.easy.mean() - 0.8) < 4 * se
  for p in (0.0, 1.0):
    tr, _ = ct.make_datasets(ct.CopyTaskSpec(1, 5, p_easy=p), 100, 1, seed=0)
    assert np.all(tr.easy == bool(p))


def test_deterministic_by_seed_and_streams_independent():
  a_tr, a_te = ct.make_datasets(SMALL, num_train=50, num_test=60, seed=7)
  b_tr, b_te = ct.make_datasets(SMALL, num_train=50, num_test=60, seed=7)
  c_tr, c_te = ct.make_datasets(SMALL, num_train=50, num_test=60, seed=8)
  assert np.array_equal(a_tr.tokens, b_tr.tokens)
  assert np.array_equal(a_te.tokens, b_te.tokens)
  assert np.array_equal(a_tr.easy, b_tr.easy)
  assert not np.array_equal(a_tr.tokens, c_tr.tokens)
  assert not np.array_equal(a_te.tokens, c_te.tokens)
  assert not np.array_equal(a_tr.tokens, a_te.tokens[:50])
  # The training set does not depend on the test-set size.
  d_tr, _ = ct.make_datasets(SMALL, num_train=50, num_test=5, seed=7)
  assert np.array_equal(a_tr.tokens, d_tr.tokens)
  with pytest.raises(ValueError):
    a_tr.tokens[0, 0] = 0  # the generated data set is read-only


def test_seen_in_train():
  spec = ct.CopyTaskSpec(seq_len=1, pad_len=3, p_easy=1.0)
  train, test = ct.make_datasets(spec, num_train=400, num_test=50, seed=0)
  assert ct.seen_in_train(train, test).all()  # only 26 easy strings exist
  train, test = ct.make_datasets(SMALL, num_train=40, num_test=50, seed=0)
  assert not ct.seen_in_train(train, test).any()


def test_paper_scale_generation_is_fast():
  spec = ct.CopyTaskSpec(seq_len=5, pad_len=2000)
  t0 = time.perf_counter()
  train, test = ct.make_datasets(spec)
  assert time.perf_counter() - t0 < 1.0
  assert train.tokens.shape == (400, 2013) and test.tokens.shape == (1000, 2013)


def test_strings_per_context():
  spec = ct.CopyTaskSpec(seq_len=1, pad_len=50)
  assert ct.strings_per_context(spec, 55) == 1
  assert ct.strings_per_context(spec, 440) == 8
  for bad in (441, 50, 0, -55):
    with pytest.raises(ValueError, match=rf"{bad}\b.*\b55\b"):
      ct.strings_per_context(spec, bad)


def test_bad_spec():
  with pytest.raises(ValueError, match=r"L_p=2001 is not a multiple of L_c=5"):
    ct.CopyTaskSpec(seq_len=5, pad_len=2001)
  for kwargs in ({"seq_len": 0, "pad_len": 3}, {"seq_len": 1, "pad_len": 0},
                 {"seq_len": 1, "pad_len": 2, "p_easy": 1.5},
                 {"seq_len": 1, "pad_len": 2, "num_letters": 1}):
    with pytest.raises(ValueError):
      ct.CopyTaskSpec(**kwargs)


def test_pack_order_padding_and_valid():
  n, s, k = 10, 4, 4
  tokens = np.arange(n * s, dtype=np.int32).reshape(n, s)
  ctx, valid = ct.pack(tokens, k)
  assert ctx.shape == (3, k * s) and ctx.dtype == np.int32
  assert valid.shape == (3, k) and valid.dtype == np.bool_
  for i in range(n):
    assert np.array_equal(ctx[i // k, (i % k) * s:(i % k + 1) * s], tokens[i])
  assert np.array_equal(ctx[2, 2 * s:], tokens[:2].reshape(-1))
  assert np.array_equal(valid, [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
  ctx1, valid1 = ct.pack(tokens, 5)  # divisible: all valid, no filler
  assert ctx1.shape == (2, 5 * s) and valid1.all()
  ctx2, valid2 = ct.pack(tokens[:2], 5)  # fewer strings than one context
  assert np.array_equal(ctx2.reshape(5, s), tokens[[0, 1, 0, 1, 0]])
  assert np.array_equal(valid2, [[1, 1, 0, 0, 0]])
  with pytest.raises(ValueError):
    ct.pack(tokens, 0)


@pytest.mark.parametrize("seq_len,pad_len,k", [(1, 50, 8), (3, 12, 3),
                                               (5, 10, 1)])
def test_loss_mask_selects_answer_targets(seq_len, pad_len, k):
  spec = ct.CopyTaskSpec(seq_len=seq_len, pad_len=pad_len)
  train, _ = ct.make_datasets(spec, num_train=2 * k, num_test=1, seed=4)
  ctx, _ = ct.pack(train.tokens, k)
  mask = ct.loss_mask_for_context(spec, k)
  t = k * spec.string_len
  assert mask.shape == (t,) and mask.dtype == np.float32
  assert set(np.unique(mask)) == {0.0, 1.0}
  per_string = mask.reshape(k, spec.string_len)
  assert np.all(per_string.sum(axis=1) == seq_len)
  assert mask[-1] == 0
  targets = np.roll(ctx, -1, axis=1)
  scored = targets[:, mask > 0].reshape(-1, seq_len)
  assert np.array_equal(scored, train.answers)
  # The input at the first scored position is <CLS>.
  first = np.flatnonzero(mask)[::seq_len]
  assert np.all(ctx[:, first] == spec.cls_id)


def test_epoch_order():
  a = base.epoch_order(400, seed=0, epoch=3)
  assert np.array_equal(np.sort(a), np.arange(400))
  assert np.array_equal(a, base.epoch_order(400, seed=0, epoch=3))
  assert not np.array_equal(a, base.epoch_order(400, seed=0, epoch=4))
  assert not np.array_equal(a, base.epoch_order(400, seed=1, epoch=3))
