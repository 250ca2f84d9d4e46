"""NTP data: m distinct contexts with embeddings, next-token distributions, frequencies.

Conventions (seed 003): `H` is `[m, d]` (row j is the embedding h_j of context
j), `P` is `[m, V]` (row j is the next-token distribution p_j, zero outside its
support S_j), `pi` is `[m]` (context frequencies, summing to 1). The decoder
`W` is `[V, d]`, so the logits of context j are `W @ h_j`.

Three ways in: `from_arrays` (validate your own arrays), `from_sequences`
(count distinct contexts of a given length in token sequences and embed them
with any function you pass) and `random_instance` / `fig1_instance` (the
paper's synthetic settings).
"""
import collections
import dataclasses
from typing import Callable, Optional, Sequence

import numpy as np

# Rows of P must sum to 1 within this tolerance (float64 counts are exact to
# ~1e-15; this leaves room for float32 inputs).
ROW_SUM_ATOL = 1e-6


@dataclasses.dataclass(frozen=True)
class NTPData:
  """A validated NTP instance (float64 NumPy arrays).

  Attributes:
    H: `[m, d]` context embeddings.
    P: `[m, V]` next-token distributions (rows sum to 1).
    pi: `[m]` context frequencies (sum to 1).
    contexts: optional `[m, n]` token ids of each context (from sequences).
    vocab: optional list of V token strings.
  """
  H: np.ndarray
  P: np.ndarray
  pi: np.ndarray
  contexts: Optional[np.ndarray] = None
  vocab: Optional[Sequence[str]] = None

  @property
  def m(self):
    return self.H.shape[0]

  @property
  def d(self):
    return self.H.shape[1]

  @property
  def V(self):
    return self.P.shape[1]

  @property
  def support(self):
    """`[m, V]` boolean mask of S_j."""
    return self.P > 0


def validate(H, P, pi=None):
  """Checks shapes and values; returns float64 (H, P, pi) with pi uniform if None.

  Raises ValueError naming the offending row or dimension, because a silently
  renormalised or broadcast input would make every downstream certificate
  meaningless. P and pi are checked by `validate_distributions`.
  """
  H = np.asarray(H, dtype=np.float64)
  P = np.asarray(P, dtype=np.float64)
  if H.ndim != 2:
    raise ValueError(f"H must be [m, d]; got shape {H.shape}")
  if P.ndim != 2:
    raise ValueError(f"P must be [m, V]; got shape {P.shape}")
  m, d = H.shape
  if m == 0:
    raise ValueError("H has m = 0 contexts (dimension 0 of H)")
  if d == 0:
    raise ValueError("H has embedding dimension d = 0 (dimension 1 of H)")
  if P.shape[0] != m:
    raise ValueError(f"shape mismatch: H has m = {m} rows but P has {P.shape[0]} rows")
  bad = np.argwhere(~np.isfinite(H))
  if bad.size:
    raise ValueError(f"H has a non-finite entry at row {bad[0][0]}, column {bad[0][1]}")
  P, pi = validate_distributions(P, pi)
  return H, P, pi


def validate_distributions(P, pi=None):
  """Checks P (`[m, V]`, rows on the simplex) and pi (`[m]`, positive, summing to 1).

  Returns float64 (P, pi) with pi uniform if None; the part of `validate`
  that does not involve H (e.g. for `geometry.entropy`). Raises ValueError
  naming the offending row, entry or dimension.
  """
  P = np.asarray(P, dtype=np.float64)
  if P.ndim != 2:
    raise ValueError(f"P must be [m, V]; got shape {P.shape}")
  m = P.shape[0]
  if m == 0:
    raise ValueError("P has m = 0 contexts (dimension 0 of P)")
  if P.shape[1] == 0:
    raise ValueError("P has vocabulary size V = 0 (dimension 1 of P)")
  bad = np.argwhere(np.isnan(P))
  if bad.size:
    raise ValueError(f"P has a NaN entry at row {bad[0][0]}, column {bad[0][1]}")
  bad = np.argwhere(~np.isfinite(P) | (P < 0))
  if bad.size:
    j, v = bad[0]
    raise ValueError(f"P has a negative or infinite entry at row {j}, column {v}: {P[j, v]}")
  sums = P.sum(axis=1)
  bad = np.flatnonzero(np.abs(sums - 1.0) > ROW_SUM_ATOL)
  if bad.size:
    raise ValueError(f"row {bad[0]} of P sums to {sums[bad[0]]:.8g}, not 1"
                     f" ({bad.size} bad row(s) in all)")
  if pi is None:
    pi = np.full(m, 1.0 / m)
  else:
    pi = np.asarray(pi, dtype=np.float64)
    if pi.shape != (m,):
      raise ValueError(f"shape mismatch: pi must be [m] = [{m}]; got shape {pi.shape}")
    bad = np.flatnonzero(~np.isfinite(pi) | (pi <= 0))
    if bad.size:
      raise ValueError(f"pi[{bad[0]}] = {pi[bad[0]]} must be positive and finite")
    if abs(pi.sum() - 1.0) > ROW_SUM_ATOL:
      raise ValueError(f"pi sums to {pi.sum():.8g}, not 1")
  return P, pi


def from_arrays(H, P, pi=None, *, contexts=None, vocab=None):
  """Validated `NTPData` from user arrays (pi uniform if omitted)."""
  H, P, pi = validate(H, P, pi)
  return NTPData(H=H, P=P, pi=pi, contexts=contexts, vocab=vocab)


def count_contexts(sequences, n):
  """Distinct length-n contexts of token sequences and their next-token counts.

  Args:
    sequences: iterable of integer token sequences (contexts never cross a
      sequence boundary).
    n: context length (>= 1).

  Returns:
    contexts `[m, n]` int array (in order of first appearance) and counts
    `[m, V]` float array with V = 1 + the largest token id seen.
  """
  if n < 1:
    raise ValueError(f"context length n must be >= 1; got {n}")
  table = collections.OrderedDict()
  vmax = -1
  for seq in sequences:
    seq = [int(t) for t in seq]
    if seq:
      vmax = max(vmax, max(seq))
    for i in range(n, len(seq)):
      table.setdefault(tuple(seq[i - n:i]), collections.Counter())[seq[i]] += 1
  if not table:
    raise ValueError(f"no sequence is longer than the context length n = {n}")
  contexts = np.array(list(table.keys()), dtype=np.int64).reshape(len(table), n)
  counts = np.zeros((len(table), vmax + 1))
  for j, nxt in enumerate(table.values()):
    for v, c in nxt.items():
      counts[j, v] = c
  return contexts, counts


def from_sequences(sequences, n, embed: Callable[[np.ndarray], np.ndarray], *,
                   vocab_size=None, vocab=None, min_count=1, max_contexts=None):
  """NTP data from token sequences: empirical P and pi, embeddings from `embed`.

  Args:
    sequences: iterable of integer token sequences.
    n: context length.
    embed: maps the `[m, n]` int array of distinct contexts to `[m, d]`
      embeddings (one-hot, random, or a trained model's last layer).
    vocab_size: V (default: 1 + largest token id).
    vocab: optional token strings, kept for plots.
    min_count: keep only contexts seen at least this many times; small
      corpora have many singletons whose one-token support makes them
      trivially separable and inflates m.
    max_contexts: then keep only the `max_contexts` most frequent contexts
      (ties: first appearance first), still in order of first appearance;
      None keeps all.
  """
  contexts, counts = count_contexts(sequences, n)
  if vocab_size is not None:
    if vocab_size < counts.shape[1]:
      raise ValueError(f"vocab_size {vocab_size} < largest token id + 1 = {counts.shape[1]}")
    counts = np.pad(counts, ((0, 0), (0, vocab_size - counts.shape[1])))
  tot = counts.sum(axis=1)
  keep = tot >= min_count
  if not keep.any():
    raise ValueError(f"no context of length {n} occurs at least min_count = {min_count} times")
  contexts, counts, tot = contexts[keep], counts[keep], tot[keep]
  if max_contexts is not None:
    keep = np.sort(np.argsort(-tot, kind="stable")[:max_contexts])
    contexts, counts, tot = contexts[keep], counts[keep], tot[keep]
  H = np.asarray(embed(contexts), dtype=np.float64)
  if H.ndim != 2 or H.shape[0] != len(contexts):
    raise ValueError(f"embed must return [m, d] = [{len(contexts)}, d]; got shape {H.shape}")
  return from_arrays(H, counts / tot[:, None], tot / tot.sum(), contexts=contexts, vocab=vocab)


def one_hot_embedding(contexts):
  """Each distinct context gets its own basis vector (d = m): always separable."""
  return np.eye(len(contexts))


def random_embedding(d, seed=0):
  """Returns `embed` giving each distinct context an iid N(0, I/d) vector."""
  def embed(contexts):
    return np.random.default_rng(seed).normal(size=(len(contexts), d)) / np.sqrt(d)
  return embed


def token_concat_embedding(E):
  """Returns `embed` concatenating token vectors E[t] over the context (d = n * E.shape[1]).

  A stand-in for a model's last layer: contexts sharing tokens get correlated
  embeddings, unlike `random_embedding`.
  """
  E = np.asarray(E, dtype=np.float64)

  def embed(contexts):
    return E[contexts].reshape(len(contexts), -1)
  return embed


def random_instance(m, d, V, support_size, *, seed=0, n_samples=None, supports=None,
                    dirichlet=1.0):
  """A random NTP instance as in the paper's Fig. 1 and appendix.

  H ~ N(0, I) rows; each support S_j is a uniformly random `support_size`
  subset (unless `supports` gives them) and p_j ~ Dirichlet(`dirichlet`) on
  it, which reproduces the paper's reported entropies (E[H] = 1.45 for
  |S_j| = 6). pi is uniform, or the empirical frequencies of `n_samples`
  context draws (each context kept at least once).
  """
  if not 1 <= support_size <= V:
    raise ValueError(f"support_size must be in [1, V = {V}]; got {support_size}")
  if d < 1:
    raise ValueError(f"d must be >= 1; got d = {d}")
  rng = np.random.default_rng(seed)
  H = rng.normal(size=(m, d))
  P = np.zeros((m, V))
  for j in range(m):
    S = (np.asarray(supports[j]) if supports is not None
         else rng.choice(V, size=support_size, replace=False))
    P[j, S] = rng.dirichlet(np.full(len(S), dirichlet))
  if n_samples is None:
    pi = np.full(m, 1.0 / m)
  else:
    cnt = 1 + rng.multinomial(max(n_samples - m, 0), np.full(m, 1.0 / m))
    pi = cnt / cnt.sum()
  return from_arrays(H, P, pi)


# Fig. 1 supports: word 2 follows context 0 only, every other word follows two
# contexts (paper: "word 3 follows one context only; the others follow two").
FIG1_SUPPORTS = ((0, 1, 2), (0, 3, 4), (1, 3, 4))
# The sizes `fig1_instance` is fixed at (`el_jax.run.ntp_train.validate_config`
# refuses a fig1 config that asks for others).
FIG1_SIZES = dict(m=3, d=2, V=5, support_size=3)


def fig1_instance(seed=0):
  """The m=3, d=2, V=5, |S_j|=3 instance of the paper's Fig. 1 (our own draw)."""
  s = FIG1_SIZES
  return random_instance(s["m"], s["d"], s["V"], s["support_size"], seed=seed,
                         supports=FIG1_SUPPORTS)
