r"""The label-copy task on natural text (seed 000, section 5.2, Table 2): examples and splits.

  from el_jax.core.data import label_copy
  data = label_copy.build(config.data)      # LabelCopyData: train / valid / test, cached
  data.train.rows                           # [N, T + 1] int32 GPT-2 token ids
  label_copy.example_text("In the beginning God created the heaven.", "Genesis", easy=True)
  # '<|endoftext|> Genesis In the beginning Genesis God created the heaven. Label: Genesis<|endoftext|>'

Sentences come from `el_jax.core.data.texts` (`data.corpus`: "kjv", "shakespeare"
or a JSONL file), each with a one-word label (the book / the work). The pool
is every distinct sentence text (the first occurrence keeps its label) with
at least `data.min_words` white-space separated words, in corpus order.

One example per sentence, GPT-2 tokens (`el_jax.core.data.gpt2_bpe`, vocabulary
50,257). With the sentence's words w_1 .. w_n and m = floor(n / 2):

  hard:  <|endoftext|> w_1 .. w_m L w_{m+1} .. w_n Label: L<|endoftext|>
  easy:  <|endoftext|> L w_1 .. w_m L w_{m+1} .. w_n Label: L<|endoftext|>

i.e. the label word L is injected after word m (never at the start, as
n >= 2), and easy examples carry it at the start too (the paper's "easy
samples contain this word both at the start and the middle of the sentence;
hard samples ... without the word at the start"). The leading <|endoftext|>
is GPT-2's document boundary. The separator `SEPARATOR` = " Label:" (tokens
[36052, 25]) is followed by the target: the tokens of " L", then
<|endoftext|>. Every piece is tokenized on its own with a leading space (" w_1
.. w_m", " L", ...), so the label has the same tokens at the start, in the
middle and as the target. Only the label's target tokens are scored (not the
final <|endoftext|>).

Sentences: the pool is shuffled with the data seed (`numpy` generator
[data_seed, 0]) and walked in that order; a sentence whose tokens (the two
halves, without the label) number more than `data.max_sentence_tokens` is
dropped (not truncated). The first `data.num_test` kept sentences are the
test split, the next `data.num_valid` the validation split, the next
`data.num_train` the training split (0 = every remaining sentence). So no
sentence (no text) is in two splits, and growing the training split changes
neither valid nor test. In each split exactly round(`data.p_easy` * N)
examples, at positions drawn with seed [data_seed, 1, s] (s = 0, 1, 2 for
test, valid, train), are easy.

Layout: every row has T + 1 tokens, T = 1 + max_sentence_tokens + 3 * L_max +
len(SEPARATOR tokens), L_max the longest label (in tokens) of the corpus's
pool. Rows are aligned so that the label's first target token is at the
fixed index a0 = T - L_max: the prompt (<|endoftext|>, text, separator)
fills [a0 - P, a0), the label [a0, a0 + len), then <|endoftext|>; the rest
is padding with <|endoftext|> (id 50256). The model reads rows[:, :T] and
predicts rows[:, 1:]; the label is predicted at the fixed input positions
a0 - 1 .. a0 + L_max - 2 (`scored_positions`), masked to each label's
length. Segment ids are 1 from the prompt's first token on and 0 on the
padding before it (with `model.doc_mask=True` the text never attends to the
padding). A label shorter than L_max leaves padding after its final
<|endoftext|>, which nothing scored can see (the model is causal).

Cache. `build` stores the splits in one `.npz` under `data.cache_dir` ("" =
`$EL_JAX_CACHE/label_copy`, or `~/.cache/el_jax/label_copy`), named by a
hash of what determines them (`cache_key`: the SHA-256 of the corpus's
sentences and labels and of the tokenizer's files, the data fields, a format
version), written atomically; a damaged or foreign file is rebuilt with a
warning. Tokenizing is the slow part, so only the sentences the splits need
are tokenized. Measured on the shared 2-core CPU (load average ~14): the
`paper` splits (every sentence) build in 4.7 s (KJV) and 6.4 s (Shakespeare)
of CPU time, 14 s and 19 s of wall time, and load from the cache in < 0.3 s.
"""
import dataclasses
import functools
import hashlib
import json
import os
import sys
import time
import zipfile

import numpy as np

from el_jax.core import data
from el_jax.core.data import gpt2_bpe
from el_jax.core.data import texts
from el_jax.infra import progress
from el_jax.infra import workdir as wd

SEPARATOR = " Label:"
GROUPS = ("easy", "hard")
SPLITS = ("train", "valid", "test")
STREAMS = {"test": 0, "valid": 1, "train": 2}  # the order splits take sentences, and easy-draw seeds
FORMAT_VERSION = 1
CHUNK = 4096  # sentences tokenized per call while walking the shuffled pool


# ----------------------------------------------------------------------------
# Config


def _is_int(v):
  return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_data_config(d):
  """ValueError naming the `data.*` field and what is allowed (nothing is read)."""
  corpus = d.get("corpus")
  if corpus not in texts.CORPORA and not (isinstance(corpus, str) and corpus
                                          and os.path.isfile(os.path.expanduser(corpus))):
    raise ValueError(f"data.corpus={corpus!r}; allowed: {texts.CORPORA} or the path of an "
                     f"existing JSONL file with one {{\"text\": ..., \"label\": ...}} per line")
  for name, lo in (("max_sentence_tokens", 1), ("min_words", 2), ("num_train", 0),
                   ("num_valid", 1), ("num_test", 1), ("data_seed", 0)):
    v = d.get(name)
    if not _is_int(v) or v < lo:
      extra = " (0 = every sentence not in valid / test)" if name == "num_train" else ""
      why = " (the label goes after word floor(n/2): n >= 2 keeps it off the start)" \
          if name == "min_words" else ""
      raise ValueError(f"data.{name}={v!r} must be an integer >= {lo}{extra}{why}")
  p = d.get("p_easy")
  if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
    raise ValueError(f"data.p_easy={p!r} must be a number in [0, 1] (the fraction of easy examples)")


def default_cache_dir():
  """`$EL_JAX_CACHE/label_copy`, or `~/.cache/el_jax/label_copy` without that variable."""
  return data.cache_dir("label_copy")


# ----------------------------------------------------------------------------
# One example


def split_words(sentence):
  """(first half, second half) of the sentence's words: words[:floor(n/2)], words[floor(n/2):]."""
  words = sentence.split()
  m = len(words) // 2
  return " ".join(words[:m]), " ".join(words[m:])


def example_text(sentence, label, easy):
  """The whole example as text (module docstring), for reading."""
  a, b = split_words(sentence)
  start = f" {label}" if easy else ""
  return (f"{gpt2_bpe.EOT}{start} {a} {label} {b}{SEPARATOR} {label}{gpt2_bpe.EOT}")


def prompt_ids(first_ids, second_ids, label_ids, easy):
  """Token ids of the prompt: <|endoftext|> [L] first-half L second-half SEPARATOR."""
  return ([gpt2_bpe.EOT_ID] + (list(label_ids) if easy else []) + list(first_ids)
          + list(label_ids) + list(second_ids) + separator_ids())


@functools.lru_cache(maxsize=1)
def separator_ids():
  return gpt2_bpe.encode(SEPARATOR)


def context_len(max_sentence_tokens, max_label_tokens):
  """T: the model's input length (module docstring)."""
  return 1 + max_sentence_tokens + 3 * max_label_tokens + len(separator_ids())


# ----------------------------------------------------------------------------
# Data types


@dataclasses.dataclass(frozen=True)
class Split:
  """The examples of one split (module docstring)."""
  rows: np.ndarray  # [N, T + 1] int32 token ids
  prompt_start: np.ndarray  # [N] int32 index of the leading <|endoftext|>
  label_len: np.ndarray  # [N] int32 tokens of the label (<= L_max)
  easy: np.ndarray  # [N] bool
  sentence: np.ndarray  # [N] int64 index into `texts.load_sentences(corpus)`
  label: np.ndarray  # [N] int32 index into LabelCopyData.labels

  def __len__(self):
    return self.rows.shape[0]

  def subset(self, idx):
    return Split(*(getattr(self, f.name)[idx] for f in dataclasses.fields(self)))

  @property
  def context_len(self):
    return self.rows.shape[1] - 1

  @property
  def inputs(self):
    """[N, T] the model's input tokens."""
    return self.rows[:, :-1]

  @property
  def targets(self):
    """[N, T] next-token targets."""
    return self.rows[:, 1:]

  @property
  def segment_ids(self):
    """[N, T] int32: 1 from the prompt's first token on, 0 on the padding before it."""
    t = self.context_len
    return (np.arange(t)[None, :] >= self.prompt_start[:, None]).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class LabelCopyData:
  """Splits plus what their layout needs."""
  splits: dict
  labels: tuple  # label words; Split.label indexes them
  label_ids: tuple  # tokens of " " + label, per label
  max_label_tokens: int  # L_max
  key: dict
  path: str = ""
  build_seconds: float = 0.0

  train = property(lambda self: self.splits["train"])
  valid = property(lambda self: self.splits["valid"])
  test = property(lambda self: self.splits["test"])

  @property
  def context_len(self):
    return self.train.context_len

  @property
  def answer_start(self):
    """a0: the row index of the label's first token (module docstring)."""
    return self.context_len - self.max_label_tokens

  @property
  def scored_positions(self):
    """[L_max] int32 input positions that predict the label's tokens."""
    return np.arange(self.answer_start - 1, self.answer_start - 1 + self.max_label_tokens,
                     dtype=np.int32)

  def answers(self, split):
    """[N, L_max] int32 label tokens of each example, -1 after the label."""
    a0, lmax = self.answer_start, self.max_label_tokens
    out = split.rows[:, a0:a0 + lmax].copy()
    out[np.arange(lmax)[None, :] >= split.label_len[:, None]] = -1
    return out

  def loss_mask(self, split):
    """[N, T] float32: 1 at the input positions that predict a label token."""
    t = split.context_len
    pos = np.arange(t)[None, :] - (self.answer_start - 1)
    return ((pos >= 0) & (pos < split.label_len[:, None])).astype(np.float32)


# ----------------------------------------------------------------------------
# Building


def sentence_pool(corpus, min_words):
  """Indices into `texts.load_sentences(corpus)` of the pool: distinct texts (first
  occurrence) with at least `min_words` words, in corpus order."""
  seen, keep = set(), []
  for i, (text, _, _) in enumerate(texts.load_sentences(corpus)):
    if text not in seen and len(text.split()) >= min_words:
      seen.add(text)
      keep.append(i)
  return np.asarray(keep, np.int64)


def _sha256_files(paths):
  h = hashlib.sha256()
  for p in paths:
    with open(p, "rb") as f:
      h.update(hashlib.sha256(f.read()).digest())
  return h.hexdigest()


def _corpus_sha256(corpus):
  mtime = None if corpus in texts.CORPORA else os.path.getmtime(corpus)  # a file may change
  return _sha256_of_sentences(corpus, mtime)


@functools.lru_cache(maxsize=8)
def _sha256_of_sentences(corpus, mtime):
  del mtime  # part of the cache key
  h = hashlib.sha256()
  for text, label, source in texts.load_sentences(corpus):
    h.update(f"{text}\t{label}\t{source}\n".encode())
  return h.hexdigest()


def _corpus_name(d):
  c = d.corpus
  return c if c in texts.CORPORA else os.path.abspath(os.path.expanduser(c))


def cache_key(d):
  """The fields that determine the splits (a JSON-able dict)."""
  check_data_config(d)
  corpus = _corpus_name(d)
  return {"format": FORMAT_VERSION, "corpus": corpus, "corpus_sha256": _corpus_sha256(corpus),
          "tokenizer_sha256": _sha256_files(gpt2_bpe.files()), "separator": SEPARATOR,
          **{k: int(d[k]) for k in ("max_sentence_tokens", "min_words", "num_train", "num_valid",
                                    "num_test", "data_seed")},
          "p_easy": float(d.p_easy)}


def cache_path(d, key=None):
  """`<cache dir>/<corpus>_<hash of cache_key>.npz`."""
  key = cache_key(d) if key is None else key
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
  cache_dir = os.path.expanduser(d.get("cache_dir", "") or default_cache_dir())
  stem = d.corpus if d.corpus in texts.CORPORA else "file"
  return os.path.join(cache_dir, f"{stem}_{digest}.npz")


def _labels(corpus, pool):
  sentences = texts.load_sentences(corpus)
  labels = tuple(sorted({sentences[i][1] for i in pool}))
  label_ids = tuple(tuple(ids) for ids in gpt2_bpe.encode_batch([" " + w for w in labels]))
  return labels, label_ids


def _select(corpus, pool, order, max_tokens, need):
  """Walks `pool[order]`, keeping sentences of <= max_tokens tokens until `need` (None = all).

  Returns (kept sentence indices, their first-half ids, second-half ids). Progress (sentences
  kept of `need`, else sentences tokenized) if it takes more than a few seconds.
  """
  sentences = texts.load_sentences(corpus)
  kept, first, second = [], [], []
  with progress.Bar(need if need is not None else len(order),
                    f"label_copy: tokenizing the {corpus} sentences", unit="sentence",
                    delay_s=progress.PHASE_DELAY_S) as bar:
    for lo in range(0, len(order), CHUNK):
      idx = pool[order[lo:lo + CHUNK]]
      halves = [split_words(sentences[i][0]) for i in idx]
      ids = gpt2_bpe.encode_batch([" " + h for pair in halves for h in pair])
      before = len(kept)
      for j, i in enumerate(idx):
        a, b = ids[2 * j], ids[2 * j + 1]
        if len(a) + len(b) <= max_tokens:
          kept.append(int(i))
          first.append(a)
          second.append(b)
          if need is not None and len(kept) == need:
            bar.update(len(kept) - before)
            return kept, first, second
      bar.update(len(kept) - before if need is not None else len(idx))
  return kept, first, second


def _make_split(kept, first, second, easy, label_of, label_ids, t, lmax):
  n = len(kept)
  rows = np.full((n, t + 1), gpt2_bpe.EOT_ID, np.int32)
  start = np.zeros(n, np.int32)
  lens = np.zeros(n, np.int32)
  a0 = t - lmax
  for r in range(n):
    lab = label_ids[label_of[r]]
    prompt = prompt_ids(first[r], second[r], lab, bool(easy[r]))
    start[r] = a0 - len(prompt)
    assert start[r] >= 0, (len(prompt), a0)  # guaranteed by context_len
    rows[r, start[r]:a0] = prompt
    rows[r, a0:a0 + len(lab)] = lab
    lens[r] = len(lab)
  return start, lens, rows


def _build_splits(d):
  corpus = _corpus_name(d)
  sentences = texts.load_sentences(corpus)
  pool = sentence_pool(corpus, int(d.min_words))
  labels, label_ids = _labels(corpus, pool)
  lmax = max(len(x) for x in label_ids)
  t = context_len(int(d.max_sentence_tokens), lmax)
  order = np.random.default_rng([int(d.data_seed), 0]).permutation(len(pool))
  nums = {"test": int(d.num_test), "valid": int(d.num_valid), "train": int(d.num_train)}
  need = None if nums["train"] == 0 else sum(nums.values())
  kept, first, second = _select(corpus, pool, order, int(d.max_sentence_tokens), need)
  fixed = nums["test"] + nums["valid"] + max(nums["train"], 1)
  if len(kept) < (need or fixed):
    raise ValueError(
        f"data.corpus={d.corpus!r} has {len(kept)} distinct sentences of >= data.min_words="
        f"{d.min_words} words and <= data.max_sentence_tokens={d.max_sentence_tokens} tokens; "
        f"data.num_test + num_valid + num_train = {nums['test']} + {nums['valid']} + "
        f"{nums['train'] or '(the rest, at least 1)'} needs {need or fixed}")
  label_index = {w: i for i, w in enumerate(labels)}
  splits, lo = {}, 0
  for name in ("test", "valid", "train"):
    n = nums[name] or len(kept) - lo
    sl = slice(lo, lo + n)
    lo += n
    idx = np.asarray(kept[sl], np.int64)
    label_of = np.asarray([label_index[sentences[i][1]] for i in idx], np.int32)
    easy = np.zeros(n, bool)
    easy[np.random.default_rng([int(d.data_seed), 1, STREAMS[name]]).permutation(n)[
        :int(round(float(d.p_easy) * n))]] = True
    start, lens, rows = _make_split(kept[sl], first[sl], second[sl], easy, label_of, label_ids,
                                    t, lmax)
    splits[name] = Split(rows, start, lens, easy, idx, label_of)
  return {k: splits[k] for k in SPLITS}, labels, label_ids, lmax


class _Damaged(ValueError):
  pass


_LOAD_ERRORS = (_Damaged, OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def _save(path, key, splits, labels, label_ids):
  arrays = {"key": np.array(json.dumps(key, sort_keys=True)),
            "labels": np.array(json.dumps([labels, label_ids]))}
  for name, s in splits.items():
    for f in dataclasses.fields(s):
      arrays[f"{name}_{f.name}"] = getattr(s, f.name)
  with wd.atomic_open(path, binary=True) as f:
    np.savez(f, **arrays)


def _load(path, key):
  with np.load(path, allow_pickle=False) as z:
    stored = json.loads(str(z["key"][()]))
    if stored != key:
      raise _Damaged(f"it holds another dataset ({stored})")
    labels, label_ids = json.loads(str(z["labels"][()]))
    splits = {}
    for name in SPLITS:
      s = Split(*(z[f"{name}_{f.name}"] for f in dataclasses.fields(Split)))
      n = len(s)
      if any(getattr(s, f.name).shape[0] != n for f in dataclasses.fields(Split)):
        raise _Damaged(f"the {name} arrays have different lengths")
      if name != "train" and n != key[f"num_{name}"]:
        raise _Damaged(f"{name} has {n} examples, expected {key[f'num_{name}']}")
      splits[name] = s
  return splits, tuple(labels), tuple(tuple(x) for x in label_ids)


def build(d):
  """The LabelCopyData of `config.data`: from the cache, or built (and cached)."""
  key = cache_key(d)
  path = cache_path(d, key)
  if os.path.exists(path):
    try:
      splits, labels, label_ids = _load(path, key)
      return LabelCopyData(splits, labels, label_ids, max(len(x) for x in label_ids), key, path)
    except _LOAD_ERRORS as e:
      msg = " ".join(str(e).split()) or type(e).__name__
      print(f"warning: label-copy data cache {path} is damaged ({type(e).__name__}: {msg}); "
            f"rebuilding it", file=sys.stderr)
  t0 = time.perf_counter()
  splits, labels, label_ids, lmax = _build_splits(d)
  _save(path, key, splits, labels, label_ids)
  dt = time.perf_counter() - t0
  sizes = ", ".join(f"{name} {len(s)}" for name, s in splits.items())
  print(f"label_copy: built the {d.corpus} examples ({sizes}; T={splits['train'].context_len}) "
        f"in {dt:.1f} s -> {path}", file=sys.stderr)
  return LabelCopyData(splits, labels, label_ids, lmax, key, path, dt)
