r"""Probabilistic context-free grammars with exact masked-LM conditionals (seed paper 002).

  python -m el_jax.core.data.pcfg --grammar=el_jax/core/data/resources/pcfg/rule_deep_mlm.txt --num=10000 [--seed=0] [--max_len=32]

The paper's PCFG data (Sec. 3.2, App. A.1) come from the grammar
`rule_deep_mlm.txt` of the authors' repository (Liuhong99/implicitbiasmlmcode):
one rule per line, `LHS RHS... prob`. `PCFG.from_file` reads it (duplicate
lines summed, the four A4_* rule sets that sum to 0.9998 renormalised); a
symbol that never appears as a LHS is a word. The file's 50 nonterminals are
S -> S1..S9 (unary), S_i -> A1_a A1_b, A1/A2/A3 -> two symbols of the next
level or one fixed word, A4 -> ~80 distinct words; sentences have 2..16 words.
A1_9 has rules but no S_i uses it: it is unreachable from S (allowed, and still
a label candidate of tasks B and C). Every nonterminal must derive words: an
unproductive start symbol, or any other unproductive nonterminal, is a
ValueError naming it when the grammar is read.

Exact masked-LM conditionals. p(x_t = w | x_-t, T) is proportional to the
probability of the sentence with w at t, i.e. to
sum_A ahat(A, t) P(A -> w), where ahat(A, t) is the outside score of a
preterminal A over the one-word span t (below any unary chain). The outside
score of a one-word span does not depend on that word, so one inside and one
outside pass over the unmasked sentence give the conditionals at every
position (`mlm_conditionals_all`); `mlm_conditional` instead puts a wildcard
at the masked position (preterminal inside score sum_w P(A -> w)). Unary
rules are summed in closed form: inside = Ubar @ inside_of_binary_and_word
rules and ahat = Ubar^T @ outside, Ubar = (I - U)^-1 (a unary cycle of
probability >= 1 is rejected). Both are checked in tests/test_pcfg.py against
plain recursion over derivations and against V separate inside passes.

Speed. Sentences are grouped by length and run as [rows, batch] charts in
float64 NumPy: for each width, the products of child scores over every
(span, split, binary rule) triple are gathered with one fancy index and
summed into parents by one sparse (CSR) matrix product. Triples that are zero
for every sentence of that length (a child that cannot yield its width, a
parent that cannot occur there under the root) are dropped once per length,
which leaves at most ~1.2 * 10^4 inside triples per sentence (2,411 of the
378,080 span-split-rule combinations at 16 words). Word probabilities at each
position are divided by max_A P(A -> x_t) against underflow; what remains is
~e^-3 per word here, so float64 holds sentences of a few hundred words.
Measured on the 2-core CPU: 10^4 sentences (sampling + all conditionals,
index tables included) in 1.3-1.7 s, 6,000-8,000 sentences/s.

Sampling follows the authors' `generate_pretraining.py`: a sentence of length
>= `max_len` (their `--length-limit`, 32) is rejected and drawn again. With
the shared grammar it never binds (at most 16 words).

Optimal MLM loss (natural log, one uniformly chosen masked position):

  10^4 sentences, seed 0: per-sentence mean 4.1916 +- 0.0102 (the CLI's
  mlm_entropy), token-weighted 4.4591;
  10^5 sentences, seed 1: per-sentence 4.1886 +- 0.0032, token-weighted
  4.4565 +- 0.0017; only sentences with 4 < length < 32 (the authors'
  downstream files): per-sentence 4.3940, token-weighted 4.5015.

The paper reports 3.196. The difference is not a weighting, length-limit or
log-base question: every variant above is ~1 nat higher, log base 2 would
raise the number, and masking 15% of the words instead of one would raise it
too (less context). Our values are exact (the conditionals match brute-force
enumeration in the tests). A bound that needs only the sampled trees shows
where 3.196 could come from: H(x_t | x_-t) >= H(x_t | x_-t, tree) =
E[H(P(. | preterminal of x_t))], which for this grammar is 3.182 +- 0.003
token-weighted over 4 * 10^4 sentences (3.220 for 4 < length < 32;
per-sentence 2.93): ~83% of the words come from an A4 preterminal with ~80
words and emission entropy 3.5..4.1 nats. The gap to our 4.46 (1.3 nats) is
what the tree tells about x_t beyond the other words. The paper's 3.196 is
within 0.02-0.03 of the bound, so it looks like the entropy of a word given
its preterminal (the parse taken as known) rather than given the other
words; a posterior-weighted conditional that also sees x_t (a "leaky"
conditional) gives other numbers (entropy 3.72). The authors did not publish
the code that wrote their conditional-probability file, and their BERT
pipeline tokenised words with the bert-large-uncased WordPiece vocabulary
(which may split words into easily predicted pieces), so we cannot say which
it was. We report the exact conditional entropy of the word-level grammar.

Downstream labels (`task_labels`, `span_argmax_label`) follow the authors'
`generate_downstream.py`; see `task_labels`.
"""
import argparse
import dataclasses
import sys
import time

import numpy as np
import scipy.sparse

_ALLOWED = ("allowed: 'LHS RHS prob' (terminal or unary rule) or 'LHS RHS1 RHS2 prob' "
            "(binary rule), prob a finite number >= 0; blank lines and lines "
            "starting with '#' are skipped")
_SUM_TOL = 1e-3  # a LHS whose probabilities sum to 1 +- this is renormalised


def _decode(data, path):
  """The lines of a grammar file's bytes; ValueError (naming the file and the byte) unless
  UTF-8 text."""
  nul = data.find(b"\0")
  try:
    text = data.decode("utf-8-sig")  # a leading byte-order mark is dropped
  except UnicodeDecodeError as e:
    raise ValueError(f"grammar file {path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                     f"{e.start}); give a text file of lines `LHS RHS... prob`") from None
  if nul >= 0:
    raise ValueError(f"grammar file {path} is not a text file (a NUL byte at offset {nul}); "
                     f"give a text file of lines `LHS RHS... prob`")
  return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _few(names, k=5):
  """'A', 'B', 'C' (and N more): a few symbol names for an error message."""
  shown = ", ".join(repr(n) for n in names[:k])
  return shown + (f" and {len(names) - k} more" if len(names) > k else "")


def _parse(lines, source):
  """[(lhs, rhs_tuple, prob, where)] from `LHS RHS... prob` lines."""
  rules = []
  for lineno, line in enumerate(lines, 1):
    fields = line.split()
    if not fields or fields[0].startswith("#"):
      continue
    where = f"{source}:{lineno}"
    if len(fields) < 3:
      raise ValueError(f"{where}: too few fields in {line.strip()!r}; {_ALLOWED}")
    if len(fields) > 4:
      raise ValueError(f"{where}: {len(fields) - 2} right-hand symbols in "
                       f"{line.strip()!r}; {_ALLOWED}")
    try:
      prob = float(fields[-1])
    except ValueError:
      raise ValueError(f"{where}: probability {fields[-1]!r} is not a number; "
                       f"{_ALLOWED}") from None
    rules.append((fields[0], tuple(fields[1:-1]), prob, where))
  return rules


@dataclasses.dataclass(frozen=True)
class _Plan:
  """Index tables of the chart of one sentence length (see `PCFG._plan`).

  Chart rows are (span, nonterminal) pairs, row = span * N + A, spans ordered
  by width then start: span(w, i) = off[w] + i covers tokens i..i+w-1.
  `inside[w]` = (left rows, right rows, CSR [(T-w+1) N, m]) for the m
  (parent span, split, binary rule) triples whose parent has width w;
  `outside[w]` = (parent rows, sibling rows, CSR) for the triples in which a
  span of width w is a child. Triples that are zero for every sentence of
  this length (a child that cannot yield its width, or a parent that cannot
  occur there in a derivation from the root) are left out.
  """
  length: int
  off: np.ndarray
  inside: dict
  outside: dict


class PCFG:
  """A PCFG in Chomsky normal form plus unary rules between nonterminals.

  Symbols that appear as a left-hand side are nonterminals, all others are
  terminals. Rules are binary `A -> B C` (B, C nonterminals), unary `A -> B`
  (B a nonterminal; chains and cycles of total probability < 1 are summed in
  closed form with (I - U)^-1) or terminal `A -> w`. Duplicate rules are
  summed; a LHS whose probabilities sum to 1 within 1e-3 is renormalised.

  Attributes:
    terminals: terminal names in sorted (Python string) order; token id =
      index. Sorted like the authors' `generate_downstream.py` sorts its
      vocabulary.
    nonterminals: nonterminal names in sorted order; the index is the id used
      by `span_argmax_label` and the task B/C labels (the authors' label map
      also sorts the nonterminals).
    lhs_order: nonterminal names in order of first appearance as a LHS.
    start: start symbol name.
    unreachable: nonterminals no derivation from the start symbol reaches
      (allowed if they derive words; an unproductive nonterminal is an error).
  """

  def __init__(self, rules, start="S", source="<rules>"):
    """`rules`: [(lhs, rhs_tuple, prob, where)], `where` naming the rule in errors."""
    for lhs, rhs, prob, where in rules:
      if not 1 <= len(rhs) <= 2:
        raise ValueError(f"{where}: {len(rhs)} right-hand symbols; {_ALLOWED}")
      if not np.isfinite(prob) or prob < 0:
        raise ValueError(f"{where}: probability {prob!r} of {lhs} -> {' '.join(rhs)} "
                         f"is negative or not finite; {_ALLOWED}")
    self.lhs_order = tuple(dict.fromkeys(r[0] for r in rules))
    lhs_set = set(self.lhs_order)
    if start not in lhs_set:
      raise ValueError(f"{source}: start symbol {start!r} has no rules")
    self.start, self.source = start, source
    self.nonterminals = tuple(sorted(lhs_set))
    self.terminals = tuple(sorted({s for _, rhs, _, _ in rules for s in rhs} - lhs_set))
    nt = {a: i for i, a in enumerate(self.nonterminals)}
    tt = {w: i for i, w in enumerate(self.terminals)}
    n, v = len(nt), len(tt)
    binary, unary, emit = {}, np.zeros((n, n)), np.zeros((n, v))
    total = np.zeros(n)
    for lhs, rhs, prob, where in rules:
      a = nt[lhs]
      total[a] += prob
      if len(rhs) == 2:
        bad = [s for s in rhs if s not in lhs_set]
        if bad:
          raise ValueError(f"{where}: binary rule {lhs} -> {' '.join(rhs)} rewrites to "
                           f"terminal {bad[0]!r}; binary rules need two nonterminals")
        key = (a, nt[rhs[0]], nt[rhs[1]])
        binary[key] = binary.get(key, 0.0) + prob
      elif rhs[0] in lhs_set:
        unary[a, nt[rhs[0]]] += prob
      else:
        emit[a, tt[rhs[0]]] += prob
    for a, s in enumerate(total):
      if abs(s - 1.0) > _SUM_TOL:
        raise ValueError(f"{source}: the probabilities of LHS {self.nonterminals[a]!r} "
                         f"sum to {s:.6g}; they must sum to 1 (within {_SUM_TOL:g})")
    keys = sorted(k for k, p in binary.items() if p > 0)
    a_r, b_r, c_r = (np.array([k[j] for k in keys], np.int64).reshape(-1) for j in range(3))
    self._bA, self._bB, self._bC = a_r, b_r, c_r
    self._bp = np.array([binary[k] for k in keys], np.float64).reshape(-1) / total[a_r]
    self._unary = unary / total[:, None]
    self._emit = emit / total[:, None]  # [N, V]
    self._emit_total = self._emit.sum(1)  # P(A -> some terminal): the wildcard's inside
    rho = np.max(np.abs(np.linalg.eigvals(self._unary))) if n else 0.0
    if rho >= 1 - 1e-9:
      raise ValueError(f"{source}: the unary rules contain a cycle of total probability "
                       f">= 1 (spectral radius {rho:.6g}); derivations would not end")
    self._check_useful()
    reach = np.eye(n, dtype=bool) | (self._unary > 0)
    for _ in range(max(1, int(np.ceil(np.log2(max(n, 2)))))):  # transitive closure
      reach = reach | ((reach.astype(np.int64) @ reach.astype(np.int64)) > 0)
    self._reach = reach  # reach[A, B]: A =>* B by unary rules
    self._ubar = np.where(reach, np.linalg.inv(np.eye(n) - self._unary), 0.0)
    self._closure_rows = {}
    for transpose, m in ((False, self._ubar), (True, self._ubar.T)):
      rows = np.nonzero((m != np.eye(n)).any(1))[0]
      cols = np.nonzero((m[rows] != 0).any(0))[0]
      self._closure_rows[transpose] = (rows, cols, m[np.ix_(rows, cols)])
    self._sampler_tables()
    self._plans = {}

  def _check_useful(self):
    """Productive and reachable nonterminals (rules of probability > 0 only).

    A nonterminal is productive if some derivation from it ends in words; the
    fixpoint also gives the fewest words it can derive (`_min_len`, inf if
    unproductive). ValueError, naming the symbols, if the start symbol is
    unproductive, or if any other nonterminal is (reachable from the start:
    useless, derivations through it never end; unreachable: dead rules).
    Unreachable productive nonterminals are allowed (the paper's grammar has
    one, A1_9, a candidate label of tasks B and C) and listed in `unreachable`.
    """
    n = self.num_nonterminals
    ua, ub = np.nonzero(self._unary)
    min_len = np.where(self._emit_total > 0, 1.0, np.inf)
    while True:
      new = min_len.copy()
      np.minimum.at(new, ua, min_len[ub])
      np.minimum.at(new, self._bA, min_len[self._bB] + min_len[self._bC])
      if np.array_equal(new, min_len):
        break
      min_len = new
    self._min_len = min_len
    start = self.nonterminals.index(self.start)
    child = np.zeros((n, n), bool)
    child[ua, ub] = True
    child[self._bA, self._bB] = True
    child[self._bA, self._bC] = True
    reached = np.zeros(n, bool)
    reached[start] = True
    frontier = reached.copy()
    while frontier.any():
      frontier = child[frontier].any(0) & ~reached
      reached |= frontier
    order = [self.nonterminals.index(a) for a in self.lhs_order]  # as in the file
    dead = [self.nonterminals[a] for a in order if not np.isfinite(min_len[a])]
    fix = "give each a rule path that ends in words (a rule `LHS word prob`)"
    if not np.isfinite(min_len[start]):
      raise ValueError(f"{self.source}: the start symbol {self.start!r} derives no finite sentence "
                       f"(no derivation from it ends in words; unproductive nonterminals: "
                       f"{_few(dead)}); {fix}")
    useless = [a for a in dead if reached[self.nonterminals.index(a)]]
    if useless:
      raise ValueError(f"{self.source}: useless nonterminal(s) {_few(useless)}: reachable from the "
                       f"start symbol {self.start!r} but no derivation from them ends in words, so "
                       f"sentences through them never finish; {fix}")
    if dead:
      raise ValueError(f"{self.source}: nonterminal(s) {_few(dead)} are unreachable from the start "
                       f"symbol {self.start!r} and derive no finite sentence (dead rules); remove "
                       f"their rules or {fix}")
    self.unreachable = tuple(self.nonterminals[a] for a in order if not reached[a])

  @property
  def min_sentence_length(self):
    """The fewest words a sentence of the grammar can have."""
    return int(self._min_len[self.nonterminals.index(self.start)])

  # ----------------------------------------------------------------- loading
  @classmethod
  def from_file(cls, path, start="S"):
    """Reads `LHS RHS... prob` lines (the format of rule_deep_mlm.txt), UTF-8 text."""
    with open(path, "rb") as f:
      data = f.read()
    return cls(_parse(_decode(data, path), str(path)), start=start, source=str(path))

  @classmethod
  def from_string(cls, text, start="S"):
    return cls(_parse(text.splitlines(), "<string>"), start=start, source="<string>")

  @classmethod
  def from_rules(cls, rules, start="S"):
    """`rules`: [(lhs, rhs, prob)], rhs a symbol name or a tuple of one or two."""
    parsed = []
    for i, (lhs, rhs, prob) in enumerate(rules):
      rhs = (rhs,) if isinstance(rhs, str) else tuple(rhs)
      try:
        prob = float(prob)
      except (TypeError, ValueError):
        raise ValueError(f"rule {i}: probability {prob!r} is not a number; {_ALLOWED}") from None
      parsed.append((lhs, rhs, prob, f"rule {i}"))
    return cls(parsed, start=start, source="<rules>")

  @property
  def num_nonterminals(self):
    return len(self.nonterminals)

  @property
  def vocab_size(self):
    return len(self.terminals)

  def rules(self):
    """[(lhs, rhs_tuple, prob)] after summing duplicates and renormalising."""
    nts, ts = self.nonterminals, self.terminals
    out = [(nts[a], (nts[b], nts[c]), p)
           for a, b, c, p in zip(self._bA, self._bB, self._bC, self._bp)]
    out += [(nts[a], (nts[b],), self._unary[a, b]) for a, b in zip(*np.nonzero(self._unary))]
    out += [(nts[a], (ts[w],), self._emit[a, w]) for a, w in zip(*np.nonzero(self._emit))]
    return out

  def _check_tokens(self, tokens, allow_mask=False):
    tokens = np.asarray(tokens)
    if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
      raise ValueError(f"token ids must be integers, got dtype {tokens.dtype}")
    tokens = tokens.astype(np.int64)
    low = -1 if allow_mask else 0
    bad = tokens[(tokens < low) | (tokens >= self.vocab_size)]
    if bad.size:
      raise ValueError(f"token id {int(bad[0])} is out of range for vocabulary size "
                       f"{self.vocab_size} (ids 0..{self.vocab_size - 1})")
    return tokens

  # ---------------------------------------------------------------- sampling
  def _sampler_tables(self):
    """Every rule with p > 0, grouped by LHS, with LHS + cumulative probability."""
    n = self.num_nonterminals
    ua, ub = np.nonzero(self._unary)
    ea, ew = np.nonzero(self._emit)
    lhs = np.concatenate([self._bA, ua, ea])
    kids = np.concatenate([np.full(self._bA.size, 2), np.ones(ua.size + ea.size, np.int64)])
    c1 = np.concatenate([self._bB, ub, n + ew])  # symbol codes: nonterminal id or N + token id
    c2 = np.concatenate([self._bC, np.full(ua.size + ea.size, -1)])
    prob = np.concatenate([self._bp, self._unary[ua, ub], self._emit[ea, ew]])
    order = np.argsort(lhs, kind="stable")
    lhs, self._r_kids, self._r_c1, self._r_c2, prob = (
        lhs[order], kids[order], c1[order], c2[order], prob[order])
    cum = np.zeros(prob.size)
    ends = np.searchsorted(lhs, np.arange(n), side="right")
    for a in range(n):
      lo = ends[a - 1] if a else 0
      cum[lo:ends[a]] = a + np.cumsum(prob[lo:ends[a]])
      cum[ends[a] - 1] = a + 1.0
    self._r_cum, self._r_end = cum, ends

  def sample(self, num, seed, max_len=32, return_trees=False):
    """Draws `num` sentences (int32 token-id arrays), deterministic in `seed`.

    As in the authors' `generate_pretraining.py` (`len(sentence) <
    length_limit`), sentences of length >= `max_len` are rejected and drawn
    again, so the default `max_len=32` keeps lengths 1..31 and the accepted
    sentences follow the grammar's distribution conditioned on that. (The
    shared grammar never yields more than 16 words, so there it never binds.)
    Derivations are expanded level by level for all sentences at once; one
    whose frontier already holds `max_len` symbols is dropped early (no rule
    shrinks a frontier), which also stops runaway recursive grammars.

    Returns:
      the list of sentences, and with `return_trees` also their derivation
      trees as nested tuples `(label, child, ...)`, a child being a tree or a
      terminal name, e.g. ("S", ("S1", ("A1_1", "enter"), (...))).
    """
    if num < 0 or max_len < 2:
      raise ValueError(f"need num >= 0 and max_len >= 2, got num={num}, max_len={max_len}")
    shortest = self.min_sentence_length
    if shortest >= max_len:
      raise ValueError(f"{self.source}: the shortest sentence of the grammar has {shortest} words; "
                       f"max_len={max_len} keeps only shorter ones: raise max_len above {shortest}")
    rng = np.random.default_rng(seed)
    sents, trees, rate, draws = [], [], 1.0, 0
    while len(sents) < num:
      want = num - len(sents)
      batch = int(want / max(rate, 0.01) * 1.1) + 16
      s, t = self._sample_batch(rng, batch, max_len, return_trees)
      draws += batch
      if not s and not sents and draws >= 10_000:
        raise ValueError(f"{self.source}: no sentence shorter than max_len={max_len} in {draws} "
                         f"draws (the shortest possible has {shortest} words, but derivations "
                         f"that short are rare); raise max_len")
      rate = max(len(s), 1) / batch
      sents += s[:want]
      trees += t[:want]
    return (sents, trees) if return_trees else sents

  def _sample_batch(self, rng, n, max_len, record):
    nn = self.num_nonterminals
    sym = np.full(n, self.nonterminals.index(self.start), np.int64)
    sid = np.arange(n)
    node, next_node, edges = np.arange(n), n, []
    for _ in range(1_000_000):
      nt = sym < nn
      if not nt.any():
        break
      lhs = sym[nt]
      r = np.searchsorted(self._r_cum, lhs + rng.random(lhs.size), side="right")
      r = np.minimum(r, self._r_end[lhs] - 1)  # guards A + u rounding up to A + 1
      count = np.ones(sym.size, np.int64)
      count[nt] = self._r_kids[r]
      first = (np.cumsum(count) - count)[nt]  # new position of each expanded item's 1st child
      two = self._r_kids[r] == 2
      new_sym = np.repeat(sym, count)
      new_sym[first] = self._r_c1[r]
      new_sym[first[two] + 1] = self._r_c2[r[two]]
      new_sid = np.repeat(sid, count)
      if record:
        kid_pos = np.sort(np.concatenate([first, first[two] + 1]))
        new_node = np.repeat(node, count)
        new_node[kid_pos] = next_node + np.arange(kid_pos.size)
        edges.append((np.repeat(node, count)[kid_pos], new_node[kid_pos], new_sym[kid_pos]))
        next_node += kid_pos.size
        node = new_node
      keep = np.bincount(new_sid, minlength=n)[new_sid] < max_len
      sym, sid = new_sym[keep], new_sid[keep]
      if record:
        node = node[keep]
    else:
      raise ValueError("sampling did not finish in 10^6 expansion rounds")
    ids, starts = np.unique(sid, return_index=True)
    sents = [s.astype(np.int32) - nn for s in np.split(sym, starts[1:])] if sid.size else []
    if not record:
      return sents, []
    kids, label = {}, {}
    for parents, children, syms in edges:
      for p, c, s in zip(parents.tolist(), children.tolist(), syms.tolist()):
        kids.setdefault(p, []).append(c)
        label[c] = s

    def build(v, s):
      if s >= nn:
        return self.terminals[s - nn]
      return (self.nonterminals[s],) + tuple(build(c, label[c]) for c in kids[v])
    start = self.nonterminals.index(self.start)
    return sents, [build(int(i), start) for i in ids]

  # ------------------------------------------------------- chart index plans
  def _can(self, length):
    """bool [N, length + 1]: can[A, w] iff A derives some string of w words."""
    n = self.num_nonterminals
    reach = self._reach.astype(np.int64)
    can_hat = np.zeros((n, length + 1), bool)
    can = np.zeros_like(can_hat)
    can_hat[:, 1] = self._emit_total > 0
    can[:, 1] = (reach @ can_hat[:, 1]) > 0
    for w in range(2, length + 1):
      for d in range(1, w):
        can_hat[self._bA[can[self._bB, d] & can[self._bC, w - d]], w] = True
      can[:, w] = (reach @ can_hat[:, w]) > 0
    return can

  def _plan(self, length, all_roots=False):
    """Cached `_Plan` for sentences of `length` tokens.

    `all_roots=False`: derivations start at the start symbol (log_prob, MLM
    conditionals); True: any nonterminal may span the whole sentence (inside
    scores of every nonterminal over a span, for the downstream labels).
    """
    key = (length, all_roots)
    if key in self._plans:
      return self._plans[key]
    n, t = self.num_nonterminals, length
    off = np.zeros(t + 2, np.int64)
    for w in range(1, t + 1):
      off[w + 1] = off[w] + t - w + 1
    can = self._can(t)
    trip = {}  # parent width -> (parent span, left span, right span, left width, rule)
    for big in range(2, t + 1):
      parts = []
      for d in range(1, big):
        rs = np.nonzero(can[self._bB, d] & can[self._bC, big - d])[0]
        i, r = (x.ravel() for x in np.meshgrid(np.arange(t - big + 1), rs, indexing="ij"))
        parts.append((off[big] + i, off[d] + i, off[big - d] + i + d, np.full(i.size, d), r))
      trip[big] = [np.concatenate(x) for x in zip(*parts)]
    # Which (span, A) can have a nonzero outside score, whatever the words.
    reach = self._reach.astype(np.int64)
    alpha_ok = np.zeros((off[t + 1], n), bool)
    if all_roots:
      alpha_ok[off[t]] = True
    else:
      alpha_ok[off[t], self.nonterminals.index(self.start)] = True
    for big in range(t, 1, -1):
      ahat_ok = (alpha_ok[off[big]:off[big + 1]].astype(np.int64) @ reach) > 0
      p, l, rr, d, r = trip[big]
      keep = ahat_ok[p - off[big], self._bA[r]]
      trip[big] = p, l, rr, d, r = [x[keep] for x in trip[big]]
      alpha_ok[l, self._bB[r]] = True
      alpha_ok[rr, self._bC[r]] = True

    def csr(rows, n_rows, data):
      return scipy.sparse.csr_matrix((data, (rows, np.arange(rows.size))),
                                     shape=(n_rows, rows.size))
    inside, outside = {}, {}
    for big in range(2, t + 1):
      p, l, rr, d, r = trip[big]
      if r.size:
        inside[big] = (l * n + self._bB[r], rr * n + self._bC[r],
                       csr((p - off[big]) * n + self._bA[r], (t - big + 1) * n, self._bp[r]))
    for w in range(1, t):
      par, sib, tgt, rule = [], [], [], []
      for big in range(w + 1, t + 1):
        p, l, rr, d, r = trip[big]
        for m, child, other, kid, kid_other in ((d == w, l, rr, self._bB, self._bC),
                                                (big - d == w, rr, l, self._bC, self._bB)):
          par.append(p[m] * n + self._bA[r[m]])
          sib.append(other[m] * n + kid_other[r[m]])
          tgt.append((child[m] - off[w]) * n + kid[r[m]])
          rule.append(r[m])
      rule = np.concatenate(rule)
      if rule.size:
        outside[w] = (np.concatenate(par), np.concatenate(sib),
                      csr(np.concatenate(tgt), (t - w + 1) * n, self._bp[rule]))
    plan = _Plan(length=t, off=off, inside=inside, outside=outside)
    self._plans[key] = plan
    return plan

  # ---------------------------------------------------- inside and outside
  def _unary_closure(self, x_IxNxB, transpose=False):
    """Applies Ubar = (I - U)^-1 (or its transpose) over the nonterminal axis.

    Only the rows of Ubar that differ from the identity are computed (for the
    shared grammar: S, or S1..S9 for the transpose), so unary rules cost little.
    """
    rows, cols, sub = self._closure_rows[transpose]
    if rows.size:
      y = np.einsum("rc,icb->irb", sub, x_IxNxB[:, cols])
      x_IxNxB[:, rows] = y
    return x_IxNxB

  def _charts(self, tokens_BxT, outside=True, all_roots=False):
    """Inside (and outside) charts of same-length sentences; -1 = wildcard.

    Returns (beta, ahat, log_scale_B, plan): beta [rows, B] holds inside
    scores (after unary closure), ahat [rows, B] outside scores of the
    nonterminal below any unary chain (so p(sentence with A at span
    rewriting by a binary or terminal rule) = ahat * that rule's inside).
    Word probabilities at position t are divided by c_t = max_A P(A -> x_t)
    (for a wildcard, max_A P(A -> any word)) against underflow; every score
    of a full derivation is then scaled by prod_t 1/c_t = exp(-log_scale).
    """
    b, t = tokens_BxT.shape
    n = self.num_nonterminals
    plan = self._plan(t, all_roots)
    wild = tokens_BxT < 0
    em = self._emit.T[np.where(wild, 0, tokens_BxT)]  # [B, T, N]
    em[wild] = self._emit_total
    c = em.max(-1)
    c[c == 0] = 1.0
    em /= c[..., None]
    off = plan.off
    beta = np.zeros((off[t + 1] * n, b))
    beta[:t * n] = self._unary_closure(em.transpose(1, 2, 0)).reshape(t * n, b)
    for w in range(2, t + 1):
      if w in plan.inside:
        left, right, mat = plan.inside[w]
        prod = beta[left]
        prod *= beta[right]
        hat = (mat @ prod).reshape(t - w + 1, n, b)
        beta[off[w] * n:off[w + 1] * n] = self._unary_closure(hat).reshape(-1, b)
    ahat = None
    if outside:
      ahat = np.zeros_like(beta)
      root = np.zeros((n, 1))
      root[self.nonterminals.index(self.start)] = 1.0
      ahat[off[t] * n:] = self._unary_closure(root[None], transpose=True)[0]
      for w in range(t - 1, 0, -1):
        if w in plan.outside:
          par, sib, mat = plan.outside[w]
          prod = ahat[par]
          prod *= beta[sib]
          alpha = (mat @ prod).reshape(t - w + 1, n, b)
          ahat[off[w] * n:off[w + 1] * n] = self._unary_closure(alpha, True).reshape(-1, b)
    return beta, ahat, np.log(c).sum(1), plan

  def _groups(self, sentences, chunk):
    """(indices, [B, T] tokens) per length, at most `chunk` sentences each."""
    sentences = [self._check_tokens(s).reshape(-1) for s in sentences]
    lengths = np.array([s.size for s in sentences], np.int64)
    if (lengths == 0).any():
      raise ValueError("sentences must have at least one token")
    for length in np.unique(lengths):
      idx = np.nonzero(lengths == length)[0]
      for lo in range(0, idx.size, chunk):
        part = idx[lo:lo + chunk]
        yield part, np.stack([sentences[i] for i in part])

  # ------------------------------------------------------------- public API
  def log_prob(self, tokens):
    """log p(sentence) summed over all derivations (inside algorithm); -inf if impossible.

    The probability is the grammar's, not conditioned on a length limit.
    """
    return float(self.log_prob_batch([tokens])[0])

  def log_prob_batch(self, sentences, chunk=256):
    """[len(sentences)] log probabilities (sentences of any lengths)."""
    out = np.empty(len(sentences))
    start = self.nonterminals.index(self.start)
    for idx, tok in self._groups(sentences, chunk):
      beta, _, log_scale, plan = self._charts(tok, outside=False)
      z = beta[plan.off[tok.shape[1]] * self.num_nonterminals + start]
      with np.errstate(divide="ignore"):
        out[idx] = np.log(z) + log_scale
    return out

  def _conditionals(self, tok):
    """[B, T, V] p(x_t = w | x_-t, length) from one inside-outside pass (NaN rows
    where the rest of the sentence has probability 0). Wildcards (-1) allowed."""
    b, t = tok.shape
    n = self.num_nonterminals
    _, ahat, _, _ = self._charts(tok)
    a1 = ahat[:t * n].reshape(t, n, b)
    num = np.ascontiguousarray(a1.transpose(2, 0, 1)) @ self._emit  # [B, T, V]
    with np.errstate(invalid="ignore", divide="ignore"):
      return num / num.sum(-1, keepdims=True)

  def mlm_conditional(self, tokens, position):
    """[V] float64 p(x_position = w | the other tokens, the length).

    One inside-outside pass over the sentence with a wildcard at `position`
    (its preterminal inside score is P(A -> any word)); then the conditional
    is proportional to sum_A ahat(A, position) P(A -> w).
    """
    tokens = self._check_tokens(tokens).reshape(-1).copy()
    if not 0 <= position < tokens.size:
      raise ValueError(f"position {position} out of range for length {tokens.size}")
    tokens[position] = -1
    return self._conditionals(tokens[None])[0, position]

  def mlm_conditionals_all(self, tokens):
    """[T, V]: the conditional at every position from one pass over the unmasked
    sentence (the outside score of a width-1 span never depends on its word)."""
    return self._conditionals(self._check_tokens(tokens).reshape(1, -1))[0]

  def mlm_conditionals_batch(self, sentences, chunk=256):
    """[[T_i, V]] for a list of sentences (grouped by length internally)."""
    out = [None] * len(sentences)
    for idx, tok in self._groups(sentences, chunk):
      cond = self._conditionals(tok)
      for j, i in enumerate(idx):
        out[i] = cond[j]
    return out

  def mlm_losses(self, sentences, chunk=256):
    """Per-token optimal MLM losses, NaN-padded to [len(sentences), max length].

    Returns (nll, ent): nll[i, t] = -log p(x_t | x_-t) of the actual word,
    ent[i, t] = H(p(. | x_-t)), the entropy of the true conditional (its
    expectation over x_t given x_-t is the same number, with less noise).
    """
    t_max = max(len(s) for s in sentences)
    nll, ent = np.full((2, len(sentences), t_max), np.nan)
    for idx, tok in self._groups(sentences, chunk):
      cond = self._conditionals(tok)
      t = tok.shape[1]
      picked = np.take_along_axis(cond, tok[..., None], -1)[..., 0]
      with np.errstate(divide="ignore", invalid="ignore"):
        nll[idx, :t] = -np.log(picked)
        ent[idx, :t] = -np.sum(np.where(cond > 0, cond * np.log(cond), 0.0), -1)
    return nll, ent

  # ------------------------------------------------------ downstream labels
  def default_candidates(self, task):
    """Label candidates of the authors' tasks, in their tie-breaking order.

    Task A: the nonterminals the start symbol rewrites to by unary rules
    (S1..S9), in file order. Tasks B, C: every nonterminal but the start
    symbol, in order of first appearance as a LHS (S1..S9, A1_0, ..., A4_9 in
    the shared file, the order of the authors' `root_prob` dict).
    """
    if task == "A":
      s = self.nonterminals.index(self.start)
      kids = {self.nonterminals[b] for b in np.nonzero(self._unary[s])[0]}
      return [self.nonterminals.index(a) for a in self.lhs_order if a in kids]
    return [self.nonterminals.index(a) for a in self.lhs_order if a != self.start]

  def span_inside_scores(self, sentences, start, end, chunk=256):
    """[len(sentences), N] inside probabilities of every nonterminal over tokens
    start..end-1, each row scaled by a positive per-sentence constant (enough for
    an argmax)."""
    n = self.num_nonterminals
    out = np.zeros((len(sentences), n))
    spans = [self._check_tokens(s).reshape(-1)[start:end] for s in sentences]
    for idx, tok in self._groups(spans, chunk):
      beta, _, _, plan = self._charts(tok, outside=False, all_roots=True)
      out[idx] = beta[plan.off[tok.shape[1]] * n:].T
    return out

  def span_argmax_label(self, tokens, start, end, candidates=None):
    """Id of the candidate nonterminal with the largest inside probability over
    tokens start..end-1 (ties, including all-zero, go to the earliest candidate,
    as Python's max over the authors' dict does). Default candidates: every
    nonterminal but the start symbol (`default_candidates("B")`)."""
    tokens = self._check_tokens(tokens).reshape(-1)
    if not 0 <= start < end <= tokens.size:
      raise ValueError(f"span {start}..{end} is not inside a sentence of {tokens.size} tokens")
    cand = np.asarray(self.default_candidates("B") if candidates is None else candidates)
    scores = self.span_inside_scores([tokens], start, end)[0]
    return int(cand[np.argmax(scores[cand])])


def task_labels(g, sentences, task):
  """Downstream labels of the authors' `pcfg/generate_downstream.py`.

  Sentences are kept only if 4 < length < 32. Task A: the S_i (S1..S9) with
  the largest inside probability over the whole sentence, label = its index
  among S1..S9 (9 classes). Task B (C): the nonterminal with the largest
  inside probability over the first 4 (2) tokens among every nonterminal
  but S, label = its index in the sorted nonterminal list (the authors'
  `C2i`, 50 classes for the shared grammar). The inside probability of a
  span is the sub-sentence's, whether or not the span is a constituent of
  the sentence's actual tree. Differences from the authors' code, which do
  not matter for the shared grammar: their inside ignores unary rules (only
  S has them there, and S is not a candidate), and they do not renormalise
  the four A4_* rule sets that sum to 0.9998 (this rescales some inside
  scores by < 0.03% and can only flip exact near-ties).

  Returns:
    (kept sentences, int64 labels, class names).
  """
  if task not in ("A", "B", "C"):
    raise ValueError(f"task must be 'A', 'B' or 'C', got {task!r}")
  kept = [np.asarray(s) for s in sentences if 4 < len(s) < 32]
  cand = np.asarray(g.default_candidates(task), np.int64)
  if task == "A":
    scores = np.zeros((len(kept), g.num_nonterminals))
    lengths = np.array([len(s) for s in kept])
    for length in np.unique(lengths):
      idx = np.nonzero(lengths == length)[0]
      scores[idx] = g.span_inside_scores([kept[i] for i in idx], 0, length)
    labels = np.argmax(scores[:, cand], 1)
    return kept, labels.astype(np.int64), tuple(g.nonterminals[a] for a in cand)
  width = 4 if task == "B" else 2
  scores = g.span_inside_scores(kept, 0, width)
  labels = cand[np.argmax(scores[:, cand], 1)]
  return kept, labels.astype(np.int64), g.nonterminals


# ------------------------------------------------------------------- CLI
class _Parser(argparse.ArgumentParser):
  def error(self, message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
  parser = _Parser(prog="python -m el_jax.core.data.pcfg",
                   description="Optimal one-masked-token MLM loss of a PCFG.")
  parser.add_argument("--grammar", required=True, help="rule file, `LHS RHS... prob` lines")
  parser.add_argument("--num", type=int, default=10000, help="sentences to sample")
  parser.add_argument("--seed", type=int, default=0, help="sampling seed")
  parser.add_argument("--max_len", type=int, default=32,
                      help="reject sentences of length >= max_len (the authors' length limit)")
  parser.add_argument("--start", default="S", help="start symbol")
  args = parser.parse_args(argv)
  if args.num < 2:
    parser.error(f"--num must be >= 2, got {args.num}")
  if args.max_len < 2:
    parser.error(f"--max_len must be >= 2, got {args.max_len}")
  try:
    g = PCFG.from_file(args.grammar, start=args.start)
  except (ValueError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  t0 = time.perf_counter()
  try:
    sents = g.sample(args.num, args.seed, max_len=args.max_len)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  t1 = time.perf_counter()
  nll, ent = g.mlm_losses(sents)
  t2 = time.perf_counter()
  lengths = np.array([len(s) for s in sents])
  per_sent = np.nanmean(nll, 1)
  mean, se = per_sent.mean(), per_sent.std(ddof=1) / np.sqrt(per_sent.size)
  ent_sent = np.nanmean(ent, 1)
  print(f"grammar {args.grammar}: {g.num_nonterminals} nonterminals, {g.vocab_size} words, "
        f"{g._bp.size} binary / {int((g._unary > 0).sum())} unary / "
        f"{int((g._emit > 0).sum())} terminal rules"
        + (f"; unreachable from {g.start!r}: {_few(list(g.unreachable))}" if g.unreachable else ""))
  print(f"{args.num} sentences (seed {args.seed}, lengths < {args.max_len}): mean length "
        f"{lengths.mean():.3f}, min {lengths.min()}, max {lengths.max()}")
  print("per-sentence value = exact average over the sentence's positions of "
        "-log p(x_t | x_-t) in nats (the expectation over a uniform masked position; "
        "less noisy than drawing one position); stderr over sentences")
  print(f"token-weighted mean of -log p(x_t | x_-t) over all {lengths.sum()} positions: "
        f"{np.nansum(nll) / lengths.sum():.4f}")
  print(f"entropy of the true conditional H(p(.|x_-t)): per-sentence mean "
        f"{ent_sent.mean():.4f} (stderr {ent_sent.std(ddof=1) / np.sqrt(ent_sent.size):.4f}), "
        f"token-weighted {np.nansum(ent) / lengths.sum():.4f}")
  print(f"time after grammar load: sampling {t1 - t0:.2f} s, inside-outside "
        f"{t2 - t1:.2f} s (index tables included)")
  print(f"mlm_entropy={mean:.6f} stderr={se:.6f} sentences_per_s={args.num / (t2 - t0):.1f}")


if __name__ == "__main__":
  main()
