r"""Hidden Markov models with exact masked-LM conditionals (seed paper 002).

  python -m el_jax.core.data.hmm --num=10000 [--seed=0] [--hmm_seed=0] [--num_blocks=5]

The paper's HMM data (Sec. 3.2, App. A.1): vocabulary 200, 100 hidden states,
sentences of 16 tokens, transition and emission matrices "random
block-diagonal stochastic matrices"; downstream task-k classifies the k-th
hidden state. The authors did not publish their HMM code, so
`HMM.random_block_diagonal` fills the gaps as follows (assumptions):

  * the states are cut into `num_blocks` contiguous blocks of (nearly) equal
    size (`np.array_split`), and so is the vocabulary;
  * `trans[k, j]` is nonzero only when j is in k's block: i.i.d.
    Uniform(0, 1) weights, each row normalised (so a sentence never leaves
    the block of its first state);
  * `emit[k, v]` is nonzero only when v is in the vocabulary block of k's
    block: i.i.d. Uniform(0, 1) weights, rows normalised;
  * the initial distribution is uniform over all states.

The number of blocks is not given in the paper. It sets the entropy: a
sentence's words come from 200 / num_blocks words, so the optimal MLM loss is
about log(200 / num_blocks) minus a little. With 100 states, vocabulary 200
and length 16, 10^4 sentences give (per-sentence mean of -log p(x_t | x_-t)
over positions, nats; hmm_seed 0, seed 0):

  num_blocks    1      2      4      5      10
  mlm_entropy   5.297  4.602  3.905  3.682  2.978   (stderr 0.0001-0.0005)

(other hmm_seed values move these by ~0.001; Dirichlet(1) instead of
Uniform(0, 1) weights gives 3.893 and 3.661 for 4 and 5 blocks). The paper
reports 3.758 for its draw, between 4 and 5 blocks; the default is 5 (20
states and 40 words per block), the closer one. Sampling plus all
conditionals of 10^4 sentences takes ~0.6-0.8 s on the 2-core CPU.

What the default draw leaves to learn (`el_jax.core.data.downstream`,
task-10, 10^4 / 4,000 train / test sentences, hmm_seed 0): Uniform(0, 1)
rows over 20 states and 40 words are nearly flat, so the hidden state is
barely identifiable. The context beyond the block is worth 0.006 nats of
MLM loss (`hmm_context_value`: 3.6818 optimal vs 3.6877 for the block's word
frequencies), and task-10's Bayes accuracy is 10.6% against 5.5% for the
block's majority state; the cpu models learn the block and nothing else.
`trans_concentration` / `emit_concentration` > 0 draw Dirichlet rows
instead; 4 blocks with 0.1 / 0.4 (`--hmm=contextual` of
experiments/mlm_flatness/) give an optimal loss of 3.765 (the paper's
3.758), a context worth 0.085 nats and a task-10 Bayes accuracy of 45%
(block majority 10%); with 0.1 / 0.1 (`--hmm=sharp`): 3.109, 0.603 nats and 82%
(block majority 10%; results/mlm_flatness/sharp/). The cpu encoders at GPT-2's
initialisation (std 0.02) learn the block and nothing more on all three; on `sharp` an
initialisation of std 0.1 takes them off it (docs/results/seed002_flatness.md).

Masked-LM conditionals: p(x_t = w | x_-t) is proportional to
sum_k pred_t(k) beta_t(k) emit[k, w], with pred_t(k) = p(z_t = k, x_<t)
(forward pass without the emission at t) and beta_t(k) = p(x_>t | z_t = k)
(backward pass); both are rescaled at every step against underflow.
"""
import argparse
import os
import sys
import time

if __name__ == "__main__":
  # One BLAS thread for the CLI (before NumPy loads OpenBLAS): the matmuls here
  # are small ([256, 100] @ [100, 100]) and two threads ran them 1.5-4x slower
  # on the shared 2-core machine. Set OPENBLAS_NUM_THREADS to override.
  os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

_TOL = 1e-6


def _check_stochastic(name, m):
  if not np.all(np.isfinite(m)):
    raise ValueError(f"{name} has non-finite entries")
  if np.any(m < 0):
    idx = tuple(int(i) for i in np.argwhere(m < 0)[0])
    raise ValueError(f"{name} has a negative entry at {idx}: {m[idx]}")
  sums = m.sum(-1)
  bad = np.nonzero(np.abs(sums - 1.0) > _TOL)[0] if m.ndim == 2 else (
      [0] if abs(sums - 1.0) > _TOL else [])
  if len(bad):
    where = f"row {int(bad[0])} of {name}" if m.ndim == 2 else name
    s = sums[bad[0]] if m.ndim == 2 else sums
    raise ValueError(f"{where} sums to {float(s):.9g}, not 1 (tolerance {_TOL:g})")


class HMM:
  """A discrete HMM: z_0 ~ init, z_t ~ trans[z_{t-1}], x_t ~ emit[z_t].

  Args:
    init: [K] initial state distribution.
    trans: [K, K] transition matrix, rows sum to 1.
    emit: [K, V] emission matrix, rows sum to 1.
  """

  def __init__(self, init, trans, emit):
    init, trans, emit = (np.asarray(x, np.float64) for x in (init, trans, emit))
    if init.ndim != 1:
      raise ValueError(f"init must be 1-D [K], got shape {init.shape}")
    k = init.shape[0]
    if trans.shape != (k, k):
      raise ValueError(f"trans must have shape [K, K] = {(k, k)}, got {trans.shape}")
    if emit.ndim != 2 or emit.shape[0] != k:
      raise ValueError(f"emit must have shape [K={k}, V], got {emit.shape}")
    for name, m in (("init", init), ("trans", trans), ("emit", emit)):
      _check_stochastic(name, m)
    self.init, self.trans, self.emit = init, trans, emit

  @property
  def num_states(self):
    return self.init.shape[0]

  @property
  def vocab_size(self):
    return self.emit.shape[1]

  @classmethod
  def random_block_diagonal(cls, num_states=100, vocab_size=200, num_blocks=5, seed=0,
                            trans_concentration=0.0, emit_concentration=0.0):
    """The paper's random block-diagonal HMM (assumptions in the module docstring).

    State block b = `np.array_split(range(num_states), num_blocks)[b]` only
    moves within itself and only emits words of vocabulary block b (same
    split of range(vocab_size)).

    `trans_concentration` / `emit_concentration`: 0 (default) draws each
    in-block weight Uniform(0, 1) (the draw every committed result used); a
    value a > 0 draws Gamma(a, 1) weights instead, i.e. each row is
    Dirichlet(a, ..., a) over its block: a < 1 gives peaked rows, so the
    hidden state is identifiable from the context (see `state_posteriors_batch`).
    """
    if not 1 <= num_blocks <= min(num_states, vocab_size):
      raise ValueError(f"num_blocks must be in 1..min(num_states, vocab_size) = "
                       f"{min(num_states, vocab_size)}, got {num_blocks}")
    for name, a in (("trans_concentration", trans_concentration),
                    ("emit_concentration", emit_concentration)):
      if not (np.isfinite(a) and a >= 0):
        raise ValueError(f"{name}={a} must be a finite number >= 0 (0 = Uniform(0, 1) weights)")
    rng = np.random.default_rng(seed)
    sb, vb = cls.block_of_state(num_states, num_blocks), cls.block_of_state(vocab_size, num_blocks)

    def weights(shape, a):
      return rng.random(shape) if a == 0 else rng.gamma(float(a), size=shape)
    trans = weights((num_states, num_states), trans_concentration) * (sb[:, None] == sb[None, :])
    emit = weights((num_states, vocab_size), emit_concentration) * (sb[:, None] == vb[None, :])
    if np.any(trans.sum(1) == 0) or np.any(emit.sum(1) == 0):  # Gamma(a) underflow, tiny a
      raise ValueError("a row of Gamma weights underflowed to 0; use a larger concentration")
    trans /= trans.sum(1, keepdims=True)
    emit /= emit.sum(1, keepdims=True)
    return cls(np.full(num_states, 1.0 / num_states), trans, emit)

  @staticmethod
  def block_of_state(size, num_blocks):
    """[size] block index of each state (or word) under `np.array_split`."""
    return np.concatenate([np.full(len(p), b) for b, p in
                           enumerate(np.array_split(np.arange(size), num_blocks))])

  def _check_tokens(self, tokens, allow_mask=False):
    tokens = np.asarray(tokens)
    if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
      raise ValueError(f"token ids must be integers, got dtype {tokens.dtype}")
    tokens = tokens.astype(np.int64)
    bad = tokens[(tokens < (-1 if allow_mask else 0)) | (tokens >= self.vocab_size)]
    if bad.size:
      raise ValueError(f"token id {int(bad[0])} is out of range for vocabulary size "
                       f"{self.vocab_size} (ids 0..{self.vocab_size - 1})")
    if tokens.shape[-1] == 0:
      raise ValueError("sentences must have at least one token")
    return tokens

  def sample(self, num, length, seed):
    """(tokens [num, length] int32, states [num, length] int32), deterministic in seed."""
    if num < 0 or length < 1:
      raise ValueError(f"need num >= 0 and length >= 1, got {num}, {length}")
    rng = np.random.default_rng(seed)
    k = self.num_states

    def draw(cum_rows):  # inverse CDF, one uniform per row
      u = rng.random(cum_rows.shape[0])
      return np.minimum((cum_rows < u[:, None]).sum(1), cum_rows.shape[1] - 1)
    cum_t, cum_e = np.cumsum(self.trans, 1), np.cumsum(self.emit, 1)
    states = np.empty((num, length), np.int32)
    tokens = np.empty((num, length), np.int32)
    states[:, 0] = draw(np.broadcast_to(np.cumsum(self.init), (num, k)))
    for t in range(length):
      if t:
        states[:, t] = draw(cum_t[states[:, t - 1]])
      tokens[:, t] = draw(cum_e[states[:, t]])
    return tokens, states

  def _forward_backward(self, tokens_BxT):
    """(pred [B, T, K], back [B, T, K], log p [B]); -1 tokens are wildcards.

    pred[:, t] is proportional to p(z_t, x_<t) and back[:, t] to
    p(x_>t | z_t), each rescaled per step; log p is exact.
    """
    b, t = tokens_BxT.shape
    k = self.num_states
    e = np.where((tokens_BxT < 0)[..., None], 1.0,
                 self.emit.T[np.maximum(tokens_BxT, 0)])  # [B, T, K]
    pred, back = np.empty((b, t, k)), np.empty((b, t, k))
    log_p = np.zeros(b)
    p = np.broadcast_to(self.init, (b, k))
    for i in range(t):
      pred[:, i] = p
      a = p * e[:, i]
      c = a.sum(1)
      with np.errstate(divide="ignore"):
        log_p += np.log(c)
      a /= np.where(c > 0, c, 1.0)[:, None]
      p = a @ self.trans
    back[:, t - 1] = 1.0
    for i in range(t - 2, -1, -1):
      bk = (e[:, i + 1] * back[:, i + 1]) @ self.trans.T
      back[:, i] = bk / np.maximum(bk.max(1, keepdims=True), 1e-300)
    return pred, back, log_p

  def log_prob(self, tokens):
    """log p(x) by the scaled forward algorithm (-inf if impossible)."""
    return float(self.log_prob_batch(np.asarray(tokens).reshape(1, -1))[0])

  def log_prob_batch(self, tokens_NxT):
    return self._forward_backward(self._check_tokens(np.atleast_2d(tokens_NxT)))[2]

  def _conditionals(self, tok):
    pred, back, _ = self._forward_backward(tok)
    num = (pred * back) @ self.emit  # [B, T, V]
    with np.errstate(invalid="ignore", divide="ignore"):
      return num / num.sum(-1, keepdims=True)

  def mlm_conditional(self, tokens, position):
    """[V] p(x_position = w | the other tokens): forward-backward with a wildcard there."""
    tok = self._check_tokens(tokens).reshape(1, -1).copy()
    if not 0 <= position < tok.shape[1]:
      raise ValueError(f"position {position} out of range for length {tok.shape[1]}")
    tok[0, position] = -1
    return self._conditionals(tok)[0, position]

  def mlm_conditionals_all(self, tokens):
    """[T, V]: the conditional at every position from one forward-backward pass."""
    return self._conditionals(self._check_tokens(tokens).reshape(1, -1))[0]

  def mlm_conditionals_batch(self, tokens_NxT, chunk=256):
    """[N, T, V] conditionals of a whole data set (NaN rows for impossible contexts)."""
    tok = self._check_tokens(np.atleast_2d(tokens_NxT))
    return np.concatenate([self._conditionals(tok[i:i + chunk])
                           for i in range(0, tok.shape[0], chunk)])

  def state_posteriors_batch(self, tokens_NxT, chunk=256):
    """[N, T, K] posterior p(z_t = k | x) of every hidden state given the whole sentence.

    Forward-backward: p(z_t, x) is proportional to pred_t(k) emit[k, x_t] beta_t(k)
    (`_forward_backward`), normalised over k. Its argmax at position t is the
    Bayes classifier of HMM task-(t + 1) (`el_jax.core.data.downstream.bayes_accuracy`).
    NaN rows for impossible sentences.
    """
    tok = self._check_tokens(np.atleast_2d(tokens_NxT))
    out = []
    for i in range(0, tok.shape[0], chunk):
      part = tok[i:i + chunk]
      pred, back, _ = self._forward_backward(part)
      e = self.emit.T[part]  # [B, T, K]
      joint = pred * e * back
      with np.errstate(invalid="ignore", divide="ignore"):
        out.append(joint / joint.sum(-1, keepdims=True))
    return np.concatenate(out)

  def mlm_losses(self, tokens_NxT, chunk=256):
    """(nll [N, T], ent [N, T]): -log p(x_t | x_-t) and H(p(. | x_-t)) per token."""
    tok = self._check_tokens(np.atleast_2d(tokens_NxT))
    nll, ent = np.empty((2,) + tok.shape)
    for i in range(0, tok.shape[0], chunk):
      part = tok[i:i + chunk]
      cond = self._conditionals(part)
      with np.errstate(divide="ignore", invalid="ignore"):
        nll[i:i + chunk] = -np.log(np.take_along_axis(cond, part[..., None], -1)[..., 0])
        ent[i:i + chunk] = -np.sum(np.where(cond > 0, cond * np.log(cond), 0.0), -1)
    return nll, ent


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
  parser = _Parser(prog="python -m el_jax.core.data.hmm",
                   description="Optimal one-masked-token MLM loss of a random block-diagonal HMM.")
  parser.add_argument("--num", type=int, default=10000, help="sentences to sample")
  parser.add_argument("--seed", type=int, default=0, help="sentence sampling seed")
  parser.add_argument("--hmm_seed", type=int, default=0, help="seed of the random matrices")
  parser.add_argument("--num_blocks", type=int, default=5, help="diagonal blocks")
  parser.add_argument("--num_states", type=int, default=100, help="hidden states")
  parser.add_argument("--vocab_size", type=int, default=200, help="words")
  parser.add_argument("--length", type=int, default=16, help="sentence length")
  args = parser.parse_args(argv)
  if args.num < 2 or args.length < 1:
    parser.error(f"need --num >= 2 and --length >= 1, got {args.num}, {args.length}")
  try:
    hmm = HMM.random_block_diagonal(args.num_states, args.vocab_size, args.num_blocks,
                                    seed=args.hmm_seed)
  except ValueError as e:
    parser.error(str(e))
  t0 = time.perf_counter()
  tokens, _ = hmm.sample(args.num, args.length, args.seed)
  nll, ent = hmm.mlm_losses(tokens)
  dt = time.perf_counter() - t0
  per_sent = nll.mean(1)
  print(f"HMM: {args.num_states} states, {args.vocab_size} words, {args.num_blocks} "
        f"blocks (hmm_seed {args.hmm_seed}); {args.num} sentences of {args.length} tokens "
        f"(seed {args.seed})")
  print("per-sentence value = exact average over the sentence's positions of "
        "-log p(x_t | x_-t) in nats (the expectation over a uniform masked position); "
        "stderr over sentences. All sentences have the same length, so the "
        "token-weighted mean is the same number.")
  print(f"entropy of the true conditional H(p(.|x_-t)): mean {ent.mean():.4f} "
        f"(stderr {ent.mean(1).std(ddof=1) / np.sqrt(args.num):.6f})")
  print(f"mlm_entropy={per_sent.mean():.6f} "
        f"stderr={per_sent.std(ddof=1) / np.sqrt(args.num):.6f} sentences_per_s={args.num / dt:.1f}")


if __name__ == "__main__":
  main()
