r"""Seed 002, Sec. 6 / Theorem 6.1: flatness picks the transferable solution on a Dyck language.

  nice -n 5 python experiments/dyck_flatness.py                 # T = 8, ~10-20 min on 2 CPU cores
  python experiments/dyck_flatness.py --steps=2000 --seeds=0 --rf_width_factors=2 \
      --out=/tmp/dyck_smoke                                     # a smoke run

The setting (`el_jax.data.dyck`, `el_jax.models.dyck_net`; assumptions in their
docstrings): sentences uniform over the strings of length T with as many ( as ),
one uniformly masked token; the one-attention-layer + ReLU-MLP model on the
+-position encoding; loss 1/2 E (f - y)^2 with y = p(() - p()) = +-1 (the exact
conditional is one-hot). All pre-training quantities are exact expectations over
the C(T, T/2) * T equally likely (sentence, mask) inputs; downstream errors are
exact over all 2^T downstream strings.

Part 1, the two constructions of the seed's Sec. 6:
  * the 2-neuron count solution at the trace-minimising scale: loss, exact Tr(H)
    (`el_jax.flatness.hessian_trace(method="exact")`) against the seed's lower
    bound 2 / sqrt(T);
  * random-feature solutions (W_V ~ N(0, 1), a = minimum-norm interpolation) with
    m = factor * N neurons (N = number of pre-training inputs), `--rf_seeds`
    draws each, rescaled to their flattest equivalent (c W_V, a / c): loss, Tr(H)
    (= E||grad f||^2 at zero loss, the seed's Lemma D.4; checked by Hutchinson
    on the first draw), the cancellation ratio E sum_j |a_j| relu_j / E|f|;
  * for each, the downstream sample complexity: relative test error (population
    MSE / Var(tau)) of the minimum-norm linear head on the features against the
    number of downstream examples (`--ds_draws` training sets per size), with the
    count solution's exact expectation q^n beside it.

Part 2, training from random initialisation: `--width` neurons, SGD (optax, no
momentum) at a small learning rate, minibatches drawn from the pre-training
distribution, for `--steps` (long after the loss converges), `--seeds` seeds;
arm `sgd` and, as the control the seed's Sec. 4 mechanism needs (stochastic
targets), arm `sgd_label_noise` (targets y +- `--label_noise`). At each step of
`--measure`: exact loss, exact Tr(H), the top Hessian eigenvalue (Lanczos; lr
times it stays below 2 in the stable regime), the cancellation ratio and the
downstream relative error at `--track_sizes` examples (ridge `--ridge_train`
relative, since the features of a trained model can be nearly collinear).

Writes <out>/dyck_flatness.json (the command, the arguments, the paper's claim and
every number) and <out>/dyck_flatness.png.
"""
import argparse
import json
import os
import sys
import time

if __name__ == "__main__":
  # One BLAS thread (before NumPy loads OpenBLAS), as el_jax.data.hmm: the least-squares
  # fits here are small, and threads fighting the shared 2-core machine's other jobs made
  # one random-feature fit ~20x slower. Set OPENBLAS_NUM_THREADS to override.
  os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from el_jax import cli  # noqa: E402
from el_jax import workdir as wd  # noqa: E402

PAPER = {
    "source": "seed 002 Sec. 6, Theorem 6.1, Lemmas D.1-D.4, Theorem D.6",
    "claim": "Both the 2-neuron count solution and random-feature solutions reach zero MLM "
             "loss; the flattest zero-loss solution (minimum Tr(H)) has no cancellation "
             "between active neurons and its features give zero downstream error from a "
             "constant number of examples (one with tau > 0 and one with tau < 0), while "
             "random-feature solutions have larger Tr(H) and need more examples. The paper "
             "gives no numbers for this setting and no training experiment on it.",
    "trace_lower_bound": "2 / sqrt(T) under our reading (1/2 squared loss, +-1 targets)",
}


def parse_ints(s):
  return [int(x) for x in s.split(",") if x.strip()]


def parse_floats(s):
  return [float(x) for x in s.split(",") if x.strip()]


def _first_below(curve, thr):
  for n in sorted(curve):
    if curve[n]["mean"] <= thr:
      return n
  return None


def _curve_summary(curve):
  return {str(n): {"mean": v["mean"], "std": v["std"]} for n, v in curve.items()}


# ----------------------------------------------------------------------------
# Part 1: the constructions


def constructions(args, lang, data, ds):
  from el_jax import flatness
  from el_jax.models import dyck_net as dn
  t = args.length
  batch = dn.model_batch(data)
  n_inputs = int(len(data["y"]))
  rows = []
  count = dn.count_solution(t)
  tr = flatness.hessian_trace(dn.loss_fn, count, batch, key=jax.random.key(0), method="exact")
  phi = np.asarray(dn.features(count, ds["z"]))
  curve = dn.sample_complexity(phi, ds["tau"], args.ds_sizes, draws=args.ds_draws, seed=0,
                               ridge=args.ridge)
  curve_r = dn.sample_complexity(phi, ds["tau"], args.ds_sizes, draws=args.ds_draws, seed=0,
                                 ridge=args.ridge_train)
  q = float((1 + np.mean(ds["tau"] == 0)) / 2)
  rows.append({"name": "count", "width": 2, "num_params": int(sum(x.size for x in
                                                                   jax.tree.leaves(count))),
               "loss": float(dn.loss_fn(count, batch)), "trace": tr.estimate,
               "trace_method": "exact (one HVP per parameter)",
               "trace_gauss_newton": sum(dn.gauss_newton_trace(count, data).values()),
               **dn.cancellation(count, data), "downstream": _curve_summary(curve),
               "downstream_ridge": _curve_summary(curve_r),
               "downstream_theory_q_pow_n": {str(n): q ** n for n in args.ds_sizes},
               "samples_to_1pct": _first_below(curve, 0.01)})
  print(f"count: loss {rows[-1]['loss']:.2e} Tr(H) {tr.estimate:.4f} (bound "
        f"{dn.trace_lower_bound(t):.4f}); downstream " + ", ".join(
            f"n={n}: {v['mean']:.3f}" for n, v in curve.items()), flush=True)
  for factor in args.rf_width_factors:
    m = factor * n_inputs
    per_seed = []
    for s in range(args.rf_seeds):
      t0 = time.time()
      raw = dn.random_feature_solution(t, m, data, seed=s, std=args.rf_std)
      p, c = dn.flattest_rescaling(raw, data)
      gn = dn.gauss_newton_trace(p, data)
      r = {"seed": s, "loss": float(dn.loss_fn(p, batch)), "rescale_c": c,
           "trace": sum(gn.values()), "trace_unrescaled": sum(
               dn.gauss_newton_trace(raw, data).values()), **dn.cancellation(p, data)}
      if s == 0 and args.hutchinson_probes:
        h = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(1),
                                   num_probes=args.hutchinson_probes, chunk_size=10)
        r["trace_hutchinson"], r["trace_hutchinson_stderr"] = h.estimate, h.stderr
      phi = np.asarray(dn.features(p, ds["z"]))
      curve = dn.sample_complexity(phi, ds["tau"], args.ds_sizes, draws=args.ds_draws,
                                   seed=100 + s, ridge=args.ridge)
      r["downstream"] = _curve_summary(curve)
      r["downstream_ridge"] = _curve_summary(dn.sample_complexity(
          phi, ds["tau"], args.ds_sizes, draws=args.ds_draws, seed=100 + s,
          ridge=args.ridge_train))
      r["samples_to_1pct"] = _first_below(curve, 0.01)
      per_seed.append(r)
      print(f"random features m={m} seed {s}: loss {r['loss']:.2e} Tr(H) {r['trace']:.3f} "
            f"(unrescaled {r['trace_unrescaled']:.3f}"
            + (f", Hutchinson {r['trace_hutchinson']:.3f} +- {r['trace_hutchinson_stderr']:.3f}"
               if "trace_hutchinson" in r else "")
            + f") cancellation {r['ratio']:.2f}; downstream " + ", ".join(
                f"n={n}: {v['mean']:.3f}" for n, v in curve.items())
            + f" ({time.time() - t0:.0f}s)", flush=True)
    traces = [r["trace"] for r in per_seed]
    rows.append({"name": f"random_features_{factor}N", "width": m,
                 "num_params": int(8 * t * t + m * (2 * t + 1)),
                 "loss_max": max(r["loss"] for r in per_seed),
                 "trace_mean": float(np.mean(traces)), "trace_min": float(np.min(traces)),
                 "trace_max": float(np.max(traces)),
                 "trace_method": "E||grad f||^2 at zero loss (Lemma D.4), flattest rescaling",
                 "downstream_mean": {str(n): float(np.mean([r["downstream"][str(n)]["mean"]
                                                            for r in per_seed]))
                                     for n in args.ds_sizes},
                 "downstream_ridge_mean": {str(n): float(np.mean(
                     [r["downstream_ridge"][str(n)]["mean"] for r in per_seed]))
                     for n in args.ds_sizes},
                 "seeds": per_seed})
  return rows


# ----------------------------------------------------------------------------
# Part 2: training from random initialisation


def train_runs(args, lang, data, ds):
  import optax
  from el_jax import flatness
  from el_jax.models import dyck_net as dn
  batch = dn.model_batch(data)
  opt = optax.sgd(args.lr)
  arms = {"sgd": 0.0}
  if args.label_noise > 0:
    arms["sgd_label_noise"] = args.label_noise
  out = {}
  measure = sorted(set(args.measure) | {0, args.steps})
  measure = [s for s in measure if s <= args.steps]
  for arm, noise in arms.items():
    runs = []
    for seed in args.seeds:
      t0 = time.time()
      p = dn.init(jax.random.key(seed), args.length, args.width, value_std=args.value_std)
      s = opt.init(p)
      key = jax.random.key(10_000 + seed)
      step, points = 0, []
      for target in measure:
        while step < target:
          k = min(args.chunk, target - step)
          p, s, key, _ = dn.train_chunk(p, s, key, batch, optimizer=opt,
                                        batch_size=args.batch_size, num_steps=k,
                                        label_noise=noise)
          step += k
        loss = float(dn.loss_fn(p, batch))
        if not np.isfinite(loss):
          raise FloatingPointError(f"{arm} seed {seed}: loss {loss} at step {step}")
        tr = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(0),
                                    method="exact", validate=False).estimate
        lam = float(flatness.top_eigenvalues(dn.loss_fn, p, batch, key=jax.random.key(0),
                                             num_steps=args.lanczos_steps,
                                             validate=False)[0])
        phi = np.asarray(dn.features(p, ds["z"]))
        curve = dn.sample_complexity(phi, ds["tau"], args.track_sizes, draws=args.ds_draws,
                                     seed=seed, ridge=args.ridge_train)
        pt = {"step": step, "loss": loss, "trace": tr, "lambda_max": lam,
              "lr_times_lambda_max": args.lr * lam, **dn.cancellation(p, data),
              "downstream": {str(n): v["mean"] for n, v in curve.items()}}
        points.append(pt)
        print(f"{arm} seed {seed} step {step}: loss {loss:.2e} Tr(H) {tr:.3f} lambda_max "
              f"{lam:.3f} cancellation {pt['ratio']:.2f} downstream " + ", ".join(
                  f"n={n}: {v:.3f}" for n, v in pt["downstream"].items())
              + f" ({time.time() - t0:.0f}s)", flush=True)
      phi = np.asarray(dn.features(p, ds["z"]))
      final_curve = dn.sample_complexity(phi, ds["tau"], args.ds_sizes, draws=args.ds_draws,
                                         seed=seed, ridge=args.ridge_train)
      per_layer = flatness.hessian_trace(dn.loss_fn, p, batch, key=jax.random.key(0),
                                         method="exact", validate=False).per_layer
      q, c = dn.flattest_rescaling(p, data)
      q_tr = flatness.hessian_trace(dn.loss_fn, q, batch, key=jax.random.key(0),
                                    method="exact", validate=False).estimate
      runs.append({"seed": seed, "points": points, "final_downstream":
                   _curve_summary(final_curve), "final_trace_per_layer": per_layer,
                   "final_flattest_rescaling": {"c": c, "trace": q_tr},
                   "wall_s": round(time.time() - t0, 1)})
      print(f"{arm} seed {seed} final: Tr(H) per layer " + ", ".join(
          f"{k} {v:.3f}" for k, v in per_layer.items())
          + f"; after the flattest rescaling (c = {c:.3f}) {q_tr:.3f}", flush=True)
    out[arm] = {"label_noise": noise, "runs": runs, "summary": _summary(runs)}
  return out


def _summary(runs):
  """Mean, min and max over seeds at each measured step."""
  rows = []
  for i, pt in enumerate(runs[0]["points"]):
    row = {"step": pt["step"]}
    for k in ("loss", "trace", "lambda_max", "ratio", "active_per_input"):
      v = [r["points"][i][k] for r in runs]
      row[k] = {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))}
    for n in pt["downstream"]:
      v = [r["points"][i]["downstream"][n] for r in runs]
      row[f"downstream_{n}"] = {"mean": float(np.mean(v)), "min": float(np.min(v)),
                                "max": float(np.max(v))}
    rows.append(row)
  return rows


# ----------------------------------------------------------------------------


def plot(result, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(1, 4, figsize=(18, 4))
  cons = result["constructions"]
  names = [c["name"] for c in cons]
  traces = [c.get("trace", c.get("trace_mean")) for c in cons]
  lo = [c.get("trace", c.get("trace_min")) for c in cons]
  hi = [c.get("trace", c.get("trace_max")) for c in cons]
  ax[0].bar(range(len(cons)), traces,
            yerr=[np.subtract(traces, lo), np.subtract(hi, traces)], color="C0")
  ax[0].axhline(result["trace_lower_bound"], color="k", ls="--", label="bound 2/sqrt(T)")
  ax[0].set_xticks(range(len(cons)), names, rotation=20, fontsize=7)
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
  sizes_t = [str(n) for n in result["args"]["track_sizes"]]
  styles = ["o-", "s--", "^:", "v-."]
  for j, arm in enumerate(result["training"]):
    summ = result["training"][arm]["summary"]
    x = [r["step"] for r in summ]
    curves = [(ax[2], "trace", "o-", arm)] + [
        (ax[3], f"downstream_{n}", styles[i % 4], f"{arm}, n={n}") for i, n in enumerate(sizes_t)]
    for a, key, style, label in curves:
      a.plot(x, [max(r[key]["mean"], 1e-4) for r in summ], style, color=f"C{j}", label=label)
      a.fill_between(x, [max(r[key]["min"], 1e-4) for r in summ],
                     [max(r[key]["max"], 1e-4) for r in summ], color=f"C{j}", alpha=0.2)
  ax[2].axhline(result["trace_lower_bound"], color="k", ls="--", label="count solution")
  rf = [c for c in cons if c["name"].startswith("random")]
  if rf:
    ax[2].axhline(rf[-1]["trace_mean"], color="r", ls=":", label=rf[-1]["name"])
  ax[2].set_yscale("log")
  ax[2].set_title("training: exact Tr(H), mean and min-max over seeds", fontsize=9)
  for i, n in enumerate(sizes_t):
    if n in cons[0]["downstream_ridge"]:
      ax[3].axhline(max(cons[0]["downstream_ridge"][n]["mean"], 1e-4), color="k",
                    ls=styles[i % 4][1:], lw=0.8, label=f"count solution, n={n}")
    if rf and n in rf[-1]["downstream_ridge_mean"]:
      ax[3].axhline(rf[-1]["downstream_ridge_mean"][n], color="r", ls=styles[i % 4][1:], lw=0.8,
                    label=f"{rf[-1]['name']}, n={n}")
  ax[3].set_title("training: downstream error (ridge head; 0 at 1e-4)", fontsize=9)
  ax[3].set_yscale("log")
  for a in ax[2:]:
    a.set_xlabel("SGD step")
    a.legend(fontsize=6)
  fig.suptitle(f"Dyck (balanced, T={result['args']['length']}); paper: "
               f"{PAPER['source']} (no numbers)", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--length", type=int, default=8, help="sentence length T (even)")
  ap.add_argument("--nested", action="store_true",
                  help="Dyck-1 (prefix condition) instead of the paper's balanced variant")
  ap.add_argument("--rf_width_factors", type=parse_ints, default=parse_ints("1,2,4"),
                  help="random-feature widths, as multiples of the number of inputs N")
  ap.add_argument("--rf_seeds", type=int, default=3)
  ap.add_argument("--rf_std", type=float, default=1.0, help="std of the random W_V entries")
  ap.add_argument("--hutchinson_probes", type=int, default=40,
                  help="Hutchinson check of the first random-feature draw (0: skip)")
  ap.add_argument("--ds_sizes", type=parse_ints, default=parse_ints("1,2,4,8,16,32,64,128,256"))
  ap.add_argument("--ds_draws", type=int, default=40, help="training sets per size")
  ap.add_argument("--ridge", type=float, default=0.0,
                  help="ridge of the head for the constructions (0: minimum norm, the theorem)")
  ap.add_argument("--ridge_train", type=float, default=1e-3,
                  help="relative ridge of the head on trained features")
  ap.add_argument("--track_sizes", type=parse_ints, default=parse_ints("8,32"))
  ap.add_argument("--width", type=int, default=32, help="neurons of the trained model")
  ap.add_argument("--value_std", type=float, default=0.1, help="init std of W_V")
  ap.add_argument("--lr", type=float, default=0.1)
  ap.add_argument("--batch_size", type=int, default=32)
  ap.add_argument("--steps", type=int, default=40_000)
  ap.add_argument("--measure", type=parse_ints,
                  default=parse_ints("0,1000,2000,5000,10000,20000,30000,40000"))
  ap.add_argument("--chunk", type=int, default=1000, help="SGD steps per jitted scan")
  ap.add_argument("--label_noise", type=float, default=0.5,
                  help="amplitude of the label-noise arm (0: plain SGD only)")
  ap.add_argument("--lanczos_steps", type=int, default=20)
  ap.add_argument("--seeds", type=parse_ints, default=parse_ints("0,1,2"))
  ap.add_argument("--x64", type=int, default=1, help="float64 (1) or float32 (0)")
  ap.add_argument("--skip_training", action="store_true")
  ap.add_argument("--out", default="results/dyck")
  args = ap.parse_args(argv)
  for name in ("length", "rf_seeds", "ds_draws", "width", "batch_size", "steps", "chunk"):
    if getattr(args, name) < 1:
      raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
  if args.ds_draws < 2:
    raise ValueError("--ds_draws must be >= 2 (the spread over draws is reported)")
  if not args.seeds:
    raise ValueError("--seeds must name at least one seed")
  if not 0 < args.lr or not np.isfinite(args.lr):
    raise ValueError(f"--lr must be a finite number > 0, got {args.lr}")
  jax.config.update("jax_enable_x64", bool(args.x64))
  from el_jax.data import dyck
  from el_jax.models import dyck_net as dn
  t0 = time.time()
  lang = dyck.Language(args.length, nested=args.nested)
  data = dn.pretraining_data(lang)
  ds = dn.downstream_data(lang)
  print(f"{lang!r}: {lang.num_sentences} sentences, N = {len(data['y'])} pre-training "
        f"inputs, {len(ds['tau'])} downstream strings", flush=True)
  result = {"setting": {"language": repr(lang), "num_sentences": int(lang.num_sentences),
                        "num_pretraining_inputs": int(len(data["y"])),
                        "num_downstream_strings": int(len(ds["tau"])),
                        "downstream_var_tau": float(np.var(ds["tau"]))},
            "trace_lower_bound": dn.trace_lower_bound(args.length), "paper": PAPER}
  result["constructions"] = constructions(args, lang, data, ds)
  if not args.skip_training:
    result["training"] = train_runs(args, lang, data, ds)
  else:
    result["training"] = {}
  result["command"] = "python experiments/dyck_flatness.py " + " ".join(
      sys.argv[1:] if argv is None else argv)
  result["args"] = vars(args)
  result["wall_s"] = round(time.time() - t0, 1)
  os.makedirs(args.out, exist_ok=True)
  stem = os.path.join(args.out, "dyck_flatness")
  wd.write_json(stem + ".json", result, default=float)
  plot(result, stem + ".png")
  brief = {"constructions": [{k: c.get(k) for k in ("name", "trace", "trace_mean",
                                                    "samples_to_1pct")}
                             for c in result["constructions"]]}
  if result["training"]:
    brief["training_final"] = {arm: v["summary"][-1] for arm, v in result["training"].items()}
  print(json.dumps(brief, default=float))
  print(f"wrote {stem}.json and .png ({result['wall_s']} s)")


if __name__ == "__main__":
  cli.script(main)
