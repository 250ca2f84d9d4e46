"""The grid (a run per loss of `LOSSES`, trained by el_jax's loop, which takes the flatness
measurements) and the per-seed summaries of its measurements, written to
`<results_dir>/copy_task.json`:

  meta      command, config, args (this config), measurement (the flatness settings)
  results   {loss: {overrides, seconds, per_seed: {seed: {converged_step, flatness (every
            measurement row), final, mean_after_convergence, num_after_convergence, final_eval,
            train_ce, train_loss, final_train}}}}
  answer    each loss's final and post-convergence Tr(H), Tr(F) and top eigenvalue per seed
  rows      the grid's rows (el_jax.run.grid)

and copy_task.png (each quantity over steps, from the runs' metrics.jsonl). The runs' folders
hold the measurements, so the rows are not reused from the results file: a finished run is read
back from `runs_dir` (el_jax.run.train resumes), and a rerun trains only what is missing.
"""
import os

import numpy as np

from el_jax.infra import metrics as metrics_lib
from el_jax.infra import plots
from el_jax.infra import workdir as wd
from el_jax.run import grid as grid_lib

FILE = "copy_task.json"
COMMAND = "python -m el_jax.experiment --config=experiments/flatness_copy_task/config.py"
# The CE and E1 + warmup runs of `make demo` (configs/copy_task.py sweep()).
LOSSES = {k: v for k, v in grid_lib.sweep_runs("copy_task").items() if k in ("ce", "e1_warmup")}
KEYS = ("hessian_trace", "fisher_trace", "top_eigenvalue")


def measured_overrides(config):
  """Every run's length and its flatness measurement (taken by the training loop)."""
  return {"train.num_steps": config.steps, "train.checkpoint_every": config.steps,
          "train.eval_every": 500, "flatness.every": config.every,
          "flatness.method": "hutchinson", "flatness.num_probes": config.probes,
          "flatness.num_batches": config.batches,
          "flatness.fisher_samples": config.fisher_samples,
          "flatness.lanczos_steps": config.lanczos_steps}


def make_grid(config):
  """A run per loss of LOSSES on configs/copy_task.py:<config.variant>, model seeds
  `config.seeds`, in `<runs_dir>/<label>`."""
  g = grid_lib.Grid(os.path.join(config.results_dir, FILE), runs_dir=config.runs_dir,
                    reuse_rows=False)
  for name, overrides in LOSSES.items():
    g.add(name, "copy_task", config.variant, {**overrides, **measured_overrides(config)},
          seeds=config.seeds)
  return g


def _quiet(run, cfg):
  cfg.progress = False


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


# (title, y label) of each panel: KEYS, then the training CE.
PANELS = (("Tr(H) of mean CE", "Tr(H)"), ("Tr(F) of mean CE (sampled labels)", "Tr(F)"),
          ("top Hessian eigenvalue", "top eigenvalue"), ("training CE", "CE"))


def plot(results, rows_by_run, path):
  """Tr(H), Tr(F), the top eigenvalue and the training CE over steps, one line per run
  (`plots.metric_over_steps`: mean over seeds, band min..max); dotted: each seed's
  convergence step."""
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
  for ax, key, (title, ylabel) in zip(axes, KEYS + ("ce",), PANELS):
    plots.metric_over_steps(rows_by_run, key, None, kind="flatness" if key in KEYS else "train",
                            ylabel=ylabel, title=title, log=True, ax=ax)
  for i, res in enumerate(results.values()):
    for s in res["per_seed"].values():
      if s["converged_step"] is not None:
        for ax in axes:
          ax.axvline(s["converged_step"], color=f"C{i}", lw=0.6, ls=":")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def run(config):
  os.makedirs(config.results_dir, exist_ok=True)
  g = make_grid(config)
  results, rows_by_run = {}, {}
  for name, overrides in LOSSES.items():
    g.run([name], configure=_quiet)
    row = g.rows[name]
    rows_by_run[name] = metrics_lib.read_rows(row["workdir"])
    results[name] = {"overrides": overrides, "seconds": row["seconds"],
                     "per_seed": summarise(rows_by_run[name], config.seeds)}
  fl0 = row["config"]["flatness"]
  meta = {"command": COMMAND, "config": f"configs/copy_task.py:{config.variant}",
          "args": config.to_dict(),
          "measurement": {"method": fl0["method"], "num_probes": fl0["num_probes"],
                          "num_batches": fl0["num_batches"],
                          "fisher_samples": fl0["fisher_samples"],
                          "lanczos_steps": fl0["lanczos_steps"],
                          "objective": "mean CE over the scored answer tokens"}}
  # Final and post-convergence Tr(H), Tr(F) and top eigenvalue of each loss, per seed.
  answer = {}
  for k in KEYS:
    for name in LOSSES:
      fin = [s["final"][k] for s in results[name]["per_seed"].values() if s["final"]]
      answer[f"{name}_final_{k}"] = fin
      post = [s["mean_after_convergence"].get(k) for s in results[name]["per_seed"].values()]
      answer[f"{name}_post_convergence_mean_{k}"] = post
  doc = {"meta": meta, "answer": answer, "results": results, "rows": g.document()["rows"]}
  wd.write_json(os.path.join(config.results_dir, FILE), doc, default=str)
  plot(results, rows_by_run, os.path.join(config.results_dir, "copy_task.png"))
  return doc
