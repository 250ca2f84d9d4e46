"""HMM: forward-backward and MLM conditionals against path enumeration, sampler, errors, CLI."""
import itertools
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.special
import scipy.stats

from el_jax.core.data import hmm as hmm_lib


def _random_hmm(k, v, seed, sparse=False):
  rng = np.random.default_rng(seed)

  def rows(shape):
    m = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])
    if sparse:  # some exact zeros, so impossible sentences exist
      m = m * (rng.random(m.shape) < 0.6)
      m[..., 0] += 1e-3
      m /= m.sum(-1, keepdims=True)
    return m
  return hmm_lib.HMM(rows((k,)), rows((k, k)), rows((k, v)))


def _brute_prob(h, x):
  """p(x) summed over every state path (itertools.product)."""
  total = 0.0
  for z in itertools.product(range(h.num_states), repeat=len(x)):
    p = h.init[z[0]] * h.emit[z[0], x[0]]
    for t in range(1, len(x)):
      p *= h.trans[z[t - 1], z[t]] * h.emit[z[t], x[t]]
    total += p
  return total


@pytest.mark.parametrize("sparse", [False, True])
def test_log_prob_and_conditionals_match_enumeration(sparse):
  h = _random_hmm(3, 4, seed=1, sparse=sparse)
  sents = np.array(list(itertools.product(range(4), repeat=4)))
  probs = np.array([_brute_prob(h, x) for x in sents])
  assert probs.sum() == pytest.approx(1.0)
  with np.errstate(divide="ignore"):
    np.testing.assert_allclose(h.log_prob_batch(sents), np.log(probs), rtol=1e-12, atol=1e-12)
  table = probs.reshape((4,) * 4)
  cond_batch = h.mlm_conditionals_batch(sents)
  for n, x in enumerate(sents[::7]):
    every = h.mlm_conditionals_all(x)
    assert h.log_prob(x) == pytest.approx(np.log(table[tuple(x)]) if table[tuple(x)] else -np.inf)
    for t in range(4):
      idx = list(x)
      idx[t] = slice(None)
      joint = table[tuple(idx)]
      got = h.mlm_conditional(x, t)
      if joint.sum() == 0:
        assert np.isnan(got).all()
        continue
      np.testing.assert_allclose(got, joint / joint.sum(), rtol=1e-10, atol=1e-15)
      np.testing.assert_allclose(every[t], got, rtol=1e-10, atol=1e-15)
      np.testing.assert_allclose(cond_batch[7 * n, t], got, rtol=1e-10, atol=1e-15)


def test_long_sentences_do_not_underflow():
  h = _random_hmm(4, 6, seed=2)
  x, _ = h.sample(3, 2000, seed=0)
  # independent log-space forward algorithm
  la = np.log(h.init) + np.log(h.emit[:, x[:, 0]]).T
  for t in range(1, x.shape[1]):
    la = scipy.special.logsumexp(la[:, :, None] + np.log(h.trans)[None], axis=1)
    la += np.log(h.emit[:, x[:, t]]).T
  np.testing.assert_allclose(h.log_prob_batch(x), scipy.special.logsumexp(la, 1), rtol=1e-10)
  nll, ent = h.mlm_losses(x)
  assert np.isfinite(nll).all() and np.isfinite(ent).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampler_frequencies_chi_square(seed):
  h = _random_hmm(2, 2, seed=3)
  sents = list(itertools.product(range(2), repeat=3))
  probs = np.array([_brute_prob(h, x) for x in sents])
  n = 20000
  tokens, states = h.sample(n, 3, seed)
  assert tokens.dtype == np.int32 and states.dtype == np.int32
  assert tokens.shape == states.shape == (n, 3)
  counts = np.bincount(tokens @ np.array([4, 2, 1]), minlength=8)
  assert scipy.stats.chisquare(counts, n * probs).pvalue > 1e-3
  # hidden states: first state and transitions follow init and trans
  assert scipy.stats.chisquare(np.bincount(states[:, 0], minlength=2),
                               n * h.init).pvalue > 1e-3


def test_sample_deterministic():
  h = _random_hmm(5, 7, seed=4)
  a, b = h.sample(50, 6, seed=9), h.sample(50, 6, seed=9)
  assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_random_block_diagonal():
  h = hmm_lib.HMM.random_block_diagonal(100, 200, num_blocks=5, seed=0)
  for m in (h.init, h.trans, h.emit):
    assert (m >= 0).all()
    np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-12)
  sb = hmm_lib.HMM.block_of_state(100, 5)
  vb = hmm_lib.HMM.block_of_state(200, 5)
  assert np.array_equal(np.bincount(sb), [20] * 5) and np.array_equal(np.bincount(vb), [40] * 5)
  assert np.array_equal(h.trans > 0, sb[:, None] == sb[None, :])
  assert np.array_equal(h.emit > 0, sb[:, None] == vb[None, :])
  np.testing.assert_allclose(h.init, 0.01)
  tokens, states = h.sample(200, 16, seed=1)
  assert (sb[states] == sb[states[:, :1]]).all()  # a sentence stays in its block
  assert (vb[tokens] == sb[states]).all()
  uneven = hmm_lib.HMM.random_block_diagonal(10, 7, num_blocks=3, seed=0)
  assert np.array_equal(uneven.emit > 0, hmm_lib.HMM.block_of_state(10, 3)[:, None]
                        == hmm_lib.HMM.block_of_state(7, 3)[None, :])
  with pytest.raises(ValueError, match="num_blocks"):
    hmm_lib.HMM.random_block_diagonal(10, 20, num_blocks=11)


@pytest.mark.parametrize("args,match", [
    ((np.ones((2, 1)) / 2, np.eye(2), np.eye(2)), r"init must be 1-D"),
    ((np.ones(2) / 2, np.eye(3), np.eye(2)), r"trans must have shape"),
    ((np.ones(2) / 2, np.eye(2), np.ones(2)), r"emit must have shape"),
    ((np.array([0.7, 0.4]), np.eye(2), np.eye(2)), r"init sums to 1.1"),
    ((np.ones(2) / 2, np.array([[1, 0], [0.5, 0.6]]), np.eye(2)), r"row 1 of trans sums"),
    ((np.ones(2) / 2, np.eye(2), np.array([[1.5, -0.5], [0, 1]])), r"emit has a negative entry"),
    ((np.ones(2) / 2, np.eye(2), np.array([[np.nan, 1], [0, 1]])), r"emit has non-finite"),
])
def test_validation(args, match):
  with pytest.raises(ValueError, match=match):
    hmm_lib.HMM(*args)


def test_bad_token_ids():
  h = _random_hmm(2, 3, seed=0)
  with pytest.raises(ValueError, match="token id 3 .* vocabulary size 3"):
    h.log_prob([0, 3])
  with pytest.raises(ValueError, match="token id -1"):
    h.mlm_conditionals_all([-1, 0])
  with pytest.raises(ValueError, match="position 5"):
    h.mlm_conditional([0, 1], 5)


def _run_cli(*args):
  return subprocess.run([sys.executable, "-m", "el_jax.core.data.hmm", *args],
                        capture_output=True, text=True, timeout=120)


def test_cli():
  res = _run_cli("--num=200", "--seed=1")
  assert res.returncode == 0, res.stderr
  m = re.fullmatch(r"mlm_entropy=(\S+) stderr=(\S+) sentences_per_s=(\S+)",
                   res.stdout.strip().splitlines()[-1])
  assert m
  value, se, speed = map(float, m.groups())
  assert 3.0 < value < 4.5 and 0 < se < 0.1 and speed > 0
  res = _run_cli("--nmu=3")
  assert res.returncode == 2 and res.stderr.startswith("error:") and res.stderr.count("\n") == 1
  res = _run_cli("--num_blocks=0")
  assert res.returncode == 2 and "num_blocks" in res.stderr and "Traceback" not in res.stderr
