"""The label-copy task on natural text (seed 000, section 5.2, Table 2) as a `Task` of `el_jax.run.train`.

Data (`el_jax.core.data.label_copy`): one sentence of the King James Bible or of
Shakespeare (`data.corpus`) per row, GPT-2 tokens, with its one-word label
injected in the middle (and, for easy examples, at the start) and copied as
the target after " Label:". Fixed train / valid / test splits of sentences
drawn from `data.data_seed`. The loss is on the label's tokens only, at the
static positions `scored_positions` (rows are aligned so that the label
always starts at the same index).

Metric groups: `easy` (the label is also the sentence's first word: a
shortcut at a fixed position) and `hard` (only in the middle).

Evaluation per split (greedy decoding of the label after the separator,
`greedy_labels`; the training split on its first `train.eval_train_examples`
examples):
  em_<g>   exact match: every token of the label right (the paper's accuracy)
  cl_<g>   mean over label tokens of the greedy token being right (the copy task's CL,
           per GPT-2 token of the label)
  n_<g>    examples in the group  (g in easy, hard, all)

`model.pretrained` names a Hugging Face GPT-2 checkpoint directory whose
weights start the model ("" = random init; `el_jax.run.train` checks and loads
it): the paper fine-tunes the pretrained GPT-2.
"""
import functools
import os

import jax.numpy as jnp
import numpy as np

from el_jax.core.data import gpt2_bpe
from el_jax.core.data import label_copy
from el_jax.core.models import decoder
from el_jax.core.tasks import base


def greedy_labels(graphdef, answer_start, max_label_tokens, params, inputs_BxT, segment_BxT):
  """[B, L_max] greedy label tokens: pass k reads the model's own tokens 0..k-1 at
  answer_start.. and predicts token k at input position answer_start - 1 + k."""
  ctx = inputs_BxT
  preds = []
  for k in range(max_label_tokens):
    pos = answer_start - 1 + k
    logits = decoder.apply(graphdef, params, ctx, segment_BxT, jnp.array([pos], jnp.int32))
    pred_B = jnp.argmax(logits[:, 0, :], axis=-1).astype(ctx.dtype)
    if pos + 1 < ctx.shape[1]:
      ctx = ctx.at[:, pos + 1].set(pred_B)
    preds.append(pred_B)
  return jnp.stack(preds, axis=1)


def label_metrics(pred_NxL, answers_NxL, easy_N):
  """em / cl / n per group from greedy tokens and the answers (-1 after each label)."""
  real = answers_NxL >= 0
  right = (pred_NxL == answers_NxL) & real
  em = (right | ~real).all(axis=1)
  out = {}
  for g, sel in (("easy", easy_N), ("hard", ~easy_N), ("all", np.ones(len(easy_N), bool))):
    n = int(sel.sum())
    out[f"em_{g}"] = float(em[sel].mean()) if n else float("nan")
    out[f"cl_{g}"] = float(right[sel].sum() / real[sel].sum()) if n else float("nan")
    out[f"n_{g}"] = n
  return out


class LabelCopyTask(base.BatchSizeRows, base.Task):
  """Label copy: one sentence per row, the loss on the label's tokens after the separator."""

  groups = label_copy.GROUPS
  resumable_fields = frozenset({"train.eval_batch_size", "train.eval_train_examples",
                                "data.cache_dir"})

  @classmethod
  def validate_config(cls, config):
    d, t, m = config.data, config.train, config.model
    label_copy.check_data_config(d)
    for name in ("batch_size", "eval_batch_size", "eval_train_examples"):
      base.check_int("train", t, name, 1)
    if d.num_train and d.num_train < t.batch_size:
      raise ValueError(f"data.num_train={d.num_train} < train.batch_size={t.batch_size}")
    if not decoder.preset(m.preset, vocab_size=1).causal:
      raise ValueError(f"model.preset={m.preset!r} is bidirectional: the label would be visible; "
                       f"the label-copy task needs a causal preset ('gpt2' or 'gpt_neox')")
    if not m.doc_mask:
      raise ValueError("model.doc_mask=False would let the sentence attend to the padding before "
                       "it; the label-copy task needs model.doc_mask=True")
    # model.pretrained (a GPT-2 checkpoint directory) is checked and loaded by el_jax.run.train.

  def __init__(self, config):
    self.config = config
    self.data = label_copy.build(config.data)  # read from its .npz cache after the first time
    for name, split in self.data.splits.items():  # the ids that reach the (pretrained) model
      gpt2_bpe.check_ids(split.rows, self.vocab_size, f"the {name} split of {self.data.path}",
                         "delete that cache file to rebuild it")
    if len(self.data.train) < config.train.batch_size:
      raise ValueError(f"the training split has {len(self.data.train)} examples < "
                       f"train.batch_size={config.train.batch_size}")
    n = min(config.train.eval_train_examples, len(self.data.train))
    self.train_eval = self.data.train.subset(slice(0, n))

  # --- data ------------------------------------------------------------------

  @property
  def vocab_size(self):
    return gpt2_bpe.VOCAB_SIZE

  @property
  def context_len(self):
    return self.data.context_len

  @property
  def num_train(self):
    return len(self.data.train)

  @property
  def examples_per_step(self):
    return self.config.train.batch_size

  def splits(self):
    return self.data.splits

  def eval_sets(self):
    return (("train", self.train_eval), ("valid", self.data.valid), ("test", self.data.test))

  @property
  def scored_positions(self):
    return self.data.scored_positions

  def batch(self, seed, step):
    idx = base.step_indices(self.num_train, self.examples_per_step, self.config.data.data_seed,
                            seed, step)
    return self.make_batch(self.data.train.subset(idx))

  def make_batch(self, split):
    """The batch dict of the examples of `split` (see `el_jax.core.tasks.base`)."""
    mask = self.data.loss_mask(split)
    easy = split.easy[:, None].astype(np.float32)
    return {"inputs": split.inputs, "targets": split.targets, "segment_ids": split.segment_ids,
            "loss_mask": mask, **base.group_masks(mask, {"easy": easy, "hard": 1.0 - easy})}

  # --- evaluation ------------------------------------------------------------

  def decode_fn(self, graphdef):
    """f(params, inputs, segment_ids) -> [B, L_max] greedy label tokens."""
    return functools.partial(greedy_labels, graphdef, self.data.answer_start,
                             self.data.max_label_tokens)

  def eval_inputs(self, split):
    """[N, T] inputs with the answer region blanked (<|endoftext|>), so nothing of the label leaks."""
    x = split.inputs.copy()
    x[:, self.data.answer_start:] = gpt2_bpe.EOT_ID
    return x

  def predict(self, evaluator, params, split):
    """[N, L_max] greedy label tokens of every example of `split`."""
    arrays = (self.eval_inputs(split), split.segment_ids)
    return base.map_padded(lambda *a: evaluator.decode(params, *evaluator.put(a)), arrays,
                           self.config.train.eval_batch_size, evaluator.num_devices)

  def evaluate(self, evaluator, params, split):
    """em / cl / n per group by greedy decoding (module docstring)."""
    return label_metrics(self.predict(evaluator, params, split), self.data.answers(split),
                         split.easy)

  # --- reporting -------------------------------------------------------------

  def summary_fields(self):
    dt = self.data
    return {"label_copy": {
        "corpus": self.config.data.corpus, "labels": list(dt.labels),
        "context_len": dt.context_len, "max_label_tokens": dt.max_label_tokens,
        "separator": label_copy.SEPARATOR,
        "sizes": {name: len(s) for name, s in dt.splits.items()},
        "easy_fraction": {name: float(s.easy.mean()) for name, s in dt.splits.items()},
        "data_cache": dt.path}}

  def write_plots(self, rows, workdir):
    from el_jax.infra import plots  # matplotlib only when training for real
    plots.plot_loss_groups({self.config.loss.name: rows}, os.path.join(workdir, "loss_easy_hard.png"),
                           groups=self.groups)
    plots.plot_accuracy(rows, os.path.join(workdir, "accuracy.png"), groups=self.groups)

  # --- planning (el_jax.tools.plan) --------------------------------------------------

  @classmethod
  def abstract_batch_spec(cls, config):
    """The batch's shapes from the config alone (`base.Task.abstract_batch_spec`): reads
    the corpus's labels (their longest tokenization, L_max, fixes the context), builds no
    examples."""
    d = config.data
    label_copy.check_data_config(d)
    corpus = label_copy._corpus_name(d)
    _, label_ids = label_copy._labels(corpus, label_copy.sentence_pool(corpus, int(d.min_words)))
    lmax = max(len(x) for x in label_ids)
    t = label_copy.context_len(int(d.max_sentence_tokens), lmax)
    a0 = t - lmax  # `LabelCopyData.answer_start`
    return {"vocab_size": gpt2_bpe.VOCAB_SIZE, "context_len": t, "rows": cls.rows_per_step(config),
            "scored_positions": np.arange(a0 - 1, a0 - 1 + lmax, dtype=np.int32)}
