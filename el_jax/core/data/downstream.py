r"""Downstream data sets of seed paper 002: PCFG tasks A, B, C and HMM task-k.

  from el_jax.core.data import downstream, pcfg, hmm
  g = pcfg.PCFG.from_file(".../rule_deep_mlm.txt")
  data = downstream.pcfg_task(g, "B", num_train=10000, num_valid=2000, num_test=2000, seed=0)
  data.train.tokens, data.train.segment_ids, data.train.lengths, data.train.labels
  data.num_classes                                # 9 (task A) or 50 (tasks B, C)
  feats = downstream.lookup_table_features(g, data.train.tokens, data.train.lengths)

The paper (Sec. 3.2, App. A.1) classifies, from a sentence, the nonterminal
spanning a span of its parse (PCFG tasks A, B, C: 50-way) or the k-th hidden
state (HMM task-6, task-10), with 0.1M examples per task. What each piece
follows, and what we chose where the paper is silent:

  * PCFG: sentences are drawn from the grammar and kept if 4 < length < 32
    (the authors' `generate_downstream.py` rejection rule); the labels are
    `pcfg.task_labels` (task A: the S_i with the largest inside probability of
    the whole sentence, 9 classes; B / C: the nonterminal with the largest
    inside probability over the first 4 / 2 words, label = index in the sorted
    nonterminal list, 50 classes for the shared grammar including the start
    symbol S, which never occurs as a label). A sentence longer than `seq_len`
    is rejected too (it never happens for seq_len >= 31, nor with the shared
    grammar, which has at most 16 words, for seq_len >= 16).
  * HMM task-k: "the k-th hidden variable" read 1-based, as the paper words
    it ("task-6 and task-10 ... the 6-th and 10-th hidden variables"), so the
    label is `states[:, k - 1]` (k = 1..length). With 16 tokens, task-6 and
    task-10 are then positions 5 and 9 (0-based), both interior.
  * Splits (the paper gives no split sizes): train / valid / test are drawn
    independently, each from its own seed `split_seed(seed, split)`, so the
    test set does not change when the training set grows. Examples are not
    de-duplicated across splits (as i.i.d. draws from the language).
  * Token convention of the MLM models: words 0..V-1, MASK = V, PAD = V + 1,
    model vocabulary V + 2; sentences right-padded with PAD to `seq_len`;
    segment id 1 on real tokens, 0 on padding (the decoder's `doc_mask`).
  * The lookup-table baseline (Sec. 3.3, App. A.4): the exact MLM
    conditional p(x_t = . | x_-t) at every position, concatenated; zeros at
    padding positions.

Cache: the splits are stored as one npz file per argument set under
`$EL_JAX_CACHE/downstream` (or `~/.cache/el_jax/downstream`), named by a
SHA-256 of the arguments and of the grammar's rules or the HMM's matrices.
Files are written atomically (temp file + fsync + `os.replace`); a damaged or
mismatching file is rebuilt with a warning on stderr. `cache=False` turns
it off; `cache="<folder>"` uses that folder. Labels of tasks A-C need inside
passes (~1.3 s per 10^4 sentences for task A), so the cache mostly saves the
sampling + labelling at 10^5 examples.
"""
import dataclasses
import hashlib
import json
import os
import sys
import zipfile

import numpy as np

from el_jax.core import data
from el_jax.core.data import pcfg
from el_jax.infra import workdir as wd

SPLITS = ("train", "valid", "test")
_FORMAT = 1  # bump when the stored layout or the sampling changes
_MIN_LEN, _MAX_LEN = 4, 32  # the authors' rule: keep 4 < length < 32


@dataclasses.dataclass(frozen=True)
class Split:
  """One split: tokens [N, T] int32 (PAD-padded), segment_ids [N, T] int32
  (1 real, 0 padding), lengths [N] int32, labels [N] int32."""
  tokens: np.ndarray
  segment_ids: np.ndarray
  lengths: np.ndarray
  labels: np.ndarray

  def __len__(self):
    return int(self.labels.shape[0])


@dataclasses.dataclass(frozen=True)
class DownstreamData:
  """A downstream task: three splits plus what a model and a probe need.

  Attributes:
    name: e.g. "pcfg_B" or "hmm_task10".
    train, valid, test: `Split`s.
    num_classes: number of label values (labels are in [0, num_classes)).
    class_names: name of each label value.
    vocab_size: V, the number of words; MASK = V, PAD = V + 1.
    seq_len: T, the padded length.
  """
  name: str
  train: Split
  valid: Split
  test: Split
  num_classes: int
  class_names: tuple
  vocab_size: int
  seq_len: int

  @property
  def mask_id(self):
    return self.vocab_size

  @property
  def pad_id(self):
    return self.vocab_size + 1

  @property
  def model_vocab_size(self):
    return self.vocab_size + 2

  def split(self, name):
    if name not in SPLITS:
      raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
    return getattr(self, name)


def split_seed(seed, split):
  """The sampling seed of one split (and round): a stable 63-bit hash of (seed, split)."""
  h = hashlib.sha256(f"el_jax.downstream/{int(seed)}/{split}".encode()).digest()
  return int.from_bytes(h[:8], "little") >> 1


def pad_sentences(sentences, seq_len, pad_id):
  """(tokens [N, T] int32, segment_ids [N, T] int32, lengths [N] int32) from a list
  of 1-D token arrays, right-padded with `pad_id`."""
  n = len(sentences)
  tokens = np.full((n, seq_len), pad_id, np.int32)
  seg = np.zeros((n, seq_len), np.int32)
  lengths = np.array([len(s) for s in sentences], np.int32).reshape(n)
  if n and lengths.max() > seq_len:
    raise ValueError(f"a sentence has {int(lengths.max())} tokens, more than seq_len={seq_len}")
  for i, s in enumerate(sentences):
    tokens[i, :len(s)] = s
    seg[i, :len(s)] = 1
  return tokens, seg, lengths


def _check_sizes(num_train, num_valid, num_test):
  for name, n in (("num_train", num_train), ("num_valid", num_valid), ("num_test", num_test)):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
      raise ValueError(f"{name}={n!r} must be an integer >= 1")


# ---------------------------------------------------------------- cache
def cache_dir(cache=True):
  """The cache folder for `cache` (True: $EL_JAX_CACHE/downstream or
  ~/.cache/el_jax/downstream; a string: that folder), or None (cache off)."""
  if cache is False or cache is None:
    return None
  if isinstance(cache, (str, os.PathLike)):
    return os.fspath(cache)
  return data.cache_dir("downstream")


def _key(kind, args, fingerprint):
  blob = json.dumps({"format": _FORMAT, "kind": kind, "args": args, "lang": fingerprint},
                    sort_keys=True)
  return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _pcfg_fingerprint(g):
  rules = sorted((lhs, tuple(rhs), float(p).hex()) for lhs, rhs, p in g.rules())
  return hashlib.sha256(repr((g.start, rules)).encode()).hexdigest()


def _hmm_fingerprint(h):
  m = hashlib.sha256()
  for a in (h.init, h.trans, h.emit):
    a = np.ascontiguousarray(a, np.float64)
    m.update(repr(a.shape).encode())
    m.update(a.tobytes())
  return m.hexdigest()


def _to_arrays(data, key):
  out = {"key": np.array(key), "name": np.array(data.name),
         "num_classes": np.array(data.num_classes), "vocab_size": np.array(data.vocab_size),
         "seq_len": np.array(data.seq_len), "class_names": np.array(list(data.class_names))}
  for s in SPLITS:
    for f in dataclasses.fields(Split):
      out[f"{s}/{f.name}"] = getattr(data.split(s), f.name)
  return out


def _from_arrays(z, key):
  if str(z["key"]) != key:
    raise ValueError(f"it holds key {str(z['key'])!r}, not {key!r}")
  splits = {s: Split(**{f.name: np.asarray(z[f"{s}/{f.name}"]) for f in dataclasses.fields(Split)})
            for s in SPLITS}
  data = DownstreamData(name=str(z["name"]), num_classes=int(z["num_classes"]),
                        class_names=tuple(str(c) for c in z["class_names"]),
                        vocab_size=int(z["vocab_size"]), seq_len=int(z["seq_len"]), **splits)
  for s in SPLITS:
    sp = data.split(s)
    n, t = sp.tokens.shape
    if (sp.segment_ids.shape != (n, t) or sp.lengths.shape != (n,) or sp.labels.shape != (n,)
        or t != data.seq_len):
      raise ValueError(f"split {s} has inconsistent shapes")
  return data


def _save_npz(path, arrays):
  """np.savez to `path` atomically (`el_jax.infra.workdir.atomic_open`)."""
  with wd.atomic_open(path, binary=True) as f:
    np.savez(f, **arrays)


def _cached(kind, args, fingerprint, cache, build):
  """`build()` or its cached result; a damaged cache file is rebuilt with a warning."""
  folder = cache_dir(cache)
  if folder is None:
    return build()
  key = _key(kind, args, fingerprint)
  path = os.path.join(folder, f"{kind}_{key}.npz")
  if os.path.exists(path):
    try:
      with np.load(path, allow_pickle=False) as z:
        return _from_arrays(z, key)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
      print(f"warning: downstream cache file {path} is damaged ({type(e).__name__}: {e}); "
            f"rebuilding it", file=sys.stderr)
  data = build()
  try:
    _save_npz(path, _to_arrays(data, key))
  except OSError as e:  # a read-only cache must not stop an experiment
    print(f"warning: could not write the downstream cache file {path} ({e}); "
          f"continuing without it", file=sys.stderr)
  return data


# ----------------------------------------------------------------- PCFG
def _sample_pcfg_split(g, task, num, seed, split, seq_len):
  """`num` sentences with 4 < length < min(32, seq_len + 1), with their labels."""
  max_len = min(_MAX_LEN, seq_len + 1)
  kept, rnd = [], 0
  while len(kept) < num:
    need = num - len(kept)
    draw = g.sample(int(need * 1.25) + 16, split_seed(seed, f"{split}/{rnd}"), max_len=max_len)
    kept.extend(s for s in draw if _MIN_LEN < len(s) < max_len)
    rnd += 1
    if rnd > 50 and not kept:
      raise ValueError(f"the grammar yields no sentence with {_MIN_LEN} < length < {max_len}")
  kept = kept[:num]
  sentences, labels, names = pcfg.task_labels(g, kept, task)
  assert len(sentences) == num
  return sentences, labels, names


def pcfg_task(g, task, num_train=80000, num_valid=10000, num_test=10000, seed=0, seq_len=32,
              cache=True):
  """PCFG downstream task "A", "B" or "C" (labels of `pcfg.task_labels`).

  Args:
    g: a `pcfg.PCFG`.
    task: "A" (9 classes for the shared grammar), "B" or "C" (all nonterminals).
    num_train, num_valid, num_test: examples per split. Default 80k / 10k / 10k,
      the paper's 0.1M examples per task (the split is our choice).
    seed: data seed; each split uses `split_seed(seed, split)`.
    seq_len: padded length T; sentences keep 4 < length < min(32, seq_len + 1).
    cache: True (default folder), False, or a folder (see the module docstring).

  Returns:
    a `DownstreamData`; tokens are word ids 0..V-1 padded with PAD = V + 1.
  """
  if task not in ("A", "B", "C"):
    raise ValueError(f"task must be 'A', 'B' or 'C', got {task!r}")
  _check_sizes(num_train, num_valid, num_test)
  if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len <= _MIN_LEN:
    raise ValueError(f"seq_len={seq_len!r} must be an integer > {_MIN_LEN} (sentences have "
                     f"more than {_MIN_LEN} words)")
  sizes = {"train": int(num_train), "valid": int(num_valid), "test": int(num_test)}
  args = dict(task=task, sizes=sizes, seed=int(seed), seq_len=int(seq_len))

  def build():
    pad = g.vocab_size + 1
    splits, names = {}, None
    for s in SPLITS:
      sents, labels, names = _sample_pcfg_split(g, task, sizes[s], seed, s, seq_len)
      tok, seg, lengths = pad_sentences(sents, seq_len, pad)
      splits[s] = Split(tok, seg, lengths, labels.astype(np.int32))
    return DownstreamData(name=f"pcfg_{task}", num_classes=len(names),
                          class_names=tuple(names), vocab_size=g.vocab_size,
                          seq_len=int(seq_len), **splits)
  return _cached("pcfg", args, _pcfg_fingerprint(g), cache, build)


# ------------------------------------------------------------------ HMM
def hmm_task(h, k, num_train=80000, num_valid=10000, num_test=10000, seed=0, length=16,
             seq_len=None, cache=True):
  """HMM task-k: label = the k-th hidden state, 1-based (`states[:, k - 1]`).

  Args:
    h: an `hmm.HMM`.
    k: 1..length (the paper's task-6 and task-10: k = 6, 10).
    num_train, num_valid, num_test, seed, cache: as in `pcfg_task`; split s is
      `h.sample(num_s, length, split_seed(seed, s))`.
    length: sentence length (16 in the paper).
    seq_len: padded length T (default: `length`, no padding).

  Returns:
    a `DownstreamData` with num_classes = h.num_states.
  """
  _check_sizes(num_train, num_valid, num_test)
  if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
    raise ValueError(f"length={length!r} must be an integer >= 1")
  seq_len = length if seq_len is None else seq_len
  if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < length:
    raise ValueError(f"seq_len={seq_len!r} must be an integer >= length={length}")
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= length:
    raise ValueError(f"k={k!r} must be an integer in 1..length={length} (task-k is the "
                     f"k-th hidden state, 1-based)")
  sizes = {"train": int(num_train), "valid": int(num_valid), "test": int(num_test)}
  args = dict(k=int(k), sizes=sizes, seed=int(seed), length=int(length), seq_len=int(seq_len))

  def build():
    pad = h.vocab_size + 1
    splits = {}
    for s in SPLITS:
      tokens, states = h.sample(sizes[s], length, split_seed(seed, s))
      tok = np.full((sizes[s], seq_len), pad, np.int32)
      tok[:, :length] = tokens
      seg = np.zeros_like(tok)
      seg[:, :length] = 1
      splits[s] = Split(tok, seg, np.full(sizes[s], length, np.int32),
                        states[:, k - 1].astype(np.int32))
    return DownstreamData(name=f"hmm_task{k}", num_classes=h.num_states,
                          class_names=tuple(f"state_{i}" for i in range(h.num_states)),
                          vocab_size=h.vocab_size, seq_len=int(seq_len), **splits)
  return _cached("hmm", args, _hmm_fingerprint(h), cache, build)


# ---------------------------------------------------------- lookup table
def _checked_tokens(tokens, lengths):
  """(tokens [N, T], lengths [N]) as arrays, N >= 1 and integer lengths in 1..T; ValueError
  saying which is wrong otherwise (the features below share it)."""
  tokens = np.asarray(tokens)
  lengths = np.asarray(lengths)
  if tokens.ndim != 2:
    raise ValueError(f"tokens must be [N, T], got shape {tokens.shape}")
  n, t = tokens.shape
  if lengths.shape != (n,):
    raise ValueError(f"lengths must have shape [N]=({n},), got {lengths.shape}")
  if n == 0:
    raise ValueError("tokens is empty (N = 0)")
  if not np.issubdtype(lengths.dtype, np.integer) or lengths.min() < 1 or lengths.max() > t:
    raise ValueError(f"lengths must be integers in 1..T={t}, got min {lengths.min()}, "
                     f"max {lengths.max()}")
  return tokens, lengths


def lookup_table_features(lang, tokens, lengths):
  """The paper's lookup-table representation: [N, T * V] float32.

  Row i is the concatenation over positions t = 0..T-1 of the exact masked-LM
  conditional p(x_t = . | x_-t) of sentence i under `lang` (a `pcfg.PCFG` or
  an `hmm.HMM`, via `lang.mlm_conditionals_batch`); zeros at t >= lengths[i].
  This model has the optimal pre-training loss by construction (the paper
  probes it "without explicitly constructing" the transformer). Memory is
  N * T * V * 4 bytes (2.6 GB at N = 10^5, T = 32, V = 200).

  Raises ValueError on shape mismatches, out-of-range tokens inside the real
  length, or a sentence of probability 0 under `lang` (no conditional exists).
  """
  tokens, lengths = _checked_tokens(tokens, lengths)
  n, t = tokens.shape
  v = lang.vocab_size
  out = np.zeros((n, t, v), np.float32)
  for length in np.unique(lengths):
    idx = np.nonzero(lengths == length)[0]
    cond = np.asarray(lang.mlm_conditionals_batch(tokens[idx, :length]))
    cond = cond.reshape(idx.size, int(length), v)
    if not np.all(np.isfinite(cond)):
      bad = idx[np.nonzero(~np.isfinite(cond).all((1, 2)))[0][0]]
      raise ValueError(f"sentence {int(bad)} has probability 0 under the language; its "
                       f"masked-LM conditionals are undefined")
    out[idx, :length] = cond
  return out.reshape(n, t * v)


def word_features(vocab_size, tokens, lengths):
  """The words themselves as a representation: [N, T * V] float32, the concatenation over
  positions t = 0..T-1 of the one-hot of word x_t (V = `vocab_size` words); zeros at
  t >= lengths[i]. A linear probe on it reads each position's word and nothing of how the
  words combine: what an encoder that passes its embeddings through unchanged can offer, and
  the row that says how much of a task a random initialisation keeps by keeping the words.
  Raises ValueError on shape mismatches or a word outside 0..V-1 inside the real length."""
  tokens, lengths = _checked_tokens(tokens, lengths)
  n, t = tokens.shape
  real = np.arange(t)[None, :] < lengths[:, None]
  if np.any((tokens < 0) & real) or np.any((tokens >= vocab_size) & real):
    raise ValueError(f"a word inside the real length is outside 0..{vocab_size - 1}")
  out = np.zeros((n, t, vocab_size), np.float32)
  rows, cols = np.nonzero(real)
  out[rows, cols, tokens[rows, cols]] = 1.0
  return out.reshape(n, t * vocab_size)


# ------------------------------------------------------- Bayes accuracy
def bayes_predictions(lang, data, split="test"):
  """[N] the Bayes classifier's labels for `split` of a downstream task `data` of `lang`.

  HMM task-k (`data.name` "hmm_task<k>"): argmax_z p(z_k = z | the whole sentence), from
  forward-backward (`hmm.HMM.state_posteriors_batch`) -- the best any classifier of the
  sentence can do, in expectation. PCFG tasks A, B, C: the label is a deterministic
  function of the sentence (the argmax of inside scores, `pcfg.task_labels`), so the
  inside algorithm recomputes it and the Bayes accuracy is 1.
  """
  sp = data.split(split)
  if data.name.startswith("hmm_task"):
    k = int(data.name[len("hmm_task"):])
    length = int(sp.lengths[0])
    if np.any(sp.lengths != length):
      raise ValueError("HMM task splits have one sentence length")
    post = lang.state_posteriors_batch(sp.tokens[:, :length])
    return np.argmax(post[:, k - 1], -1).astype(np.int32)
  if data.name.startswith("pcfg_"):
    task = data.name[len("pcfg_"):]
    sents = [sp.tokens[i, :sp.lengths[i]] for i in range(len(sp))]
    kept, labels, _ = pcfg.task_labels(lang, sents, task)
    if len(kept) != len(sents):
      raise ValueError("a sentence of the split is outside 4 < length < 32")
    return labels.astype(np.int32)
  raise ValueError(f"no Bayes classifier for downstream task {data.name!r}")


def bayes_accuracy(lang, data, split="test"):
  """Accuracy of `bayes_predictions` on `split` (HMM: the posterior's argmax; PCFG: 1)."""
  return float(np.mean(bayes_predictions(lang, data, split) == data.split(split).labels))


def majority_accuracy(data, split="test"):
  """Accuracy on `split` of always answering the most frequent training label."""
  top = np.bincount(data.train.labels, minlength=data.num_classes).argmax()
  return float(np.mean(data.split(split).labels == top))


# --------------------------------------------- HMM: what the block alone gives
def hmm_blocks(h):
  """(state block [K], word block [V]) of a block-diagonal HMM: the connected components of
  its transitions, and of each word the component of the states that emit it (ValueError if
  a word is emitted from two components, i.e. the HMM is not block-diagonal)."""
  k = h.num_states
  comp = -np.ones(k, np.int64)
  nxt = 0
  adj = (h.trans > 0) | (h.trans.T > 0)
  for s0 in range(k):
    if comp[s0] >= 0:
      continue
    stack, comp[s0] = [s0], nxt
    while stack:
      u = stack.pop()
      for v in np.nonzero(adj[u] & (comp < 0))[0]:
        comp[v] = nxt
        stack.append(v)
    nxt += 1
  words = -np.ones(h.vocab_size, np.int64)
  for w in range(h.vocab_size):
    c = np.unique(comp[h.emit[:, w] > 0])
    if c.size > 1:
      raise ValueError(f"word {w} is emitted from {c.size} blocks: not a block-diagonal HMM")
    if c.size:
      words[w] = c[0]
  return comp, words


def block_majority_accuracy(h, data, split="test"):
  """HMM task-k: accuracy on `split` of answering, for each sentence, the most frequent
  training label among the training sentences of its block (the block is read off any word,
  `hmm_blocks`). What a representation that encodes only the block can reach."""
  _, words = hmm_blocks(h)
  b_tr, b = words[data.train.tokens[:, 0]], words[data.split(split).tokens[:, 0]]
  counts = np.zeros((int(words.max()) + 1, data.num_classes), np.int64)
  np.add.at(counts, (b_tr, data.train.labels), 1)
  return float(np.mean(counts[b].argmax(1) == data.split(split).labels))


def hmm_context_value(h, data, split="test"):
  """How much of the masked-LM loss the context beyond the block explains (nats per token):
  {"optimal_mlm_loss": mean -log p(x_t | x_-t) over the tokens of `split` (forward-backward),
  "block_unigram_mlm_loss": mean -log q(x_t | block), q the word frequencies of each block in
  the training split (add-one smoothed), "context_value": their difference}. Near 0, the MLM
  objective is met by knowing the block alone, and pre-training need not learn the states."""
  _, words = hmm_blocks(h)
  length = int(data.train.lengths[0])
  tr, ev = data.train.tokens[:, :length], data.split(split).tokens[:, :length]
  counts = np.ones((int(words.max()) + 1, h.vocab_size))
  np.add.at(counts, (np.repeat(words[tr[:, 0]], length), tr.ravel()), 1)
  q = counts / counts.sum(1, keepdims=True)
  uni = float(-np.mean(np.log(q[np.repeat(words[ev[:, 0]], length), ev.ravel()])))
  nll, _ = h.mlm_losses(ev)
  opt = float(nll.mean())
  return {"optimal_mlm_loss": opt, "block_unigram_mlm_loss": uni, "context_value": uni - opt}
