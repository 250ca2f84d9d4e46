"""Tr(H) and linear-probe accuracy of the MLM models' checkpoints (seed 002, Sec. 5).

The measurements of experiments/mlm_flatness/ (Figures 1 / 3, 2 and 5) and
experiments/adversarial_pretraining.py (Tables 1 and 2):

* Tr(H) by the estimator of the seed's appendix B.1 (labels sampled from the model,
  `fisher_samples` per input, on `flat_inputs` valid sentences with their fixed masks; mean
  and standard deviation over `flat_reps` repetitions, each on its own inputs and draws)
  and by Hutchinson probes of the exact Hessian (`el_jax.core.flatness`);
* linear-probe accuracy on the downstream tasks (`el_jax.core.probe.linear_probe_selected`: the
  feature normalisation, learning rate and weight decay chosen on the valid split per model,
  from `probe_normalizations` x `probe_lrs` x `probe_weight_decays`);
* the sanity rows of every probe / fine-tuning table (`Measurer.sanity`), measured on
  the same splits with the same protocol: the majority class, the Bayes classifier (HMM: the
  forward-backward posterior of the hidden state; PCFG: the label is the inside algorithm's
  argmax, so 1), the paper's lookup table (the exact conditionals as features) and a randomly
  initialised model of the same architecture (the init of each pre-training seed);
* fine-tuning accuracy on the same tasks (`el_jax.core.probe.fine_tune`: the paper's protocol, the
  whole encoder and a head on the first position, AdamW 1e-4 with 200 warmup steps);
* the pre-training losses of a checkpoint's step, from the run's eval rows (`eval_row`).
"""
import dataclasses
import hashlib
import inspect
import json
import os

import jax
import ml_collections
import numpy as np
import optax

from el_jax.infra import checkpoint
from el_jax.run import config as config_lib
from el_jax.core.data import downstream
from el_jax.core.data import mlm_data
from el_jax.core import flatness
from el_jax.infra import metrics as metrics_lib
from el_jax.core import probe
from el_jax.infra import progress
from el_jax.core import step as step_lib
from el_jax.infra import workdir as wd
from el_jax.core.models import decoder
from el_jax.run import setup as setup_lib

# The fields of a probe / fine-tuning result that the experiments' JSON keeps.
RESULT_KEYS = ("test_acc", "valid_acc", "epoch", "test_acc_mean", "test_acc_std",
               "valid_acc_mean")
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
  probe_lrs: str = "0.001"  # probe learning rates, comma-separated (chosen on valid per model)
  probe_weight_decays: str = "0"  # probe AdamW weight decays, comma-separated (chosen on valid)
  # probe feature normalisations, comma-separated (chosen on valid): standardize | whiten
  probe_normalizations: str = "standardize"
  flat_inputs: int = 200  # valid sentences per Tr(H) repetition
  flat_reps: int = 5  # Tr(H) repetitions (disjoint inputs)
  fisher_samples: int = 50  # sampled labels per input (appendix B.1)
  hutchinson_probes: int = 10  # Hutchinson probes per batch
  chunk: int = 4  # examples vmapped at once (memory)
  fine_tune_seeds: str = ""  # fine-tuning seeds, comma-separated ("" = no fine-tuning)
  fine_tune_epochs: int = 10  # fine-tuning epochs (the epoch is chosen on valid)
  # folder of probe results by the content of their inputs ("" = none; `probe_features`)
  probe_cache: str = ""

  @classmethod
  def from_args(cls, args):
    """The settings of an argparse namespace with these field names."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def check_probe_flags(lrs, normalizations):
  """ValueError naming --probe_lrs / --probe_normalizations and what is allowed, before a
  script trains anything (the grid is otherwise parsed only when the measuring starts)."""
  try:
    probe.parse_grid(lrs, "0", normalizations)
  except ValueError as e:
    raise ValueError(f"--probe_lrs={lrs!r} / --probe_normalizations={normalizations!r}: "
                     f"{e}") from None


class Measurer:
  """Loads checkpoints of one config (`language`: "pcfg" | "hmm") and measures Tr(H) and
  linear-probe accuracy as `settings` (a `Settings`) says."""

  def __init__(self, cfg, settings, language):
    self.cfg, self.settings = cfg, settings
    self.setup = setup_lib.Setup(cfg)
    self.trainer = setup_lib.Trainer(self.setup)
    self.task = self.setup.task
    self.loss_fn, self.logits_fn = step_lib.ce_objectives(self.trainer.graphdef)
    corpus = self.task.corpus
    lang = self.task.language if hasattr(self.task, "language") else None
    if lang is None:
      lang = mlm_data.language(cfg.data)
    self.language = lang
    self.grid = probe.parse_grid(settings.probe_lrs, settings.probe_weight_decays,
                                 settings.probe_normalizations)
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
    # Progress (a phase of a few seconds or more): the B.1 repetitions, then Hutchinson's.
    with progress.Bar(len(self.flat_batches) + 1, f"Tr(H) of checkpoint {step}",
                      unit="estimate", delay_s=progress.PHASE_DELAY_S) as bar:
      for r, b in enumerate(self.flat_batches):
        res = flatness.fisher_trace(self.logits_fn, params, b, key=jax.random.key(1000 + r),
                                    num_samples=s.fisher_samples, probe="labels",
                                    chunk_size=s.chunk, validate=r == 0)
        fisher.append(res.estimate)
        bar.update(1)
      hutch = flatness.hessian_trace_over_batches(
          self.loss_fn, params, self.flat_batches, key=jax.random.key(7),
          num_probes=s.hutchinson_probes, chunk_size=2)
      bar.update(1)
    return {"trace_b1": float(np.mean(fisher)), "trace_b1_std": float(np.std(fisher, ddof=1)),
            "trace_b1_reps": fisher, "trace_hutchinson": hutch.estimate,
            "trace_hutchinson_stderr": hutch.stderr}

  def probe_features(self, ds, feats_fn):
    """The linear probe (5 probe seeds; lr and weight decay chosen on valid from `self.grid`,
    the epoch chosen on valid) on the features `feats_fn(split)` of task `ds`, with the
    features' numerical rank (`probe.feature_rank`) and width beside it."""
    feats = {s: feats_fn(ds.split(s)) for s in ("train", "valid", "test")}
    path = self._cache_path(feats, ds)
    if path and os.path.exists(path):
      return wd.read_json(path, what="a cached probe result (--probe_cache); delete it to "
                                     "probe again")
    r = probe.linear_probe_selected(feats["train"], ds.train.labels, feats["valid"],
                                    ds.valid.labels, feats["test"], ds.test.labels,
                                    ds.num_classes, grid=self.grid,
                                    epochs=self.settings.probe_epochs)
    out = {**{k: r[k] for k in RESULT_KEYS}, "chosen": r["chosen"],
           "selection": r["selection"], "feature_rank": probe.feature_rank(feats["train"]),
           "num_features": int(feats["train"].shape[1])}
    if path:  # atomically: a process reading it never sees half a file
      wd.write_json(path, out)
    return out

  def _cache_path(self, feats, ds):
    """Where `Settings.probe_cache` keeps the probe result of these inputs (None without a
    cache): the name is a SHA-256 of everything the result is a function of, the features
    and labels of the three splits (bytes, dtype, shape), the class count, the grid, the
    epochs, el_jax.core.probe's source, `probe_features`' own (the fields it keeps) and the jax /
    optax versions. Same inputs on the same code give bit-identical results, so a hit is the
    result a fresh probe would print; a model, split or setting that differs in one bit is a
    miss. It lets processes probe disjoint models in parallel and a later run collect them
    (experiments/mlm_flatness/'s `probe_cache`)."""
    if not self.settings.probe_cache:
      return None
    h = hashlib.sha256()
    meta = {"grid": self.grid, "epochs": self.settings.probe_epochs,
            "num_classes": ds.num_classes, "jax": jax.__version__, "optax": optax.__version__}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    h.update(inspect.getsource(probe).encode())
    h.update(inspect.getsource(Measurer.probe_features).encode())  # the fields it keeps
    for s in ("train", "valid", "test"):
      for a in (feats[s], ds.split(s).labels):
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{s}|{a.dtype}|{a.shape}|".encode())
        h.update(a.tobytes())
    return os.path.join(self.settings.probe_cache, h.hexdigest() + ".json")

  def probes(self, graphdef, params):
    """Linear-probe results per downstream task (`probe_features` on the model's final hidden
    states, `probe.encode`)."""
    return self._per_task("linear probe", lambda name, ds: self.probe_features(
        ds, lambda sp: probe.encode(graphdef, params, sp.tokens, sp.segment_ids)))

  def _per_task(self, what, fn, tasks=None):
    """{task: fn(name, ds)} over `tasks` (default: every task), with progress over the tasks
    and, inside, each one labelled "<what> of task <name>" (`el_jax.infra.progress`)."""
    tasks = self.tasks if tasks is None else tasks
    out = {}
    with progress.Bar(len(tasks), f"{what}s", unit="task", delay_s=progress.PHASE_DELAY_S) as bar:
      for name, ds in tasks.items():
        with progress.label(f"{what} of task {name}"):
          out[name] = fn(name, ds)
        bar.update(1)
    return out

  def fine_tune_seeds(self):
    return [int(x) for x in self.settings.fine_tune_seeds.split(",") if x.strip()]

  def fine_tunes(self, graphdef, params):
    """Fine-tuning results per downstream task (`Settings.fine_tune_seeds`, the paper's
    protocol: CLS head, AdamW lr 1e-4, 200 warmup steps then linear decay, batch 32; the
    epoch chosen on valid); {} when no fine-tuning seeds are set."""
    seeds = self.fine_tune_seeds()

    def one(name, ds):
      r = probe.fine_tune(graphdef, params, ds.train, ds.valid, ds.test, ds.num_classes,
                          seeds=seeds, epochs=self.settings.fine_tune_epochs, head="cls",
                          lr=1e-4, warmup_steps=200)
      return {k: r[k] for k in RESULT_KEYS}
    return self._per_task("fine-tuning", one, self.tasks if seeds else {})

  def random_init_params(self, seed):
    """The parameters model seed `seed` starts pre-training from (`decoder.init`)."""
    return decoder.init(self.setup.model_cfg, seed)[1]

  def sanity(self, model_seeds=(0,), fine_tune=False, language_rows=True, lookup=True):
    """The sanity rows of every task, on the same splits and with the same protocol as
    `probes` / `fine_tunes`: {task: {"num_test", "majority" (accuracy of the most
    frequent training label), "bayes" (`downstream.bayes_accuracy`), for HMM tasks
    "block_majority" and "context_value" (`downstream.block_majority_accuracy`,
    `downstream.hmm_context_value`), for PCFG tasks "words" (the probe on the one-hot words,
    `downstream.word_features`), "lookup_table" (the probe
    on the exact conditionals, `downstream.lookup_table_features`), "random_init" ({seed: the
    probe on the model seed's initialisation}), and with `fine_tune` "fine_tune_random_init"
    ({seed: fine-tuning from that initialisation})}}. A trained model's probe is only
    evidence of transfer where it beats its own random init. `language_rows=False` leaves
    out the rows that do not depend on the architecture (majority, Bayes, lookup table);
    `lookup=False` the lookup table alone (a caller that probes it already)."""
    graphdef = self.trainer.graphdef
    ft = {}
    if fine_tune and self.fine_tune_seeds():
      ft = {seed: self.fine_tunes(graphdef, self.random_init_params(seed))
            for seed in model_seeds}

    def one(name, ds):
      row = {"num_test": len(ds.test)}
      if language_rows:
        row.update({"majority": downstream.majority_accuracy(ds),
                    "bayes": downstream.bayes_accuracy(self.language, ds)})
        if ds.name.startswith("hmm_task"):  # what the block alone gives, in probe and in loss
          row["block_majority"] = downstream.block_majority_accuracy(self.language, ds)
          row["context_value"] = downstream.hmm_context_value(self.language, ds)
        if ds.name.startswith("pcfg_"):  # the words alone: what a random init keeps
          row["words"] = self.probe_features(
              ds, lambda sp: downstream.word_features(ds.vocab_size, sp.tokens, sp.lengths))
        if lookup:
          row["lookup_table"] = self.probe_features(
              ds, lambda sp: downstream.lookup_table_features(self.language, sp.tokens,
                                                              sp.lengths))
      row["random_init"] = {}
      for seed in model_seeds:
        params = self.random_init_params(seed)
        row["random_init"][str(seed)] = self.probe_features(
            ds, lambda sp, p=params: probe.encode(graphdef, p, sp.tokens, sp.segment_ids))
      if ft:
        row["fine_tune_random_init"] = {str(seed): r[name] for seed, r in ft.items()}
      return row
    return self._per_task("sanity row", one)


def encoder_run_config(workdir, need):
  """The config (a ConfigDict) of a finished MLM pre-training workdir of the transformer
  encoder, for scripts that read its checkpoints (`need`: what they read, for the error); a
  workdir without config.json, or of another task or preset, is a ValueError saying what to
  give."""
  stored = config_lib.stored_config(workdir)
  if stored is None:
    raise ValueError(f"--workdir={workdir!r} holds no config.json: give a finished MLM "
                     f"pre-training workdir (experiments/mlm_flatness/ leaves them under "
                     f"its `runs`)")
  cfg = ml_collections.ConfigDict(stored)
  if cfg.get("task") != "mlm" or cfg.model.get("preset") != "encoder":
    raise ValueError(f"{workdir}: task {cfg.get('task')!r}, model.preset "
                     f"{cfg.model.get('preset')!r}; {need} need an MLM run of the "
                     f"transformer encoder (preset 'encoder')")
  return cfg


def eval_row(workdir, seed, step, keys=EVAL_KEYS):
  """The `keys` of the eval row of `seed` at `step` in a run's metrics.jsonl."""
  rows = [r for r in metrics_lib.read_rows(workdir)
          if r.get("kind") == "eval" and r.get("seed") == seed and r.get("step") == step]
  if not rows:
    raise ValueError(f"{workdir} has no eval row at step {step}: set train.eval_every to a "
                     f"divisor of train.checkpoint_every")
  r = rows[-1]
  return {k: r[k] for k in keys if k in r}


# ----------------------------------------------------------------------------
# Shared by experiments/mlm_flatness/ and experiments/adversarial_pretraining.py: the HMM
# variants (--hmm) and the pre-training overrides (--pretrain), so that both scripts name and
# configure the same pre-training run (and reuse one finished run).

# --hmm: the HMM's data overrides (configs/hmm_mlm.py). "uniform" is the default draw (Uniform(0,
# 1) in-block weights, 5 blocks), on which the hidden state is barely identifiable: the context
# beyond the block is worth ~0.001 nats of MLM loss and task-10's Bayes accuracy is ~10%, so no
# probe can tell models apart. "contextual": 4 blocks, Dirichlet(0.1) transition and
# Dirichlet(0.4) emission rows: optimal loss ~3.77 (the paper's 3.758), context worth ~0.08
# nats, task-10 Bayes ~46% against 26% from the word at that position alone. "sharp": the
# same with Dirichlet(0.1) emission rows too: optimal loss ~3.1, context worth ~0.6 nats,
# task-10 Bayes ~82% against ~10% for the block's majority state (hmm_seed 0):
# the MLM objective itself pays for learning the states (0.08 nats did not, in 6000 AdamW
# steps at batch 256 on the cpu model: see the CHANGELOG).
HMMS = {"uniform": {},
        "contextual": {"data.num_blocks": 4, "data.trans_concentration": 0.1,
                       "data.emit_concentration": 0.4},
        "sharp": {"data.num_blocks": 4, "data.trans_concentration": 0.1,
                  "data.emit_concentration": 0.1}}


def hmm_overrides(language, hmm):
  """The data overrides of --hmm=`hmm` (`HMMS`) for the HMM ({} for the PCFG)."""
  return dict(HMMS[hmm]) if language == "hmm" else {}


def run_prefix(language, hmm):
  """The run labels' prefix: the language, plus the HMM (`HMMS`) when not the default."""
  return language + (f"_{hmm}" if language == "hmm" and hmm != "uniform" else "")


def parse_pretrain(text):
  """--pretrain's overrides of the AdamW pre-training run: "key=value,key=value" with dotted
  config keys (train.*, optim.*, model.*, and data.masking: the masking scheme, the one data
  field that leaves the language, hence the probe's tasks, unchanged) -> {key: int | float |
  str}."""
  out = {}
  for item in (x.strip() for x in text.split(",") if x.strip()):
    key, eq, value = item.partition("=")
    if not eq or not key.strip() or not value.strip():
      raise ValueError(f"--pretrain: {item!r} is not key=value (e.g. train.num_steps=6000)")
    if key.split(".")[0] not in ("train", "optim", "model") and key.strip() != "data.masking":
      raise ValueError(f"--pretrain: {key!r} is not a train.*, optim.* or model.* field, nor "
                       f"data.masking (another data.* field would change the language)")
    for cast in (int, float, str):
      try:
        out[key.strip()] = cast(value.strip())
        break
      except ValueError:
        continue
  return out


def pretrain_suffix(extra):
  """The run labels' suffix of --pretrain's overrides `extra`: "" without, "_pretrain" with,
  plus "_<preset>" when they set model.preset (another architecture: runs of its own),
  "_init<std>" when they set model.init_std (another initialisation) and "_<masking>" when
  they set data.masking (another objective)."""
  if not extra:
    return ""
  return ("_pretrain" + (f"_{extra['model.preset']}" if "model.preset" in extra else "")
          + (f"_init{extra['model.init_std']}" if "model.init_std" in extra else "")
          + (f"_{extra['data.masking']}" if "data.masking" in extra else ""))
