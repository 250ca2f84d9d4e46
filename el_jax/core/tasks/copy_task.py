"""The padded-shifted copy task (seed 000, sections 3-4) as a `Task` of `el_jax.run.train`.

Data (`el_jax.core.data.copy_task`): fixed train / valid / test sets drawn from
the data seed; `k = data.context_len / string_len` strings are packed per
context. The loss is on the L_c answer tokens after `<CLS>`. With `data.pipeline="grain"`
the splits are read from the TFDS data set `el_jax_copy_task` and the training batches come
from a grain loader (`base.PIPELINES`).

Metric groups: `easy` (the padding is the Caesar-shifted sequence, a
shortcut) and `hard` (random padding: the answer must be copied).

Evaluation per split (greedy decoding of every answer, `greedy_answers`):
  em_<g>  exact match: all L_c answer letters right, over the strings of group g
  cl_<g>  copy-letter accuracy: mean over answer letters
  n_<g>   strings in the group  (g in easy, hard, all)
"""
import functools
import os

import jax.numpy as jnp
import numpy as np

from el_jax.core.data import copy_task
from el_jax.core.models import decoder
from el_jax.core.tasks import base


def task_spec(config):
  d = config.data
  return copy_task.CopyTaskSpec(seq_len=d.seq_len, pad_len=d.pad_len, p_easy=d.p_easy,
                                num_letters=d.num_letters)


@functools.lru_cache(maxsize=4)
def _splits(spec, num_train, num_valid, num_test, seed):
  return copy_task.make_splits(spec, num_train=num_train, num_valid=num_valid,
                               num_test=num_test, seed=seed)


def greedy_answers(graphdef, spec, k, params, contexts_CxT, segment_CxT):
  """Greedy autoregressive decoding of every answer in a packed context.

  Pass j predicts answer token j of all k strings at once from a context
  whose answer tokens < j are the model's own earlier predictions (later
  answer tokens cannot influence the prediction: the model is causal).
  Earlier strings in the context therefore also carry predicted answers for
  positions < j; strings are independent, so this leaks nothing.
  Returns predictions [C, k, L_c].
  """
  s, a0, lc = spec.string_len, spec.answer_start, spec.seq_len
  starts = jnp.arange(k) * s + a0  # first answer token of each slot
  ctx = contexts_CxT
  preds = []
  for j in range(lc):
    logits = decoder.apply(graphdef, params, ctx, segment_CxT)
    q = starts + j - 1  # positions whose next token is answer token j
    pred_CxK = jnp.argmax(logits[:, q, :], axis=-1).astype(ctx.dtype)
    ctx = ctx.at[:, starts + j].set(pred_CxK)
    preds.append(pred_CxK)
  return jnp.stack(preds, axis=-1)


def _tfds_splits(config, spec):
  """({split: CopyDataset} read from the TFDS data set of `config`, the train data source)."""
  # Heavy, optional: TFDS and grain, for data.pipeline="grain" only.
  from el_jax.core.data import loader
  from el_jax.core.data import tfds_builders
  sources = tfds_builders.data_source("el_jax_copy_task", config)
  out = {}
  for name, src in sources.items():
    rec = loader.read(src, range(len(src)))
    tokens, easy = rec["tokens"].astype(np.int32), rec["easy"].astype(bool)
    tokens.flags.writeable = easy.flags.writeable = False
    out[name] = copy_task.CopyDataset(tokens=tokens, easy=easy, spec=spec)
  return out, sources["train"]


class CopyTask(base.Task):
  """Copy task: strings packed k per context, loss on the answer tokens."""

  groups = ("easy", "hard")
  resumable_fields = frozenset({"train.eval_batch_contexts"})

  @classmethod
  def validate_config(cls, config):
    t = config.train
    if t.batch_strings < 1:
      raise ValueError(f"train.batch_strings={t.batch_strings} must be >= 1")
    spec = task_spec(config)  # CopyTaskSpec checks its own fields
    k = copy_task.strings_per_context(spec, config.data.context_len)
    if t.batch_strings % k:
      raise ValueError(f"train.batch_strings={t.batch_strings} is not a multiple of the "
                       f"{k} strings packed per context (data.context_len="
                       f"{config.data.context_len})")
    d = config.data
    if d.num_train < t.batch_strings:
      raise ValueError(f"data.num_train={d.num_train} < train.batch_strings={t.batch_strings}")
    for name in ("num_valid", "num_test"):
      if d[name] < 1:
        raise ValueError(f"data.{name}={d[name]} must be >= 1")
    base.data_pipeline(config)

  @classmethod
  def rows_per_step(cls, config):
    k = copy_task.strings_per_context(task_spec(config), config.data.context_len)
    return config.train.batch_strings // k

  @classmethod
  def describe_batch(cls, config):
    k = copy_task.strings_per_context(task_spec(config), config.data.context_len)
    return (f"{cls.rows_per_step(config)} contexts per batch (train.batch_strings="
            f"{config.train.batch_strings} / {k} strings per context)")

  def __init__(self, config):
    self.config = config
    self.spec = task_spec(config)
    d = config.data
    self.k = copy_task.strings_per_context(self.spec, d.context_len)
    self._loaders = {}
    if base.data_pipeline(config) == "grain":
      self._splits, self._train_source = _tfds_splits(config, self.spec)
    else:
      self._splits = _splits(self.spec, d.num_train, d.num_valid, d.num_test, d.data_seed)
    self.loss_mask_T = copy_task.loss_mask_for_context(self.spec, self.k)
    self._scored = np.flatnonzero(self.loss_mask_T).astype(np.int32)
    self.segment_T = np.repeat(np.arange(self.k, dtype=np.int32), self.spec.string_len)

  # --- data ------------------------------------------------------------------

  @property
  def vocab_size(self):
    return self.spec.vocab_size

  @property
  def context_len(self):
    return self.config.data.context_len

  @property
  def num_train(self):
    return len(self._splits["train"])

  @property
  def examples_per_step(self):
    return self.config.train.batch_strings

  @property
  def train(self):
    return self._splits["train"]

  @property
  def test(self):
    return self._splits["test"]

  def splits(self):
    return self._splits

  @property
  def scored_positions(self):
    return self._scored

  def batch(self, seed, step):
    if base.data_pipeline(self.config) == "grain":
      return self._loader(seed)[step]
    idx = base.step_indices(self.num_train, self.examples_per_step, self.config.data.data_seed,
                            seed, step)
    return self.make_batch(self.train.tokens[idx], self.train.easy[idx])

  def _loader(self, seed):
    """The grain loader of model seed `seed` (data.pipeline="grain"; `base.grain_loader`)."""
    if seed not in self._loaders:
      self._loaders[seed] = base.grain_loader(
          self, self._train_source, lambda r: self.make_batch(r["tokens"], r["easy"]), seed)
    return self._loaders[seed]

  def data_iterator(self, seed):
    """data.pipeline="grain": the grain iterator of `seed` (`base.Task.data_iterator`)."""
    return self._loader(seed).iterator() if base.data_pipeline(self.config) == "grain" else None

  def make_batch(self, tokens_NxS, easy_N):
    """The batch dict of N strings (N a multiple of k), packed k per context."""
    ctx_CxT, valid_CxK = copy_task.pack(tokens_NxS, self.k)
    c = ctx_CxT.shape[0]
    easy_CxK = copy_task.pack(easy_N[:, None].astype(np.int32), self.k)[0].astype(bool)
    slot_mask = np.repeat(valid_CxK, self.spec.string_len, axis=1).astype(np.float32)
    easy_T = np.repeat(easy_CxK, self.spec.string_len, axis=1).astype(np.float32)
    mask = self.loss_mask_T[None] * slot_mask
    return {
        "inputs": ctx_CxT,
        "targets": np.roll(ctx_CxT, -1, axis=1),
        "loss_mask": mask,
        **base.group_masks(mask, {"easy": easy_T, "hard": 1.0 - easy_T}),
        "segment_ids": np.broadcast_to(self.segment_T, (c, self.segment_T.size)).copy(),
    }

  # --- evaluation ------------------------------------------------------------

  def decode_fn(self, graphdef):
    """f(params, contexts, segment_ids) -> greedy answers [C, k, L_c]."""
    return functools.partial(greedy_answers, graphdef, self.spec, self.k)

  def predict(self, evaluator, params, dataset):
    """Greedy answers [N, L_c] of every string of `dataset`."""
    k = self.k

    def call(toks):
      ctx, _ = copy_task.pack(toks, k)
      seg = np.broadcast_to(self.segment_T, ctx.shape).copy()
      return np.asarray(evaluator.decode(params, *evaluator.put((ctx, seg)))).reshape(
          -1, self.spec.seq_len)

    per_call = max(self.config.train.eval_batch_contexts, 1) * k
    return base.map_padded(call, (dataset.tokens,), per_call, k * evaluator.num_devices)

  def evaluate(self, evaluator, params, dataset):
    """EM and CL accuracy by greedy decoding, per group (module docstring)."""
    pred_NxL = self.predict(evaluator, params, dataset)
    correct = pred_NxL == dataset.answers
    n = len(dataset)
    out = {}
    for g, sel in (("easy", dataset.easy), ("hard", ~dataset.easy), ("all", np.ones(n, bool))):
      c = correct[sel]
      out[f"em_{g}"] = float(c.all(axis=1).mean()) if c.size else float("nan")
      out[f"cl_{g}"] = float(c.mean()) if c.size else float("nan")
      out[f"n_{g}"] = int(sel.sum())
    return out

  # --- reporting -------------------------------------------------------------

  def summary_fields(self):
    return {"strings_per_context": self.k}

  def write_plots(self, rows, workdir):
    from el_jax.infra import plots  # matplotlib only when training for real
    plots.plot_loss_groups({self.config.loss.name: rows}, os.path.join(workdir, "loss_easy_hard.png"),
                           groups=self.groups)
    plots.plot_accuracy(rows, os.path.join(workdir, "accuracy.png"), groups=self.groups)

  # --- planning (el_jax.tools.plan) --------------------------------------------------

  @classmethod
  def abstract_batch_spec(cls, config):
    """The batch's shapes from the config alone (`base.Task.abstract_batch_spec`)."""
    spec = task_spec(config)
    k = copy_task.strings_per_context(spec, config.data.context_len)
    scored = np.flatnonzero(copy_task.loss_mask_for_context(spec, k)).astype(np.int32)
    return {"vocab_size": spec.vocab_size, "context_len": int(config.data.context_len),
            "rows": cls.rows_per_step(config), "scored_positions": scored}
