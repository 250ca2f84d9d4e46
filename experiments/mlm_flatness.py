r"""Seed 002, Figures 1 / 3, 2 and 5: flatness and transfer of MLM models at equal loss.

  python experiments/mlm_flatness.py --figure=training --language=pcfg   # Fig. 1 / 3
  python experiments/mlm_flatness.py --figure=training --language=hmm
  python experiments/mlm_flatness.py --figure=training --language=hmm --continue_with=adamw \
      --continue_steps=9000 --every=2250 --seeds=0,1,2   # Fig. 1: AdamW continues
  python experiments/mlm_flatness.py --figure=size                       # Fig. 2
  python experiments/mlm_flatness.py --figure=embedded                   # Fig. 5
  ... --size=paper  (accelerator sizes; not run here)
  ... --figure=training --seeds=0,1,2   (3 pre-trained models: p-values over model seeds)
  python experiments/mlm_flatness.py --figure=pretrained --language=hmm --hmm=sharp \
      --seeds=0,1 --pretrain=train.batch_size=256,train.num_steps=3000,optim.lr=0.002,\
optim.warmup_steps=300
      # does the probe see what pre-training learned? (issue 34)
  python experiments/mlm_flatness.py --figure=pretrained --language=pcfg --seeds=0,1,2 \
      --tasks=A,B,C --pretrain=data.masking=bert   # the PCFG's tasks under BERT masking

Every model is trained as a run of an `el_jax.run.grid.Grid` on configs/pcfg_mlm.py or
configs/hmm_mlm.py, in --runs/<label> (finished runs there are reused), and
measured on its saved checkpoints:

* pre-training loss: the valid MLM loss and its gap to the exact optimum (the
  eval rows of metrics.jsonl at that step);
* Tr(H) by the estimator of the seed's appendix B.1 (labels sampled from the
  model, `--fisher_samples` per input, on `--flat_inputs` valid sentences with
  their fixed masks; the mean and standard deviation over `--flat_reps`
  repetitions, each on its own inputs and draws) and by Hutchinson probes of
  the exact Hessian (`el_jax.core.flatness`);
* linear-probe accuracy (`el_jax.core.probe.linear_probe`: the paper's protocol,
  AdamW lr 1e-3, the epoch chosen on the valid split, test accuracy reported,
  mean and std over 5 probe seeds) on PCFG task C or HMM task-10 (and the
  other tasks with --tasks);
* the probe's feature normalisation (--probe_normalizations: per-feature standardisation and /
  or PCA whitening), learning rate (--probe_lrs) and weight decay (--probe_weight_decays) are
  chosen on the valid split per model (`el_jax.core.probe.linear_probe_selected`);
* sanity rows (`el_jax.run.mlm_measure.Measurer.sanity`, issue 34; `sanity` in the JSON), measured
  on the same splits with the same protocol: the majority class, for the HMM the block alone,
  the Bayes classifier (HMM: the forward-backward posterior; PCFG: 1, the label is the inside
  algorithm's argmax), the paper's lookup table and the random init of every pre-training
  seed (every size for Figures 2 / 5), and with fine-tuning the random inits fine-tuned;
  `comparison.vs_random_init` tests the trained models' probe against their inits;
* with --fine_tune_seeds (e.g. 0,1; training figure only), fine-tuning accuracy at the first
  and the last measured checkpoint (`el_jax.core.probe.fine_tune`, the paper's protocol: the whole
  encoder and a head on the first position, AdamW lr 1e-4, 200 warmup steps, batch 32,
  --fine_tune_epochs epochs, the epoch chosen on valid), compared like the probe.

`pretrained` (issue 34, not a figure of the paper): the AdamW pre-training runs alone
(--seeds, the variant's recipe with --pretrain's train.* / optim.* / model.* overrides; a run
with overrides is named `<language>[_<hmm>]_adamw_pretrain`, plus `_<preset>` when they set
model.preset, e.g. `bilstm`, the paper's HMM architecture), each model measured at its end:
valid gap, probe, sanity rows and the trained models' probe against their random inits. It
answers whether a model that learned more than the HMM's blocks probes above its init, before
any figure's transfer claim rests on the probe. Written to <out>/pretrained_<language>[_<hmm>].json.
With --probe_cache=DIR, every probe result is also kept in DIR by the content of its inputs
(features, labels, grid, epochs, the probe's code): processes probing disjoint --seeds of the
same run in parallel fill it, and the run over all the seeds then reads them,
the same numbers a single process prints.

Figure 1 / 3 (`training`): the `cpu` AdamW run of the language is pre-trained
to convergence, then continued from its parameters with SGD (warmup, then a
constant learning rate; fresh optimizer: `train.init_from`), with a checkpoint
every `--every` steps; each checkpoint is measured. The paper's Fig. 3 trains
with SGD from the start (warmup, then a constant lr 1e-3; App. B.2 gives no batch
for it, 4096 is its AdamW batch) and uses LSTMs on the HMM; here the AdamW
transformer is continued, and the SGD learning rate is chosen on the
valid split by a pilot (`--sgd_lrs`: the largest whose valid loss after
`--pilot_steps` steps is within `--pilot_tol` of where it started), because
lr 1e-3 at batch 128 moves the model too little to measure on a CPU.
The last measured checkpoint is compared with the first (Tr(H) B.1 and each
probe task, Holm over them): with one model seed (the default, --seeds=0) over
the Tr(H) repetitions and the probe seeds of that one model (they say a change
is not measurement noise); with >= 2 (--seeds, one pre-trained model per seed,
each continued with SGD) over the model seeds, one value per model.
With --continue_with=adamw (Fig. 1: the paper's AdamW pre-training goes on after
the loss converges) the continuation is AdamW instead (the pre-training's betas
and weight decay, warmup then a constant rate, a fresh optimizer), its learning
rate chosen by the same pilot among --continue_lrs (default 1e-4, 3e-4, 1e-3: the
pre-training ends its cosine decay at 1e-4 from a peak of 1e-3); the same
measurements, written to <out>/training_adamw_<language>.json. The flags
--sgd_lrs / --sgd_warmup / --sgd_steps are the continuation's, whichever the
optimizer (aliases --continue_lrs / --continue_warmup / --continue_steps).
With --pretrain the training figure continues the `pretrained` figure's run (the same label,
so a finished one is read back, not trained again; --pretrain_seeds names its model seeds when
they are more than the --seeds continued), and the pilot and continuation keep its model.*
and train.batch_size (runs suffixed like it, e.g. `hmm_sharp_sgd_pretrain_bilstm`): the
paper's HMM architecture continued with SGD (issue 34):

  python experiments/mlm_flatness.py --figure=training --language=hmm --hmm=sharp \
      --seeds=0,1,2 --pretrain_seeds=0,1,2,3,4,5 --pretrain=model.preset=bilstm,\
train.batch_size=256,train.num_steps=6000,optim.lr=0.002,optim.warmup_steps=300 \
      --sgd_lrs=0.1,0.3,1 --pilot_steps=150 --sgd_steps=2000 --every=1000 \
      --flat_inputs=100 --fisher_samples=20 --probe_train=10000 --probe_valid=2000 \
      --probe_test=4000 --probe_epochs=30 --probe_lrs=0.001,0.01 \
      --probe_normalizations=standardize,whiten --runs=runs/mlm_flatness_6k \
      --probe_cache=runs/probe_cache --out=results/mlm_flatness/sharp_bilstm_6k_sgd

Figure 2 (`size`): the `--sizes` (d_model/heads/layers/MLP[@steps]) trained with the
same recipe (with --pretrain's overrides, and each model seed of --seeds: with >= 2 every
size is compared with the first over the models, `_size_models`); Figure 5 (`embedded`):
the same models grown by
`el_jax.core.models.growth` (width replication, zero residual blocks) into the
largest architecture, or into `--embed_into` (the paper's Table 4 uses the
least common multiple of the widths), where Tr(H) is measured in one
parameterisation (their outputs, hence loss and probe accuracy, are unchanged;
checked). On the sharp HMM's init-0.1 encoders, six models per size, the 128-wide one also
stopped at 1000 steps (near the 64-wide one's loss; issue 34), then Figure 5 at that pair:

  python experiments/mlm_flatness.py --figure=size --language=hmm --hmm=sharp --tasks=10,6 \
      --sizes=64/1/1/256,128/2/4/512@1000,128/2/4/512 --seeds=0,1,2,3,4,5 \
      --pretrain=model.init_std=0.1,train.batch_size=256,train.num_steps=6000,optim.lr=0.002,\
optim.warmup_steps=300 --flat_inputs=100 --fisher_samples=20 --probe_train=10000 \
      --probe_valid=2000 --probe_test=4000 --probe_epochs=30 --probe_lrs=0.001,0.01 \
      --probe_normalizations=standardize,whiten --runs=runs/mlm_flatness \
      --probe_cache=runs/probe_cache --out=results/mlm_flatness/sharp_init0.1_sizes
  ... --figure=embedded --sizes=64/1/1/256,128/2/4/512@1000 (the rest as above)

--hmm=contextual trains and probes on an HMM whose hidden states the context identifies (4
blocks, Dirichlet(0.1) transition and Dirichlet(0.4) emission rows; `mlm_measure.HMMS`): on the default
draw the context beyond the block is worth ~0.006 nats of MLM loss, so the models learn the
block alone and no probe of them can say anything about transfer (issue 34). --hmm=sharp
is the same with Dirichlet(0.1) emission rows: there the context is worth ~0.6 nats of MLM
loss (contextual: ~0.08), so the objective itself pays for learning the states.

Writes <out>/<figure>_<language>[_<hmm>].json (training_adamw_<language>.json for Fig. 1; the measured `points`, the `comparison`
and the grid's `rows` of the runs; paper numbers beside ours) and .png (the
training figure by `el_jax.infra.plots.metric_over_steps`).

Results: `results/mlm_flatness/`, on the page docs/results/seed002_flatness.md#figures-1--3-trh-and-transfer-after-the-loss-converges-pcfg-hmm
(generated by `python -m el_jax.report`). Wall time at CPU size on the 2-core machine:
Figs. 1 / 3 14-18 min per language and seed (41 min for the HMM with --seeds=0,1,2; 86 min
with --sgd_steps=12000 --every=3000 --fine_tune_seeds=0,1 --fine_tune_epochs=5; Fig. 1 with
--continue_with=adamw --continue_steps=9000 --every=2250 and the same seeds and fine-tuning
131 min beside other jobs; the LSTM command above 96 min), Fig. 2
82 min, Fig. 5 6.4 min (the init-0.1 commands above: 34 min with the 1000-step runs' 15 min of
training, then 3.5 min). Command: `python experiments/mlm_flatness.py --figure=training --language=hmm`.
"""
import argparse
import json
import os
import sys
import textwrap
import time

import numpy as np

from el_jax.infra import checkpoint
from el_jax.run import cli
from el_jax.run import grid as grid_lib
from el_jax.run import mlm_measure
from el_jax.infra import plots
from el_jax.infra import provenance
from el_jax.run import runner
from el_jax.report import stats
from el_jax.infra import workdir as wd
from el_jax.run import config as config_lib

PAPER = {
    "training": {"source": "seed 002 Sec. 5, Fig. 3 and App. B.2: after the loss converges, "
                           "SGD keeps lowering Tr(H) while the probe accuracy rises",
                 "pcfg_task_C_gain": 1.6, "hmm_task_10_gain": 4.0},
    "training_adamw": {"source": "seed 002 Sec. 3, Fig. 1: along AdamW pre-training, after the "
                                 "valid loss converges, downstream accuracy keeps increasing"},
    "size": {"source": "seed 002 Fig. 2: at (nearly) equal pre-training loss, larger models "
                       "probe better"},
    "embedded": {"source": "seed 002 Sec. 5, Fig. 5: models of growing size embedded in one "
                           "architecture; Tr(H) 19.8 -> 12.6 while probe accuracy 40.4 -> 50.5",
                 "trace": [19.8, 12.6], "probe": [40.4, 50.5]},
}
SIZES = "64/1/1/256,128/2/4/512,192/3/5/768,256/4/6/1024"


def hmm_overrides(language, args):
  """The data overrides of --hmm for the HMM ({} for the PCFG; `mlm_measure.hmm_overrides`)."""
  return mlm_measure.hmm_overrides(language, args.hmm)


def run_prefix(language, args):
  """The run labels' prefix (`mlm_measure.run_prefix`)."""
  return mlm_measure.run_prefix(language, args.hmm)


def out_stem(args):
  """<figure>[_<continuation>]_<language>[_<hmm>]: the JSON / PNG name (the default HMM keeps the
  names of the files written before --hmm existed)."""
  stem = (f"{args.figure}_{args.language}" if args.continue_with == "sgd"
          else f"{args.figure}_{args.continue_with}_{args.language}")
  if args.language == "hmm" and args.hmm != "uniform":
    stem += f"_{args.hmm}"
  return stem


def parse_size(s):
  """A --sizes item "d_model/heads/layers/MLP[@steps]" -> its config overrides (@steps: its
  own train.num_steps, e.g. the larger model trained to the smaller one's loss)."""
  arch, at, steps = s.partition("@")
  try:
    d, h, n, m = (int(x) for x in arch.split("/"))
    over = {"model.embed_dim": d, "model.num_heads": h, "model.num_layers": n,
            "model.mlp_dim": m}
    if at:
      over["train.num_steps"] = int(steps)
  except ValueError:
    raise ValueError(f"--sizes item {s!r} is not d_model/heads/layers/MLP[@steps] of integers, "
                     f"e.g. 64/1/1/256 or 128/2/4/512@1500") from None
  return over


def size_label(s):
  """A --sizes item as a run label's part: 128/2/4/512@1500 -> 128-2-4-512-1500steps."""
  arch, at, steps = s.partition("@")
  return arch.replace("/", "-") + (f"-{steps}steps" if at else "")


def _measurer(cfg, args, language):
  return mlm_measure.Measurer(cfg, mlm_measure.Settings.from_args(args), language)


def _mean_eval(workdir, seeds, step, key="valid_mlm_loss"):
  """Mean over `seeds` of `key` in the eval rows of `step` (one seed: its value)."""
  return float(np.mean([mlm_measure.eval_row(workdir, s, step)[key] for s in seeds]))


# ----------------------------------------------------------------------------
# Figure 1 / 3: keep training after convergence


# The continuation after the AdamW pre-training: SGD (Fig. 3) or AdamW again (Fig. 1). Its
# run label, JSON keys and point key start with NAME[optimizer] ("sgd_step", "adamw_cont_step").
NAME = {"sgd": "sgd", "adamw": "adamw_cont"}
LRS = {"sgd": "0.01,0.03,0.1,0.3", "adamw": "0.0001,0.0003,0.001"}


def continue_overrides(args, base_dir, lr, steps, every, optimizer="sgd"):
  """`optimizer` (warmup, then a constant lr; a fresh optimizer) from the parameters of
  `base_dir`: plain SGD, or AdamW with the pre-training's betas and weight decay."""
  over = {"optim.name": optimizer, "optim.lr": lr, "optim.warmup_steps": args.sgd_warmup,
          "optim.decay": "constant", "train.num_steps": steps,
          "train.checkpoint_every": every, "train.eval_every": every,
          "train.keep_checkpoints": 0, "train.init_from": base_dir}
  if optimizer == "sgd":
    over.update({"optim.momentum": 0.0, "optim.weight_decay": 0.0})
  elif optimizer != "adamw":
    raise ValueError(f"unknown continuation optimizer {optimizer!r}; allowed: {sorted(NAME)}")
  return over


def pilot_lr(g, language, args, seeds, base_dir, base_steps, extra):
  """The largest lr of --sgd_lrs (of the continuation optimizer, --continue_with) whose valid
  loss after --pilot_steps (mean over the model seeds) stays within --pilot_tol of the
  converged run's (chosen on valid, before the long run). Each trial is a run of the grid
  `g`, with `extra`'s (--pretrain's parsed overrides) `carried_overrides`."""
  opt = args.continue_with
  start = _mean_eval(base_dir, seeds, base_steps)
  chosen, trials = None, {}
  for lr in sorted(float(x) for x in args.sgd_lrs.split(",")):
    prefix = run_prefix(language, args)
    label = (f"{prefix}_pilot_lr{lr:g}" if opt == "sgd"
             else f"{prefix}_{NAME[opt]}_pilot_lr{lr:g}") + mlm_measure.pretrain_suffix(extra)
    g.add(label, f"{language}_mlm", args.size,
          {**hmm_overrides(language, args), **carried_overrides(extra),
           **continue_overrides(args, base_dir, lr, args.pilot_steps, args.pilot_steps, opt)},
          seeds=seeds, phase="pilot", **{f"{NAME[opt]}_lr": lr})
    g.run([label])
    end = _mean_eval(g.rows[label]["workdir"], seeds, args.pilot_steps)
    trials[f"{lr:g}"] = {"valid_mlm_loss": end, "change": end - start}
    if end - start <= args.pilot_tol:
      chosen = lr
  if chosen is None:
    raise ValueError(f"no {opt} lr of {args.sgd_lrs} kept the valid loss within "
                     f"{args.pilot_tol} of {start:.4f}: {trials}")
  return chosen, start, trials


def figure_training(language, args, path):
  """The AdamW run, the pilot and the continuation run (SGD, or AdamW with
  --continue_with=adamw; one grid, model seeds --seeds), measured at the AdamW run's end
  (step 0 of the continuation) and at the continuation's checkpoints."""
  t0 = time.time()
  seeds, opt = tuple(args.seeds), args.continue_with
  name = NAME[opt]
  step_key = f"{name}_step"
  g = grid_lib.Grid(path, runs_dir=args.runs, reuse_rows=False)
  base, extra = add_pretraining(g, language, args, tuple(args.pretrain_seeds or seeds))
  (base_row,) = g.run([base])
  base_dir, base_steps = base_row["workdir"], base_row["config"]["train"]["num_steps"]
  lr, start, trials = pilot_lr(g, language, args, seeds, base_dir, base_steps, extra)
  cont = f"{run_prefix(language, args)}_{name}{mlm_measure.pretrain_suffix(extra)}"
  g.add(cont, f"{language}_mlm", args.size,
        {**hmm_overrides(language, args), **carried_overrides(extra),
         **continue_overrides(args, base_dir, lr, args.sgd_steps, args.every, opt)},
        seeds=seeds, phase=name, **{f"{name}_lr": lr})
  g.run([cont])
  cont_dir = g.rows[cont]["workdir"]
  cfg = g.runs[cont].config()
  m = _measurer(cfg, args, language)
  points = []
  every = args.measure_every or args.every
  for seed in seeds:
    steps = [s for s in checkpoint.checkpoint_steps(cont_dir, seed) if s % every == 0]
    # The converged AdamW model is the start of the continuation (step 0).
    entries = [(base_dir, base_steps, 0)] + [(cont_dir, s, s) for s in steps]
    for i, (d, ck, step) in enumerate(entries):
      params = m.params(d, ck, seed)
      row = {step_key: step, "seed": seed, **mlm_measure.eval_row(d, seed, ck),
             **m.flatness(params, ck), "probe": m.probes(m.trainer.graphdef, params)}
      if i in (0, len(entries) - 1) and args.fine_tune_seeds:  # fine-tuning: first and last
        row["fine_tune"] = m.fine_tunes(m.trainer.graphdef, params)
      points.append(row)
      print(f"{language} seed {seed} {opt} step {step}: valid loss "
            f"{row['valid_mlm_loss']:.4f} Tr(H) B.1 {row['trace_b1']:.3f} +- "
            f"{row['trace_b1_std']:.3f} Hutchinson {row['trace_hutchinson']:.3f}; probe "
            + ", ".join(f"{k} {v['test_acc_mean']:.4f}" for k, v in row["probe"].items())
            + "".join(f"; fine-tuned {k} {v['test_acc_mean']:.4f}"
                      for k, v in row.get("fine_tune", {}).items()), flush=True)
  comparison = (_trend(points, step_key) if len(seeds) == 1
                else _trend_over_seeds(points, step_key, seeds))
  print("sanity rows (majority, Bayes, lookup table, random init)", flush=True)
  sanity = m.sanity(seeds, fine_tune=bool(args.fine_tune_seeds))
  last = max(p[step_key] for p in points)
  comparison["vs_random_init"] = vs_random_init(
      {str(p["seed"]): p for p in points if p[step_key] == last}, sanity)
  _print_sanity(sanity)
  return g, {"figure": "training", "language": language, "size": args.size, "hmm": args.hmm,
             "sanity": sanity,
             "continued_with": opt, "pretrain": extra, "adamw_run": base_dir,
             f"{name}_run": cont_dir,
             f"{name}_lr": lr, "pilot": trials, "pilot_start_valid_loss": start,
             "points": points, "comparison": comparison, "config": g.rows[cont]["config"],
             "paper": PAPER["training" if opt == "sgd" else "training_adamw"],
             "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}


vs_random_init = mlm_measure.vs_random_init  # the trained models' probe against their inits


def _print_sanity(sanity):
  for task, r in sanity.items():
    rnd = ", ".join(f"{k} {v['test_acc_mean']:.4f}" for k, v in r["random_init"].items())
    print(f"task {task}: majority {r['majority']:.4f}, Bayes {r['bayes']:.4f}, lookup-table "
          f"probe {r['lookup_table']['test_acc_mean']:.4f}, random-init probe {rnd}", flush=True)


def _with_holm(out):
  """`out` (a `_trend`) with `p_holm` on its Tr(H), probe and fine-tuning comparisons: one
  family."""
  family = [out["trace_b1_change"], *out["probe"].values(), *out.get("fine_tune", {}).values()]
  for c, q in zip(family, stats.holm([c["p_value"] for c in family])):
    c["p_holm"] = q
  return out


def _paired(series):
  """{quantity: el_jax.report.stats.paired_compare(after, before)} with Holm over them: the before /
  after comparison on the same units (issue 34), beside the unpaired one kept for the older
  files' readers. `series` {quantity: (before, after)}."""
  out = {k: stats.paired_compare(after, before) for k, (before, after) in series.items()}
  for c, q in zip(out.values(), stats.holm([c["p_value"] for c in out.values()])):
    c["p_holm"] = q
  return out


def _trend(points, x):
  """First vs last point of one model: the change of Tr(H) and of probe accuracy, with a
  permutation test over the Tr(H) repetitions and over the probe seeds (5 at each end), Holm
  over the two (they say a change is not measurement noise, for this one model)."""
  a, b = points[0], points[-1]
  out = {"x": [a[x], b[x]], "trace_b1": [a["trace_b1"], b["trace_b1"]],
         "trace_b1_std": [a["trace_b1_std"], b["trace_b1_std"]],
         "trace_hutchinson": [a["trace_hutchinson"], b["trace_hutchinson"]],
         "valid_mlm_loss": [a["valid_mlm_loss"], b["valid_mlm_loss"]], "probe": {},
         "over": "repetitions / probe seeds of one model"}
  out["trace_b1_change"] = stats.compare(b["trace_b1_reps"], a["trace_b1_reps"])
  for task in a["probe"]:
    out["probe"][task] = {"acc": [a["probe"][task]["test_acc_mean"],
                                  b["probe"][task]["test_acc_mean"]],
                          **stats.compare(b["probe"][task]["test_acc"],
                                          a["probe"][task]["test_acc"])}
  if "fine_tune" in a and "fine_tune" in b:
    out["fine_tune"] = {task: {"acc": [a["fine_tune"][task]["test_acc_mean"],
                                       b["fine_tune"][task]["test_acc_mean"]],
                               **stats.compare(b["fine_tune"][task]["test_acc"],
                                               a["fine_tune"][task]["test_acc"])}
                        for task in a["fine_tune"]}
  # Paired: the same Tr(H) repetition (fixed inputs) and the same probe / fine-tuning seed
  # at both checkpoints.
  series = {"trace_b1": (a["trace_b1_reps"], b["trace_b1_reps"])}
  series.update({f"probe {t}": (a["probe"][t]["test_acc"], b["probe"][t]["test_acc"])
                 for t in a["probe"]})
  series.update({f"fine_tune {t}": (a["fine_tune"][t]["test_acc"], b["fine_tune"][t]["test_acc"])
                 for t in out.get("fine_tune", {})})
  out["paired"] = _paired(series)
  return _with_holm(out)


def _trend_over_seeds(points, x, seeds):
  """First vs last measured point over the model seeds (one value per pre-trained model:
  its Tr(H) B.1 mean over repetitions, its probe accuracy mean over probe seeds), with the
  permutation test over model seeds and Holm over Tr(H) and the probes. The means over
  seeds stand where `_trend` has one model's values."""
  first, last = min(p[x] for p in points), max(p[x] for p in points)
  ends = []
  for at in (first, last):
    by_seed = {p["seed"]: p for p in points if p[x] == at}
    if sorted(by_seed) != sorted(seeds):
      raise ValueError(f"{x} {at} is not measured for every seed {list(seeds)}")
    ends.append([by_seed[s] for s in seeds])

  def col(pts, key):
    return [float(p[key]) for p in pts]

  a, b = ends
  out = {"x": [first, last], "over": "model seeds", "seeds": list(seeds)}
  for key in ("trace_b1", "trace_hutchinson", "valid_mlm_loss"):
    out[key] = [float(np.mean(col(a, key))), float(np.mean(col(b, key)))]
  out["trace_b1_change"] = stats.compare(col(b, "trace_b1"), col(a, "trace_b1"))
  out["probe"] = {}
  for task in a[0]["probe"]:
    acc_a = [p["probe"][task]["test_acc_mean"] for p in a]
    acc_b = [p["probe"][task]["test_acc_mean"] for p in b]
    out["probe"][task] = {"acc": [float(np.mean(acc_a)), float(np.mean(acc_b))],
                          **stats.compare(acc_b, acc_a)}
  if all("fine_tune" in p for p in a + b):  # one value per model: its mean over the ft seeds
    out["fine_tune"] = {}
    for task in a[0]["fine_tune"]:
      ft_a = [p["fine_tune"][task]["test_acc_mean"] for p in a]
      ft_b = [p["fine_tune"][task]["test_acc_mean"] for p in b]
      out["fine_tune"][task] = {"acc": [float(np.mean(ft_a)), float(np.mean(ft_b))],
                                **stats.compare(ft_b, ft_a)}
  # Paired over the models: each model at its first and last checkpoint (the unpaired test
  # above cannot go below 0.1 with 3 models, the paired one not below 0.25).
  series = {"trace_b1": (col(a, "trace_b1"), col(b, "trace_b1"))}
  for task in a[0]["probe"]:
    series[f"probe {task}"] = ([p["probe"][task]["test_acc_mean"] for p in a],
                               [p["probe"][task]["test_acc_mean"] for p in b])
  for task in out.get("fine_tune", {}):
    series[f"fine_tune {task}"] = ([p["fine_tune"][task]["test_acc_mean"] for p in a],
                                   [p["fine_tune"][task]["test_acc_mean"] for p in b])
  out["paired"] = _paired(series)
  return _with_holm(out)


# ----------------------------------------------------------------------------
# Figures 2 and 5: model sizes, then embedded into the largest


def train_sizes(language, args, path):
  """The grid of --sizes (model seeds --seeds), each trained with the variant's recipe and
  --pretrain's overrides (runs suffixed like them, e.g. `hmm_sharp_size_64-1-1-256_pretrain_
  init0.1`); a size equal to a finished run under --runs (e.g. the `pretrained` figure's run
  of the same overrides and seeds) is read back from it. Returns (grid, {size: (config,
  workdir)})."""
  g = grid_lib.Grid(path, runs_dir=args.runs, reuse_rows=False,
                    reuse_from=runner.run_dirs(os.path.join(args.runs, "*")))
  steps = {"train.num_steps": args.size_steps} if args.size_steps else {}
  extra = mlm_measure.parse_pretrain(args.pretrain)
  for s in args.sizes.split(","):
    g.add(f"{run_prefix(language, args)}_size_{size_label(s)}"
          f"{mlm_measure.pretrain_suffix(extra)}", f"{language}_mlm", args.size,
          {**hmm_overrides(language, args), **extra, **steps, **parse_size(s)},
          seeds=tuple(args.seeds), model_size=s)
  g.run()
  return g, {r.extra["model_size"]: (r.config(), g.rows[label]["workdir"])
             for label, r in g.runs.items()}


def add_pretraining(g, language, args, seeds):
  """Adds the AdamW pre-training run (the variant's recipe with --pretrain's overrides, model
  seeds `seeds`) to the grid `g`; returns its label and the overrides. A run with overrides is
  named `<language>[_<hmm>]_adamw_pretrain`, plus `_<preset>` when they set model.preset (the
  training and pretrained figures share it: one finished run serves both)."""
  extra = mlm_measure.parse_pretrain(args.pretrain)
  base = f"{run_prefix(language, args)}_adamw{mlm_measure.pretrain_suffix(extra)}"
  g.add(base, f"{language}_mlm", args.size, {**hmm_overrides(language, args), **extra},
        seeds=seeds, phase="adamw")
  return base, extra


def carried_overrides(extra):
  """What a continuation (and its pilot) keeps of --pretrain's overrides: the model.* items
  (it restores that architecture), train.batch_size and data.masking (the same batch and
  objective as the pre-training); its optimizer, steps and schedule are its own."""
  return {k: v for k, v in extra.items()
          if k.startswith("model.") or k in ("train.batch_size", "data.masking")}


def figure_pretrained(language, args, path):
  """Does the probe see what pre-training learned (issue 34)? The AdamW pre-training runs
  alone (model seeds --seeds, the variant's recipe with --pretrain's overrides), each
  measured at its end: the valid gap, the linear probe of every task, and the sanity rows
  (majority, block, Bayes, lookup table, each seed's random init) with the trained models'
  probe tested against their random inits. No Tr(H), no continuation."""
  t0 = time.time()
  seeds = tuple(args.seeds)
  g = grid_lib.Grid(path, runs_dir=args.runs, reuse_rows=False)
  base, extra = add_pretraining(g, language, args, seeds)
  (row,) = g.run([base])
  base_dir, steps = row["workdir"], row["config"]["train"]["num_steps"]
  m = _measurer(g.runs[base].config(), args, language)
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
  comparison = {"seeds": list(seeds), "vs_random_init": vs_random_init(
      {str(p["seed"]): p for p in points}, sanity)}
  return g, {"figure": "pretrained", "language": language, "size": args.size, "hmm": args.hmm,
             "pretrain": extra, "sanity": sanity, "adamw_run": base_dir, "points": points,
             "comparison": comparison, "config": row["config"],
             "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}


def _size_models(points, sizes, seeds):
  """Figures 2 / 5 with >= 2 model seeds per size: every later size against the first over
  the model seeds (one value per model: its Tr(H) B.1 mean over repetitions, its Hutchinson
  estimate, its probe accuracy mean over probe seeds; unpaired permutation test: the models
  of two sizes are independent), Holm over every Tr(H) and probe test of the table; the valid
  MLM loss tested the same way, outside the family: it says whether the sizes are compared
  at equal loss."""
  by = {(p["size"], p["seed"]): p for p in points}
  missing = [(s, seed) for s in sizes for seed in seeds if (s, seed) not in by]
  if missing:
    raise ValueError(f"sizes / seeds not measured: {missing}")

  def col(s, fn):
    return [float(fn(by[(s, seed)])) for seed in seeds]

  tasks = list(points[0]["probe"])
  quantities = {"valid_mlm_loss": lambda p: p["valid_mlm_loss"],
                "trace_b1": lambda p: p["trace_b1"],
                "trace_hutchinson": lambda p: p["trace_hutchinson"]}
  quantities.update({f"probe {t}": (lambda p, t=t: p["probe"][t]["test_acc_mean"])
                     for t in tasks})
  out = {"over": "model seeds", "seeds": list(seeds), "sizes": list(sizes),
         "means": {s: {q: float(np.mean(col(s, fn))) for q, fn in quantities.items()}
                   for s in sizes},
         "stds": {s: {q: float(np.std(col(s, fn), ddof=1)) for q, fn in quantities.items()}
                  for s in sizes},
         "vs_first": {}}
  family = []
  for s in sizes[1:]:
    out["vs_first"][s] = {q: stats.compare(col(s, fn), col(sizes[0], fn))
                          for q, fn in quantities.items()}
    family += [c for q, c in out["vs_first"][s].items() if q != "valid_mlm_loss"]
  for c, q in zip(family, stats.holm([c["p_value"] for c in family])):
    c["p_holm"] = q
  out["holm_family"] = len(family)
  return out


def figure_size(language, args, path, embedded=False):
  """Figure 2 (or 5, `embedded`): every --sizes model of every --seeds measured at its end
  (valid loss, Tr(H) in its own architecture or grown into the largest / --embed_into, the
  probes) with the sanity rows of every size's random init; one seed: the first and last size
  compared over the repetitions and probe seeds of one model each (`_trend`); several: every
  size against the first over the models (`_size_models`)."""
  from el_jax.core.models import decoder, growth
  t0 = time.time()
  seeds = tuple(args.seeds)
  g, runs = train_sizes(language, args, path)
  sizes = args.sizes.split(",")
  largest = sizes[-1]
  big_cfg = runs[largest][0]
  if embedded and args.embed_into:
    # An architecture that is only measured, never trained: the smallest one whose widths
    # are multiples of every size's (the paper's Table 4 takes the least common multiple).
    big_cfg = grid_lib.make_config(f"{language}_mlm", args.size,
                                   {**hmm_overrides(language, args), **parse_size(args.embed_into)},
                                   seeds=(0,))
  big = _measurer(big_cfg, args, language) if embedded else None
  points = []
  for s, (cfg, d) in runs.items():
    m = _measurer(cfg, args, language)
    step = cfg.train.num_steps
    for seed in seeds:
      params = m.params(d, step, seed)
      row = {"size": s, "seed": seed, "step": step, "num_params": decoder.num_params(params),
             **mlm_measure.eval_row(d, seed, step),
             "probe": m.probes(m.trainer.graphdef, params)}
      if embedded:
        cfg_big = big.setup.model_cfg
        gcfg, gparams = growth.grow(m.setup.model_cfg, params, cfg_big)
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
  # every size (its own architecture) and model seed, keyed by size (one seed, as in the
  # files written before --seeds) or "<size> seed <seed>".
  def key(s, seed):
    return s if len(seeds) == 1 else f"{s} seed {seed}"
  # Sizes of one architecture (e.g. 128/2/4/512 and 128/2/4/512@1000) share their random
  # inits: measured once.
  sanity, by_arch = None, {}
  for s, (cfg, _) in runs.items():
    arch = json.dumps(cfg.model.to_dict(), sort_keys=True)
    if arch not in by_arch:
      m = _measurer(cfg, args, language)
      by_arch[arch] = m.sanity(seeds, language_rows=sanity is None)
    r = by_arch[arch]
    if sanity is None:
      sanity = {task: {**row, "random_init": {}} for task, row in r.items()}
    for task, row in r.items():
      for seed in seeds:
        sanity[task]["random_init"][key(s, seed)] = row["random_init"][str(seed)]
  if len(seeds) == 1:
    comparison = _trend(points, "size")
  else:
    comparison = _size_models(points, sizes, seeds)
  comparison["vs_random_init"] = vs_random_init({key(p["size"], p["seed"]): p for p in points},
                                                sanity)
  _print_sanity(sanity)
  fig = "embedded" if embedded else "size"
  return g, {"figure": fig, "language": language, "size": args.size, "points": points,
             "hmm": args.hmm, "sanity": sanity, "seeds": list(seeds),
             "pretrain": mlm_measure.parse_pretrain(args.pretrain),
             "embedded_into": (args.embed_into or largest) if embedded else None,
             "comparison": comparison, "paper": PAPER[fig],
             "configs": {s: config_lib.config_dict(c) for s, (c, _) in runs.items()},
             "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}


# ----------------------------------------------------------------------------


def plot_pretrained(result, path):
  """Probe test accuracy per task: the trained models (one dot per model seed and probe seed)
  beside their random inits, the lookup table, the block alone and the Bayes accuracy."""
  import matplotlib.pyplot as plt
  tasks = list(result["sanity"])
  fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.6), squeeze=False)
  for a, t in zip(axes[0], tasks):
    s = result["sanity"][t]
    groups = [("random init", [x for r in s["random_init"].values() for x in r["test_acc"]]),
              ("trained", [x for p in result["points"] for x in p["probe"][t]["test_acc"]]),
              ("lookup table", s["lookup_table"]["test_acc"])]
    for i, (name, accs) in enumerate(groups):
      a.plot([i] * len(accs), [100 * x for x in accs], "o", alpha=0.6)
    a.set_xticks(range(len(groups)), [g[0] for g in groups])
    for level, name, style in ((s["bayes"], "Bayes", "--"), (s["majority"], "majority", ":"),
                               (s.get("block_majority"), "block alone", "-.")):
      if level is not None:
        a.axhline(100 * level, ls=style, c="gray", lw=1)
        a.text(len(groups) - 0.5, 100 * level, name, va="bottom", ha="right", fontsize=8)
    a.set_ylabel("probe test accuracy (%)")
    a.set_title(f"task {t}: {result['language']} ({result.get('hmm', '')}), step "
                f"{result['points'][0]['step']}")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot(result, path):
  """Valid MLM loss, Tr(H) (B.1 and Hutchinson) and probe accuracy per point: over SGD
  steps (`plots.metric_over_steps`: mean over the model seeds, band min..max) for the
  training figure; per model size (error bars: std over repetitions / probe seeds) for the
  others."""
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
    for a, (by_label, title, ylabel) in zip(ax, panels):
      plots.metric_over_steps(by_label, "v", None, kind="point", ylabel=ylabel, ax=a,
                              title=title)
      a.set_xlabel(f"{'SGD' if opt == 'sgd' else 'AdamW'} step (after the AdamW pre-training)")
  elif len(result.get("seeds", [0])) > 1:  # several models per size: mean +- std over them
    sizes = list(dict.fromkeys(p["size"] for p in pts))
    xs = list(range(len(sizes)))

    def over_models(a, fn, label, fmt):
      vals = [[fn(p) for p in pts if p["size"] == s] for s in sizes]
      for x, v in zip(xs, vals):
        a.plot([x] * len(v), v, ".", color="gray", alpha=0.5)
      a.errorbar(xs, [np.mean(v) for v in vals], yerr=[np.std(v, ddof=1) for v in vals],
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
    for a in ax:
      a.set_xlabel("model size (@ its training steps)")
      a.set_xticks(xs, sizes, rotation=20, fontsize=7)
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
    for a in ax:
      a.set_xlabel("model size")
      a.set_xticks(xs, [p["size"] for p in pts], rotation=20, fontsize=7)
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


def optional_ints(flag, text, empty_means):
  """--`flag`'s comma-separated integers (empty items skipped; "" gives []), or an error that
  names the flag and what an empty value means."""
  try:
    return [int(x) for x in text.split(",") if x.strip()]
  except ValueError:
    raise ValueError(f"--{flag}={text!r} must be comma-separated integers (or empty: "
                     f"{empty_means})") from None


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--figure", choices=["training", "size", "embedded", "pretrained"],
                  required=True)
  ap.add_argument("--language", choices=["pcfg", "hmm"], default="pcfg")
  ap.add_argument("--size", default="cpu", help="config variant: cpu | paper | test")
  ap.add_argument("--seeds", default="0", help="pre-training model seeds, comma-separated "
                  "(>= 2: the comparison is over model seeds; Figures 2 / 5: every size "
                  "trained with each)")
  ap.add_argument("--runs", default="runs/mlm_flatness", help="training workdirs (reused)")
  ap.add_argument("--out", default="results/mlm_flatness")
  ap.add_argument("--tasks", default=None, help="downstream tasks (default C for pcfg, 10 for hmm)")
  ap.add_argument("--hmm", choices=sorted(mlm_measure.HMMS), default="uniform",
                  help="the HMM (--language=hmm): uniform (the default draw of configs/hmm_mlm.py) "
                       "contextual (hidden states identifiable from the context) or sharp "
                       "(the same with sparser emissions: the context worth ~0.6 nats); see mlm_measure.HMMS")
  ap.add_argument("--continue_with", choices=sorted(NAME), default="sgd",
                  help="training figure: the optimizer that continues after the AdamW "
                       "pre-training (sgd: Fig. 3; adamw: Fig. 1)")
  ap.add_argument("--sgd_lrs", "--continue_lrs", dest="sgd_lrs", default=None,
                  help=f"the pilot's candidate learning rates of the continuation (default: "
                       f"{LRS})")
  ap.add_argument("--pilot_steps", type=int, default=400)
  ap.add_argument("--pilot_tol", type=float, default=0.01)
  ap.add_argument("--sgd_warmup", "--continue_warmup", dest="sgd_warmup", type=int,
                  default=100, help="warmup steps of the continuation")
  ap.add_argument("--sgd_steps", "--continue_steps", dest="sgd_steps", type=int, default=6000,
                  help="steps of the continuation")
  ap.add_argument("--every", type=int, default=1500,
                  help="continuation steps between checkpoints")
  ap.add_argument("--measure_every", type=int, default=0,
                  help="measure the checkpoints at multiples of this (0 = every checkpoint)")
  ap.add_argument("--sizes", default=SIZES,
                  help="Figures 2 / 5: d_model/heads/layers/MLP[@steps], comma-separated, "
                       "smallest first (@steps: that size's own train.num_steps, e.g. a larger "
                       "model stopped at the smaller one's loss)")
  ap.add_argument("--size_steps", type=int, default=0, help="0 = the variant's train.num_steps")
  ap.add_argument("--embed_into", default="",
                  help="Fig. 5: d_model/heads/layers/MLP of the architecture every size is grown "
                       "into (widths multiples of every size's; '' = the largest of --sizes)")
  ap.add_argument("--flat_inputs", type=int, default=200)
  ap.add_argument("--flat_reps", type=int, default=5)
  ap.add_argument("--fisher_samples", type=int, default=50)
  ap.add_argument("--hutchinson_probes", type=int, default=10)
  ap.add_argument("--chunk", type=int, default=4, help="examples vmapped at once (memory)")
  ap.add_argument("--probe_train", type=int, default=4000)
  ap.add_argument("--probe_valid", type=int, default=1000)
  ap.add_argument("--probe_test", type=int, default=2000)
  ap.add_argument("--probe_epochs", type=int, default=100)
  ap.add_argument("--probe_data_seed", type=int, default=0)
  ap.add_argument("--probe_lrs", default="0.001",
                  help="probe learning rates, comma-separated: chosen on valid per model")
  ap.add_argument("--probe_weight_decays", default="0",
                  help="probe AdamW weight decays, comma-separated: chosen on valid per model")
  ap.add_argument("--probe_normalizations", default="standardize",
                  help="probe feature normalisations, comma-separated (standardize, whiten): "
                       "chosen on valid per model")
  ap.add_argument("--probe_cache", default="",
                  help="folder of probe results by the content of their inputs (default: "
                       "none): processes probing disjoint --seeds in parallel fill it, and a "
                       "run over all the seeds collects them (Measurer._cache_path)")
  ap.add_argument("--fine_tune_seeds", default="",
                  help="training figure: also fine-tune (the paper's protocol) at the first "
                       "and last measured checkpoint with these seeds, e.g. 0,1 (\"\" = no)")
  ap.add_argument("--fine_tune_epochs", type=int, default=10)
  ap.add_argument("--pretrain", default="",
                  help="pretrained figure (and Figures 2 / 5: every size's run): overrides of "
                       "the AdamW pre-training, comma-separated "
                       "key=value (train.* / optim.* / model.* / data.masking), e.g. "
                       "train.batch_size=256,train.num_steps=6000,optim.lr=0.002 (its run is "
                       "named apart; the steps are not in the name); training figure: the run "
                       "continued (its model.*, train.batch_size and data.masking also the "
                       "continuation's)")
  ap.add_argument("--pretrain_seeds", default="",
                  help="training figure: the model seeds of the pre-training run, a superset "
                       "of --seeds (\"\" = --seeds), e.g. 0,1,2,3,4,5 to reuse the six-model "
                       "pretrained run while continuing --seeds=0,1,2")
  args = ap.parse_args(argv)
  args.tasks = args.tasks or ("C" if args.language == "pcfg" else "10")
  if args.continue_with != "sgd" and args.figure != "training":
    raise ValueError("--continue_with is for --figure=training")
  args.sgd_lrs = args.sgd_lrs or LRS[args.continue_with]
  args.seeds = cli.seed_list(args.seeds)
  ft = optional_ints("fine_tune_seeds", args.fine_tune_seeds, "no fine-tuning")
  if ft and args.figure != "training":
    raise ValueError("--fine_tune_seeds is for --figure=training (first and last checkpoint)")
  if args.fine_tune_epochs < 1:
    raise ValueError(f"--fine_tune_epochs={args.fine_tune_epochs} must be >= 1")
  ps = args.pretrain_seeds = optional_ints("pretrain_seeds", args.pretrain_seeds, "--seeds")
  if ps and (args.figure != "training" or not set(args.seeds) <= set(ps)
             or len(set(ps)) != len(ps) or min(ps) < 0):
    raise ValueError(f"--pretrain_seeds={ps} is for --figure=training and must be distinct "
                     f"integers >= 0 that contain every --seeds {args.seeds}")
  mlm_measure.parse_pretrain(args.pretrain)  # a malformed item stops here, before any training
  if args.figure in ("size", "embedded"):
    for item in args.sizes.split(","):
      parse_size(item)  # a malformed size stops here, before any training
  stem = os.path.join(args.out, out_stem(args))
  if args.figure == "training":
    g, result = figure_training(args.language, args, stem + ".json")
  elif args.figure == "pretrained":
    g, result = figure_pretrained(args.language, args, stem + ".json")
  else:
    g, result = figure_size(args.language, args, stem + ".json",
                            embedded=args.figure == "embedded")
  result["command"] = "python experiments/mlm_flatness.py " + " ".join(sys.argv[1:] if argv
                                                                        is None else argv)
  result["args"] = vars(args)
  os.makedirs(args.out, exist_ok=True)
  # The measurements, and the grid's rows of the runs they were taken on (el_jax.run.grid).
  result["rows"] = g.document()["rows"]
  wd.write_json(stem + ".json", result, default=float)
  plot(result, stem + ".png")
  print(json.dumps(result["comparison"], default=float))
  print(f"wrote {stem}.json and .png")
  return result


if __name__ == "__main__":
  cli.script(main)
