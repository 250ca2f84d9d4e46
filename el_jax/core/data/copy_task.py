"""The padded-shifted copy task of seed paper 000 (Sec. 3.1, App. B.1).

Each string is `<BOS>[seq][padding]<CLS>[seq]<EOS>`:

  * `[seq]`: L_c letters, i.i.d. uniform over `num_letters` letters;
  * easy (probability p_easy = 0.8): the padding is the rightward Caesar shift
    of `[seq]` (letter i -> i+1 mod num_letters; "gravity" -> "hsbwjuz")
    repeated L_p / L_c times;
  * hard: the padding is L_p i.i.d. uniform letters.

Only the L_c answer tokens after `<CLS>` are scored. A string has
S = L_p + 2 L_c + 3 tokens (2013 for L_c=5, L_p=2000; 55 for L_c=1, L_p=50);
contexts are k whole strings packed back to back, so that the context length
can grow while the number of strings per batch stays fixed.

Train, validation and test sets are independent draws from the same distribution, each
from its own seed stream; as in the paper, test strings that happen to equal a
training string are kept. They are not rejected because for small L_c the easy
strings are few (26 distinct easy strings for L_c=1), so rejection would change
the test distribution; `seen_in_train` reports the overlap instead.

Token ids: letters 0..num_letters-1, then BOS, CLS, EOS.
"""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class CopyTaskSpec:
  """Shape of the copy task.

  Attributes:
    seq_len: L_c, letters to copy.
    pad_len: L_p, padding letters; a multiple of L_c.
    p_easy: probability that a string is easy (Caesar-shifted padding).
    num_letters: alphabet size (26 in the paper; larger for vocab ablations).
  """
  seq_len: int
  pad_len: int
  p_easy: float = 0.8
  num_letters: int = 26

  def __post_init__(self):
    if self.seq_len < 1:
      raise ValueError(f"L_c=seq_len must be >= 1, got {self.seq_len}")
    if self.pad_len < 1:
      raise ValueError(f"L_p=pad_len must be >= 1, got {self.pad_len}")
    if self.pad_len % self.seq_len:
      raise ValueError(f"L_p={self.pad_len} is not a multiple of "
                       f"L_c={self.seq_len}")
    if not 0.0 <= self.p_easy <= 1.0:
      raise ValueError(f"p_easy must be in [0, 1], got {self.p_easy}")
    if self.num_letters < 2:
      raise ValueError(f"num_letters must be >= 2, got {self.num_letters}")

  @property
  def bos_id(self) -> int:
    return self.num_letters

  @property
  def cls_id(self) -> int:
    return self.num_letters + 1

  @property
  def eos_id(self) -> int:
    return self.num_letters + 2

  @property
  def vocab_size(self) -> int:
    return self.num_letters + 3

  @property
  def string_len(self) -> int:
    return self.pad_len + 2 * self.seq_len + 3

  @property
  def answer_start(self) -> int:
    """Index in a string of the first answer token (the one after <CLS>)."""
    return self.seq_len + self.pad_len + 2


# eq=False: the generated __eq__/__hash__ would compare numpy arrays.
@dataclasses.dataclass(frozen=True, eq=False)
class CopyDataset:
  """A fixed split of copy-task strings.

  Attributes:
    tokens: int32 [N, S] strings (read-only: the dataset is generated once).
    easy: bool [N], True where the padding is the shifted `[seq]`.
    spec: the task the strings were drawn from.
  """
  tokens: np.ndarray
  easy: np.ndarray
  spec: CopyTaskSpec

  def __post_init__(self):
    n = self.tokens.shape[0]
    if self.tokens.shape != (n, self.spec.string_len):
      raise ValueError(f"tokens shape {self.tokens.shape} != (N, S="
                       f"{self.spec.string_len})")
    if self.easy.shape != (n,):
      raise ValueError(f"easy shape {self.easy.shape} != ({n},)")

  def __len__(self):
    return self.tokens.shape[0]

  @property
  def answers(self) -> np.ndarray:
    """int32 [N, L_c]: the letters each string must reproduce after <CLS>."""
    return self.tokens[:, answer_positions(self.spec)]


def caesar_shift(letters, num_letters: int = 26) -> np.ndarray:
  """Rightward Caesar shift of letter ids: i -> (i + 1) mod num_letters."""
  letters = np.asarray(letters)
  return (letters + 1) % num_letters


def make_split(spec: CopyTaskSpec, num_strings: int,
               rng: np.random.Generator) -> CopyDataset:
  """Draws `num_strings` i.i.d. strings from `rng` (vectorised)."""
  if num_strings < 0:
    raise ValueError(f"num_strings must be >= 0, got {num_strings}")
  n, lc, lp, nl = num_strings, spec.seq_len, spec.pad_len, spec.num_letters
  # A fixed draw order (hard padding drawn for every string) keeps each
  # split a pure function of its seed, independent of which strings are easy.
  seq_NxLc = rng.integers(0, nl, size=(n, lc), dtype=np.int32)
  easy_N = rng.random(n) < spec.p_easy
  hard_pad_NxLp = rng.integers(0, nl, size=(n, lp), dtype=np.int32)
  easy_pad_NxLp = np.tile(caesar_shift(seq_NxLc, nl), (1, lp // lc))
  pad_NxLp = np.where(easy_N[:, None], easy_pad_NxLp, hard_pad_NxLp)

  def column(token_id):
    return np.full((n, 1), token_id, dtype=np.int32)

  tokens_NxS = np.concatenate(
      [column(spec.bos_id), seq_NxLc, pad_NxLp, column(spec.cls_id), seq_NxLc,
       column(spec.eos_id)], axis=1).astype(np.int32)
  tokens_NxS.flags.writeable = False
  easy_N.flags.writeable = False
  return CopyDataset(tokens=tokens_NxS, easy=easy_N, spec=spec)


def make_datasets(spec: CopyTaskSpec, num_train: int = 400,
                  num_test: int = 1000,
                  seed: int = 0) -> tuple[CopyDataset, CopyDataset]:
  """(train, test) splits, deterministic in `seed`, from independent streams.

  The test set may, by chance, contain strings of the training set (see the
  module docstring); `seen_in_train(train, test)` says which.
  """
  train = make_split(spec, num_train, np.random.default_rng([seed, 0]))
  test = make_split(spec, num_test, np.random.default_rng([seed, 1]))
  return train, test


def make_splits(spec: CopyTaskSpec, num_train: int = 400, num_valid: int = 1000,
                num_test: int = 1000, seed: int = 0) -> dict:
  """{"train", "valid", "test"}: `make_datasets`' train and test sets (unchanged)
  plus a validation set from a third, independent stream of the same seed.

  The validation set is for choosing hyperparameters; the test set is only
  reported. Like the test set, it may contain strings of the training set.
  """
  train, test = make_datasets(spec, num_train=num_train, num_test=num_test, seed=seed)
  valid = make_split(spec, num_valid, np.random.default_rng([seed, 3]))
  return {"train": train, "valid": valid, "test": test}


def seen_in_train(train: CopyDataset, test: CopyDataset) -> np.ndarray:
  """bool [N_test]: True where the test string also occurs in `train`."""
  seen = {row.tobytes() for row in np.ascontiguousarray(train.tokens)}
  return np.array([row.tobytes() in seen
                   for row in np.ascontiguousarray(test.tokens)], dtype=bool)


def strings_per_context(spec: CopyTaskSpec, context_len: int) -> int:
  """k = context_len / string_len; the context must hold whole strings."""
  s = spec.string_len
  if context_len <= 0 or context_len % s:
    raise ValueError(f"context length {context_len} is not a positive "
                     f"multiple of the string length {s}")
  return context_len // s


def pack(tokens_NxS: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  """Packs k strings per context, string i into context i // k, slot i % k.

  Args:
    tokens_NxS: int [N, S] strings.
    k: strings per context.

  Returns:
    `(contexts_CxT, valid_CxK)`: int32 [C, k*S] with C = ceil(N / k), and bool
    [C, k], False for the slots of the last context that are filled with
    copies of the first strings (only when k does not divide N).
  """
  if k < 1:
    raise ValueError(f"k (strings per context) must be >= 1, got {k}")
  tokens_NxS = np.asarray(tokens_NxS)
  n, s = tokens_NxS.shape
  c = -(-n // k)
  missing = c * k - n
  # Filler strings are real strings so every context stays well-formed; the
  # modulo covers N < missing (fewer strings than one context's worth).
  filler = tokens_NxS[np.arange(missing) % max(n, 1)] if missing else (
      tokens_NxS[:0])
  all_MxS = np.concatenate([tokens_NxS, filler], axis=0)
  contexts_CxT = all_MxS.reshape(c, k * s).astype(np.int32)
  valid_CxK = (np.arange(c * k) < n).reshape(c, k)
  return contexts_CxT, valid_CxK


def answer_positions(spec: CopyTaskSpec) -> np.ndarray:
  """int32 [L_c]: 0-based positions of the answer tokens within a string."""
  return np.arange(spec.answer_start, spec.answer_start + spec.seq_len,
                   dtype=np.int32)


def loss_mask_for_context(spec: CopyTaskSpec, k: int) -> np.ndarray:
  """float32 [k*S]: 1 at inputs whose next token (the target) is an answer.

  With targets = np.roll(context, -1, axis=1), position t predicts token t+1,
  so the ones sit at answer_start-1 ... answer_start+L_c-2 of every string.
  The last position of a context (its <EOS>) is never scored, so the
  wrap-around target of the roll does not matter.
  """
  if k < 1:
    raise ValueError(f"k (strings per context) must be >= 1, got {k}")
  s = spec.string_len
  mask_KxS = np.zeros((k, s), dtype=np.float32)
  mask_KxS[:, answer_positions(spec) - 1] = 1.0
  return mask_KxS.reshape(k * s)


def decode_string(tokens_S, spec: CopyTaskSpec) -> str:
  """Readable form, e.g. "<BOS>ab<CLS>ab<EOS>"; letters past z print as [i]."""
  special = {spec.bos_id: "<BOS>", spec.cls_id: "<CLS>", spec.eos_id: "<EOS>"}
  out = []
  for t in np.asarray(tokens_S).tolist():
    if t in special:
      out.append(special[t])
    elif 0 <= t < min(spec.num_letters, 26):
      out.append(chr(ord("a") + t))
    elif 0 <= t < spec.num_letters:
      out.append(f"[{t}]")
    else:
      out.append(f"<?{t}>")
  return "".join(out)
