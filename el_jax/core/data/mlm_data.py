r"""Fixed masked-LM corpora of a synthetic language with exact conditionals (seed 002), cached.

  from el_jax.core.data import mlm_data
  lang = mlm_data.language(config.data)   # el_jax.core.data.pcfg.PCFG or el_jax.core.data.hmm.HMM
  corpus = mlm_data.build(config.data)    # Corpus: train / valid / test, from the disk cache
  corpus.valid.cond                       # [N, T, V] float32 p(x_t = w | x_-t)

Languages (`data.language`):
  pcfg  the paper's grammar (`data.grammar`, rule_deep_mlm.txt: sentences of
        2..16 words, `el_jax.core.data.pcfg`); sentences of length > T =
        `data.max_len_tokens` are rejected and drawn again (never, for T >= 16).
  hmm   a random block-diagonal HMM (`el_jax.core.data.hmm`: `data.num_states`,
        `data.vocab_size`, `data.num_blocks`, `data.hmm_seed`), every sentence
        `data.length` tokens (<= T).
  lm    sentences of a decoder restricted to its top-K tokens (the paper's
        OPT-generated data): built and cached by `el_jax.core.data.lm_language`
        (it loads a model, so it sits above this module; `el_jax.core.tasks.mlm`
        dispatches), with conditionals at the fixed masks only. Here only the
        shared fields are checked.

Vocabulary (other code relies on it): terminal ids 0..V-1 (the language's own
ids), MASK = V, PAD = V + 1, so the model's vocabulary is V + 2.

Splits (independent draws from the data seed, `data.data_seed`, one seed
stream each: train 0, valid 1, test 2; sampled in chunks of `CHUNK` sentences
with seeds [data_seed, stream, chunk]). Short PCFG sentences are common, so
the same sentence may occur in two splits, as in any i.i.d. draw. Each split
holds:
  tokens    [N, T] int32, PAD after the sentence
  lengths   [N] int32 (1..T)
  states    [N, T] int32 HMM hidden states, -1 at padding (HMM only)
and valid / test also
  mask_pos  [N] int32 the fixed evaluation mask: one position per sentence,
            uniform over its real positions (seed [data_seed, stream, 1])
  cond      [N, T, V] float32 the exact conditional p(x_t = . | x_-t) at every
            real position (zeros at padding), from inside-outside (PCFG) or
            forward-backward (HMM); it does not depend on the word at t.
The training split has no conditionals (the training loop does not need
them); `train_eval_split` computes them for its first sentences.

Cache. `build` stores the splits in one `.npz` under `data.cache_dir` ("" =
`$EL_JAX_CACHE/mlm`, or `~/.cache/el_jax/mlm` without that variable), named
by a hash of the fields that determine the content (`cache_key`: the
language's parameters, for the PCFG the SHA-256 of the grammar file's bytes
rather than its path, T, the split sizes, the data seed and a format
version). It is written atomically (temp file, fsync, `os.replace`), so a
killed build never leaves a torn file, and two processes building the same
corpus both leave a valid one. A damaged or foreign file is rebuilt with a
warning. Building prints one line before and one with its duration after.
Measured on the shared 2-core CPU (load average ~2): the corpora of the `cpu`
configs (100k training sentences, 2,000 valid and 2,000 test with
conditionals; 55-58 MB files) build and cache in 1.5 s (PCFG) and 3.3 s
(HMM), and load from the cache in 0.17 s and 0.07 s.
"""
import dataclasses
import hashlib
import json
import os
import sys
import time
import zipfile

import numpy as np

from el_jax.core import data
from el_jax.core.data import hmm as hmm_lib
from el_jax.core.data import pcfg as pcfg_lib
from el_jax.infra import progress
from el_jax.infra import workdir as wd

LANGUAGES = ("pcfg", "hmm", "lm")
SPLITS = ("train", "valid", "test")
STREAMS = {"train": 0, "valid": 1, "test": 2}  # seed streams of the splits
FORMAT_VERSION = 1  # bump when the content of a cache file changes for the same key
# Optional `data.*` fields of an HMM (`hmm.HMM.random_block_diagonal`): 0 or absent = the
# Uniform(0, 1) weights of the default draw; a > 0 = Dirichlet(a) rows within each block.
HMM_CONCENTRATIONS = ("trans_concentration", "emit_concentration")
CHUNK = 65_536  # sentences per sampling call (bounds the HMM sampler's [N, K] temporaries)
COND_CHUNK = 2048  # sentences per conditional computation (bounds the float64 [n, T, V])


# ----------------------------------------------------------------------------
# Config -> language


def _is_int(v):
  return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def grammar_path(d):
  """`data.grammar` (relative paths are relative to the working directory)."""
  return os.path.expanduser(d.grammar)


def check_data_config(d):
  """ValueError naming the `data.*` field and what is allowed (no data is built)."""
  if d.get("language") not in LANGUAGES:
    raise ValueError(f"data.language={d.get('language')!r}; allowed: {LANGUAGES}")
  need = {"pcfg": ("grammar",), "hmm": ("num_states", "vocab_size", "num_blocks", "hmm_seed",
                                         "length"), "lm": ()}[d.language]
  for name in ("max_len_tokens", "num_train", "num_valid", "num_test", "data_seed", *need):
    if name not in d:
      other = {"hmm": "hmm_mlm", "lm": "lm_mlm"}.get(d.language, "pcfg_mlm")
      raise ValueError(f"data.{name} is missing; data.language={d.language!r} needs "
                       f"data.{name} (see configs/{other}.py)")
  for name, lo in (("max_len_tokens", 2), ("num_train", 1), ("num_valid", 1), ("num_test", 1),
                   ("data_seed", 0)):
    if not _is_int(d[name]) or d[name] < lo:
      raise ValueError(f"data.{name}={d[name]!r} must be an integer >= {lo}")
  if d.language == "lm":  # its own fields: el_jax.core.data.lm_language.check_data_config
    return
  if d.language == "pcfg":
    path = grammar_path(d)
    if not os.path.isfile(path):
      raise ValueError(f"data.grammar={d.grammar!r}: no such file (the paper's grammar is "
                       f"rule_deep_mlm.txt, shipped as el_jax.core.data.PCFG_GRAMMAR)")
  else:
    for name, lo in (("num_states", 1), ("vocab_size", 1), ("num_blocks", 1), ("hmm_seed", 0),
                     ("length", 1)):
      if not _is_int(d[name]) or d[name] < lo:
        raise ValueError(f"data.{name}={d[name]!r} must be an integer >= {lo}")
    if d.num_blocks > min(d.num_states, d.vocab_size):
      raise ValueError(f"data.num_blocks={d.num_blocks} must be <= min(data.num_states, "
                       f"data.vocab_size) = {min(d.num_states, d.vocab_size)}")
    if d.length > d.max_len_tokens:
      raise ValueError(f"data.length={d.length} (HMM sentence length) must be <= "
                       f"data.max_len_tokens={d.max_len_tokens}")
    for name in HMM_CONCENTRATIONS:
      a = d.get(name, 0.0)
      if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a < float("inf"):
        raise ValueError(f"data.{name}={a!r} must be a number >= 0 (0 = Uniform(0, 1) "
                         f"weights, the default draw)")


def language(d):
  """The PCFG (`data.grammar`) or HMM (`data.num_states`, ...) of `config.data`."""
  check_data_config(d)
  if d.language == "lm":
    raise ValueError("data.language='lm' is built by el_jax.core.data.lm_language.language (it "
                     "loads a model; el_jax.core.tasks.mlm.language dispatches)")
  if d.language == "pcfg":
    return pcfg_lib.PCFG.from_file(grammar_path(d))
  return hmm_lib.HMM.random_block_diagonal(
      d.num_states, d.vocab_size, d.num_blocks, seed=d.hmm_seed,
      **{k: float(d.get(k, 0.0)) for k in HMM_CONCENTRATIONS})


def default_cache_dir():
  """`$EL_JAX_CACHE/mlm`, or `~/.cache/el_jax/mlm` when EL_JAX_CACHE is not set."""
  return data.cache_dir("mlm")


def _file_sha256(path):
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def cache_key(d):
  """The fields that determine a corpus's content (a JSON-able dict)."""
  check_data_config(d)
  if d.language == "lm":
    raise ValueError("data.language='lm' corpora are built and cached by "
                     "el_jax.core.data.lm_language.build")
  key = {"format": FORMAT_VERSION, "language": d.language, "max_len_tokens": int(d.max_len_tokens),
         "num_train": int(d.num_train), "num_valid": int(d.num_valid), "num_test": int(d.num_test),
         "data_seed": int(d.data_seed)}
  if d.language == "pcfg":
    key["grammar_sha256"] = _file_sha256(grammar_path(d))
  else:
    key.update({k: int(d[k]) for k in ("num_states", "vocab_size", "num_blocks", "hmm_seed",
                                       "length")})
    # Only when set: the corpora of the default (Uniform) draw keep their cache files.
    key.update({k: float(d[k]) for k in HMM_CONCENTRATIONS if d.get(k, 0.0)})
  return key


def cache_path(d, key=None):
  """`<cache dir>/<language>_<hash of cache_key>.npz`."""
  key = cache_key(d) if key is None else key
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
  cache_dir = os.path.expanduser(d.get("cache_dir", "") or default_cache_dir())
  return os.path.join(cache_dir, f"{d.language}_{digest}.npz")


# ----------------------------------------------------------------------------
# Data types


@dataclasses.dataclass(frozen=True)
class Split:
  """Sentences of one split (module docstring); `cond` / `mask_pos` / `states` may be None."""
  tokens: np.ndarray
  lengths: np.ndarray
  mask_pos: np.ndarray | None = None
  cond: np.ndarray | None = None
  states: np.ndarray | None = None

  def __len__(self):
    return self.tokens.shape[0]

  def subset(self, idx):
    pick = lambda a: None if a is None else a[idx]  # noqa: E731
    return Split(self.tokens[idx], self.lengths[idx], pick(self.mask_pos), pick(self.cond),
                 pick(self.states))

  @property
  def real(self):
    """[N, T] bool: the sentence's positions (not padding)."""
    return np.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]

  @property
  def segment_ids(self):
    """[N, T] int32: 1 at real positions, 0 at padding (the model's doc_mask)."""
    return self.real.astype(np.int32)

  def masked_inputs(self, mask_id):
    """[N, T] int32 tokens with MASK at the fixed evaluation position `mask_pos`."""
    x = self.tokens.copy()
    x[np.arange(len(self)), self.mask_pos] = mask_id
    return x

  def masked_batch(self, mask_id):
    """The batch dict of the loop (`el_jax.core.tasks.base`) scoring the fixed `mask_pos`: MASK
    as input there, loss_mask 1 there only (what Tr(H) of the pre-training loss is measured on)."""
    loss_mask = np.zeros(self.tokens.shape, np.float32)
    loss_mask[np.arange(len(self)), self.mask_pos] = 1.0
    return {"inputs": self.masked_inputs(mask_id), "targets": self.tokens,
            "segment_ids": self.segment_ids, "loss_mask": loss_mask}

  @property
  def masked_tokens(self):
    """[N] the true tokens at `mask_pos`."""
    return self.tokens[np.arange(len(self)), self.mask_pos]

  @property
  def cond_at_mask(self):
    """[N, V] the exact conditionals at `mask_pos`."""
    return self.cond[np.arange(len(self)), self.mask_pos]


@dataclasses.dataclass(frozen=True)
class Corpus:
  """The fixed splits of one language (`build`)."""
  language: str
  vocab_size: int  # V: terminals
  max_len: int  # T: tokens per row
  splits: dict
  key: dict
  path: str
  built_s: float | None = None  # seconds it took to build (None: read from the cache)

  @property
  def mask_id(self):
    return self.vocab_size

  @property
  def pad_id(self):
    return self.vocab_size + 1

  @property
  def model_vocab_size(self):
    return self.vocab_size + 2

  @property
  def train(self):
    return self.splits["train"]

  @property
  def valid(self):
    return self.splits["valid"]

  @property
  def test(self):
    return self.splits["test"]

  def unigram(self):
    """[V] float64 word frequencies of the training split (add-one smoothed)."""
    tr = self.train
    counts = np.bincount(tr.tokens[tr.real], minlength=self.vocab_size).astype(np.float64)
    counts += 1.0
    return counts / counts.sum()


# ----------------------------------------------------------------------------
# Building


def fixed_mask_positions(lengths, seed):
  """[N] int32: one position per sentence, uniform over 0..length-1, deterministic in seed."""
  u = np.random.default_rng(seed).random(len(lengths))
  return np.minimum((u * lengths).astype(np.int64), np.asarray(lengths) - 1).astype(np.int32)


def _sample(d, lang, num, seed, desc="mlm_data: sampling"):
  """(tokens [num, T] int32 PAD-padded, lengths [num] int32, states [num, T] int32 or None);
  progress (`desc`) if it takes more than a few seconds."""
  t, pad = int(d.max_len_tokens), lang.vocab_size + 1
  tokens = np.full((num, t), pad, np.int32)
  lengths = np.empty(num, np.int32)
  states = np.full((num, t), -1, np.int32) if d.language == "hmm" else None
  with progress.Bar(num, desc, unit="sentence", delay_s=progress.PHASE_DELAY_S) as bar:
    for c, lo in enumerate(range(0, num, CHUNK)):
      m = min(CHUNK, num - lo)
      if d.language == "pcfg":
        # PCFG.sample rejects length >= max_len, so sentences have <= T words.
        sents = lang.sample(m, [*seed, c], max_len=t + 1)
        for i, s in enumerate(sents):
          tokens[lo + i, :len(s)] = s
          lengths[lo + i] = len(s)
      else:
        tok, st = lang.sample(m, d.length, [*seed, c])
        tokens[lo:lo + m, :d.length] = tok
        states[lo:lo + m, :d.length] = st
        lengths[lo:lo + m] = d.length
      bar.update(m)
  return tokens, lengths, states


def conditionals(lang, tokens, lengths, desc="mlm_data: exact conditionals"):
  """[N, T, V] float32 exact conditionals at every real position (zeros at padding); progress
  (`desc`) if it takes more than a few seconds."""
  n, t = tokens.shape
  out = np.zeros((n, t, lang.vocab_size), np.float32)
  with progress.Bar(n, desc, unit="sentence", delay_s=progress.PHASE_DELAY_S) as bar:
    for lo in range(0, n, COND_CHUNK):
      hi = min(lo + COND_CHUNK, n)
      if isinstance(lang, hmm_lib.HMM) and np.all(lengths[lo:hi] == lengths[lo]):
        length = int(lengths[lo])
        out[lo:hi, :length] = lang.mlm_conditionals_batch(tokens[lo:hi, :length])
      else:
        conds = lang.mlm_conditionals_batch([tokens[i, :lengths[i]] for i in range(lo, hi)])
        for i, c in zip(range(lo, hi), conds):
          out[i, :lengths[i]] = c
      bar.update(hi - lo)
  bad = ~np.isfinite(out).all(axis=(1, 2))
  if bad.any():
    raise RuntimeError(f"sentence {int(np.flatnonzero(bad)[0])} has probability 0 without one "
                       f"of its words (NaN conditional); the language cannot have produced it")
  return out


def _build_splits(d, lang):
  splits = {}
  for name in SPLITS:
    stream = STREAMS[name]
    tokens, lengths, states = _sample(d, lang, int(d[f"num_{name}"]), [d.data_seed, stream],
                                      f"mlm_data: sampling the {d.language} {name} split")
    mask_pos = cond = None
    if name != "train":
      mask_pos = fixed_mask_positions(lengths, [d.data_seed, stream, 1])
      cond = conditionals(lang, tokens, lengths,
                          f"mlm_data: exact conditionals of the {d.language} {name} split")
    splits[name] = Split(tokens, lengths, mask_pos, cond, states)
  return splits


def train_eval_split(corpus, lang, num, data_seed):
  """The first `num` training sentences with fixed masks and exact conditionals (not cached).

  Masks from seed [data_seed, 0, 1] (the train stream's, as for valid / test).
  """
  s = corpus.train.subset(slice(0, min(num, len(corpus.train))))
  return dataclasses.replace(s, mask_pos=fixed_mask_positions(s.lengths, [data_seed, 0, 1]),
                             cond=conditionals(lang, s.tokens, s.lengths, "mlm_data: exact "
                                               "conditionals of the training sentences evaluated"))


# ----------------------------------------------------------------------------
# Cache file


class _Damaged(ValueError):
  pass


# What reading a torn, truncated, overwritten or foreign .npz can raise.
_LOAD_ERRORS = (_Damaged, OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def _small_int(a, limit):
  return a.astype(np.int16 if limit < 2 ** 15 else np.int32)


def _save(path, key, splits, vocab_size):
  arrays = {"key": np.array(json.dumps(key, sort_keys=True))}
  for name, s in splits.items():
    arrays[f"{name}_tokens"] = _small_int(s.tokens, vocab_size + 2)
    arrays[f"{name}_lengths"] = _small_int(s.lengths, s.tokens.shape[1] + 1)
    for field in ("mask_pos", "cond", "states"):
      a = getattr(s, field)
      if a is not None:
        arrays[f"{name}_{field}"] = (a if field == "cond" else
                                     _small_int(a, int(np.abs(a).max(initial=0)) + 1))
  with wd.atomic_open(path, binary=True) as f:  # shared caches stay readable (not 0600)
    np.savez(f, **arrays)


def _load(path, key):
  """{split: Split} of the cache file `path`; _Damaged (or a reader error) if unusable."""
  t, v = key["max_len_tokens"], None
  with np.load(path, allow_pickle=False) as z:
    stored = json.loads(str(z["key"][()]))
    if stored != key:
      raise _Damaged(f"it holds another corpus ({stored})")
    splits = {}
    for name in SPLITS:

      def get(field, name=name):
        k = f"{name}_{field}"
        if k not in z.files:
          return None
        return z[k] if field == "cond" else z[k].astype(np.int32)

      s = Split(*(get(f) for f in ("tokens", "lengths", "mask_pos", "cond", "states")))
      if s.tokens is None or s.lengths is None:
        raise _Damaged(f"{name}_tokens / {name}_lengths missing")
      n = key[f"num_{name}"]
      if s.tokens.shape != (n, t) or s.lengths.shape != (n,):
        raise _Damaged(f"{name} has shape {s.tokens.shape}, expected {(n, t)}")
      if name != "train":
        if s.cond is None or s.mask_pos is None:
          raise _Damaged(f"{name}_cond / {name}_mask_pos missing")
        v = s.cond.shape[2]
        if s.cond.shape[:2] != (n, t) or s.mask_pos.shape != (n,):
          raise _Damaged(f"{name}_cond / {name}_mask_pos have the wrong shape")
      if key["language"] == "hmm" and (s.states is None or s.states.shape != (n, t)):
        raise _Damaged(f"{name}_states missing or of the wrong shape")
      splits[name] = s
  return splits, v


def build(d, lang=None):
  """The Corpus of `config.data`: read from the cache, or built (and cached) if absent.

  `lang`: the language object if the caller already has it (else `language(d)`,
  only when the corpus must be built).
  """
  key = cache_key(d)
  path = cache_path(d, key)
  if os.path.exists(path):
    try:
      splits, v = _load(path, key)
      return Corpus(d.language, v, key["max_len_tokens"], splits, key, path)
    except _LOAD_ERRORS as e:
      msg = " ".join(str(e).split()) or type(e).__name__
      print(f"warning: MLM data cache {path} is damaged ({type(e).__name__}: {msg}); "
            f"rebuilding it", file=sys.stderr)
  sizes = ", ".join(f"{name} {int(d[f'num_{name}'])}" for name in SPLITS)
  print(f"mlm_data: building the {d.language} corpus ({sizes} sentences, T="
        f"{d.max_len_tokens}) -> {path}", file=sys.stderr)
  t0 = time.perf_counter()
  lang = language(d) if lang is None else lang
  splits = _build_splits(d, lang)
  _save(path, key, splits, lang.vocab_size)
  dt = time.perf_counter() - t0
  print(f"mlm_data: built and cached the {d.language} corpus in {dt:.1f} s", file=sys.stderr)
  return Corpus(d.language, lang.vocab_size, int(d.max_len_tokens), splits, key, path, dt)
