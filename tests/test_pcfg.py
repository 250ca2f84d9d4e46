"""PCFG: inside/outside and MLM conditionals against brute force, sampler, labels, errors, CLI."""
import functools
import itertools
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

from el_jax.core.data import PCFG_GRAMMAR
from el_jax.core.data import pcfg

# The paper's grammar, shipped with el_jax (el_jax/core/data/resources/README.md): these tests
# check el_jax against it.
GRAMMAR = PCFG_GRAMMAR

# Unary chains S -> S1 -> A -> C, a unary cycle A -> C -> A (probability 0.03),
# recursion through binary rules, and a word (c) emitted by several symbols.
SMALL = """
# a small grammar with unary rules
S A B 0.4
S S1 0.35
S a 0.25
S1 B A 0.5
S1 A 0.3
S1 C 0.2
A a 0.5
A b 0.2
A A B 0.2
A C 0.1
C A 0.3
C c 0.4
C B B 0.3
B b 0.6
B c 0.3
B S1 0.1
"""


def _brute_inside(rules, depth=60):
  """p(sym =>* words) summed over derivations of depth <= `depth`, by plain recursion.

  Independent of the library: no charts, no matrix inverse for unary rules
  (a unary cycle of probability q contributes q^(depth/2) at most).
  """
  by_lhs = {}
  for lhs, rhs, p in rules:
    by_lhs.setdefault(lhs, []).append((rhs, p))

  @functools.lru_cache(maxsize=None)
  def f(sym, words, d):
    if d == 0:
      return 0.0
    total = 0.0
    for rhs, p in by_lhs[sym]:
      if len(rhs) == 1 and rhs[0] not in by_lhs:
        total += p * (words == rhs)
      elif len(rhs) == 1:
        total += p * f(rhs[0], words, d - 1)
      else:
        for k in range(1, len(words)):
          left = f(rhs[0], words[:k], d - 1)
          if left:
            total += p * left * f(rhs[1], words[k:], d - 1)
    return total
  return lambda sym, words: f(sym, tuple(words), depth)


@pytest.fixture(scope="module")
def small():
  return pcfg.PCFG.from_string(SMALL)


@pytest.fixture(scope="module")
def real():
  return pcfg.PCFG.from_file(GRAMMAR)


def _sentences(g, max_len):
  return [s for n in range(1, max_len + 1)
          for s in itertools.product(range(g.vocab_size), repeat=n)]


def test_small_grammar_tables(small):
  assert small.terminals == ("a", "b", "c")
  assert small.nonterminals == ("A", "B", "C", "S", "S1")
  assert small.lhs_order == ("S", "S1", "A", "C", "B")
  want = {(l, tuple(r)): float(p) for l, *r, p in (line.split() for line in SMALL.splitlines()
                                                     if line and not line.startswith("#"))}
  assert {(l, r): p for l, r, p in small.rules()} == pytest.approx(want, rel=1e-15)


def test_log_prob_matches_brute_force(small):
  brute = _brute_inside(small.rules())
  sents = _sentences(small, 4)
  got = small.log_prob_batch([list(s) for s in sents])
  for s, lp in zip(sents, got):
    ref = brute("S", [small.terminals[i] for i in s])
    assert lp == pytest.approx(math.log(ref), rel=1e-12, abs=1e-12), s
    assert small.log_prob(list(s)) == pytest.approx(lp, abs=1e-12)


def test_mlm_conditional_matches_brute_force(small):
  brute = _brute_inside(small.rules())
  for s in _sentences(small, 4):
    every = small.mlm_conditionals_all(s)
    for t in range(len(s)):
      joint = np.array([brute("S", [small.terminals[i] for i in s[:t] + (w,) + s[t + 1:]])
                        for w in range(small.vocab_size)])
      got = small.mlm_conditional(s, t)
      assert got.dtype == np.float64 and got.shape == (small.vocab_size,)
      np.testing.assert_allclose(got, joint / joint.sum(), rtol=1e-10, atol=1e-14)
      np.testing.assert_allclose(every[t], got, rtol=1e-10, atol=1e-14)


def test_unary_closure_is_inverse(small):
  u = np.zeros((5, 5))
  for lhs, rhs, p in small.rules():
    if len(rhs) == 1 and rhs[0] in small.nonterminals:
      u[small.nonterminals.index(lhs), small.nonterminals.index(rhs[0])] = p
  series = sum(np.linalg.matrix_power(u, k) for k in range(200))
  np.testing.assert_allclose(small._ubar, series, atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampler_frequencies_chi_square(small, seed):
  brute = _brute_inside(small.rules())
  sents = _sentences(small, 3)  # max_len=4 keeps lengths 1..3
  p = np.array([brute("S", [small.terminals[i] for i in s]) for s in sents])
  n = 20000
  drawn = small.sample(n, seed, max_len=4)
  assert all(1 <= len(s) <= 3 for s in drawn)
  index = {s: i for i, s in enumerate(sents)}
  counts = np.bincount([index[tuple(s.tolist())] for s in drawn], minlength=len(sents))
  expected = n * p / p.sum()
  big = expected >= 5  # pool the rare sentences into one bin
  obs = np.append(counts[big], counts[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  assert scipy.stats.chisquare(obs, exp).pvalue > 1e-3


def test_sampler_deterministic_and_trees(small):
  a, trees = small.sample(300, 5, max_len=8, return_trees=True)
  b = small.sample(300, 5, max_len=8)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert all(x.dtype == np.int32 and 1 <= len(x) < 8 for x in a)
  rules = {(l, r) for l, r, _ in small.rules()}

  def walk(tree):  # yield of the tree; every node must be a rule of the grammar
    kids = tree[1:]
    assert (tree[0], tuple(k if isinstance(k, str) else k[0] for k in kids)) in rules
    return [w for k in kids for w in ([k] if isinstance(k, str) else walk(k))]
  for s, tree in zip(a, trees):
    assert tree[0] == "S"
    assert walk(tree) == [small.terminals[i] for i in s]


def test_real_grammar_file(real):
  assert (real.num_nonterminals, real.vocab_size) == (50, 200)
  assert real.terminals == tuple(sorted(real.terminals))
  sums = {}
  for lhs, _, p in real.rules():
    sums[lhs] = sums.get(lhs, 0.0) + p
  assert max(abs(s - 1) for s in sums.values()) < 1e-12  # the 0.9998 sums renormalised
  assert real.default_candidates("A") == [real.nonterminals.index(f"S{i}") for i in range(1, 10)]


def test_real_grammar_inside_outside_equals_v_inside_passes(real):
  sents, trees = real.sample(4, 3, return_trees=True)
  brute = _brute_inside(real.rules(), depth=8)  # trees have depth <= 6
  for s in sents[:3]:
    words = [real.terminals[i] for i in s]
    assert real.log_prob(s) == pytest.approx(math.log(brute("S", words)), rel=1e-12)
    every = real.mlm_conditionals_all(s)
    for t in range(len(s)):
      toks = np.repeat(s[None], real.vocab_size, 0)
      toks[:, t] = np.arange(real.vocab_size)
      lp = real.log_prob_batch(list(toks))  # V separate inside passes
      ref = np.exp(lp - lp.max())
      got = real.mlm_conditional(s, t)
      np.testing.assert_allclose(got, ref / ref.sum(), rtol=1e-9, atol=1e-15)
      np.testing.assert_allclose(every[t], got, rtol=1e-9, atol=1e-15)
  batch = real.mlm_conditionals_batch(sents)
  for s, c in zip(sents, batch):
    np.testing.assert_allclose(c, real.mlm_conditionals_all(s), rtol=1e-12, atol=1e-15)


def test_real_grammar_sampler_and_losses(real):
  sents = real.sample(500, 0)
  lengths = np.array([len(s) for s in sents])
  assert lengths.min() >= 2 and lengths.max() <= 16  # the grammar caps sentences at 16 words
  assert np.isfinite(real.log_prob_batch(sents)).all()
  nll, ent = real.mlm_losses(sents)
  mask = np.arange(nll.shape[1]) < lengths[:, None]
  assert np.isfinite(nll[mask]).all() and np.isnan(nll[~mask]).all()
  # E[-log p(x_t | x_-t)] = E[H(p(.|x_-t))]: the two estimates agree within noise
  assert abs(np.nanmean(nll) - np.nanmean(ent)) < 0.1
  assert 3.5 < np.nanmean(nll) < 5.0


@pytest.mark.parametrize("task,width", [("A", None), ("B", 4), ("C", 2)])
def test_task_labels_match_brute_force(real, task, width):
  sents = real.sample(40, 11)
  kept, labels, classes = pcfg.task_labels(real, sents, task)
  assert [len(s) for s in kept] == [len(s) for s in sents if 4 < len(s) < 32]
  brute = _brute_inside(real.rules(), depth=8)
  names = ([f"S{i}" for i in range(1, 10)] if task == "A" else
           [a for a in real.lhs_order if a != "S"])  # the authors' dict order
  assert len(classes) == (9 if task == "A" else 50)
  for s, label in list(zip(kept, labels))[:6]:
    words = [real.terminals[i] for i in s][:width]
    scores = [brute(a, words) for a in names]
    best = names[int(np.argmax(scores))]  # first maximum, like max() over the dict
    assert classes[label] == best
    if task != "A":
      assert real.span_argmax_label(s, 0, width) == label


def test_span_argmax_label_ties_go_to_first_candidate():
  g = pcfg.PCFG.from_string("S A A 1.0\nA x 0.5\nA B B 0.5\nB y 1.0\n")
  x, y = g.terminals.index("x"), g.terminals.index("y")
  a, b = g.nonterminals.index("A"), g.nonterminals.index("B")
  assert g.default_candidates("B") == [a, b]  # LHS order without the start symbol
  assert g.span_argmax_label([x, y, y], 1, 3) == a  # only A derives 'y y'
  assert g.span_argmax_label([x, y, y], 2, 3) == b
  assert g.span_argmax_label([x, y], 0, 2) == a  # nothing derives 'x y': first candidate
  assert g.span_argmax_label([x, y], 0, 2, candidates=[b, a]) == b


@pytest.mark.parametrize("text,match", [
    ("S a\n", r"<string>:1: too few fields"),
    ("S a 1.0\nS A B C 0.5\n", r"<string>:2: 3 right-hand symbols"),
    ("S a -0.5\nS b 1.5\n", r"<string>:1: probability -0.5 .* negative"),
    ("S a 0.5\nS b half\n", r"<string>:2: probability 'half' is not a number"),
    ("S a 0.5\nS b 0.3\n", r"LHS 'S' sum to 0.8"),
    ("S a B 1.0\nB b 1.0\n", r"binary rule S -> a B rewrites to terminal 'a'"),
    ("S A 1.0\nA S 1.0\n", r"cycle of total probability >= 1"),
    ("T a 1.0\n", r"start symbol 'S' has no rules"),
])
def test_bad_grammars(text, match):
  with pytest.raises(ValueError, match=match):
    pcfg.PCFG.from_string(text)


def test_bad_grammar_file_names_path_and_line(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_text("S A B 0.5\nS a 0.5\n\n# comment\nA a 1.0 extra 2\nB b 1.0\n")
  with pytest.raises(ValueError, match=re.escape(f"{path}:5:") + ".*allowed"):
    pcfg.PCFG.from_file(path)


def test_renormalisation_and_duplicates():
  g = pcfg.PCFG.from_string("S a 0.3\nS a 0.2\nS b 0.4999\n")
  rules = dict(((l, r), p) for l, r, p in g.rules())
  assert rules[("S", ("a",))] == pytest.approx(0.5 / 0.9999)
  assert g.log_prob([g.terminals.index("b")]) == pytest.approx(math.log(0.4999 / 0.9999))
  g2 = pcfg.PCFG.from_rules([("S", ("A", "A"), 1), ("A", "x", "1.0")])
  assert g2.log_prob([0, 0]) == 0.0 and g2.log_prob([0]) == -np.inf


def test_bad_token_ids(small):
  with pytest.raises(ValueError, match="token id 7 .* vocabulary size 3"):
    small.log_prob([0, 7])
  with pytest.raises(ValueError, match="token id -1"):
    small.mlm_conditional([0, -1], 0)
  with pytest.raises(ValueError, match="position 2"):
    small.mlm_conditional([0, 1], 2)
  with pytest.raises(ValueError, match="integers"):
    small.log_prob([0.5])


def _run_cli(*args):
  return subprocess.run([sys.executable, "-m", "el_jax.core.data.pcfg", *args],
                        capture_output=True, text=True, timeout=120)


def test_cli_last_line():
  res = _run_cli(f"--grammar={GRAMMAR}", "--num=200", "--seed=1")
  assert res.returncode == 0, res.stderr
  last = res.stdout.strip().splitlines()[-1]
  m = re.fullmatch(r"mlm_entropy=(\S+) stderr=(\S+) sentences_per_s=(\S+)", last)
  assert m, last
  value, se, speed = map(float, m.groups())
  assert 0 < value < 10 and 0 < se < 1 and speed > 0


def test_cli_errors(tmp_path):
  res = _run_cli("--grammar=x", "--bogus=1")
  assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith("error:")
  bad = tmp_path / "g.txt"
  bad.write_text("S a 0.5\n")
  for arg in (f"--grammar={bad}", f"--grammar={tmp_path / 'missing.txt'}"):
    res = _run_cli(arg, "--num=10")
    assert res.returncode == 2 and res.stderr.startswith("error:"), res.stderr
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1
