"""Causal language modelling on the offline texts: pretraining a small GPT-2 (label copy's).

No pretrained GPT-2 weights can be downloaded on a machine without the Hugging
Face hub, so the label-copy experiment fine-tunes a small GPT-2 pretrained here
(`configs/text_lm.py`, then `el_jax.core.models.pretrained.export_run` writes it in
the Hugging Face layout that `load_gpt2` reads).

Data: the sentences of `data.corpora` (`el_jax.core.data.texts`: KJV verses,
Shakespeare's spoken sentences), each as " " + text + <|endoftext|> in GPT-2
tokens, in an order shuffled by `data.data_seed`, concatenated and cut into rows
of `data.context_len + 1` tokens (GPT-2's own packing: no document mask; rows
start anywhere in a sentence). The first `data.num_test` rows are the test
split, the next `data.num_valid` the validation split, the rest the training
split. Sentences whose text occurs in any split of the label-copy data of the
variant `data.exclude_label_copy` of configs/label_copy.py (for every corpus
of `data.corpora`) are left out, so the fine-tuning task never sees its
own sentences in pretraining. Identical texts are kept once.

Metric group `text` (every position). Evaluation per split (the training
split on its first `train.eval_train_examples` rows):
  ce_text   mean next-token cross-entropy (nats per token)
  ppl_text  exp(ce_text)
  acc_text  next-token greedy accuracy
  n_text    scored tokens
"""
import functools
import hashlib
import json
import os
import sys

import jax.numpy as jnp
import numpy as np
import optax

from el_jax.run import config as config_lib
from el_jax.core import data
from el_jax.core.data import gpt2_bpe
from el_jax.core.data import label_copy
from el_jax.core.data import texts
from el_jax.core.models import decoder
from el_jax.core.tasks import base
from el_jax.infra import workdir as wd

FORMAT_VERSION = 1


def check_config(config):
  d, t = config.data, config.train
  corpora = tuple(d.corpora)
  if not corpora:
    raise ValueError(f"data.corpora is empty; choose from {texts.CORPORA}")
  for c in corpora:
    if c not in texts.CORPORA:
      raise ValueError(f"data.corpora has unknown corpus {c!r}; valid corpora: {texts.CORPORA}")
  excl = d.exclude_label_copy
  if excl:
    variants = config_lib.load_config_module("label_copy").VARIANTS
    if excl not in variants:
      raise ValueError(f"data.exclude_label_copy={excl!r} is not a variant of configs/label_copy.py "
                       f"({variants}, or '' for none)")
  base.check_int("data", d, "context_len", 2)
  base.check_int("data", d, "num_valid", 1)
  base.check_int("data", d, "num_test", 1)
  base.check_int("data", d, "data_seed", 0)
  base.check_int("data", d, "max_sentences", 0)
  for name in ("batch_size", "eval_batch_size", "eval_train_examples"):
    base.check_int("train", t, name, 1)


def _exclusion_configs(d):
  """The label-copy data configs (variant `d.exclude_label_copy`, one per corpus) whose
  sentences are left out."""
  if not d.exclude_label_copy:
    return []
  out = []
  for corpus in d.corpora:
    lc = config_lib.get_config("label_copy", d.exclude_label_copy).data
    lc.corpus = corpus
    if d.get("cache_dir", ""):  # the label-copy examples cached beside the rows
      lc.cache_dir = os.path.join(os.path.expanduser(d.cache_dir), "label_copy")
    out.append(lc)
  return out


def _excluded_texts(d):
  """Texts of every label-copy split (variant `d.exclude_label_copy`) of each corpus."""
  out = set()
  for lc in _exclusion_configs(d):
    sentences = texts.load_sentences(lc.corpus)
    for split in label_copy.build(lc).splits.values():
      out.update(sentences[int(i)][0] for i in split.sentence)
  return out


def _cache_path(d, key):
  """`<data.cache_dir>/rows_<hash of key>.npz` (default $EL_JAX_CACHE/text_lm or
  ~/.cache/el_jax/text_lm)."""
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
  cache_dir = os.path.expanduser(d.get("cache_dir", "") or data.cache_dir("text_lm"))
  return os.path.join(cache_dir, f"rows_{digest}.npz")


def build_rows(d):
  """(rows [N, context_len + 1] int32, number of sentences, excluded) for the data config `d`;
  cached as .npz (the key: corpora, the excluded splits' own cache keys, context, data seed,
  sentence cap, tokenizer)."""
  key = {"format": FORMAT_VERSION, "corpora": list(d.corpora),
         "exclude_label_copy": d.exclude_label_copy, "context_len": int(d.context_len),
         "data_seed": int(d.data_seed), "max_sentences": int(d.max_sentences),
         "tokenizer": gpt2_bpe.files()[0],
         # what fixes the excluded splits (a changed label-copy config rebuilds the rows)
         "excluded_splits": [label_copy.cache_key(lc) for lc in _exclusion_configs(d)]}
  path = _cache_path(d, key)
  if os.path.exists(path):
    try:
      with np.load(path) as z:
        if json.loads(str(z["key"])) == key:
          rows = gpt2_bpe.check_ids(z["rows"], gpt2_bpe.VOCAB_SIZE, "the cached rows")
          return rows, int(z["num_sentences"]), int(z["num_excluded"])
    except (OSError, ValueError, KeyError) as e:  # rebuilt below (it is only a cache)
      print(f"warning: the cached rows {path} cannot be read ({type(e).__name__}: {e}); "
            f"rebuilding them", file=sys.stderr)
  excluded = _excluded_texts(d)
  seen, kept, dropped = set(), [], 0
  for corpus in d.corpora:
    for text, _, _ in texts.load_sentences(corpus):
      if text in seen:
        continue
      seen.add(text)
      if text in excluded:
        dropped += 1
      else:
        kept.append(text)
  if d.max_sentences:
    kept = kept[:int(d.max_sentences)]
  order = np.random.default_rng([int(d.data_seed), 7]).permutation(len(kept))
  ids = gpt2_bpe.encode_batch([" " + kept[i] for i in order], vocab_size=gpt2_bpe.VOCAB_SIZE,
                              desc=f"text_lm: tokenizing {len(kept)} sentences")
  stream = np.fromiter((t for s in ids for t in (*s, gpt2_bpe.EOT_ID)), np.int32)
  width = int(d.context_len) + 1
  n = len(stream) // width
  rows = stream[:n * width].reshape(n, width)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with wd.atomic_open(path, binary=True) as f:
    np.savez(f, rows=rows, key=json.dumps(key), num_sentences=len(kept), num_excluded=dropped)
  return rows, len(kept), dropped


def token_ce(graphdef, params, inputs, segments, targets):
  """([B] summed next-token CE, [B] correct greedy predictions) of each row."""
  logits = decoder.apply(graphdef, params, inputs, segments)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
  right = jnp.argmax(logits, axis=-1) == targets
  return ce.sum(axis=1), right.sum(axis=1)


class TextLMTask(base.BatchSizeRows, base.Task):
  """Next-token prediction at every position of packed text rows."""

  groups = ("text",)
  resumable_fields = frozenset({"train.eval_batch_size", "train.eval_train_examples",
                                "data.cache_dir"})

  @classmethod
  def validate_config(cls, config):
    check_config(config)
    if not decoder.preset(config.model.preset, vocab_size=1).causal:
      raise ValueError(f"model.preset={config.model.preset!r} is bidirectional; causal language "
                       f"modelling needs 'gpt2' or 'gpt_neox'")

  def __init__(self, config):
    self.config = config
    d = config.data
    rows, self.num_sentences, self.num_excluded = build_rows(d)
    nt, nv = int(d.num_test), int(d.num_valid)
    if len(rows) < nt + nv + config.train.batch_size:
      raise ValueError(f"the texts give {len(rows)} rows of {d.context_len + 1} tokens, fewer "
                       f"than data.num_test + data.num_valid + train.batch_size = "
                       f"{nt + nv + config.train.batch_size}")
    self._splits = {"test": rows[:nt], "valid": rows[nt:nt + nv], "train": rows[nt + nv:]}
    self.train_eval = self._splits["train"][:config.train.eval_train_examples]

  @property
  def vocab_size(self):
    return gpt2_bpe.VOCAB_SIZE

  @property
  def context_len(self):
    return int(self.config.data.context_len)

  @property
  def num_train(self):
    return len(self._splits["train"])

  @property
  def examples_per_step(self):
    return self.config.train.batch_size

  def splits(self):
    return {k: self._splits[k] for k in base.SPLITS}

  def eval_sets(self):
    return (("train", self.train_eval), ("valid", self._splits["valid"]),
            ("test", self._splits["test"]))

  @staticmethod
  def make_batch(rows):
    """The batch dict of `rows` [B, T + 1] (see `el_jax.core.tasks.base`)."""
    ones = np.ones((rows.shape[0], rows.shape[1] - 1), np.float32)
    return {"inputs": rows[:, :-1], "targets": rows[:, 1:],
            "segment_ids": ones.astype(np.int32), "loss_mask": ones, "mask_text": ones}

  def batch(self, seed, step):
    idx = base.step_indices(self.num_train, self.examples_per_step, self.config.data.data_seed,
                            seed, step)
    return self.make_batch(self._splits["train"][idx])

  def decode_fn(self, graphdef):
    """f(params, inputs, segment_ids, targets) -> ([B] summed CE, [B] correct tokens)."""
    return functools.partial(token_ce, graphdef)

  def evaluate(self, evaluator, params, rows):
    b = self.make_batch(rows)
    arrays = (b["inputs"], b["segment_ids"], b["targets"])
    ce, right = base.map_padded(lambda *a: evaluator.decode(params, *evaluator.put(a)), arrays,
                                self.config.train.eval_batch_size, evaluator.num_devices)
    n = int(b["loss_mask"].sum())
    mean = float(np.sum(ce, dtype=np.float64) / n)
    return {"ce_text": mean, "ppl_text": float(np.exp(mean)),
            "acc_text": float(np.sum(right) / n), "n_text": n}

  def summary_fields(self):
    d = self.config.data
    return {"text_lm": {"corpora": list(d.corpora), "exclude_label_copy": d.exclude_label_copy,
                        "sentences": self.num_sentences, "excluded_sentences": self.num_excluded,
                        "rows": {k: len(v) for k, v in self._splits.items()},
                        "tokens_per_row": self.context_len}}

  def write_plots(self, rows, workdir):
    from el_jax.infra import plots  # matplotlib only when training for real
    plots.plot_loss_groups({self.config.loss.name: rows}, os.path.join(workdir, "loss.png"),
                           groups=self.groups)

  # --- planning (el_jax.tools.plan) --------------------------------------------------

  @classmethod
  def abstract_batch_spec(cls, config):
    """The batch's shapes from the config alone (`base.Task.abstract_batch_spec`)."""
    return {"vocab_size": gpt2_bpe.VOCAB_SIZE, "context_len": int(config.data.context_len),
            "rows": cls.rows_per_step(config), "scored_positions": None}
