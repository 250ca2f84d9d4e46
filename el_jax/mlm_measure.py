"""Tr(H) and linear-probe accuracy of the MLM models' checkpoints (seed 002, Sec. 5).

The measurements of experiments/mlm_flatness.py (Figures 1 / 3, 2 and 5) and
experiments/adversarial_pretraining.py (Tables 1 and 2):

* Tr(H) by the estimator of the seed's appendix B.1 (labels sampled from the model,
  `fisher_samples` per input, on `flat_inputs` valid sentences with their fixed masks; mean
  and standard deviation over `flat_reps` repetitions, each on its own inputs and draws)
  and by Hutchinson probes of the exact Hessian (`el_jax.flatness`);
* linear-probe accuracy on the downstream tasks (`el_jax.probe.linear_probe`);
* fine-tuning accuracy on the same tasks (`el_jax.probe.fine_tune`: the paper's protocol, the
  whole encoder and a head on the first position, AdamW 1e-4 with 200 warmup steps);
* the pre-training losses of a checkpoint's step, from the run's eval rows (`eval_row`).
"""
import dataclasses

import jax
import numpy as np

from el_jax import checkpoint
from el_jax.data import downstream
from el_jax.data import mlm_data
from el_jax import flatness
from el_jax import metrics as metrics_lib
from el_jax import probe
from el_jax import step as step_lib
from el_jax import train

# The eval-row fields of an MLM run that `eval_row` returns by default.
EVAL_KEYS = ("valid_mlm_loss", "valid_gap", "valid_kl", "test_mlm_loss", "test_gap",
             "train_mlm_loss")


@dataclasses.dataclass
class Settings:
  """What `Measurer` measures, and on how much data."""
  tasks: str  # downstream tasks, comma-separated (PCFG: "A", "B", "C"; HMM: "10", ...)
  probe_train: int = 4000  # probe training examples per task
  probe_valid: int = 1000  # probe validation examples (the epoch is chosen on them)
  probe_test: int = 2000  # probe test examples
  probe_data_seed: int = 0  # seed of the probe data sets
  probe_epochs: int = 100  # probe training epochs
  flat_inputs: int = 200  # valid sentences per Tr(H) repetition
  flat_reps: int = 5  # Tr(H) repetitions (disjoint inputs)
  fisher_samples: int = 50  # sampled labels per input (appendix B.1)
  hutchinson_probes: int = 10  # Hutchinson probes per batch
  chunk: int = 4  # examples vmapped at once (memory)
  fine_tune_seeds: str = ""  # fine-tuning seeds, comma-separated ("" = no fine-tuning)
  fine_tune_epochs: int = 10  # fine-tuning epochs (the epoch is chosen on valid)

  @classmethod
  def from_args(cls, args):
    """The settings of an argparse namespace with these field names."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


class Measurer:
  """Loads checkpoints of one config (`language`: "pcfg" | "hmm") and measures Tr(H) and
  linear-probe accuracy as `settings` (a `Settings`) says."""

  def __init__(self, cfg, settings, language):
    self.cfg, self.settings = cfg, settings
    self.setup = train.Setup(cfg)
    self.trainer = train.Trainer(self.setup)
    self.task = self.setup.task
    self.loss_fn, self.logits_fn = step_lib.ce_objectives(self.trainer.graphdef)
    corpus = self.task.corpus
    lang = self.task.language if hasattr(self.task, "language") else None
    if lang is None:
      lang = mlm_data.language(cfg.data)
    self.tasks = {}
    for name in settings.tasks.split(","):
      kw = dict(num_train=settings.probe_train, num_valid=settings.probe_valid,
                num_test=settings.probe_test, seed=settings.probe_data_seed)
      if language == "pcfg":
        self.tasks[name] = downstream.pcfg_task(lang, name, seq_len=corpus.max_len, **kw)
      else:
        self.tasks[name] = downstream.hmm_task(lang, int(name), length=corpus.max_len, **kw)
    # B.1 inputs: valid sentences with their fixed masks, one disjoint group per repetition.
    v = corpus.valid
    n = settings.flat_inputs
    if n * settings.flat_reps > len(v):
      raise ValueError(f"flat_inputs={n} x flat_reps={settings.flat_reps} exceeds the "
                       f"{len(v)} valid sentences")
    self.flat_batches = [v.subset(np.arange(r * n, (r + 1) * n)).masked_batch(corpus.mask_id)
                         for r in range(settings.flat_reps)]

  def params(self, workdir, step, seed):
    return checkpoint.restore_params(self.trainer, workdir, seed, step)

  def flatness(self, params, step):
    """Tr(H) of `params` (appendix B.1 and Hutchinson); `step` is not used in the estimate."""
    s = self.settings
    fisher = []
    for r, b in enumerate(self.flat_batches):
      res = flatness.fisher_trace(self.logits_fn, params, b, key=jax.random.key(1000 + r),
                                  num_samples=s.fisher_samples, probe="labels",
                                  chunk_size=s.chunk, validate=r == 0)
      fisher.append(res.estimate)
    hutch = flatness.hessian_trace_over_batches(
        self.loss_fn, params, self.flat_batches, key=jax.random.key(7),
        num_probes=s.hutchinson_probes, chunk_size=2)
    return {"trace_b1": float(np.mean(fisher)), "trace_b1_std": float(np.std(fisher, ddof=1)),
            "trace_b1_reps": fisher, "trace_hutchinson": hutch.estimate,
            "trace_hutchinson_stderr": hutch.stderr}

  def probes(self, graphdef, params):
    """Linear-probe results per downstream task (5 probe seeds; the epoch chosen on valid)."""
    out = {}
    for name, ds in self.tasks.items():
      feats = {s: probe.encode(graphdef, params, ds.split(s).tokens, ds.split(s).segment_ids)
               for s in ("train", "valid", "test")}
      r = probe.linear_probe(feats["train"], ds.train.labels, feats["valid"], ds.valid.labels,
                             feats["test"], ds.test.labels, ds.num_classes,
                             epochs=self.settings.probe_epochs)
      out[name] = {k: r[k] for k in ("test_acc", "valid_acc", "epoch", "test_acc_mean",
                                     "test_acc_std", "valid_acc_mean")}
    return out

  def fine_tunes(self, graphdef, params):
    """Fine-tuning results per downstream task (`Settings.fine_tune_seeds`, the paper's
    protocol: CLS head, AdamW lr 1e-4, 200 warmup steps then linear decay, batch 32; the
    epoch chosen on valid); {} when no fine-tuning seeds are set."""
    seeds = [int(x) for x in self.settings.fine_tune_seeds.split(",") if x.strip()]
    out = {}
    for name, ds in self.tasks.items() if seeds else ():
      r = probe.fine_tune(graphdef, params, ds.train, ds.valid, ds.test, ds.num_classes,
                          seeds=seeds, epochs=self.settings.fine_tune_epochs, head="cls",
                          lr=1e-4, warmup_steps=200)
      out[name] = {k: r[k] for k in ("test_acc", "valid_acc", "epoch", "test_acc_mean",
                                     "test_acc_std", "valid_acc_mean")}
    return out


def eval_row(workdir, seed, step, keys=EVAL_KEYS):
  """The `keys` of the eval row of `seed` at `step` in a run's metrics.jsonl."""
  rows = [r for r in metrics_lib.read_rows(workdir)
          if r.get("kind") == "eval" and r.get("seed") == seed and r.get("step") == step]
  if not rows:
    raise ValueError(f"{workdir} has no eval row at step {step}: set train.eval_every to a "
                     f"divisor of train.checkpoint_every")
  r = rows[-1]
  return {k: r[k] for k in keys if k in r}
