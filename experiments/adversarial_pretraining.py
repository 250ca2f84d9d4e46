r"""Seed 002, Tables 1 and 2: normal vs adversarial pretraining vs the lookup table (PCFG).

  python experiments/adversarial_pretraining.py --size=cpu     # ~45 min on a quiet 2-core CPU
  python experiments/adversarial_pretraining.py --size=paper   # accelerator sizes (not run here)
  python experiments/adversarial_pretraining.py --size=test    # seconds; a smoke test

Trains through `el_jax.runner` (finished runs under --runs are reused) on
configs/pcfg_mlm.py:<size>:

* the normal AdamW model (the config as it is), and
* the adversarial model: the same recipe with `adversarial.enabled` (MLM loss
  minus weight x the squared loss, on D2, of a ridge head fitted on D1, both
  drawn from task `adversarial.task`'s training set; `el_jax.adversarial`).
  The weight is chosen on the valid split by a pilot: the weights of
  --weights, from the largest down, are trained for --pilot_steps steps (the
  first steps of their full runs: `train.stop_at_step`, resumable) until one's
  valid MLM loss there is within --pilot_tol nats of the normal run's at the
  same step; that one is trained to the end (the smallest if none is; flagged
  in the JSON).

Then measures, on the final checkpoints:

* pre-training loss: valid / test MLM loss and the gap to the exact optimum
  (the eval rows of metrics.jsonl); for the lookup table, the optimum itself;
* linear-probe accuracy on tasks A and B (`el_jax.probe.linear_probe`, the
  paper's protocol, 5 probe seeds; test accuracy at the epoch chosen on
  valid), for both models and for the lookup table's features (the exact
  conditionals, concatenated); normal vs adversarial by `runner.compare`
  (permutation test and bootstrap interval over the 5 probe seeds: they say
  the probe difference is not probe noise, for this one pair of models);
* Tr(H) of the pre-training loss: the estimator of App. B.1 (labels sampled
  from the model) with its std over --flat_reps repetitions, and Hutchinson
  probes of the exact Hessian, as experiments/mlm_flatness.py measures them;
* the adversary's own objective on the final models: the mean D2 squared loss
  of the ridge head over --d2_draws draws of (D1, D2) from the training set.

The same measurements are taken on the normal run's saved checkpoint whose
valid loss is closest to the adversarial model's final one (`adamw_matched`):
the comparison at equal pre-training loss when the final losses differ.

Writes <out>/table.json and table.png (the paper's numbers beside ours).
"""
import argparse
import dataclasses
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
    "source": "seed 002 Table 1 (235M BERT on PCFG; pre-training loss, linear-probe accuracy "
              "% on tasks A and B, mean and std over 5 seeds) and Table 2 (Acc: a probe "
              "accuracy, task not named; Tr(H) of the pre-training loss, App. B.1)",
    "table1": {"adamw": {"loss": 3.204, "A": [89.9, 0.3], "B": [49.2, 0.8]},
               "adversarial": {"loss": 3.206, "A": [83.1, 0.6], "B": [42.3, 1.5]},
               "lookup_table": {"loss": 3.196, "A": [71.2, None], "B": [39.7, None]}},
    "table2": {"adamw": {"loss": 3.20, "acc": [55.7, 0.6], "trace": [8.01, 0.73]},
               "adversarial": {"loss": 3.20, "acc": [50.2, 1.0], "trace": [19.34, 0.92]}},
}
EVAL_KEYS = ("valid_mlm_loss", "valid_gap", "valid_kl", "valid_true_entropy", "test_mlm_loss",
             "test_gap", "test_kl", "train_mlm_loss")
SIZES = {  # per --size: (probe valid, probe test, flat inputs, flat reps, fisher samples,
    #                      Hutchinson probes, probe epochs)
    "paper": (10_000, 10_000, 200, 5, 50, 10, 100),
    "cpu": (1000, 2000, 200, 5, 50, 10, 100),
    "test": (32, 32, 8, 2, 4, 2, 3),
}


# The `test` variant evaluates only at its last step: twice as many steps leave room for a pilot.
OVERRIDES = {"paper": {}, "cpu": {}, "test": {"train.num_steps": 60}}


def configs(args, weight=None):
  """(normal, adversarial) configs of --size (the adversarial one at `weight`)."""
  over = {"seeds": (0,), **OVERRIDES[args.size]}
  normal = runner.get_config("pcfg_mlm", args.size, over)
  adv = runner.get_config("pcfg_mlm", args.size, {**over, "adversarial.enabled": True})
  if weight is not None:
    adv.adversarial.weight = float(weight)
  return normal, adv


def eval_row(workdir, step):
  return mlm_measure.eval_row(workdir, 0, step, EVAL_KEYS)


def adv_dir(args, weight):
  return os.path.join(args.runs, f"pcfg_adversarial_w{weight:g}")


# ----------------------------------------------------------------------------
# Training: normal run, pilot, chosen adversarial run


def pilot(args, normal_dir):
  """{weight: valid loss at --pilot_steps and its difference to the normal run}; the choice."""
  start = eval_row(normal_dir, args.pilot_steps)["valid_mlm_loss"]
  trials = {}
  for w in sorted(args.weights, reverse=True):  # the largest first: stop at the first within tol
    _, cfg = configs(args, w)
    d = adv_dir(args, w)
    if runner.finished_summary(cfg, d) is None:
      cfg.train.stop_at_step = args.pilot_steps  # the first steps of the full run (resumable)
      runner.run_or_reuse(cfg, d)
    loss = eval_row(d, args.pilot_steps)["valid_mlm_loss"]
    trials[f"{w:g}"] = {"weight": w, "valid_mlm_loss": loss, "minus_normal": loss - start,
                        "within_tol": bool(loss - start <= args.pilot_tol)}
    print(f"pilot weight {w:g}: valid MLM loss {loss:.4f} at step {args.pilot_steps} "
          f"({loss - start:+.4f} vs normal)", flush=True)
    if trials[f"{w:g}"]["within_tol"]:
      break
  ok = [t["weight"] for t in trials.values() if t["within_tol"]]
  chosen = max(ok) if ok else min(args.weights)
  return {"steps": args.pilot_steps, "tol": args.pilot_tol, "normal_valid_mlm_loss": start,
          "trials": trials, "chosen_weight": chosen, "none_within_tol": not ok,
          "rule": "the largest weight whose valid MLM loss after `steps` steps is within `tol` "
                  "nats of the normal run's at that step (the smallest if none is); weights "
                  "are tried from the largest down, smaller ones are not run once one passes"}


def adversary_curve(workdir, num_steps):
  """Mean adv_d2_loss / loss of the train rows in the first and last tenth of training."""
  rows = [r for r in runner.read_metrics(workdir) if r.get("kind") == "train"]
  out = {}
  for name, lo, hi in (("first_tenth", 0, num_steps / 10), ("last_tenth", 0.9 * num_steps,
                                                             num_steps)):
    sel = [r for r in rows if lo < r["step"] <= hi]
    out[name] = {k: float(np.mean([r[k] for r in sel])) for k in
                 ("adv_d2_loss", "adv_d1_loss", "loss", "adv_grad_norm", "grad_norm")
                 if sel and k in sel[0]}
  return out


def train_time_s(workdir):
  """Seconds spent in training steps (metrics `time_s`, summed over resumed segments)."""
  total, last = 0.0, 0.0
  for r in runner.read_metrics(workdir):
    if r.get("kind") != "train":
      continue
    if r["time_s"] < last:  # a resume restarts the clock
      total += last
    last = r["time_s"]
  return round(total + last, 1)


# ----------------------------------------------------------------------------
# Measurements


def d2_diagnostic(x, labels, num_classes, acfg, draws):
  """Mean and std over `draws` (D1, D2) draws of the ridge head's D2 and D1 squared losses
  on features `x` of the training set (the adversary's objective, measured)."""
  import jax
  import jax.numpy as jnp
  from el_jax import adversarial
  y = np.eye(num_classes, dtype=np.float32)[labels]
  fn = jax.jit(lambda a, b, c, d: adversarial.head_losses(a, b, c, d, float(acfg.ridge)))
  d2, d1 = [], []
  for r in range(draws):
    i1, i2 = adversarial.draw_subsets(jax.random.key(10_000 + r), x.shape[0],
                                      int(acfg.d1_size), int(acfg.d2_size))
    i1, i2 = np.asarray(i1), np.asarray(i2)
    a, b = fn(jnp.asarray(x[i1]), jnp.asarray(y[i1]), jnp.asarray(x[i2]), jnp.asarray(y[i2]))
    d2.append(float(a))
    d1.append(float(b))
  return {"d2_loss_mean": float(np.mean(d2)), "d2_loss_std": float(np.std(d2, ddof=1)),
          "d1_loss_mean": float(np.mean(d1)), "draws": draws}


def probe_all(data, feats_fn, args):
  """{task: probe result} for the downstream tasks in `data` with features from `feats_fn`."""
  from el_jax import probe
  out, feats = {}, {}
  for name, ds in data.items():
    x = {s: feats_fn(ds.split(s)) for s in ("train", "valid", "test")}
    r = probe.linear_probe(x["train"], ds.train.labels, x["valid"], ds.valid.labels, x["test"],
                           ds.test.labels, ds.num_classes, epochs=args.probe_epochs)
    out[name] = {k: r[k] for k in ("test_acc", "valid_acc", "epoch", "test_acc_mean",
                                   "test_acc_std", "valid_acc_mean", "num_features")}
    feats[name] = x["train"]
    print(f"  probe task {name}: test acc {100 * r['test_acc_mean']:.2f} "
          f"({100 * r['test_acc_std']:.2f})", flush=True)
  return out, feats


def measure(args, normal_cfg, adv_cfg, normal_dir, chosen_dir):
  from el_jax import probe
  from el_jax.data import downstream
  a = adv_cfg.adversarial
  pv, pt, fi, fr, fs, hp, ep = SIZES[args.size]
  settings = mlm_measure.Settings(
      tasks="A,B", probe_train=int(a.num_train), probe_valid=pv, probe_test=pt,
      probe_data_seed=int(a.data_seed), flat_inputs=fi, flat_reps=fr, fisher_samples=fs,
      chunk=args.chunk, hutchinson_probes=hp, probe_epochs=ep)
  args.probe_epochs = ep
  m = mlm_measure.Measurer(normal_cfg, settings, "pcfg")
  # The probe of the adversary's task trains on the set the adversary drew D1 / D2 from.
  own = m.tasks[a.task].train
  check = downstream.pcfg_task(m.task.language, a.task, num_train=int(a.num_train), num_valid=1,
                               num_test=1, seed=int(a.data_seed), seq_len=m.task.context_len,
                               cache=False).train
  if not (np.array_equal(own.tokens, check.tokens) and np.array_equal(own.labels, check.labels)):
    raise RuntimeError("the probe's training set is not the adversary's")
  graphdef = m.trainer.graphdef
  steps = normal_cfg.train.num_steps

  def measure_model(label, d, step):
    t0 = time.time()
    print(f"measuring {label} ({d}, step {step})", flush=True)
    params = m.params(d, step, 0)
    row = {"run": d, "step": step, **eval_row(d, step)}
    row["probe"], feats = probe_all(
        m.tasks, lambda s, p=params: probe.encode(graphdef, p, s.tokens, s.segment_ids), args)
    task = m.tasks[a.task]
    row["adversary_objective"] = d2_diagnostic(feats[a.task], task.train.labels,
                                               task.num_classes, a, args.d2_draws)
    row.update(m.flatness(params, step))
    print(f"  Tr(H) B.1 {row['trace_b1']:.3f} +- {row['trace_b1_std']:.3f}, Hutchinson "
          f"{row['trace_hutchinson']:.3f} +- {row['trace_hutchinson_stderr']:.3f}; D2 loss "
          f"{row['adversary_objective']['d2_loss_mean']:.4f} ({time.time() - t0:.0f} s)",
          flush=True)
    return row

  models = {"adamw": measure_model("adamw", normal_dir, steps),
            "adversarial": measure_model("adversarial", chosen_dir, steps)}
  # The normal run's saved checkpoint whose valid loss is closest to the adversarial model's:
  # a comparison at (nearly) equal pre-training loss when the final losses differ.
  from el_jax import train
  target = models["adversarial"]["valid_mlm_loss"]
  saved = [(abs(eval_row(normal_dir, s)["valid_mlm_loss"] - target), s)
           for s in train.checkpoint_steps(normal_dir, 0) if s % normal_cfg.train.eval_every == 0]
  matched = min(saved)[1] if saved else steps
  if matched != steps:
    models["adamw_matched"] = measure_model("adamw_matched", normal_dir, matched)
  print("measuring the lookup table", flush=True)
  lang = m.task.language
  lookup = {"valid_mlm_loss": models["adamw"]["valid_true_entropy"], "valid_gap": 0.0,
            "note": "the exact conditionals: its MLM loss is the optimum (valid true entropy)"}
  lookup["probe"], _ = probe_all(
      m.tasks, lambda s: downstream.lookup_table_features(lang, s.tokens, s.lengths), args)
  models["lookup_table"] = lookup
  comparisons = {}
  for base in ("adamw", "adamw_matched"):
    if base not in models:
      continue
    adv, ref = models["adversarial"], models[base]
    c = {f"probe_{t}": runner.compare(adv["probe"][t]["test_acc"], ref["probe"][t]["test_acc"])
         for t in m.tasks}
    c["trace_b1"] = runner.compare(adv["trace_b1_reps"], ref["trace_b1_reps"])
    c["valid_mlm_loss_diff"] = adv["valid_mlm_loss"] - ref["valid_mlm_loss"]
    c["valid_kl_diff"] = adv["valid_kl"] - ref["valid_kl"]
    comparisons[f"adversarial_vs_{base}"] = c
  return models, comparisons, settings


# ----------------------------------------------------------------------------


def plot(result, path):
  from el_jax import plots  # noqa: F401  (selects the Agg backend)
  import matplotlib.pyplot as plt
  m = result["models"]
  names = [n for n in ("adamw", "adamw_matched", "adversarial", "lookup_table") if n in m]
  colors = [{"adamw": "tab:blue", "adamw_matched": "tab:cyan", "adversarial": "tab:red",
             "lookup_table": "tab:gray"}[n] for n in names]
  matched_step = m.get("adamw_matched", {}).get("step")
  shown = {"adamw": "AdamW", "adamw_matched": f"AdamW step\n{matched_step} (= loss)",
           "adversarial": "adversarial", "lookup_table": "lookup\ntable"}
  fig, ax = plt.subplots(1, 4, figsize=(15, 3.6))
  ax[0].bar(names, [m[n]["valid_mlm_loss"] for n in names], color=colors)
  lo = min(m[n]["valid_mlm_loss"] for n in names)
  ax[0].set_ylim(lo - 0.05, max(m[n]["valid_mlm_loss"] for n in names) + 0.05)
  ax[0].set_title("valid MLM loss (nats)\npaper: AdamW 3.204, adv. 3.206, lookup 3.196",
                  fontsize=9)
  for i, t in enumerate(("A", "B")):
    means = [100 * m[n]["probe"][t]["test_acc_mean"] for n in names]
    stds = [100 * m[n]["probe"][t]["test_acc_std"] for n in names]
    ax[1 + i].bar(names, means, yerr=stds, color=colors, capsize=4)
    p = PAPER["table1"]
    have = [n for n in names if n in p]
    ax[1 + i].scatter(have, [p[n][t][0] for n in have], marker="_", s=400, color="k",
                      label="paper", zorder=3)
    ax[1 + i].set_title(f"linear probe, task {t} (test acc %)\npaper: "
                        + " / ".join(f"{p[n][t][0]}" for n in have), fontsize=9)
    ax[1 + i].legend(fontsize=7)
  trained = [n for n in names if n != "lookup_table"]
  tc = colors[:len(trained)]
  x = np.arange(len(trained))
  ax[3].bar(x - 0.2, [m[n]["trace_b1"] for n in trained], 0.4,
            yerr=[m[n]["trace_b1_std"] for n in trained], color=tc, capsize=4,
            label="B.1 (sampled labels)")
  ax[3].bar(x + 0.2, [m[n]["trace_hutchinson"] for n in trained], 0.4,
            yerr=[m[n]["trace_hutchinson_stderr"] for n in trained], color=tc, alpha=0.45,
            capsize=4, hatch="//", label="Hutchinson")
  ax[3].set_xticks(x, trained)
  ax[3].set_title("Tr(H) of the pre-training loss\npaper (B.1): AdamW 8.01, adv. 19.34",
                  fontsize=9)
  ax[3].legend(fontsize=7)
  for a in ax:
    a.set_xticks(a.get_xticks(), [shown[t.get_text()] for t in a.get_xticklabels()])
    a.tick_params(axis="x", labelsize=8)
  fig.suptitle(f"seed 002 Tables 1-2 at size '{result['size']}' (adversarial weight "
               f"{result['pilot']['chosen_weight']:g}, task {result['adversarial']['task']})",
               fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--size", choices=sorted(SIZES), default="cpu",
                  help="configs/pcfg_mlm.py variant (and measurement sizes)")
  ap.add_argument("--runs", default=None, help="training workdirs (reused; default "
                  "runs/adversarial, runs/adversarial_<size> for other sizes)")
  ap.add_argument("--out", default=None, help="default results/adversarial(_<size>)")
  ap.add_argument("--weights", default="0.1,0.3,1",
                  help="adversarial weights of the pilot (comma-separated, >= 0)")
  ap.add_argument("--pilot_steps", type=int, default=0,
                  help="pilot length (a multiple of train.eval_every; 0 = the first "
                       "evaluation after train.num_steps / 6)")
  ap.add_argument("--pilot_tol", type=float, default=0.02,
                  help="allowed valid MLM loss above the normal run's at the pilot step (nats)")
  ap.add_argument("--d2_draws", type=int, default=20,
                  help="(D1, D2) draws of the adversary's objective measured on final models")
  ap.add_argument("--chunk", type=int, default=4, help="examples vmapped at once in Tr(H)")
  args = ap.parse_args(argv)
  try:
    args.weights = sorted({float(w) for w in args.weights.split(",")})
  except ValueError:
    raise ValueError(f"--weights={args.weights!r} must be comma-separated numbers") from None
  if not args.weights or min(args.weights) < 0:
    raise ValueError(f"--weights={args.weights} must be numbers >= 0")
  suffix = "" if args.size == "cpu" else f"_{args.size}"
  args.runs = args.runs or os.path.join("runs", f"adversarial{suffix}")
  args.out = args.out or os.path.join("results", f"adversarial{suffix}")
  t0 = time.time()
  normal_cfg, adv_cfg = configs(args)
  every, n = normal_cfg.train.eval_every, normal_cfg.train.num_steps
  if not args.pilot_steps:
    args.pilot_steps = every * max(1, -(-n // (6 * every)))
  if args.pilot_steps % every or not 0 < args.pilot_steps < n:
    raise ValueError(f"--pilot_steps={args.pilot_steps} must be a multiple of train.eval_every"
                     f"={every} below train.num_steps={n}")
  normal_dir = os.path.join(args.runs, "pcfg_adamw")
  runner.run_or_reuse(normal_cfg, normal_dir)
  t_normal = time.time() - t0
  pil = pilot(args, normal_dir)
  _, adv_cfg = configs(args, pil["chosen_weight"])
  chosen_dir = adv_dir(args, pil["chosen_weight"])
  runner.run_or_reuse(adv_cfg, chosen_dir)
  t_train = time.time() - t0
  models, comparisons, settings = measure(args, normal_cfg, adv_cfg, normal_dir, chosen_dir)
  models["adversarial"]["training"] = adversary_curve(chosen_dir, n)
  models["adamw"]["training"] = adversary_curve(normal_dir, n)
  result = {
      "size": args.size, "models": models, "comparisons": comparisons, "pilot": pil,
      "adversarial": adv_cfg.adversarial.to_dict(), "paper": PAPER,
      "config_adamw": runner.config_dict(normal_cfg), "config_adversarial":
      runner.config_dict(adv_cfg), "measurement": dataclasses.asdict(settings),
      "command": "python experiments/adversarial_pretraining.py " + " ".join(
          sys.argv[1:] if argv is None else argv),
      "wall_s": {"total": round(time.time() - t0, 1), "training": round(t_train, 1),
                 "normal_run_or_reuse": round(t_normal, 1)},
      "train_time_s": {d: train_time_s(os.path.join(args.runs, d)) for d in sorted(
          os.listdir(args.runs)) if os.path.exists(os.path.join(args.runs, d, "metrics.jsonl"))},
      "note": ("Trained runs are reused when finished (then wall_s.training counts only the "
               "rest; train_time_s is each run's own training time); the probe p-values "
               "compare 5 probe seeds on one pair of pre-trained models. The pre-training "
               "losses are on this grammar's one-mask MLM, whose optimum is ~4.19 nats, not "
               "the paper's 3.196 (README)."),
  }
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, "table.json")
  wd.write_json(path, result, default=float)
  plot(result, os.path.join(args.out, "table.png"))
  print(json.dumps(comparisons, default=float))
  print(f"wrote {path} and table.png")


if __name__ == "__main__":
  cli.script(main)
