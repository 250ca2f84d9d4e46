r"""Masked-LM pretraining on a synthetic language with exact conditionals (seed 002) as a `Task`.

Data (`el_jax.core.data.mlm_data`): fixed train / valid / test sentences of a PCFG,
an HMM or a decoder restricted to its top-K tokens (`data.language` = "pcfg" |
"hmm" | "lm"; the last from `el_jax.core.data.lm_language`, with the exact
conditionals at the fixed evaluation masks only), one sentence per row padded to T =
`data.max_len_tokens`; terminal ids 0..V-1, MASK = V, PAD = V + 1 (model
vocabulary V + 2). Segment ids are 1 on the sentence and 0 on padding, so
with `model.doc_mask=True` no real token attends to padding.

Training batches (`train.batch_size` sentences, `base.step_indices`; the
masks drawn from a generator keyed on (data seed, model seed, step)):
  masking = "one"   the paper's Sec. 3 setup ("for simplicity, we only consider
                    masking out one token"): one uniformly chosen real position
                    per sentence is replaced by MASK and scored;
  masking = "bert"  each real position is chosen with probability 0.15 (at
                    least one per sentence: a sentence with none gets one
                    uniform position); chosen positions become MASK (80%), a
                    uniform random terminal (10%) or stay (10%); all chosen
                    positions are scored. The reference repository pre-trains
                    with BERT masking (its README: generate_samples.py
                    --masked_lm_prob 0.15 --max_predictions_per_seq 5). A
                    scored position that stays unchanged (or holds a random
                    word) asks the model to keep, at every position, the
                    word there; "one" scores only the MASK position, so
                    nothing asks an encoder to keep the other words.
The targets are the original tokens; `loss_mask` (and the one group's
`mask_masked`) is 1 at the chosen positions.

Evaluation (valid, test, and the first `train.eval_train_sentences` training
sentences) uses one fixed masked position per sentence (`mask_pos`, from the
data seed) with MASK as input. The model's distribution q is its softmax
renormalised over the V terminals (the MASK / PAD logits are dropped: they
are never targets), and p is the exact conditional p(x_t = . | x_-t):
  mlm_loss      mean -log q(x_t) of the true token (the MLM loss, one mask per sentence)
  true_entropy  mean H(p): the optimal value of mlm_loss, in expectation
  gap           mlm_loss - true_entropy (an unbiased but noisy estimate of kl)
  kl            mean KL(p || q), exact over the vocabulary: E_x[mlm_loss] =
                true_entropy + kl, and kl has no sampling noise from x_t
                (the paper's App. A.6 evaluation)
  acc           argmax q == the true token;  true_acc: argmax p == the true token
  n             sentences evaluated
"""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from el_jax.core import adversarial
from el_jax.core.data import lm_language
from el_jax.core.data import mlm_data
from el_jax.core.models import decoder
from el_jax.core.tasks import base

MASKINGS = ("one", "bert")
BERT_RATE = 0.15  # fraction of real positions chosen by "bert" masking
BERT_MASK, BERT_RANDOM = 0.8, 0.1  # of the chosen: MASK, random terminal (the rest unchanged)


# ----------------------------------------------------------------------------
# The language of `config.data`


def check_data_config(d):
  """ValueError naming the `data.*` field (no data built; an LM generator's config.json read)."""
  mlm_data.check_data_config(d)
  if d.language == "lm":
    lm_language.check_data_config(d)


def language(d):
  """The PCFG, HMM (`mlm_data.language`) or LM-sampled language (`lm_language.language`)."""
  return lm_language.language(d) if d.get("language") == "lm" else mlm_data.language(d)


def num_terminals(d):
  """V of `config.data` without building data (the LM language: K; else the language's)."""
  return int(d.top_k) if d.get("language") == "lm" else mlm_data.language(d).vocab_size


# ----------------------------------------------------------------------------
# Masking (host-side NumPy)


def mask_one(tokens_BxT, lengths_B, rng, mask_id):
  """(inputs, chosen [B, T] bool): one uniform real position per row replaced by MASK."""
  b = tokens_BxT.shape[0]
  pos = np.minimum((rng.random(b) * lengths_B).astype(np.int64), lengths_B - 1)
  chosen = np.zeros(tokens_BxT.shape, bool)
  chosen[np.arange(b), pos] = True
  inputs = tokens_BxT.copy()
  inputs[chosen] = mask_id
  return inputs, chosen


def mask_bert(tokens_BxT, lengths_B, rng, mask_id, num_terminals):
  """(inputs, chosen [B, T] bool): BERT's 15% with 80/10/10 (module docstring)."""
  b, t = tokens_BxT.shape
  real = np.arange(t)[None, :] < lengths_B[:, None]
  chosen = (rng.random((b, t)) < BERT_RATE) & real
  forced = np.minimum((rng.random(b) * lengths_B).astype(np.int64), lengths_B - 1)
  none = ~chosen.any(axis=1)
  chosen[np.flatnonzero(none), forced[none]] = True
  u = rng.random((b, t))
  to_mask = chosen & (u < BERT_MASK)
  to_random = chosen & (u >= BERT_MASK) & (u < BERT_MASK + BERT_RANDOM)
  inputs = tokens_BxT.copy()
  inputs[to_mask] = mask_id
  inputs[to_random] = rng.integers(0, num_terminals, size=int(to_random.sum()))
  return inputs, chosen


# ----------------------------------------------------------------------------
# Evaluation


def masked_log_probs(graphdef, num_terminals, params, inputs_BxT, segment_ids_BxT, positions_B):
  """[B, V] log-probabilities over the V terminals at each row's masked position.

  The model's softmax renormalised over the terminal ids (MASK / PAD logits dropped).
  """
  logits_BxTxW = decoder.apply(graphdef, params, inputs_BxT, segment_ids_BxT)
  at_BxW = logits_BxTxW[jnp.arange(logits_BxTxW.shape[0]), positions_B]
  return jax.nn.log_softmax(at_BxW[:, :num_terminals], axis=-1)


def mlm_metrics(logq_NxV, p_NxV, true_N):
  """mlm_loss, true_entropy, gap, kl, acc, true_acc, n (module docstring) in float64 NumPy.

  `logq_NxV`: the model's log-probabilities over the terminals; `p_NxV` the
  exact conditionals; `true_N` the true tokens.
  """
  logq = np.asarray(logq_NxV, np.float64)
  p = np.asarray(p_NxV, np.float64)
  true = np.asarray(true_N)
  n = true.shape[0]
  nll = -logq[np.arange(n), true]
  pos = p > 0
  plogp = np.where(pos, p * np.log(np.where(pos, p, 1.0)), 0.0)
  ent = -plogp.sum(axis=1)
  kl = (plogp - np.where(pos, p * logq, 0.0)).sum(axis=1)
  return {"mlm_loss": float(nll.mean()), "true_entropy": float(ent.mean()),
          "gap": float(nll.mean() - ent.mean()), "kl": float(kl.mean()),
          "acc": float((logq.argmax(axis=1) == true).mean()),
          "true_acc": float((p.argmax(axis=1) == true).mean()), "n": int(n)}


def unigram_metrics(corpus, split):
  """`mlm_metrics` of the unigram model (training-split word frequencies) on `split`."""
  logq = np.broadcast_to(np.log(corpus.unigram()), (len(split), corpus.vocab_size))
  return mlm_metrics(logq, split.cond_at_mask, split.masked_tokens)


# ----------------------------------------------------------------------------
# The task


class MLMTask(base.BatchSizeRows, base.Task):
  """One-mask (or BERT) MLM on a PCFG / HMM corpus, scored against the exact conditionals."""

  groups = ("masked",)
  resumable_fields = frozenset({"train.eval_batch_size", "train.eval_train_sentences",
                                "data.cache_dir", "data.sample_batch", "data.cond_batch"})

  @classmethod
  def validate_config(cls, config):
    adversarial.validate_config(config)  # first: it names the language it needs
    d, t, m = config.data, config.train, config.model
    check_data_config(d)
    if d.get("masking") not in MASKINGS:
      raise ValueError(f"data.masking={d.get('masking')!r}; allowed: {MASKINGS}")
    for name in ("batch_size", "eval_batch_size", "eval_train_sentences"):
      base.check_int("train", t, name, 1)
    if d.num_train < t.batch_size:
      raise ValueError(f"data.num_train={d.num_train} < train.batch_size={t.batch_size}")
    if decoder.preset(m.preset, vocab_size=1).causal:
      raise ValueError(f"model.preset={m.preset!r} is causal: a masked token would not see the "
                       f"words after it; the MLM task needs a bidirectional preset, "
                       f"'encoder' or 'bilstm'")
    if not m.doc_mask:
      raise ValueError("model.doc_mask=False would let the sentence attend to its padding; the "
                       "MLM task needs model.doc_mask=True")

  @classmethod
  def single_process_reason(cls, config):
    return ("adversarial.enabled (its downstream data live on one device)"
            if adversarial.enabled(config) else "")

  def step_fn(self):
    """Seed 002's adversarial pretraining (MLM minus a transfer term; el_jax.core.adversarial)
    when `adversarial.enabled`, else the plain step."""
    if adversarial.enabled(self.config):
      return adversarial.make_step_fn(self)
    return super().step_fn()

  def __init__(self, config):
    self.config = config
    d = config.data
    self.language = language(d)
    data_lib = lm_language if d.language == "lm" else mlm_data
    self.corpus = data_lib.build(d, self.language)
    self.train_eval = data_lib.train_eval_split(self.corpus, self.language,
                                                config.train.eval_train_sentences, d.data_seed)

  # --- data ------------------------------------------------------------------

  @property
  def vocab_size(self):
    return self.corpus.model_vocab_size

  @property
  def context_len(self):
    return self.corpus.max_len

  @property
  def num_terminals(self):
    return self.corpus.vocab_size

  @property
  def num_train(self):
    return len(self.corpus.train)

  @property
  def examples_per_step(self):
    return self.config.train.batch_size

  def splits(self):
    return self.corpus.splits

  def eval_sets(self):
    return (("train", self.train_eval), ("valid", self.corpus.valid), ("test", self.corpus.test))

  def batch(self, seed, step):
    d = self.config.data
    idx = base.step_indices(self.num_train, self.examples_per_step, d.data_seed, seed, step)
    rng = np.random.default_rng([d.data_seed, seed, step, 1])
    return self.make_batch(self.corpus.train.subset(idx), rng)

  def make_batch(self, split, rng):
    """The batch dict of the sentences of `split`, masked by `data.masking` with `rng`."""
    c = self.corpus
    if self.config.data.masking == "one":
      inputs, chosen = mask_one(split.tokens, split.lengths, rng, c.mask_id)
    else:
      inputs, chosen = mask_bert(split.tokens, split.lengths, rng, c.mask_id, c.vocab_size)
    loss_mask = chosen.astype(np.float32)
    return {"inputs": inputs, "targets": split.tokens.copy(), "segment_ids": split.segment_ids,
            "loss_mask": loss_mask, **base.group_masks(loss_mask, {"masked": np.float32(1.0)})}

  # --- evaluation ------------------------------------------------------------

  def decode_fn(self, graphdef):
    """f(params, inputs, segment_ids, positions) -> [B, V] log-probs over the terminals."""
    return functools.partial(masked_log_probs, graphdef, self.num_terminals)

  def log_probs(self, evaluator, params, split):
    """[N, V] the model's log-probabilities over the terminals at `split.mask_pos`."""
    arrays = (split.masked_inputs(self.corpus.mask_id), split.segment_ids, split.mask_pos)
    return base.map_padded(lambda *a: evaluator.decode(params, *evaluator.put(a)), arrays,
                           self.config.train.eval_batch_size, evaluator.num_devices)

  def evaluate(self, evaluator, params, split):
    """mlm_loss, true_entropy, gap, kl, acc, true_acc, n at the fixed masks (module docstring)."""
    return mlm_metrics(self.log_probs(evaluator, params, split), split.cond_at_mask,
                       split.masked_tokens)

  # --- reporting -------------------------------------------------------------

  def summary_fields(self):
    d, c = self.config.data, self.corpus
    lang = {"name": d.language, **{k: v for k, v in c.key.items()
                                   if k not in ("format", "language")}}
    if d.language == "pcfg":
      lang["grammar"] = d.grammar
    elif d.language == "lm":
      lang["generator"] = d.generator
      if self.language.coverage() is not None:
        lang["top_k_coverage"] = self.language.coverage()  # share of the free generator's tokens
      lang["cost"] = (f"{self.language.vocab_size} forward passes of {self.language.length} "
                      f"tokens per evaluated sentence (the exact conditional at its mask)")
    uni = {name: unigram_metrics(c, s) for name, s in (("valid", c.valid), ("test", c.test))}
    return {
        "language": lang,
        "vocab_size_terminals": c.vocab_size,
        "context_len": c.max_len,
        "masking": d.masking,
        "optimal_loss": uni["test"]["true_entropy"],
        "unigram": {f"{split}_{k}": m[k] for split, m in uni.items()
                    for k in ("mlm_loss", "gap", "kl")},
        "data_cache": c.path,
        "note": ("optimal_loss = mean entropy of the exact conditional at the test set's fixed "
                 "masked positions (one uniform position per sentence, nats); gap = mlm_loss - "
                 "true_entropy, kl = exact KL(p_true || q) with q the model's softmax "
                 "renormalised over the terminals. unigram: the same metrics of the training "
                 "split's word frequencies."),
    }

  def write_plots(self, rows, workdir):
    plot_gap(rows, os.path.join(workdir, "valid_gap.png"),
             unigram=unigram_metrics(self.corpus, self.corpus.valid)["gap"])

  # --- planning (el_jax.tools.plan) --------------------------------------------------

  @classmethod
  def abstract_batch_spec(cls, config):
    """The batch's shapes from the config alone (`base.Task.abstract_batch_spec`): the
    language (grammar file or HMM matrices) is built for its vocabulary, no corpus (the LM
    language: data.top_k, no generator)."""
    d = config.data
    vocab = num_terminals(d) + 2  # terminals, MASK, PAD (`Corpus.model_vocab_size`)
    return {"vocab_size": vocab, "context_len": int(d.max_len_tokens),
            "rows": cls.rows_per_step(config), "scored_positions": None}


def plot_gap(rows, path, split="valid", unigram=None):
  """`<split>` gap and KL vs step on a log scale (paper Fig. 10); thin lines are seeds.

  Points where the (noisy) gap is <= 0 cannot be drawn on a log scale and are left out.
  """
  from el_jax.infra import plots  # noqa: F401  (matplotlib only when training for real; selects Agg)
  import matplotlib.pyplot as plt
  evals = [r for r in rows if r.get("kind") == "eval"]
  fig, ax = plt.subplots(figsize=(5.5, 3.8))
  for key, color in (("gap", "tab:blue"), ("kl", "tab:red")):
    for i, seed in enumerate(sorted({r["seed"] for r in evals})):
      pts = sorted((r["step"], r[f"{split}_{key}"]) for r in evals
                   if r["seed"] == seed and r.get(f"{split}_{key}") is not None)
      pts = [(s, v) for s, v in pts if v > 0]
      if pts:
        ax.plot(*zip(*pts), color=color, marker="o", ms=3, lw=1, alpha=0.8,
                label=f"{split} {'mlm_loss - true_entropy' if key == 'gap' else 'KL(p || q)'}"
                if i == 0 else None)
  if unigram is not None and unigram > 0:
    ax.axhline(unigram, color="gray", ls="--", lw=1, label="unigram model's gap")
  ax.set_yscale("log")
  ax.set_xlabel("step")
  ax.set_ylabel("nats above the optimal loss")
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
