r"""Bracket languages with exact counting: the synthetic language of seed 002, Sec. 6.

  from el_jax.core.data import dyck
  lang = dyck.Language(8)                        # the paper's language, length 8
  x = lang.sample(1000, seed=0)                  # [1000, 8], uniform over the valid strings
  masked, pos, y = lang.sample_masked(1000, seed=0)
  p = lang.mlm_conditional(masked[0], pos[0])    # exact p(masked token | rest)
  tau = lang.mismatches(lang.downstream_sample(100, seed=0))

Seed 002 (Liu, Xie, Li, Ma), Section 6 / Theorem 6.1: "a variant of the Dyck
language consisting of matching brackets. The vocabulary of the language has
two brackets ( and ). Each sentence is composed of a sequence of tokens such
that the total numbers of ('s and )'s are equal." A sentence is drawn
uniformly over the valid sentences of even length n and one uniformly chosen
position is replaced by a mask token. The seed's text lost most symbols; what
this module assumes where it is unreadable:

  * the paper's language (`Language(n)`, `nested=False`, one bracket type) is
    the set of strings over {(, )} with as many ('s as )'s, with no
    prefix condition ("a variant of the Dyck language"; the paper's
    validity test is tau(x) = 0 below, which ignores the order). There are
    C(n, n/2) of them.
  * the downstream label (the paper's eq. (2), "tau(x) counts the number of
    mismatches in x") is the signed count
        tau(x_{1:l}) = #{i <= l: x_i is an opening bracket}
                       - #{i <= l: x_i is a closing bracket},
    a masked position counting 0; the paper's task takes the whole sequence
    (l = n; `mismatches(x, prefix_len=l)` gives any prefix). This is what
    the remaining text says of it: x is valid iff tau(x) = 0, tau of a
    masked valid sentence is +1 when the masked token is ) and -1 when it is
    (, and tau(x) = 1^T z_{1:n} under the +-position encoding.
  * the downstream inputs are length-n strings with i.i.d. uniform tokens
    ("each token is sampled from {(, )} uniformly, randomly and
    independently"), not necessarily valid.

The issue that asked for this module named two bracket types and a Dyck
language proper, so `Language(n, num_types=k, nested=True)` is the Dyck-k
language too (every prefix has at least as many opening as closing brackets
and each closing bracket matches the type of the last unclosed one);
`nested=False` is defined for one bracket type only. Token ids: the opening
bracket of type t is 2t, its closing bracket 2t + 1, the mask 2k; with k = 1,
0 = "(", 1 = ")", 2 = mask.

Counting. `num_completions(r, d)` is the number of ways to append r tokens to
a prefix in state d so that the whole string is valid: d is the depth (stack
height) for Dyck-k and the balance #( - #) for the balanced language. A
dynamic program over (r, d) in exact integers:
    Dyck-k:    N(r, d) = k N(r-1, d+1) + [d > 0] N(r-1, d-1)   (a closing
               bracket's type is forced by the stack),
    balanced:  N(r, b) = N(r-1, b+1) + N(r-1, b-1),
with N(0, 0) = 1; hence N(n, 0) = Catalan(n/2) k^(n/2) and C(n, n/2)
(checked in the tests). The sampler draws left to right with probabilities
N(r-1, d') / N(r, d), which is exactly uniform over the valid strings.

Masked-LM conditional. Sentences are uniform and the mask position is
uniform and independent, so p(x_i = c | x_-i) is proportional to the number
of valid sentences that agree with x off position i and have c at i: 1 if
the filled string is valid, else 0. In both languages at most one filling is
valid (the number of opening brackets is n/2, and a closing or an opening
bracket's type is fixed by the stack), so the conditional is one-hot and the
optimal squared / cross-entropy MLM loss is 0: this is why Theorem 6.1 can
ask for solutions with zero pre-training loss.
"""
import itertools
import math

import numpy as np

MAX_LENGTH = 1024
MAX_ENUMERATE = 2_000_000


def _check_count(name, value, minimum=0):
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
  return int(value)


class Language:
  """Balanced bracket strings of a fixed even length, with exact counts.

  Args:
    length: the sentence length n, even, 2 <= n <= MAX_LENGTH.
    num_types: bracket types k (1 or 2).
    nested: True = the Dyck-k language (prefix condition, matching types);
      False = the paper's variant (equal numbers of ( and ), any order;
      only with num_types=1).
  """

  def __init__(self, length, num_types=1, nested=False):
    n = _check_count("length", length, 2)
    if n % 2:
      raise ValueError(f"length must be even (a valid sentence has as many opening as "
                       f"closing brackets), got {n}")
    if n > MAX_LENGTH:
      raise ValueError(f"length must be <= {MAX_LENGTH}, got {n}")
    if isinstance(num_types, bool) or num_types not in (1, 2):
      raise ValueError(f"num_types must be 1 or 2, got {num_types!r}")
    if not isinstance(nested, (bool, np.bool_)):
      raise ValueError(f"nested must be True or False, got {nested!r}")
    if not nested and num_types != 1:
      raise ValueError("nested=False (the paper's balanced-count variant) is defined for "
                       "num_types=1 only; use nested=True for the Dyck-2 language")
    self.length, self.num_types, self.nested = n, int(num_types), bool(nested)
    self.mask_id = 2 * self.num_types
    self.vocab_size = 2 * self.num_types  # bracket tokens; the mask id comes after them
    # Exact completion counts: _counts[r][d + off], off = n + 1 (a balance may be negative;
    # the columns d = +-(n + 1) stay 0 and absorb the d +- 1 look-ups at the edges).
    self._off = n + 1
    width = 2 * n + 3
    counts = [[0] * width for _ in range(n + 1)]
    counts[0][self._off] = 1
    k = self.num_types
    for r in range(1, n + 1):
      for d in range(-n, n + 1):
        if self.nested and d < 0:
          continue
        up = counts[r - 1][d + 1 + self._off]
        down = counts[r - 1][d - 1 + self._off] if (d > 0 or not self.nested) else 0
        counts[r][d + self._off] = k * up + down
    self._counts = counts
    # p_open[r, d + off]: probability that the next token opens, given r tokens left
    # (including it) and state d, under the uniform distribution over valid strings
    # (int / int is correctly rounded in Python, however large the counts).
    p_open = np.zeros((n + 1, width))
    has = np.zeros((n + 1, width), bool)
    for r in range(0, n + 1):
      for d in range(-n, n + 1):
        tot = counts[r][d + self._off]
        has[r, d + self._off] = tot > 0
        if tot and r:
          p_open[r, d + self._off] = k * counts[r - 1][d + 1 + self._off] / tot
    self._has = has
    self._p_open = p_open

  def __repr__(self):
    return (f"dyck.Language(length={self.length}, num_types={self.num_types}, "
            f"nested={self.nested})")

  # --------------------------------------------------------------------------
  # Counting

  def num_completions(self, remaining, state):
    """Exact number of valid completions of `remaining` tokens from `state`
    (depth for Dyck-k, balance #( - #) for the balanced language); 0 if none."""
    r = _check_count("remaining", remaining)
    if r > self.length:
      raise ValueError(f"remaining must be <= length={self.length}, got {r}")
    if isinstance(state, bool) or not isinstance(state, (int, np.integer)):
      raise ValueError(f"state must be an integer, got {state!r}")
    if abs(int(state)) > self.length:
      return 0
    return self._counts[r][int(state) + self._off]

  @property
  def num_sentences(self):
    """The number of valid sentences of length n (exact integer)."""
    return self._counts[self.length][self._off]

  # --------------------------------------------------------------------------
  # Validation and the left-to-right state machine

  def check_tokens(self, tokens, allow_mask=False, name="tokens"):
    """[B, n] (or [n]) integer token ids in range; returns an int64 array."""
    x = np.asarray(tokens)
    if x.dtype == bool or not np.issubdtype(x.dtype, np.integer):
      raise ValueError(f"{name} must be integer token ids, got dtype {x.dtype}")
    if x.ndim not in (1, 2) or x.shape[-1] != self.length:
      raise ValueError(f"{name} must have shape [n] or [B, n] with n = {self.length}, "
                       f"got {x.shape}")
    top = self.mask_id if allow_mask else self.vocab_size - 1
    bad = np.argwhere((x < 0) | (x > top))
    if len(bad):
      i = tuple(int(j) for j in bad[0])
      allowed = f"0..{top}" + (f" (mask = {self.mask_id})" if allow_mask else
                               " (no mask token here)")
      raise ValueError(f"{name}{list(i)} = {int(x[i])} is not a token id; allowed: {allowed}")
    return x.astype(np.int64)

  def _scan(self, x_bxl):
    """One left-to-right pass over prefixes (no masks): (ok [B], state [B]).

    ok: no closing bracket so far broke the nesting (always True for the
    balanced language); state: the depth (Dyck-k) or the balance.
    """
    b, l = x_bxl.shape
    ok = np.ones(b, bool)
    depth = np.zeros(b, np.int64)
    stack = np.zeros((b, l + 1), np.int64)
    rows = np.arange(b)
    for i in range(l):
      tok = x_bxl[:, i]
      opening = tok % 2 == 0
      typ = tok // 2
      if self.nested:
        top = stack[rows, np.clip(depth - 1, 0, l)]
        ok &= opening | ((depth > 0) & (top == typ))
        at = np.clip(depth, 0, l)
        stack[rows, at] = np.where(opening, typ, stack[rows, at])
      depth = depth + np.where(opening, 1, -1)
    return ok, depth

  def _run(self, x_bxn):
    """Valid flags [B] of complete strings (no masks)."""
    ok, depth = self._scan(x_bxn)
    return ok & (depth == 0)

  def is_valid(self, tokens):
    """Whether each string (no masks) is a sentence of the language: [B] bool (or a bool)."""
    x = self.check_tokens(tokens)
    out = self._run(np.atleast_2d(x))
    return bool(out[0]) if x.ndim == 1 else out

  # --------------------------------------------------------------------------
  # Sampling and enumeration

  def sample(self, num, seed=0):
    """`num` sentences uniform over the valid strings of length n: int64 [num, n]."""
    num = _check_count("num", num)
    rng = np.random.default_rng(seed)
    n, k = self.length, self.num_types
    out = np.zeros((num, n), np.int64)
    depth = np.zeros(num, np.int64)
    stack = np.zeros((num, n + 1), np.int64)
    rows = np.arange(num)
    for i in range(n):
      r = n - i
      opening = rng.random(num) < self._p_open[r, depth + self._off]
      typ = rng.integers(0, k, num)
      if self.nested:
        top = stack[rows, np.maximum(depth - 1, 0)]
        typ = np.where(opening, typ, top)
        stack[rows, np.minimum(depth, n)] = np.where(opening, typ,
                                                     stack[rows, np.minimum(depth, n)])
      out[:, i] = 2 * typ + np.where(opening, 0, 1)
      depth = depth + np.where(opening, 1, -1)
    return out

  def all_sentences(self):
    """Every valid sentence, lexicographic by token id: int64 [num_sentences, n]."""
    if self.num_sentences > MAX_ENUMERATE:
      raise ValueError(f"{self!r} has {self.num_sentences} sentences, more than "
                       f"MAX_ENUMERATE={MAX_ENUMERATE}; use sample() instead")
    n, v = self.length, self.vocab_size
    pref = np.zeros((1, 0), np.int64)
    for i in range(n):
      # Prefix-major with the new token last: stays lexicographic.
      cand = np.concatenate([np.repeat(pref, v, 0),
                             np.tile(np.arange(v), len(pref))[:, None]], 1)
      ok, state = self._scan(cand)
      pref = cand[ok & self._has[n - i - 1, state + self._off]]
    return pref

  # --------------------------------------------------------------------------
  # Masked-LM data

  def mask(self, sentences, positions):
    """Copies of `sentences` [B, n] with token `positions[b]` replaced by the mask."""
    x = self.check_tokens(sentences, name="sentences")
    x2 = np.atleast_2d(x).copy()
    p = self._check_positions(positions, len(x2))
    x2[np.arange(len(x2)), p] = self.mask_id
    return x2 if x.ndim == 2 else x2[0]

  def _check_positions(self, positions, batch):
    p = np.atleast_1d(np.asarray(positions))
    if p.dtype == bool or not np.issubdtype(p.dtype, np.integer):
      raise ValueError(f"positions must be integers, got dtype {p.dtype}")
    if p.shape != (batch,):
      raise ValueError(f"positions must have shape [{batch}] (one per sentence), got {p.shape}")
    bad = np.nonzero((p < 0) | (p >= self.length))[0]
    if len(bad):
      raise ValueError(f"position {int(p[bad[0]])} is out of range 0..{self.length - 1}")
    return p.astype(np.int64)

  def sample_masked(self, num, seed=0):
    """The pre-training distribution: (masked [num, n], positions [num], targets [num]).

    A sentence uniform over the valid ones, one position uniform over 0..n-1
    replaced by the mask; `targets` is the token that was there.
    """
    x = self.sample(num, seed)
    pos = np.random.default_rng([seed, 1]).integers(0, self.length, _check_count("num", num))
    return self.mask(x, pos), pos, x[np.arange(len(x)), pos]

  def all_masked(self):
    """Every (sentence, position) pair, each of equal probability under the pre-training
    distribution: (masked [N n, n], positions [N n], targets [N n]), sentence-major."""
    x = self.all_sentences()
    reps = np.repeat(x, self.length, 0)
    pos = np.tile(np.arange(self.length), len(x))
    return self.mask(reps, pos), pos, reps[np.arange(len(reps)), pos]

  def mlm_conditional_batch(self, tokens, positions):
    """Exact p(x_i = c | x_-i) for each row: float64 [B, 2k].

    Counts the valid sentences that agree with the row off position i, one per
    candidate c (the token at i is ignored: the mask or any bracket). A row
    with no valid filling, or with a mask anywhere else, is a ValueError.
    """
    x = np.atleast_2d(self.check_tokens(tokens, allow_mask=True))
    p = self._check_positions(positions, len(x))
    rows = np.arange(len(x))
    other = x.copy()
    other[rows, p] = 0
    bad = np.nonzero((other == self.mask_id).any(1))[0]
    if len(bad):
      raise ValueError(f"row {int(bad[0])} has a mask outside position {int(p[bad[0]])}; "
                       f"one masked token per sentence is supported")
    counts = np.zeros((len(x), self.vocab_size))
    for c in range(self.vocab_size):
      filled = other.copy()
      filled[rows, p] = c
      counts[:, c] = self._run(filled)
    tot = counts.sum(1)
    bad = np.nonzero(tot == 0)[0]
    if len(bad):
      raise ValueError(f"row {int(bad[0])}: no token at position {int(p[bad[0]])} makes a "
                       f"valid sentence of {self!r}")
    return counts / tot[:, None]

  def mlm_conditional(self, tokens, position):
    """Exact p(x_position = c | the other tokens) of one sentence: float64 [2k]."""
    x = self.check_tokens(tokens, allow_mask=True)
    if x.ndim != 1:
      raise ValueError(f"tokens must be one sentence [n]; use mlm_conditional_batch for "
                       f"[B, n], got shape {x.shape}")
    return self.mlm_conditional_batch(x[None], np.array([position]))[0]

  # --------------------------------------------------------------------------
  # Downstream data

  def downstream_sample(self, num, seed=0):
    """The paper's downstream inputs: [num, n] i.i.d. uniform bracket tokens (valid or not)."""
    num = _check_count("num", num)
    return np.random.default_rng(seed).integers(0, self.vocab_size, (num, self.length))

  def mismatches(self, tokens, prefix_len=None):
    """`mismatches` with this language's token ids (tokens must have length n)."""
    x = self.check_tokens(tokens, allow_mask=True)
    return mismatches(x, prefix_len, self.num_types)

  def all_downstream(self):
    """Every string of n bracket tokens (the downstream distribution is uniform on them)."""
    if self.vocab_size ** self.length > MAX_ENUMERATE:
      raise ValueError(f"{self.vocab_size}^{self.length} strings exceed "
                       f"MAX_ENUMERATE={MAX_ENUMERATE}; use downstream_sample() instead")
    return np.array(list(itertools.product(range(self.vocab_size), repeat=self.length)),
                    np.int64).reshape(-1, self.length)


def mismatches(tokens, prefix_len=None, num_types=1):
  """The downstream label tau (eq. (2) as read here): #opening - #closing brackets among
  the first `prefix_len` tokens (default all); the mask token counts 0.

  Token ids follow `Language(..., num_types)`: 2t opens and 2t + 1 closes type t,
  2 num_types is the mask. Returns int64 [B] for [B, n] tokens, an int for [n].
  """
  if isinstance(num_types, bool) or num_types not in (1, 2):
    raise ValueError(f"num_types must be 1 or 2, got {num_types!r}")
  x = np.asarray(tokens)
  if x.dtype == bool or not np.issubdtype(x.dtype, np.integer):
    raise ValueError(f"tokens must be integer token ids, got dtype {x.dtype}")
  if x.ndim not in (1, 2) or x.shape[-1] < 1:
    raise ValueError(f"tokens must have shape [n] or [B, n] with n >= 1, got {x.shape}")
  mask_id = 2 * num_types
  bad = np.argwhere((x < 0) | (x > mask_id))
  if len(bad):
    i = tuple(int(j) for j in bad[0])
    raise ValueError(f"tokens{list(i)} = {int(x[i])} is not a token id; allowed: "
                     f"0..{mask_id} (brackets 0..{mask_id - 1}, mask {mask_id})")
  n = x.shape[-1]
  l = n if prefix_len is None else _check_count("prefix_len", prefix_len)
  if l > n:
    raise ValueError(f"prefix_len must be <= the sequence length {n}, got {l}")
  x = x[..., :l]
  sign = np.where(x == mask_id, 0, np.where(x % 2 == 0, 1, -1))
  out = sign.sum(-1).astype(np.int64)
  return int(out) if x.ndim == 1 else out


def catalan(m):
  """The m-th Catalan number (exact)."""
  return math.comb(2 * m, m) // (m + 1)
