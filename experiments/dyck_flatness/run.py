"""Both parts of the Dyck experiment, written to `<results_dir>/dyck_flatness.json` and .png:

  setting          the language, its numbers of sentences, pre-training inputs and downstream
                   strings, Var(tau)
  trace_lower_bound  2 / sqrt(T)
  paper            the claim, its source and our reading of the bound (el_jax.report.papers)
  constructions    [the count solution, then each random-feature width: loss, exact or
                   Gauss-Newton Tr(H), cancellation, downstream curves (mean, std over draws)
                   with the minimum-norm and the ridge head; per draw for random features]
  training         {arm: {label_noise, runs: [per seed: points (per measured step: loss,
                   trace, lambda_max, lr_times_lambda_max, ratio, active_per_input,
                   downstream at track_sizes), final_downstream, final_trace_per_layer,
                   final_flattest_rescaling, wall_s], summary: mean / min / max over seeds
                   per measured step}}
  command, args (this config), ran_on, wall_s

The training runs go through el_jax's loop (the `dyck` task, configs/dyck.py:cpu with this
config's settings as overrides) as one `el_jax.run.grid.Grid` in `<runs_dir>/<arm>`
(resumable; a finished run is read back), every checkpoint kept, one every gcd of the measured
steps; the measurements read the checkpoints, so rows are never reused from the results file.
The loop trains exactly what a hand-written loop of `dyck_net.train_chunk` trains (same init,
minibatch key stream and SGD; tests/test_dyck_task.py).
"""
import os
import sys
import time

import jax
import numpy as np

from el_jax.infra import provenance
from el_jax.infra import workdir as wd
from el_jax.report import papers

from experiments.dyck_flatness.analysis import spread, stays_below, summary

FILE = "dyck_flatness.json"
COMMAND = "python -m el_jax.experiment --config=experiments/dyck_flatness/config.py"


def paper():
  """The `paper` field of the results: the theorem's claim, its source and the bound as we
  read it (el_jax.report.papers)."""
  claim, source = papers.entry("s002.thm61.claim")
  return {"source": source, "claim": claim,
          "trace_lower_bound": papers.entry("s002.thm61.trace_lower_bound")[0]}


def _curve_summary(curve):
  return {str(n): {"mean": v["mean"], "std": v["std"]} for n, v in curve.items()}


def _log(text):
  print(text, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# Part 1: the constructions


def constructions(config, data, ds):
  from el_jax.core import flatness
  from el_jax.core.models import dyck_net as dn
  t = config.length
  batch = dn.model_batch(data)
  n_inputs = int(len(data["y"]))
  rows = []
  count = dn.count_solution(t)
  tr = flatness.hessian_trace(dn.loss_fn, count, batch, key=jax.random.key(0), method="exact")
  phi = np.asarray(dn.features(count, ds["z"]))
  curve = dn.sample_complexity(phi, ds["tau"], config.ds_sizes, draws=config.ds_draws, seed=0,
                               ridge=config.ridge)
  curve_r = dn.sample_complexity(phi, ds["tau"], config.ds_sizes, draws=config.ds_draws, seed=0,
                                 ridge=config.ridge_train)
  q = float((1 + np.mean(ds["tau"] == 0)) / 2)
  rows.append({"name": "count", "width": 2, "num_params": int(sum(x.size for x in
                                                                   jax.tree.leaves(count))),
               "loss": float(dn.loss_fn(count, batch)), "trace": tr.estimate,
               "trace_method": "exact (one HVP per parameter)",
               "trace_gauss_newton": sum(dn.gauss_newton_trace(count, data).values()),
               **dn.cancellation(count, data), "downstream": _curve_summary(curve),
               "downstream_ridge": _curve_summary(curve_r),
               "downstream_theory_q_pow_n": {str(n): q ** n for n in config.ds_sizes},
               "samples_to_1pct": stays_below(curve, 0.01)})
  _log(f"count: loss {rows[-1]['loss']:.2e} Tr(H) {tr.estimate:.4f} (bound "
       f"{dn.trace_lower_bound(t):.4f})")
  for factor in config.rf_width_factors:
    m = factor * n_inputs
    per_seed = []
    for s in range(config.rf_seeds):
      t0 = time.time()
      raw = dn.random_feature_solution(t, m, data, seed=s, std=config.rf_std)
      p, c = dn.flattest_rescaling(raw, data)
      gn = dn.gauss_newton_trace(p, data)
      r = {"seed": s, "loss": float(dn.loss_fn(p, batch)), "rescale_c": c,
           "trace": sum(gn.values()), "trace_unrescaled": sum(
               dn.gauss_newton_trace(raw, data).values()), **dn.cancellation(p, data)}
      if s == 0 and config.hutchinson_probes:
        h = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(1),
                                   num_probes=config.hutchinson_probes, chunk_size=10)
        r["trace_hutchinson"], r["trace_hutchinson_stderr"] = h.estimate, h.stderr
      phi = np.asarray(dn.features(p, ds["z"]))
      curve = dn.sample_complexity(phi, ds["tau"], config.ds_sizes, draws=config.ds_draws,
                                   seed=100 + s, ridge=config.ridge)
      r["downstream"] = _curve_summary(curve)
      r["downstream_ridge"] = _curve_summary(dn.sample_complexity(
          phi, ds["tau"], config.ds_sizes, draws=config.ds_draws, seed=100 + s,
          ridge=config.ridge_train))
      r["samples_to_1pct"] = stays_below(curve, 0.01)
      per_seed.append(r)
      _log(f"random features m={m} seed {s}: loss {r['loss']:.2e} Tr(H) {r['trace']:.3f} "
           f"({time.time() - t0:.0f}s)")
    traces = spread([r["trace"] for r in per_seed])
    rows.append({"name": f"random_features_{factor}N", "width": m,
                 "num_params": int(8 * t * t + m * (2 * t + 1)),
                 "loss_max": max(r["loss"] for r in per_seed),
                 **{f"trace_{k}": v for k, v in traces.items()},
                 "trace_method": "E||grad f||^2 at zero loss (Lemma D.4), flattest rescaling",
                 "downstream_mean": {str(n): float(np.mean([r["downstream"][str(n)]["mean"]
                                                            for r in per_seed]))
                                     for n in config.ds_sizes},
                 "downstream_ridge_mean": {str(n): float(np.mean(
                     [r["downstream_ridge"][str(n)]["mean"] for r in per_seed]))
                     for n in config.ds_sizes},
                 "seeds": per_seed})
  return rows


# ----------------------------------------------------------------------------
# Part 2: training from random initialisation (el_jax's loop, the `dyck` task)


def measured_steps(config):
  """The steps measured: `measure`, plus 0 and `steps`, up to `steps`."""
  return [s for s in sorted(set(config.measure) | {0, config.steps}) if s <= config.steps]


def make_grid(config):
  """The training runs (`el_jax.run.grid.Grid`): configs/dyck.py with this config's settings,
  one run per arm (plain SGD; with label_noise > 0 also the label-noise arm), model seeds
  `seeds`, in `<runs_dir>/<arm>`. Every checkpoint is kept (train.keep_checkpoints=0), one
  every gcd of the measured steps, so that each measured step has one."""
  from el_jax.run import grid as grid_lib
  every = int(np.gcd.reduce([s for s in measured_steps(config) if s > 0]))
  common = {"data.length": config.length, "data.nested": config.nested,
            "model.width": config.width, "model.value_std": config.value_std,
            "model.dtype": "float64" if config.x64 else "float32", "optim.lr": config.lr,
            "train.batch_size": config.batch_size, "train.num_steps": config.steps,
            "train.checkpoint_every": every, "train.keep_checkpoints": 0,
            "train.log_every": min(every, 1000)}
  # Rows are not reused from a results file: the measurements read the checkpoints (`path`
  # is where the grid would write; this experiment writes its own JSON instead).
  g = grid_lib.Grid(os.path.join(config.results_dir, FILE), runs_dir=config.runs_dir,
                    reuse_rows=False)
  arms = {"sgd": 0.0}  # grid labels, the keys of result["training"]
  if config.label_noise > 0:
    arms["sgd_label_noise"] = config.label_noise
  for arm, noise in arms.items():
    # One device, as configs/dyck.py (not `runner.fit_devices`: a batch split over devices
    # would round its mean differently).
    g.add(arm, "dyck", "cpu", {**common, "data.label_noise": noise}, seeds=config.seeds,
          fit_devices=False)
  return g


def _quiet(run, cfg):
  """Every run: no progress bar (one line per measurement instead)."""
  cfg.progress = False


def train_runs(config, data, ds):
  from el_jax.core import flatness
  from el_jax.core import tasks
  from el_jax.core.models import dyck_net as dn
  from el_jax.infra import checkpoint
  batch = dn.model_batch(data)
  measure = measured_steps(config)
  g = make_grid(config)
  out = {}
  for arm, run in g.runs.items():
    t_train = time.time()
    g.run([arm], configure=_quiet)  # trains every seed (or reads a finished run back)
    row = g.rows[arm]
    train_s = time.time() - t_train
    cfg = run.config()
    noise = float(cfg.data.label_noise)
    task = tasks.get_task_class("dyck")(cfg)
    abstract = jax.eval_shape(task.init_params, 0)
    here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def params_at(seed, step):
      if step == 0:  # the loop's init (Trainer.init: the same numbers, jitted)
        return task.init_params(seed)
      try:
        return checkpoint.load_params_from(row["workdir"], seed, abstract, here, step)[0]
      except ValueError as e:
        raise ValueError(f"{e}; that run was trained with other checkpoint steps than "
                         f"`measure` needs: move it away, or give another runs_dir") from None

    runs = []
    for seed in config.seeds:
      t0 = time.time()
      points = []
      for step in measure:
        p = params_at(seed, step)
        loss = float(dn.loss_fn(p, batch))
        if not np.isfinite(loss):
          raise FloatingPointError(f"{arm} seed {seed}: loss {loss} at step {step}")
        tr = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(0),
                                    method="exact", validate=False).estimate
        lam = float(flatness.top_eigenvalues(dn.loss_fn, p, batch, key=jax.random.key(0),
                                             num_steps=config.lanczos_steps,
                                             validate=False)[0])
        phi = np.asarray(dn.features(p, ds["z"]))
        curve = dn.sample_complexity(phi, ds["tau"], config.track_sizes, draws=config.ds_draws,
                                     seed=seed, ridge=config.ridge_train)
        pt = {"step": step, "loss": loss, "trace": tr, "lambda_max": lam,
              "lr_times_lambda_max": config.lr * lam, **dn.cancellation(p, data),
              "downstream": {str(n): v["mean"] for n, v in curve.items()}}
        points.append(pt)
        _log(f"{arm} seed {seed} step {step}: loss {loss:.2e} Tr(H) {tr:.3f} lambda_max "
             f"{lam:.3f} ({time.time() - t0:.0f}s)")
      phi = np.asarray(dn.features(p, ds["z"]))
      final_curve = dn.sample_complexity(phi, ds["tau"], config.ds_sizes, draws=config.ds_draws,
                                         seed=seed, ridge=config.ridge_train)
      per_layer = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(0),
                                         method="exact", validate=False).per_layer
      q, c = dn.flattest_rescaling(p, data)
      q_tr = flatness.hessian_trace(dn.loss_fn, q, batch, key=jax.random.key(0),
                                    method="exact", validate=False).estimate
      # wall_s: this seed's share of its run's training (or read-back) time plus its measurements.
      runs.append({"seed": seed, "points": points, "final_downstream":
                   _curve_summary(final_curve), "final_trace_per_layer": per_layer,
                   "final_flattest_rescaling": {"c": c, "trace": q_tr},
                   "wall_s": round(train_s / len(config.seeds) + time.time() - t0, 1)})
    out[arm] = {"label_noise": noise, "runs": runs, "summary": summary(runs)}
  return out


# ----------------------------------------------------------------------------


def _measure_rows(result, name, value, clip=None):
  """{arm: rows}: each training arm's measured points as metrics rows (kind "measure", the
  layout `plots.metric_over_steps` reads), one per (seed, step), with `name` = value(point)
  (raised to `clip` for a log axis)."""
  return {arm: [{"seed": r["seed"], "step": pt["step"], "kind": "measure",
                 name: value(pt) if clip is None else max(value(pt), clip)}
                for r in t["runs"] for pt in r["points"]]
          for arm, t in result["training"].items()}


def plot(result, path):
  import matplotlib.pyplot as plt
  from el_jax.infra import plots  # matplotlib only when plotting (Agg backend)
  from el_jax.report import plots as report_plots
  fig, ax = plt.subplots(1, 4, figsize=(18, 4))
  cons = result["constructions"]
  # Panel 1: Tr(H) of each construction, one bar (dots: the random-feature draws).
  bars = [{"label": c["name"],
           "aggregate": {"trace": {"mean": c["trace"] if "trace" in c else c["trace_mean"]}},
           "per_seed": {"trace": [c["trace"]] if "trace" in c else
                        [s["trace"] for s in c["seeds"]]}}
          for c in cons]
  report_plots.bars_with_seeds(bars, ["trace"], None, ylabel="Tr(H)", ax=ax[0],
                               metric_names={"trace": "Tr(H) at zero loss"})
  ax[0].axhline(result["trace_lower_bound"], color="k", ls="--", label="bound 2/sqrt(T)")
  ax[0].set_yscale("log")
  ax[0].set_title("Tr(H) at zero loss (constructions)", fontsize=9)
  ax[0].legend(fontsize=7)
  sizes = result["args"]["ds_sizes"]
  for c in cons:
    d = c.get("downstream") or {k: {"mean": v} for k, v in c["downstream_mean"].items()}
    ax[1].plot(sizes, [max(d[str(n)]["mean"], 1e-4) for n in sizes], "o-", label=c["name"])
  ax[1].plot(sizes, [max(cons[0]["downstream_theory_q_pow_n"][str(n)], 1e-4) for n in sizes],
             "k:", label="count: theory q^n")
  ax[1].set_xscale("log")
  ax[1].set_yscale("log")
  ax[1].set_xlabel("downstream training examples")
  ax[1].set_title("downstream error vs examples (min-norm head; 0 at 1e-4)", fontsize=9)
  ax[1].legend(fontsize=7)
  # Panels 3-4: the measurements along training, mean and min-max over seeds.
  if result["training"]:
    plots.metric_over_steps(_measure_rows(result, "trace", lambda pt: pt["trace"]), "trace",
                            None, kind="measure", ylabel="exact Tr(H)", log=True, ax=ax[2],
                            title="training: exact Tr(H), mean and min-max over seeds")
    sizes_t = [str(n) for n in result["args"]["track_sizes"]]
    downstream = {f"{arm}, n={n}": rows for n in sizes_t for arm, rows in _measure_rows(
        result, "error", lambda pt, n=n: pt["downstream"][n], clip=1e-4).items()}
    plots.metric_over_steps(downstream, "error", None, kind="measure", ylabel="relative error",
                            log=True, ax=ax[3],
                            title="training: downstream error (ridge head; 0 at 1e-4)")
    styles = ["-", "--", ":", "-."]
    ax[2].axhline(result["trace_lower_bound"], color="k", ls="--", label="count solution")
    rf = [c for c in cons if c["name"].startswith("random")]
    if rf:
      ax[2].axhline(rf[-1]["trace_mean"], color="r", ls=":", label=rf[-1]["name"])
    for i, n in enumerate(sizes_t):
      if n in cons[0]["downstream_ridge"]:
        ax[3].axhline(max(cons[0]["downstream_ridge"][n]["mean"], 1e-4), color="k",
                      ls=styles[i % 4], lw=0.8, label=f"count solution, n={n}")
      if rf and n in rf[-1]["downstream_ridge_mean"]:
        ax[3].axhline(rf[-1]["downstream_ridge_mean"][n], color="r", ls=styles[i % 4], lw=0.8,
                      label=f"{rf[-1]['name']}, n={n}")
    for a in ax[2:]:
      a.set_xlabel("SGD step")
      a.legend(fontsize=6)
  fig.suptitle(f"Dyck (balanced, T={result['args']['length']}); paper: "
               f"{result['paper']['source']} (no numbers)", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def check(config):
  """The config's numbers that cannot work, as one-line errors, before anything is computed."""
  for name in ("length", "rf_seeds", "ds_draws", "width", "batch_size", "steps"):
    if config[name] < 1:
      raise ValueError(f"config.{name} must be >= 1, got {config[name]}")
  if config.ds_draws < 2:
    raise ValueError("config.ds_draws must be >= 2 (the spread over draws is reported)")
  if not config.seeds:
    raise ValueError("config.seeds must name at least one seed")
  if not 0 < config.lr or not np.isfinite(config.lr):
    raise ValueError(f"config.lr must be a finite number > 0, got {config.lr}")


def run(config):
  check(config)
  jax.config.update("jax_enable_x64", bool(config.x64))
  from el_jax.core.data import dyck
  from el_jax.core.models import dyck_net as dn
  t0 = time.time()
  lang = dyck.Language(config.length, nested=config.nested)
  data = dn.pretraining_data(lang)
  ds = dn.downstream_data(lang)
  _log(f"{lang!r}: {lang.num_sentences} sentences, N = {len(data['y'])} pre-training inputs, "
       f"{len(ds['tau'])} downstream strings")
  result = {"setting": {"language": repr(lang), "num_sentences": int(lang.num_sentences),
                        "num_pretraining_inputs": int(len(data["y"])),
                        "num_downstream_strings": int(len(ds["tau"])),
                        "downstream_var_tau": float(np.var(ds["tau"]))},
            "trace_lower_bound": dn.trace_lower_bound(config.length), "paper": paper()}
  result["constructions"] = constructions(config, data, ds)
  result["training"] = {} if config.skip_training else train_runs(config, data, ds)
  result["command"] = COMMAND
  result["args"] = config.to_dict()
  result["ran_on"] = provenance.ran_on()  # where these numbers were computed
  result["wall_s"] = round(time.time() - t0, 1)
  os.makedirs(config.results_dir, exist_ok=True)
  path = os.path.join(config.results_dir, FILE)
  wd.write_json(path, result, default=float)
  plot(result, path[:-len(".json")] + ".png")
  return result
