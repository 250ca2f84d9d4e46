"""The runs of a recipe (config.py) and their measurements, written to one file under
`results_dir`/`out`: <figure>[_adamw]_<language>[_<hmm>].json and its .png.

Every model is trained as a run of an `el_jax.run.grid.Grid` on configs/pcfg_mlm.py or
configs/hmm_mlm.py, in `runs`/<label> (a finished run there is read back, not trained again),
and measured on its saved checkpoints (`el_jax.run.mlm_measure.Measurer`):

* pre-training loss: the valid MLM loss and its gap to the exact optimum (the eval rows of
  metrics.jsonl at that step);
* Tr(H) by the estimator of the seed's App. B.1 (labels sampled from the model,
  `fisher_samples` per input, on `flat_inputs` valid sentences with their fixed masks; the mean
  and standard deviation over `flat_reps` repetitions) and by Hutchinson probes of the exact
  Hessian (`el_jax.core.flatness`);
* linear-probe accuracy (`el_jax.core.probe.linear_probe_selected`: 5 probe seeds, the
  feature normalisation, learning rate and weight decay chosen on valid per model, the epoch
  on valid) on each of `tasks`, and with `fine_tune_seeds` fine-tuning at the first and last
  measured checkpoint (`el_jax.core.probe.fine_tune`, the paper's protocol);
* the sanity rows (`Measurer.sanity`): the majority class, the block alone (HMM), the Bayes
  classifier, the paper's lookup table, the words alone (PCFG) and the random init of every
  model seed (every size), on the same splits with the same protocol.

A run with `pretrain` overrides is named `<language>[_<hmm>]_adamw` plus
`mlm_measure.pretrain_suffix` (e.g. `_pretrain_bilstm`); the training figure continues that
very run (its model.*, train.batch_size and data.masking are kept by the pilot and the
continuation), so one finished pre-training serves every figure. With `probe_cache`, every
probe result is kept by the content of its inputs: processes probing disjoint seeds of one run
in parallel fill it, and a run over all the seeds reads them back.

The comparisons (first against last checkpoint, sizes against each other, trained models
against their random inits) are not computed here: `analysis.py` computes them from the
points of every file.
"""
import json
import os
import textwrap
import time
import types

import numpy as np

from el_jax.infra import checkpoint
from el_jax.infra import plots
from el_jax.infra import provenance
from el_jax.infra import workdir as wd
from el_jax.report import papers
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import mlm_measure
from el_jax.run import runner

from experiments.mlm_flatness import config as config_file

COMMAND = "python -m el_jax.experiment --config=experiments/mlm_flatness/config.py"
FIGURES = ("training", "pretrained", "size", "embedded")
# The continuation after the AdamW pre-training: SGD (Fig. 3) or AdamW again (Fig. 1). Its run
# label, JSON keys and point key start with NAME[optimizer] ("sgd_step", "adamw_cont_step").
NAME = {"sgd": "sgd", "adamw": "adamw_cont"}
LRS = {"sgd": "0.01,0.03,0.1,0.3", "adamw": "0.0001,0.0003,0.001"}
# The paper's claim each figure is set beside (el_jax.report.papers).
PAPER_KEYS = {"training": "s002.fig3", "training_adamw": "s002.fig1", "size": "s002.fig2.size",
              "embedded": "s002.fig5"}


def variant_of(config):
  """The variant of config.py whose config `config` is, or None (overridden fields)."""
  want = config.to_dict()
  return next((v for v in config_file.VARIANTS if config_file.get_config(v).to_dict() == want),
              None)


def settings(config):
  """The recipe as the namespace the measurements read (the fields of config.py, with the
  defaults that depend on others filled in), after the checks that need no training."""
  c = config.to_dict()
  a = types.SimpleNamespace(**{k: v for k, v in c.items() if k != "results_dir"})
  if a.figure not in FIGURES:
    raise ValueError(f"config.figure={a.figure!r}; allowed: {', '.join(FIGURES)}")
  if a.language not in ("pcfg", "hmm"):
    raise ValueError(f"config.language={a.language!r}; allowed: pcfg, hmm")
  if a.hmm not in mlm_measure.HMMS:
    raise ValueError(f"config.hmm={a.hmm!r}; allowed: {', '.join(sorted(mlm_measure.HMMS))}")
  if a.continue_with not in NAME:
    raise ValueError(f"config.continue_with={a.continue_with!r}; allowed: {', '.join(NAME)}")
  if a.continue_with != "sgd" and a.figure != "training":
    raise ValueError("config.continue_with is for config.figure='training'")
  a.out = os.path.join(config.results_dir, a.out) if a.out else config.results_dir
  a.tasks = a.tasks or ("C" if a.language == "pcfg" else "10")
  a.sgd_lrs = a.sgd_lrs or LRS[a.continue_with]
  a.seeds = [int(s) for s in a.seeds]
  if len(set(a.seeds)) != len(a.seeds) or not a.seeds or min(a.seeds) < 0:
    raise ValueError(f"config.seeds={tuple(a.seeds)} must be distinct integers >= 0")
  a.fine_tune_seeds = ",".join(str(int(s)) for s in a.fine_tune_seeds)
  if a.fine_tune_seeds and a.figure != "training":
    raise ValueError("config.fine_tune_seeds is for config.figure='training' (first and last "
                     "checkpoint)")
  if a.fine_tune_epochs < 1:
    raise ValueError(f"config.fine_tune_epochs={a.fine_tune_epochs} must be >= 1")
  ps = a.pretrain_seeds = [int(s) for s in a.pretrain_seeds]
  if ps and (a.figure != "training" or not set(a.seeds) <= set(ps) or len(set(ps)) != len(ps)
             or min(ps) < 0):
    raise ValueError(f"config.pretrain_seeds={tuple(ps)} is for config.figure='training' and "
                     f"must be distinct integers >= 0 that contain every config.seeds "
                     f"{tuple(a.seeds)}")
  mlm_measure.parse_pretrain(a.pretrain)  # a malformed item stops here, before any training
  mlm_measure.check_probe_flags(a.probe_lrs, a.probe_normalizations)
  if a.figure in ("size", "embedded"):
    for item in a.sizes.split(","):
      parse_size(item)  # a malformed size stops here, before any training
  return a


def args_record(a):
  """The recipe as the file's `args` (the fields of the committed files)."""
  return {k: getattr(a, k) for k in (
      "figure", "language", "size", "seeds", "runs", "out", "tasks", "hmm", "continue_with",
      "sgd_lrs", "pilot_steps", "pilot_tol", "sgd_warmup", "sgd_steps", "every",
      "measure_every", "sizes", "size_steps", "embed_into", "flat_inputs", "flat_reps",
      "fisher_samples", "hutchinson_probes", "chunk", "probe_train", "probe_valid",
      "probe_test", "probe_epochs", "probe_data_seed", "probe_lrs", "probe_weight_decays",
      "probe_normalizations", "probe_cache", "fine_tune_seeds", "fine_tune_epochs",
      "pretrain", "pretrain_seeds")}


def out_stem(a):
  """<figure>[_<continuation>]_<language>[_<hmm>]: the JSON / PNG name (the default HMM keeps
  the names of the files written before the other HMMs existed)."""
  stem = (f"{a.figure}_{a.language}" if a.continue_with == "sgd"
          else f"{a.figure}_{a.continue_with}_{a.language}")
  if a.language == "hmm" and a.hmm != "uniform":
    stem += f"_{a.hmm}"
  return stem


def paper(key):
  value, source = papers.entry(PAPER_KEYS[key])
  return {"key": PAPER_KEYS[key], "source": f"{source}: {value}"}


def parse_size(s):
  """A `sizes` item "d_model/heads/layers/MLP[@steps]" -> its config overrides (@steps: its
  own train.num_steps, e.g. the larger model trained to the smaller one's loss)."""
  arch, at, steps = s.partition("@")
  try:
    d, h, n, m = (int(x) for x in arch.split("/"))
    over = {"model.embed_dim": d, "model.num_heads": h, "model.num_layers": n,
            "model.mlp_dim": m}
    if at:
      over["train.num_steps"] = int(steps)
  except ValueError:
    raise ValueError(f"config.sizes item {s!r} is not d_model/heads/layers/MLP[@steps] of "
                     f"integers, e.g. 64/1/1/256 or 128/2/4/512@1500") from None
  return over


def size_label(s):
  """A `sizes` item as a run label's part: 128/2/4/512@1500 -> 128-2-4-512-1500steps."""
  arch, at, steps = s.partition("@")
  return arch.replace("/", "-") + (f"-{steps}steps" if at else "")


def _measurer(cfg, a, language):
  return mlm_measure.Measurer(cfg, mlm_measure.Settings(
      **{f: getattr(a, f) for f in mlm_measure.Settings.__dataclass_fields__}), language)


def _mean_eval(workdir, seeds, step, key="valid_mlm_loss"):
  """Mean over `seeds` of `key` in the eval rows of `step` (one seed: its value)."""
  return float(np.mean([mlm_measure.eval_row(workdir, s, step)[key] for s in seeds]))


def _hmm(language, a):
  return mlm_measure.hmm_overrides(language, a.hmm)


def _prefix(language, a):
  return mlm_measure.run_prefix(language, a.hmm)


# ----------------------------------------------------------------------------
# Figure 1 / 3: keep training after convergence


def continue_overrides(a, base_dir, lr, steps, every, optimizer="sgd"):
  """`optimizer` (warmup, then a constant lr; a fresh optimizer) from the parameters of
  `base_dir`: plain SGD, or AdamW with the pre-training's betas and weight decay."""
  over = {"optim.name": optimizer, "optim.lr": lr, "optim.warmup_steps": a.sgd_warmup,
          "optim.decay": "constant", "train.num_steps": steps,
          "train.checkpoint_every": every, "train.eval_every": every,
          "train.keep_checkpoints": 0, "train.init_from": base_dir}
  if optimizer == "sgd":
    over.update({"optim.momentum": 0.0, "optim.weight_decay": 0.0})
  elif optimizer != "adamw":
    raise ValueError(f"unknown continuation optimizer {optimizer!r}; allowed: {sorted(NAME)}")
  return over


def carried_overrides(extra):
  """What a continuation (and its pilot) keeps of `pretrain`'s overrides: the model.* items
  (it restores that architecture), train.batch_size and data.masking (the same batch and
  objective as the pre-training); its optimizer, steps and schedule are its own."""
  return {k: v for k, v in extra.items()
          if k.startswith("model.") or k in ("train.batch_size", "data.masking")}


def add_pretraining(g, language, a, seeds):
  """Adds the AdamW pre-training run (the variant's recipe with `pretrain`'s overrides, model
  seeds `seeds`) to the grid `g`; returns its label and the overrides."""
  extra = mlm_measure.parse_pretrain(a.pretrain)
  base = f"{_prefix(language, a)}_adamw{mlm_measure.pretrain_suffix(extra)}"
  g.add(base, f"{language}_mlm", a.size, {**_hmm(language, a), **extra}, seeds=seeds,
        phase="adamw")
  return base, extra


def pilot_lr(g, language, a, seeds, base_dir, base_steps, extra):
  """The largest rate of `sgd_lrs` whose valid loss after `pilot_steps` (mean over the model
  seeds) stays within `pilot_tol` of the converged run's (chosen on valid, before the long
  run). Each trial is a run of the grid `g`."""
  opt = a.continue_with
  start = _mean_eval(base_dir, seeds, base_steps)
  chosen, trials = None, {}
  for lr in sorted(float(x) for x in a.sgd_lrs.split(",")):
    prefix = _prefix(language, a)
    label = (f"{prefix}_pilot_lr{lr:g}" if opt == "sgd"
             else f"{prefix}_{NAME[opt]}_pilot_lr{lr:g}") + mlm_measure.pretrain_suffix(extra)
    g.add(label, f"{language}_mlm", a.size,
          {**_hmm(language, a), **carried_overrides(extra),
           **continue_overrides(a, base_dir, lr, a.pilot_steps, a.pilot_steps, opt)},
          seeds=seeds, phase="pilot", **{f"{NAME[opt]}_lr": lr})
    g.run([label])
    end = _mean_eval(g.rows[label]["workdir"], seeds, a.pilot_steps)
    trials[f"{lr:g}"] = {"valid_mlm_loss": end, "change": end - start}
    if end - start <= a.pilot_tol:
      chosen = lr
  if chosen is None:
    raise ValueError(f"no {opt} lr of {a.sgd_lrs} kept the valid loss within "
                     f"{a.pilot_tol} of {start:.4f}: {trials}")
  return chosen, start, trials


def _print_sanity(sanity):
  for task, r in sanity.items():
    rnd = ", ".join(f"{k} {v['test_acc_mean']:.4f}" for k, v in r["random_init"].items())
    print(f"task {task}: majority {r['majority']:.4f}, Bayes {r['bayes']:.4f}, lookup-table "
          f"probe {r['lookup_table']['test_acc_mean']:.4f}, random-init probe {rnd}", flush=True)


def figure_training(language, a, path):
  """The AdamW run, the pilot and the continuation run (SGD or AdamW; one grid, model seeds
  `seeds`), measured at the AdamW run's end (step 0 of the continuation) and at the
  continuation's checkpoints."""
  t0 = time.time()
  seeds, opt = tuple(a.seeds), a.continue_with
  name = NAME[opt]
  step_key = f"{name}_step"
  g = grid_lib.Grid(path, runs_dir=a.runs, reuse_rows=False)
  base, extra = add_pretraining(g, language, a, tuple(a.pretrain_seeds or seeds))
  (base_row,) = g.run([base])
  base_dir, base_steps = base_row["workdir"], base_row["config"]["train"]["num_steps"]
  lr, start, trials = pilot_lr(g, language, a, seeds, base_dir, base_steps, extra)
  cont = f"{_prefix(language, a)}_{name}{mlm_measure.pretrain_suffix(extra)}"
  g.add(cont, f"{language}_mlm", a.size,
        {**_hmm(language, a), **carried_overrides(extra),
         **continue_overrides(a, base_dir, lr, a.sgd_steps, a.every, opt)},
        seeds=seeds, phase=name, **{f"{name}_lr": lr})
  g.run([cont])
  cont_dir = g.rows[cont]["workdir"]
  m = _measurer(g.runs[cont].config(), a, language)
  points = []
  every = a.measure_every or a.every
  for seed in seeds:
    steps = [s for s in checkpoint.checkpoint_steps(cont_dir, seed) if s % every == 0]
    # The converged AdamW model is the start of the continuation (step 0).
    entries = [(base_dir, base_steps, 0)] + [(cont_dir, s, s) for s in steps]
    for i, (d, ck, step) in enumerate(entries):
      params = m.params(d, ck, seed)
      row = {step_key: step, "seed": seed, **mlm_measure.eval_row(d, seed, ck),
             **m.flatness(params, ck), "probe": m.probes(m.trainer.graphdef, params)}
      if i in (0, len(entries) - 1) and a.fine_tune_seeds:  # fine-tuning: first and last
        row["fine_tune"] = m.fine_tunes(m.trainer.graphdef, params)
      points.append(row)
      print(f"{language} seed {seed} {opt} step {step}: valid loss "
            f"{row['valid_mlm_loss']:.4f} Tr(H) B.1 {row['trace_b1']:.3f} +- "
            f"{row['trace_b1_std']:.3f} Hutchinson {row['trace_hutchinson']:.3f}; probe "
            + ", ".join(f"{k} {v['test_acc_mean']:.4f}" for k, v in row["probe"].items())
            + "".join(f"; fine-tuned {k} {v['test_acc_mean']:.4f}"
                      for k, v in row.get("fine_tune", {}).items()), flush=True)
  print("sanity rows (majority, Bayes, lookup table, random init)", flush=True)
  sanity = m.sanity(seeds, fine_tune=bool(a.fine_tune_seeds))
  _print_sanity(sanity)
  return g, {"figure": "training", "language": language, "size": a.size, "hmm": a.hmm,
             "sanity": sanity, "continued_with": opt, "pretrain": extra, "adamw_run": base_dir,
             f"{name}_run": cont_dir, f"{name}_lr": lr, "pilot": trials,
             "pilot_start_valid_loss": start, "points": points,
             "config": g.rows[cont]["config"],
             "paper": paper("training" if opt == "sgd" else "training_adamw"),
             "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}


def figure_pretrained(language, a, path):
  """Does the probe see what pre-training learned? The AdamW pre-training runs alone (model
  seeds `seeds`, the variant's recipe with `pretrain`'s overrides), each measured at its end:
  the valid gap, the probe of every task, and the sanity rows. No Tr(H), no continuation."""
  t0 = time.time()
  seeds = tuple(a.seeds)
  g = grid_lib.Grid(path, runs_dir=a.runs, reuse_rows=False)
  base, extra = add_pretraining(g, language, a, seeds)
  (row,) = g.run([base])
  base_dir, steps = row["workdir"], row["config"]["train"]["num_steps"]
  m = _measurer(g.runs[base].config(), a, language)
  points = []
  for seed in seeds:
    params = m.params(base_dir, steps, seed)
    point = {"step": steps, "seed": seed, **mlm_measure.eval_row(base_dir, seed, steps),
             "probe": m.probes(m.trainer.graphdef, params)}
    points.append(point)
    print(f"{language} seed {seed} step {steps}: valid gap {point['valid_gap']:.4f}; probe "
          + ", ".join(f"{k} {v['test_acc_mean']:.4f}" for k, v in point["probe"].items()),
          flush=True)
  print("sanity rows (majority, Bayes, lookup table, random init)", flush=True)
  sanity = m.sanity(seeds)
  _print_sanity(sanity)
  return g, {"figure": "pretrained", "language": language, "size": a.size, "hmm": a.hmm,
             "pretrain": extra, "sanity": sanity, "adamw_run": base_dir, "points": points,
             "config": row["config"], "ran_on": provenance.ran_on(),
             "wall_s": round(time.time() - t0, 1)}


# ----------------------------------------------------------------------------
# Figures 2 and 5: model sizes, then embedded into the largest


def train_sizes(language, a, path):
  """The grid of `sizes` (model seeds `seeds`), each trained with the variant's recipe and
  `pretrain`'s overrides; a size equal to a finished run under `runs` (e.g. the pretrained
  figure's run of the same overrides and seeds) is read back from it. Returns (grid, {size:
  (config, workdir)})."""
  g = grid_lib.Grid(path, runs_dir=a.runs, reuse_rows=False,
                    reuse_from=runner.run_dirs(os.path.join(a.runs, "*")))
  steps = {"train.num_steps": a.size_steps} if a.size_steps else {}
  extra = mlm_measure.parse_pretrain(a.pretrain)
  for s in a.sizes.split(","):
    g.add(f"{_prefix(language, a)}_size_{size_label(s)}{mlm_measure.pretrain_suffix(extra)}",
          f"{language}_mlm", a.size, {**_hmm(language, a), **extra, **steps, **parse_size(s)},
          seeds=tuple(a.seeds), model_size=s)
  g.run()
  return g, {r.extra["model_size"]: (r.config(), g.rows[label]["workdir"])
             for label, r in g.runs.items()}


def figure_size(language, a, path, embedded=False):
  """Figure 2 (or 5, `embedded`): every size of every model seed measured at its end (valid
  loss, Tr(H) in its own architecture or grown into the largest / `embed_into`, the probes),
  with the sanity rows of every size's random init."""
  from el_jax.core.models import decoder, growth
  t0 = time.time()
  seeds = tuple(a.seeds)
  g, runs = train_sizes(language, a, path)
  sizes = a.sizes.split(",")
  largest = sizes[-1]
  big_cfg = runs[largest][0]
  if embedded and a.embed_into:
    # An architecture that is only measured, never trained: the smallest one whose widths
    # are multiples of every size's (the paper's Table 4 takes the least common multiple).
    big_cfg = grid_lib.make_config(f"{language}_mlm", a.size,
                                   {**_hmm(language, a), **parse_size(a.embed_into)}, seeds=(0,))
  big = _measurer(big_cfg, a, language) if embedded else None
  points = []
  for s, (cfg, d) in runs.items():
    m = _measurer(cfg, a, language)
    step = cfg.train.num_steps
    for seed in seeds:
      params = m.params(d, step, seed)
      row = {"size": s, "seed": seed, "step": step, "num_params": decoder.num_params(params),
             **mlm_measure.eval_row(d, seed, step),
             "probe": m.probes(m.trainer.graphdef, params)}
      if embedded:
        gcfg, gparams = growth.grow(m.setup.model_cfg, params, big.setup.model_cfg)
        b = m.flat_batches[0]
        small = np.asarray(decoder.apply(m.trainer.graphdef, params, b["inputs"],
                                         b["segment_ids"]))
        grown = np.asarray(decoder.apply(big.trainer.graphdef, gparams, b["inputs"],
                                         b["segment_ids"]))
        row["grown_max_logit_diff"] = float(np.abs(small - grown).max())
        row.update(big.flatness(gparams, step))
        row["num_params_embedded"] = decoder.num_params(gparams)
      else:
        row.update(m.flatness(params, step))
      points.append(row)
      print(f"{language} size {s} seed {seed}: valid loss {row['valid_mlm_loss']:.4f} Tr(H) "
            f"B.1 {row['trace_b1']:.3f} +- {row['trace_b1_std']:.3f}; probe " + ", ".join(
                f"{k} {v['test_acc_mean']:.4f}" for k, v in row["probe"].items()), flush=True)

  # Sanity rows: the language's (majority, Bayes, lookup table) once, and the random init of
  # every size (its own architecture) and model seed, keyed by size (one seed) or
  # "<size> seed <seed>". Sizes of one architecture (128/2/4/512 and 128/2/4/512@1000) share
  # their random inits: measured once.
  def key(s, seed):
    return s if len(seeds) == 1 else f"{s} seed {seed}"
  sanity, by_arch = None, {}
  for s, (cfg, _) in runs.items():
    arch = json.dumps(cfg.model.to_dict(), sort_keys=True)
    if arch not in by_arch:
      by_arch[arch] = _measurer(cfg, a, language).sanity(seeds, language_rows=sanity is None)
    r = by_arch[arch]
    if sanity is None:
      sanity = {task: {**row, "random_init": {}} for task, row in r.items()}
    for task, row in r.items():
      for seed in seeds:
        sanity[task]["random_init"][key(s, seed)] = row["random_init"][str(seed)]
  _print_sanity(sanity)
  fig = "embedded" if embedded else "size"
  return g, {"figure": fig, "language": language, "size": a.size, "points": points,
             "hmm": a.hmm, "sanity": sanity, "seeds": list(seeds),
             "pretrain": mlm_measure.parse_pretrain(a.pretrain),
             "embedded_into": (a.embed_into or largest) if embedded else None,
             "paper": paper(fig),
             "configs": {s: config_lib.config_dict(c) for s, (c, _) in runs.items()},
             "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}


# ----------------------------------------------------------------------------


def plot_pretrained(result, path):
  """Probe test accuracy per task: the trained models (one dot per model seed and probe seed)
  beside their random inits, the lookup table, the block alone and the Bayes accuracy."""
  import matplotlib.pyplot as plt
  tasks = list(result["sanity"])
  fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.6), squeeze=False)
  for ax, t in zip(axes[0], tasks):
    s = result["sanity"][t]
    groups = [("random init", [x for r in s["random_init"].values() for x in r["test_acc"]]),
              ("trained", [x for p in result["points"] for x in p["probe"][t]["test_acc"]]),
              ("lookup table", s["lookup_table"]["test_acc"])]
    for i, (_, accs) in enumerate(groups):
      ax.plot([i] * len(accs), [100 * x for x in accs], "o", alpha=0.6)
    ax.set_xticks(range(len(groups)), [grp[0] for grp in groups])
    for level, name, style in ((s["bayes"], "Bayes", "--"), (s["majority"], "majority", ":"),
                               (s.get("block_majority"), "block alone", "-.")):
      if level is not None:
        ax.axhline(100 * level, ls=style, c="gray", lw=1)
        ax.text(len(groups) - 0.5, 100 * level, name, va="bottom", ha="right", fontsize=8)
    ax.set_ylabel("probe test accuracy (%)")
    ax.set_title(f"task {t}: {result['language']} ({result.get('hmm', '')}), step "
                 f"{result['points'][0]['step']}")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot(result, path):
  """Valid MLM loss, Tr(H) (B.1 and Hutchinson) and probe accuracy per point: over the
  continuation's steps (`plots.metric_over_steps`: mean over the model seeds, band min..max)
  for the training figure; per model size (error bars: std over repetitions / probe seeds, or
  over the models) for the others."""
  import matplotlib.pyplot as plt
  pts = result["points"]
  if result["figure"] == "pretrained":
    return plot_pretrained(result, path)
  fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
  tasks = list(pts[0]["probe"])
  if result["figure"] == "training":
    opt = result.get("continued_with", "sgd")
    step_key = f"{NAME[opt]}_step"

    def rows(key, fn):
      return [{"kind": "point", "seed": p["seed"], "step": p[step_key], key: fn(p)}
              for p in pts]
    panels = (
        ({"valid MLM loss": rows("v", lambda p: p["valid_mlm_loss"])}, "valid MLM loss",
         "nats"),
        ({"B.1 (sampled labels)": rows("v", lambda p: p["trace_b1"]),
          "Hutchinson": rows("v", lambda p: p["trace_hutchinson"])},
         "Tr(H) of the pre-training loss", "Tr(H)"),
        ({f"task {t}": rows("v", lambda p, t=t: 100 * p["probe"][t]["test_acc_mean"])
          for t in tasks}, "linear probe test accuracy (%)", "test accuracy (%)"))
    for axis, (by_label, title, ylabel) in zip(ax, panels):
      plots.metric_over_steps(by_label, "v", None, kind="point", ylabel=ylabel, ax=axis,
                              title=title)
      axis.set_xlabel(f"{'SGD' if opt == 'sgd' else 'AdamW'} step (after the AdamW "
                      f"pre-training)")
  elif len(result.get("seeds", [0])) > 1:  # several models per size: mean +- std over them
    sizes = list(dict.fromkeys(p["size"] for p in pts))
    xs = list(range(len(sizes)))

    def over_models(axis, fn, label, fmt):
      vals = [[fn(p) for p in pts if p["size"] == s] for s in sizes]
      for x, v in zip(xs, vals):
        axis.plot([x] * len(v), v, ".", color="gray", alpha=0.5)
      axis.errorbar(xs, [np.mean(v) for v in vals], yerr=[np.std(v, ddof=1) for v in vals],
                    fmt=fmt, label=label, capsize=3)
    over_models(ax[0], lambda p: p["valid_mlm_loss"], None, "o-")
    ax[0].set_title("valid MLM loss")
    over_models(ax[1], lambda p: p["trace_b1"], "B.1 (sampled labels)", "o-")
    over_models(ax[1], lambda p: p["trace_hutchinson"], "Hutchinson", "s--")
    ax[1].set_title("Tr(H) of the pre-training loss")
    ax[1].legend()
    for task in tasks:
      over_models(ax[2], lambda p, t=task: 100 * p["probe"][t]["test_acc_mean"], f"task {task}",
                  "o-")
    ax[2].set_title("linear probe test accuracy (%)")
    ax[2].legend()
    for axis in ax:
      axis.set_xlabel("model size (@ its training steps)")
      axis.set_xticks(xs, sizes, rotation=20, fontsize=7)
  else:
    xs = list(range(len(pts)))
    ax[0].plot(xs, [p["valid_mlm_loss"] for p in pts], "o-")
    ax[0].set_title("valid MLM loss")
    ax[1].errorbar(xs, [p["trace_b1"] for p in pts], yerr=[p["trace_b1_std"] for p in pts],
                   fmt="o-", label="B.1 (sampled labels)")
    ax[1].plot(xs, [p["trace_hutchinson"] for p in pts], "s--", label="Hutchinson")
    ax[1].set_title("Tr(H) of the pre-training loss")
    ax[1].legend()
    for task in tasks:
      ax[2].errorbar(xs, [100 * p["probe"][task]["test_acc_mean"] for p in pts],
                     yerr=[100 * p["probe"][task]["test_acc_std"] for p in pts], fmt="o-",
                     label=f"task {task}")
    ax[2].set_title("linear probe test accuracy (%)")
    ax[2].legend()
    for axis in ax:
      axis.set_xlabel("model size")
      axis.set_xticks(xs, [p["size"] for p in pts], rotation=20, fontsize=7)
  seeds = len({p.get("seed", 0) for p in pts})
  title = (f"{result['language']}: {result['figure']} ({result['size']}"
           + ("" if seeds < 2 else f"; lines: mean over {seeds} model seeds, bands: min..max"
              if result["figure"] == "training" else
              f"; lines: mean over {seeds} models per size, bars: std, dots: each model")
           + f"); paper: {result['paper']['source']}")
  fig.suptitle(textwrap.fill(title, 170), fontsize=8)  # the whole source, wrapped
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def run(config):
  """Trains (or reads back) the recipe's runs, measures them and writes
  <out>/<stem>.json (the measurements, the recipe as `args`, the grid's `rows`) and .png."""
  a = settings(config)
  stem = os.path.join(a.out, out_stem(a))
  if a.figure == "training":
    g, result = figure_training(a.language, a, stem + ".json")
  elif a.figure == "pretrained":
    g, result = figure_pretrained(a.language, a, stem + ".json")
  else:
    g, result = figure_size(a.language, a, stem + ".json", embedded=a.figure == "embedded")
  variant = variant_of(config)
  result["command"] = (f"{COMMAND}:{variant}" if variant else
                       f"{COMMAND} (fields of no single variant: see `args`)")
  result["args"] = args_record(a)
  os.makedirs(a.out, exist_ok=True)
  result["rows"] = g.document()["rows"]  # the grid's rows of the runs measured
  wd.write_json(stem + ".json", result, default=float)
  plot(result, stem + ".png")
  print(f"wrote {stem}.json and .png")
  return result
