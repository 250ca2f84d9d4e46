r"""Seed 002, Figures 1 / 3, 2 and 5: flatness and transfer of MLM models at equal loss.

  python experiments/mlm_flatness.py --figure=training --language=pcfg   # Fig. 1 / 3
  python experiments/mlm_flatness.py --figure=training --language=hmm
  python experiments/mlm_flatness.py --figure=size                       # Fig. 2
  python experiments/mlm_flatness.py --figure=embedded                   # Fig. 5
  ... --size=paper  (accelerator sizes; not run here)

Every model is trained through `el_jax.runner` on configs/pcfg_mlm.py or
configs/hmm_mlm.py (finished runs under --runs are reused) and measured on its
saved checkpoints:

* pre-training loss: the valid MLM loss and its gap to the exact optimum (the
  eval rows of metrics.jsonl at that step);
* Tr(H) by the estimator of the seed's appendix B.1 (labels sampled from the
  model, `--fisher_samples` per input, on `--flat_inputs` valid sentences with
  their fixed masks; the mean and standard deviation over `--flat_reps`
  repetitions, each on its own inputs and draws) and by Hutchinson probes of
  the exact Hessian (`el_jax.flatness`);
* linear-probe accuracy (`el_jax.probe.linear_probe`: the paper's protocol,
  AdamW lr 1e-3, the epoch chosen on the valid split, test accuracy reported,
  mean and std over 5 probe seeds) on PCFG task C or HMM task-10 (and the
  other tasks with --tasks).

Figure 1 / 3 (`training`): the `cpu` AdamW run of the language is pre-trained
to convergence, then continued from its parameters with SGD (warmup, then a
constant learning rate; fresh optimizer: `train.init_from`), with a checkpoint
every `--every` steps; each checkpoint is measured. The paper uses SGD lr 1e-3
at batch 4096 from the start; here the SGD learning rate is chosen on the
valid split by a pilot (`--sgd_lrs`: the largest whose valid loss after
`--pilot_steps` steps is within `--pilot_tol` of where it started), because
lr 1e-3 at batch 128 moves the model too little to measure on a CPU.

Figure 2 (`size`): the `--sizes` (d_model/heads/layers/MLP) trained with the
same recipe; Figure 5 (`embedded`): the same models grown by
`el_jax.models.growth` (width replication, zero residual blocks) into the
largest architecture, or into `--embed_into` (the paper's Table 4 uses the
least common multiple of the widths), where Tr(H) is measured in one
parameterisation (their outputs, hence loss and probe accuracy, are unchanged;
checked).

Writes <out>/<figure>_<language>.json and .png (paper numbers beside ours).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from el_jax import cli
from el_jax import mlm_measure
from el_jax import runner
from el_jax import workdir as wd

PAPER = {
    "training": {"source": "seed 002 Sec. 5, Fig. 3 and App. B.2: after the loss converges, "
                           "SGD keeps lowering Tr(H) while the probe accuracy rises",
                 "pcfg_task_C_gain": 1.6, "hmm_task_10_gain": 4.0},
    "size": {"source": "seed 002 Fig. 2: at (nearly) equal pre-training loss, larger models "
                       "probe better"},
    "embedded": {"source": "seed 002 Sec. 5, Fig. 5: models of growing size embedded in one "
                           "architecture; Tr(H) 19.8 -> 12.6 while probe accuracy 40.4 -> 50.5",
                 "trace": [19.8, 12.6], "probe": [40.4, 50.5]},
}
SIZES = "64/1/1/256,128/2/4/512,192/3/5/768,256/4/6/1024"


def parse_size(s):
  d, h, n, m = (int(x) for x in s.split("/"))
  return {"model.embed_dim": d, "model.num_heads": h, "model.num_layers": n, "model.mlp_dim": m}


# ----------------------------------------------------------------------------
# Figure 1 / 3: keep training after convergence


def _measurer(cfg, args, language):
  return mlm_measure.Measurer(cfg, mlm_measure.Settings.from_args(args), language)


def pilot_lr(base_dir, base_steps, language, args):
  """The largest SGD lr of --sgd_lrs whose valid loss after --pilot_steps stays within
  --pilot_tol of the converged run's (chosen on valid, before the long run)."""
  start = mlm_measure.eval_row(base_dir, 0, base_steps)["valid_mlm_loss"]
  chosen, trials = None, {}
  for lr in sorted(float(x) for x in args.sgd_lrs.split(",")):
    cfg = sgd_config(language, args, base_dir, lr, args.pilot_steps, args.pilot_steps)
    d = os.path.join(args.runs, f"{language}_pilot_lr{lr:g}")
    runner.run_or_reuse(cfg, d)
    end = mlm_measure.eval_row(d, 0, args.pilot_steps)["valid_mlm_loss"]
    trials[f"{lr:g}"] = {"valid_mlm_loss": end, "change": end - start}
    if end - start <= args.pilot_tol:
      chosen = lr
  if chosen is None:
    raise ValueError(f"no SGD lr of {args.sgd_lrs} kept the valid loss within "
                     f"{args.pilot_tol} of {start:.4f}: {trials}")
  return chosen, start, trials


def sgd_config(language, args, base_dir, lr, steps, every):
  return runner.get_config(f"{language}_mlm", args.size, {
      "optim.name": "sgd", "optim.lr": lr, "optim.warmup_steps": args.sgd_warmup,
      "optim.decay": "constant", "optim.momentum": 0.0, "optim.weight_decay": 0.0,
      "train.num_steps": steps, "train.checkpoint_every": every, "train.eval_every": every,
      "train.keep_checkpoints": 0, "train.init_from": base_dir, "seeds": (0,)})


def figure_training(language, args):
  t0 = time.time()
  base_cfg = runner.get_config(f"{language}_mlm", args.size, {"seeds": (0,)})
  base_dir = os.path.join(args.runs, f"{language}_adamw")
  runner.run_or_reuse(base_cfg, base_dir)
  base_steps = base_cfg.train.num_steps
  lr, start, trials = pilot_lr(base_dir, base_steps, language, args)
  cfg = sgd_config(language, args, base_dir, lr, args.sgd_steps, args.every)
  sgd_dir = os.path.join(args.runs, f"{language}_sgd")
  runner.run_or_reuse(cfg, sgd_dir)
  m = _measurer(cfg, args, language)
  points = []
  from el_jax import train
  every = args.measure_every or args.every
  steps = [s for s in train.checkpoint_steps(sgd_dir, 0) if s % every == 0]
  # The converged AdamW model is the start of the SGD phase (step 0).
  entries = [(base_dir, base_steps, 0)] + [(sgd_dir, s, s) for s in steps]
  for d, ck, sgd_step in entries:
    params = m.params(d, ck, 0)
    row = {"sgd_step": sgd_step, **mlm_measure.eval_row(d, 0, ck),
           **m.flatness(params, ck), "probe": m.probes(m.trainer.graphdef, params)}
    points.append(row)
    print(f"{language} SGD step {sgd_step}: valid loss {row['valid_mlm_loss']:.4f} "
          f"Tr(H) B.1 {row['trace_b1']:.3f} +- {row['trace_b1_std']:.3f} "
          f"Hutchinson {row['trace_hutchinson']:.3f}; probe " + ", ".join(
              f"{k} {v['test_acc_mean']:.4f}" for k, v in row["probe"].items()), flush=True)
  return {"figure": "training", "language": language, "size": args.size,
          "adamw_run": base_dir, "sgd_run": sgd_dir, "sgd_lr": lr, "pilot": trials,
          "pilot_start_valid_loss": start, "points": points,
          "comparison": _trend(points, "sgd_step"),
          "config": runner.config_dict(cfg), "paper": PAPER["training"],
          "wall_s": round(time.time() - t0, 1)}


def _trend(points, x):
  """First vs last point: the change of Tr(H) and of probe accuracy, with a permutation
  test over probe seeds (the probe accuracies of 5 seeds at each end)."""
  a, b = points[0], points[-1]
  out = {"x": [a[x], b[x]], "trace_b1": [a["trace_b1"], b["trace_b1"]],
         "trace_b1_std": [a["trace_b1_std"], b["trace_b1_std"]],
         "trace_hutchinson": [a["trace_hutchinson"], b["trace_hutchinson"]],
         "valid_mlm_loss": [a["valid_mlm_loss"], b["valid_mlm_loss"]], "probe": {}}
  out["trace_b1_change"] = runner.compare(b["trace_b1_reps"], a["trace_b1_reps"])
  for task in a["probe"]:
    out["probe"][task] = {"acc": [a["probe"][task]["test_acc_mean"],
                                  b["probe"][task]["test_acc_mean"]],
                          **runner.compare(b["probe"][task]["test_acc"],
                                           a["probe"][task]["test_acc"])}
  return out


# ----------------------------------------------------------------------------
# Figures 2 and 5: model sizes, then embedded into the largest


def train_sizes(language, args):
  out = {}
  for s in args.sizes.split(","):
    steps = {"train.num_steps": args.size_steps} if args.size_steps else {}
    cfg = runner.get_config(f"{language}_mlm", args.size, {**parse_size(s), "seeds": (0,),
                                                            **steps})
    d = os.path.join(args.runs, f"{language}_size_{s.replace('/', '-')}")
    # A size equal to the `cpu` model (128/2/4/512) reuses the Figure 3 AdamW run.
    found = runner.find_finished(cfg, [d, *runner.run_dirs(os.path.join(args.runs, "*"))])
    d = found[0] if found else d
    runner.run_or_reuse(cfg, d)
    out[s] = (cfg, d)
  return out


def figure_size(language, args, embedded=False):
  from el_jax.models import decoder, growth
  t0 = time.time()
  runs = train_sizes(language, args)
  largest = args.sizes.split(",")[-1]
  big_cfg = runs[largest][0]
  if embedded and args.embed_into:
    # An architecture that is only measured, never trained: the smallest one whose widths
    # are multiples of every size's (the paper's Table 4 takes the least common multiple).
    big_cfg = runner.get_config(f"{language}_mlm", args.size,
                                {**parse_size(args.embed_into), "seeds": (0,)})
  big = _measurer(big_cfg, args, language) if embedded else None
  points = []
  for s, (cfg, d) in runs.items():
    m = _measurer(cfg, args, language)
    step = cfg.train.num_steps
    params = m.params(d, step, 0)
    row = {"size": s, "num_params": decoder.num_params(params),
           **mlm_measure.eval_row(d, 0, step), "probe": m.probes(m.trainer.graphdef, params)}
    if embedded:
      cfg_big = big.setup.model_cfg
      gcfg, gparams = growth.grow(m.setup.model_cfg, params, cfg_big)
      b = m.flat_batches[0]
      small = np.asarray(decoder.apply(m.trainer.graphdef, params, b["inputs"], b["segment_ids"]))
      grown = np.asarray(decoder.apply(big.trainer.graphdef, gparams, b["inputs"],
                                       b["segment_ids"]))
      row["grown_max_logit_diff"] = float(np.abs(small - grown).max())
      row.update(big.flatness(gparams, step))
      row["num_params_embedded"] = decoder.num_params(gparams)
    else:
      row.update(m.flatness(params, step))
    points.append(row)
    print(f"{language} size {s}: valid loss {row['valid_mlm_loss']:.4f} Tr(H) B.1 "
          f"{row['trace_b1']:.3f} +- {row['trace_b1_std']:.3f}; probe " + ", ".join(
              f"{k} {v['test_acc_mean']:.4f}" for k, v in row["probe"].items()), flush=True)
  fig = "embedded" if embedded else "size"
  return {"figure": fig, "language": language, "size": args.size, "points": points,
          "embedded_into": (args.embed_into or largest) if embedded else None,
          "comparison": _trend(points, "size"), "paper": PAPER[fig],
          "configs": {s: runner.config_dict(c) for s, (c, _) in runs.items()},
          "wall_s": round(time.time() - t0, 1)}


# ----------------------------------------------------------------------------


def plot(result, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  pts = result["points"]
  x_key = "sgd_step" if result["figure"] == "training" else "size"
  xs = list(range(len(pts))) if x_key == "size" else [p[x_key] for p in pts]
  fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
  ax[0].plot(xs, [p["valid_mlm_loss"] for p in pts], "o-")
  ax[0].set_title("valid MLM loss")
  ax[1].errorbar(xs, [p["trace_b1"] for p in pts], yerr=[p["trace_b1_std"] for p in pts],
                 fmt="o-", label="B.1 (sampled labels)")
  ax[1].plot(xs, [p["trace_hutchinson"] for p in pts], "s--", label="Hutchinson")
  ax[1].set_title("Tr(H) of the pre-training loss")
  ax[1].legend()
  for task in pts[0]["probe"]:
    ax[2].errorbar(xs, [100 * p["probe"][task]["test_acc_mean"] for p in pts],
                   yerr=[100 * p["probe"][task]["test_acc_std"] for p in pts], fmt="o-",
                   label=f"task {task}")
  ax[2].set_title("linear probe test accuracy (%)")
  ax[2].legend()
  for a in ax:
    a.set_xlabel("SGD step (after the AdamW pre-training)" if x_key == "sgd_step"
                 else "model size")
    if x_key == "size":
      a.set_xticks(xs, [p["size"] for p in pts], rotation=20, fontsize=7)
  fig.suptitle(f"{result['language']}: {result['figure']} ({result['size']}); "
               f"paper: {result['paper']['source'][:90]}", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--figure", choices=["training", "size", "embedded"], required=True)
  ap.add_argument("--language", choices=["pcfg", "hmm"], default="pcfg")
  ap.add_argument("--size", default="cpu", help="config variant: cpu | paper | test")
  ap.add_argument("--runs", default="runs/mlm_flatness", help="training workdirs (reused)")
  ap.add_argument("--out", default="results/mlm_flatness")
  ap.add_argument("--tasks", default=None, help="downstream tasks (default C for pcfg, 10 for hmm)")
  ap.add_argument("--sgd_lrs", default="0.01,0.03,0.1,0.3")
  ap.add_argument("--pilot_steps", type=int, default=400)
  ap.add_argument("--pilot_tol", type=float, default=0.01)
  ap.add_argument("--sgd_warmup", type=int, default=100)
  ap.add_argument("--sgd_steps", type=int, default=6000)
  ap.add_argument("--every", type=int, default=1500, help="SGD steps between checkpoints")
  ap.add_argument("--measure_every", type=int, default=0,
                  help="measure the checkpoints at multiples of this (0 = every checkpoint)")
  ap.add_argument("--sizes", default=SIZES)
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
  args = ap.parse_args(argv)
  args.tasks = args.tasks or ("C" if args.language == "pcfg" else "10")
  if args.figure == "training":
    result = figure_training(args.language, args)
  else:
    result = figure_size(args.language, args, embedded=args.figure == "embedded")
  result["command"] = "python experiments/mlm_flatness.py " + " ".join(sys.argv[1:] if argv
                                                                        is None else argv)
  result["args"] = vars(args)
  os.makedirs(args.out, exist_ok=True)
  stem = os.path.join(args.out, f"{args.figure}_{args.language}")
  wd.write_json(stem + ".json", result, default=float)
  plot(result, stem + ".png")
  print(json.dumps(result["comparison"], default=float))
  print(f"wrote {stem}.json and .png")


if __name__ == "__main__":
  cli.script(main)
