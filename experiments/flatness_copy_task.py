r"""Does equal learning land in flatter solutions? Tr(H) and Tr(F) over copy-task training.

  python experiments/flatness_copy_task.py --out=results/flatness --workdir=runs/flatness

Trains the `cpu` copy task (configs/copy_task.py:cpu) with the CE and the
E1 + warmup runs of `make demo` (the `sweep()` of that config) and measures,
every `--every` steps on the same fixed training batches, the Hessian trace
(Hutchinson), the Fisher trace (labels sampled from the model) and the top
Hessian eigenvalue of the *mean cross-entropy* on the scored answer tokens, so
both runs are measured on the same objective whatever they were trained with.
Writes `<out>/copy_task.json` (every measurement plus a summary per loss) and
`<out>/copy_task.png`. Checkpoints and metrics.jsonl go to `--workdir`; runs
that already finished there are reused (el_jax.train resumes), so a rerun only
trains what is missing.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from el_jax import demo
from el_jax import runner
from el_jax import cli
from el_jax import workdir as wd

# The CE and E1 + warmup runs of `make demo` (configs/copy_task.py sweep()).
LOSSES = {k: v for k, v in demo.demo_runs().items() if k in ("ce", "e1_warmup")}
KEYS = ("hessian_trace", "fisher_trace", "top_eigenvalue")


def make_config(overrides, args):
  c = runner.get_config("copy_task", "cpu", overrides)
  c.seeds = tuple(args.seeds)
  c.train.num_steps = args.steps
  c.train.checkpoint_every = args.steps
  c.train.eval_every = 500
  c.progress = False
  c.flatness.every = args.every
  c.flatness.method = "hutchinson"
  c.flatness.num_probes = args.probes
  c.flatness.num_batches = args.batches
  c.flatness.fisher_samples = args.fisher_samples
  c.flatness.lanczos_steps = args.lanczos_steps
  return c


def converged_step(train_rows):
  """First logged step from which every logged batch is fitted (all margins > 0).

  Loss-agnostic on purpose: E1 fits the task while keeping the margins, and so
  the CE, near their initial values (CE ~ log V), so "CE below a threshold"
  would call a fitted E1 run unconverged.
  """
  steps = np.array([r["step"] for r in train_rows])
  fitted = np.array([r["fitted_frac"] for r in train_rows]) >= 1.0
  if not fitted[-1]:
    return None
  bad = np.flatnonzero(~fitted)
  return int(steps[bad[-1] + 1]) if len(bad) else int(steps[0])


def summarise(rows, seeds):
  """Per seed: the measurements, the convergence step, and means after convergence."""
  out = {}
  for seed in seeds:
    mine = [r for r in rows if r.get("seed") == seed]
    tr = [r for r in mine if r.get("kind") == "train"]
    fl = [r for r in mine if r.get("kind") == "flatness"]
    ev = [r for r in mine if r.get("kind") == "eval"]
    conv = converged_step(tr)
    after = [r for r in fl if conv is not None and r["step"] >= conv]
    out[seed] = {
        "converged_step": conv,
        "flatness": fl,
        "final": fl[-1] if fl else None,
        "mean_after_convergence": {k: float(np.mean([r[k] for r in after])) for k in KEYS
                                   if after and k in after[0]},
        "num_after_convergence": len(after),
        "final_eval": ev[-1] if ev else None,
        "train_ce": [(r["step"], r["ce"]) for r in tr],
        "train_loss": [(r["step"], r["loss"]) for r in tr],
        "final_train": {k: tr[-1][k] for k in ("loss", "ce", "margin_mean", "fitted_frac")},
    }
  return out


def plot(results, path):
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
  colors = {"ce": "C0", "e1_warmup": "C3", "e1_warmup300": "C2"}
  for name, res in results.items():
    for seed, s in res["per_seed"].items():
      lab = f"{name} seed {seed}"
      st = [r["step"] for r in s["flatness"]]
      for ax, k in zip(axes[:3], KEYS):
        y = [r.get(k, np.nan) for r in s["flatness"]]
        se = [r.get(k + "_stderr", 0.0) for r in s["flatness"]]
        ax.errorbar(st, y, yerr=se, color=colors[name], marker="o", ms=3, capsize=2, label=lab,
                    alpha=0.85, ls="-" if seed == min(res["per_seed"]) else "--")
      ce = np.array(s["train_ce"])
      axes[3].semilogy(ce[:, 0], np.maximum(ce[:, 1], 1e-8), color=colors[name],
                       ls="-" if seed == min(res["per_seed"]) else "--", label=lab)
      if s["converged_step"] is not None:
        for ax in axes:
          ax.axvline(s["converged_step"], color=colors[name], lw=0.6, ls=":")
  for ax, title in zip(axes, ("Tr(H) of mean CE", "Tr(F) of mean CE (sampled labels)",
                              "top Hessian eigenvalue", "training CE")):
    ax.set_title(title)
    ax.set_xlabel("step")
  for ax in axes[:3]:
    ax.set_yscale("log")
  axes[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", default="results/flatness")
  ap.add_argument("--workdir", default="runs/flatness_copy_task")
  ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
  ap.add_argument("--steps", type=int, default=1500)
  ap.add_argument("--every", type=int, default=100)
  ap.add_argument("--probes", type=int, default=8)
  ap.add_argument("--batches", type=int, default=8)
  ap.add_argument("--fisher_samples", type=int, default=4)
  ap.add_argument("--lanczos_steps", type=int, default=10)
  args = ap.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  results = {}
  for name, overrides in LOSSES.items():
    cfg = make_config(overrides, args)
    wd = os.path.join(args.workdir, name)
    t0 = time.time()
    runner.run_or_reuse(cfg, wd)
    rows = runner.read_metrics(wd)
    results[name] = {"overrides": overrides, "seconds": round(time.time() - t0, 1),
                     "per_seed": summarise(rows, args.seeds)}
    print(f"{name}: {results[name]['seconds']} s", flush=True)
  fl0 = cfg.flatness
  meta = {"command": "python experiments/flatness_copy_task.py " + " ".join(argv or sys.argv[1:]),
          "config": "configs/copy_task.py:cpu", "args": vars(args),
          "measurement": {"method": fl0.method, "num_probes": fl0.num_probes,
                          "num_batches": fl0.num_batches, "fisher_samples": fl0.fisher_samples,
                          "lanczos_steps": fl0.lanczos_steps,
                          "objective": "mean CE over the scored answer tokens"}}
  # The answer: final and post-convergence Tr(H), Tr(F), E1 vs CE, per seed.
  answer = {}
  for k in KEYS:
    for name in LOSSES:
      fin = [s["final"][k] for s in results[name]["per_seed"].values() if s["final"]]
      answer[f"{name}_final_{k}"] = fin
      post = [s["mean_after_convergence"].get(k) for s in results[name]["per_seed"].values()]
      answer[f"{name}_post_convergence_mean_{k}"] = post
  wd.write_json(os.path.join(args.out, "copy_task.json"), {"meta": meta, "answer": answer, "results": results}, default=str)
  plot(results, os.path.join(args.out, "copy_task.png"))
  print(json.dumps(answer))


if __name__ == "__main__":
  cli.script(main)
