"""What the seed-002 page shows of Tables 1-2, per measured table (`TABLES`, those present):
each arm's models and their mean / std, the lookup table, the sanity rows, the pilot, every
arm's probe against its models' random inits (one Holm family) and the adversarial models
against the final AdamW models and against their checkpoints at equal loss (one Holm family):
over the model seeds, paired by seed, when several were trained; over one pair's probe seeds
and Tr(H) repetitions with one (`stats.family`). Probe accuracies are shown in percent
(`*_pct`: 100 x the fraction). NumPy only; `plot` draws each table's figure."""
import os

import numpy as np

from el_jax.report import papers
from el_jax.report import stats

# {name in the analysis: the file under results_dir}, in page order; a table not measured is
# left out.
TABLES = {"pcfg": "table.json", "hmm_sharp": "hmm_sharp_init0.1/table.json",
          "fixed_probe": "fixed_probe/table.json", "paper": "paper/table.json"}
ARMS = {"adamw": "AdamW, final", "adamw_matched": "AdamW at equal loss",
        "adversarial": "adversarial"}
BASES = {"adamw": "final AdamW", "adamw_matched": "AdamW at equal loss"}
SUMMARY_KEYS = ("step", "valid_mlm_loss", "valid_gap", "valid_kl", "test_mlm_loss", "trace_b1",
                "trace_hutchinson")
OVER = {True: "model seeds (pairs: the adversarial and the normal run of one seed)",
        False: "probe seeds / Tr(H) repetitions of one pair of models"}


def analyze(src, config):
  return {name: table(src, rel) for name, rel in TABLES.items() if src.exists(rel)}


def summarize(per_seed):
  """Mean and std over the model seeds of one arm: {key: {"mean", "std" (ddof 1; None for
  one seed), "values"}} for the eval losses, Tr(H) and each task's probe test accuracy (a
  model's value: the mean over its probe seeds; `probe_<task>`)."""
  rows = list(per_seed.values())
  cols = {k: [r[k] for r in rows] for k in SUMMARY_KEYS if k in rows[0]}
  cols.update({f"probe_{t}": [r["probe"][t]["test_acc_mean"] for r in rows]
               for t in rows[0]["probe"]})
  return {k: {"mean": float(np.mean(v)),
              "std": float(np.std(v, ddof=1)) if len(v) > 1 else None,
              "values": [float(x) for x in v]} for k, v in cols.items()}


def _pct(r):
  return {"mean": 100 * r["test_acc_mean"], "std": 100 * r["test_acc_std"]}


def _model(x, tasks):
  """One pre-trained model's row: its losses, probes (percent), Tr(H) and the adversary's
  objective and gradient (the last tenth of training) where recorded."""
  out = {k: x[k] for k in ("seed", "step", "valid_mlm_loss", "valid_gap", "trace_b1",
                           "trace_b1_std", "trace_hutchinson", "trace_hutchinson_stderr")}
  out["probe_pct"] = {t: _pct(x["probe"][t]) for t in tasks}
  out["d2_loss_mean"] = x["adversary_objective"]["d2_loss_mean"]
  if "training" in x:
    out["last_tenth"] = x["training"]["last_tenth"]
  return out


def _arm(per_seed, tasks, label):
  mean = summarize(per_seed)
  pct = {}
  for t in tasks:
    v = mean[f"probe_{t}"]
    pct[t] = {"mean": 100 * v["mean"], "std": None if v["std"] is None else 100 * v["std"],
              "values": [100 * x for x in v["values"]], "min": 100 * min(v["values"])}
  return {"label": label, "seeds": {k: _model(x, tasks) for k, x in per_seed.items()},
          "mean": mean, "probe_pct": pct}


def _sanity(sanity):
  out = {}
  for t, s in sanity.items():
    inits = {k: {**_pct(r), "chosen": r.get("chosen") or None}
             for k, r in s["random_init"].items()}
    out[t] = {"majority_pct": 100 * s["majority"], "bayes_pct": 100 * s["bayes"],
              "random_init": inits,
              "random_init_min_pct": 100 * min(r["test_acc_mean"]
                                               for r in s["random_init"].values()),
              "random_init_max_pct": 100 * max(r["test_acc_mean"]
                                               for r in s["random_init"].values())}
    out[t]["block_majority_pct"] = (100 * s["block_majority"] if "block_majority" in s
                                    else None)
  return out


def vs_random_init(d):
  """Every arm's probe against its models' random inits (the sanity rows), one family (Holm):
  several models over the models, each paired with its own seed's init (sign flip); one over
  its probe seeds (unpaired). A trained model's probe is evidence about what pre-training
  learned only where it beats this."""
  pairs, meta = [], []
  for arm in ARMS:
    trained = d["models"][arm]["seeds"]
    for t, row in d["sanity"].items():
      keys = [k for k in row["random_init"] if k in trained]
      if len(keys) == 1:
        va, vb = trained[keys[0]]["probe"][t]["test_acc"], row["random_init"][keys[0]]["test_acc"]
      else:
        va = [trained[k]["probe"][t]["test_acc_mean"] for k in keys]
        vb = [row["random_init"][k]["test_acc_mean"] for k in keys]
      pairs.append(((arm, t), va, "random_init", vb))
      meta.append({"arm": arm, "task": t, "keys": keys, "trained_above_random_in": int(sum(
          trained[k]["probe"][t]["test_acc_mean"] > row["random_init"][k]["test_acc_mean"]
          for k in keys))})
  several = len(meta[0]["keys"]) > 1
  rows = []
  for c, m in zip(stats.family(pairs, paired=several), meta):
    del c["a"], c["b"]
    rows.append({**c, **m, "over": ("models and their own inits" if several
                                     else "probe seeds of one model"),
                 "arm_label": ARMS[m["arm"]], "n_models": len(m["keys"]),
                 "trained_pct": 100 * c["mean_a"], "init_pct": 100 * c["mean_b"],
                 "diff_pct": 100 * c["diff"]})
  return {"rows": rows, "family_size": len(rows),
          "most_above": max(r["trained_above_random_in"] for r in rows),
          "diff_pct_min": min(r["diff_pct"] for r in rows),
          "diff_pct_max": max(r["diff_pct"] for r in rows)}


def compare_models(d, tasks):
  """The adversarial models against the final AdamW models and against their checkpoints at
  equal loss: each probe task's test accuracy and Tr(H) B.1, one Holm family over both. With
  several model seeds over the models (paired by seed: a seed's two runs share the
  initialisation and the batches; sign flip, floor 2 / 2^n); with one over that pair's 5
  probe seeds and Tr(H) repetitions (permutation: a difference beyond probe or estimator
  noise, for this pair of models only). The valid loss and KL differences (mean over the
  pairs) beside them."""
  m = d["models"]
  keys = list(m["adversarial"]["seeds"])
  several = len(keys) > 1
  quantities = [(f"probe_{t}", t) for t in tasks] + [("trace_b1", None)]
  pairs = []
  for base in BASES:
    adv, ref = m["adversarial"]["seeds"], m[base]["seeds"]
    for key, t in quantities:
      if several:
        get = ((lambda r, t=t: r["probe"][t]["test_acc_mean"]) if t else
               (lambda r: r["trace_b1"]))
        va, vb = [get(adv[k]) for k in keys], [get(ref[k]) for k in keys]
      else:
        get = ((lambda r, t=t: r["probe"][t]["test_acc"]) if t else
               (lambda r: r["trace_b1_reps"]))
        va, vb = get(adv[keys[0]]), get(ref[keys[0]])
      pairs.append(((base, key), va, base, vb))
  fam = iter(stats.family(pairs, paired=several))
  out = {}
  for base, label in BASES.items():
    adv, ref = m["adversarial"]["seeds"], m[base]["seeds"]
    qs = {}
    for key, t in quantities:
      c = next(fam)
      del c["a"], c["b"]
      scale = 100 if t else 1
      qs[key] = {**c, "task": t, "paired": several, "scale": scale, "digits": 1 if t else 0,
                 "shown": scale * c["diff"], "shown_abs": abs(scale * c["diff"])}
    loss = float(np.mean([adv[k]["valid_mlm_loss"] - ref[k]["valid_mlm_loss"] for k in keys]))
    out[base] = {"label": label, "quantities": qs, "over": OVER[several], "seeds": keys,
                 "valid_mlm_loss_diff": loss, "valid_mlm_loss_diff_abs": abs(loss),
                 "valid_kl_diff": float(np.mean([adv[k]["valid_kl"] - ref[k]["valid_kl"]
                                                 for k in keys]))}
  return out


def table(src, rel):
  """Everything the page shows of one measured table (`run.py`'s file `rel`)."""
  d = src.load(rel)
  tasks = d.get("tasks", ["A", "B"])  # files written before the HMM run have A, B
  language = d.get("language", "pcfg")
  hmm = language == "hmm"
  p = d["pilot"]
  adv = d["adversarial"]
  arms = {arm: _arm(d["models"][arm]["seeds"], tasks,
                    f"{label} (weight {adv['weight']:g})" if arm == "adversarial" else label)
          for arm, label in ARMS.items()}
  return {
      "language": language, "tasks": tasks,
      "task_names": {t: f"task-{t}" if hmm else f"task {t}" for t in tasks},
      "bayes_label": ("Bayes (posterior of the hidden state)" if hmm
                      else "Bayes (the inside algorithm)"),
      "seeds": d["seeds"], "n_models": len(d["seeds"]), "adversarial": adv,
      "measurement": {k: d["measurement"][k] for k in (
          "probe_train", "probe_valid", "probe_test", "probe_epochs", "probe_lrs",
          "probe_normalizations", "flat_inputs", "flat_reps")},
      "wall_minutes": d["wall_s"]["total"] / 60,
      "pilot": {"steps": p["steps"], "tol": p["tol"],
                "normal_valid_mlm_loss": p["normal_valid_mlm_loss"],
                "chosen_weight": p["chosen_weight"], "none_within_tol": p["none_within_tol"],
                "trials": [{**{k: t[k] for k in ("weight", "valid_mlm_loss", "minus_normal",
                                                 "within_tol")},
                            "chosen": t["weight"] == p["chosen_weight"]}
                           for t in p["trials"].values()]},
      "models": arms,
      "lookup": {"valid_mlm_loss": d["lookup_table"]["valid_mlm_loss"],
                 "probe_pct": {t: _pct(d["lookup_table"]["probe"][t]) for t in tasks}},
      "sanity": _sanity(d["sanity"]),
      "vs_random_init": vs_random_init(d),
      "comparisons": compare_models(d, tasks),
      "comparison_family_size": len(BASES) * (len(tasks) + 1),
      "ran_on": src.ran_on([rel]),
  }


# ----------------------------------------------------------------------------
# The figure of each table

SHOWN = {"adamw": "AdamW", "adamw_matched": "AdamW at\nequal loss", "adversarial": "adversarial",
         "lookup_table": "lookup\ntable"}
PAPER_KEYS = {"adamw": "adamw", "adversarial": "adversarial", "lookup_table": "lookup"}


def _paper(key):
  """A Table 1 number of el_jax.report.papers ("89.9 +- 0.3" -> 89.9)."""
  return float(papers.entry(key)[0].split()[0])


def plot(analysis, src, config):
  """table.png beside each table: the valid MLM loss; the probe's test accuracy per task
  (`el_jax.report.plots.bars_with_seeds`: bars the mean over the model seeds, dots one model
  each (its mean over the probe seeds), crosses the paper's Table 1 on the PCFG); Tr(H) (B.1
  and Hutchinson: bars the mean over the models, dots one model each)."""
  for name, a in analysis.items():
    if name in TABLES:
      _plot_table(a, src.load(TABLES[name]), src.path(os.path.join(
          os.path.dirname(TABLES[name]), "table.png")))


def _plot_table(a, d, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from el_jax.report import plots as report_plots
  names = list(SHOWN)
  colors = [f"C{i}" for i in range(len(names))]  # bars_with_seeds' colours, in this order
  pcfg = a["language"] == "pcfg"  # the paper's numbers are its PCFG's
  tasks = a["tasks"]

  def values(n, key):
    if n == "lookup_table":
      return [a["lookup"][key]] if key in a["lookup"] else []
    return a["models"][n]["mean"][key]["values"]

  fig, ax = plt.subplots(1, 3, figsize=(15, 3.6), gridspec_kw={"width_ratios": [1, 1.6, 1]})
  for i, n in enumerate(names):
    v = values(n, "valid_mlm_loss")
    ax[0].bar(i, np.mean(v), color=colors[i])
    ax[0].scatter(np.full(len(v), i), v, s=10, color="k", zorder=3, lw=0)
  lo = min(min(values(n, "valid_mlm_loss")) for n in names)
  hi = max(max(values(n, "valid_mlm_loss")) for n in names)
  ax[0].set_ylim(lo - 0.05, hi + 0.05)
  ax[0].set_xticks(range(len(names)), [SHOWN[n] for n in names], fontsize=8)
  paper_loss = ", ".join(f"{w} {papers.entry(f's002.t1.{k}.loss')[0]}" for w, k in
                         (("AdamW", "adamw"), ("adv.", "adversarial"), ("lookup", "lookup")))
  ax[0].set_title("valid MLM loss (nats)" + (f"\npaper: {paper_loss}" if pcfg else ""),
                  fontsize=9)
  rows = []
  for n in names:
    if n == "lookup_table":
      per = {t: [100 * v for v in d["lookup_table"]["probe"][t]["test_acc"]] for t in tasks}
    else:
      per = {t: a["models"][n]["probe_pct"][t]["values"] for t in tasks}
    rows.append({"label": SHOWN[n].replace("\n", " "),
                 "aggregate": {t: {"mean": float(np.mean(per[t]))} for t in tasks},
                 "per_seed": per})
  k = len(a["seeds"])
  report_plots.bars_with_seeds(
      rows, list(tasks), None, ylabel="probe test acc %", ax=ax[1],
      paper={(r["label"], t): _paper(f"s002.t1.{PAPER_KEYS[n]}.{t}")
             for r, n in zip(rows, names) if n in PAPER_KEYS for t in tasks} if pcfg else None,
      metric_names={t: f"task {t}" for t in tasks},
      title=f"linear probe (dots: {k} pre-trained model{'s' if k > 1 else ''} per arm, each\n"
            f"its 5 probe seeds' mean; lookup table: its probe seeds"
            f"{'; x: paper' if pcfg else ''})")
  trained = names[:-1]
  for i, n in enumerate(trained):
    for off, key, alpha, hatch, label in ((-0.2, "trace_b1", 1.0, None, "B.1 (sampled labels)"),
                                          (0.2, "trace_hutchinson", 0.45, "//", "Hutchinson")):
      v = values(n, key)
      ax[2].bar(i + off, np.mean(v), 0.4, color=colors[i], alpha=alpha, hatch=hatch,
                label=label if i == 0 else None)
      ax[2].scatter(np.full(len(v), i + off), v, s=10, color="k", zorder=3, lw=0)
  ax[2].set_xticks(range(len(trained)), [SHOWN[n] for n in trained], fontsize=8)
  paper_trace = ", ".join(f"{w} {_paper(f's002.t2.{k}.trace'):g}" for w, k in
                          (("AdamW", "adamw"), ("adv.", "adversarial")))
  ax[2].set_title("Tr(H) of the pre-training loss (dots: models)" + (
      f"\npaper (B.1): {paper_trace}" if pcfg else ""), fontsize=9)
  ax[2].legend(fontsize=7)
  lang = a["language"] + (f" {d['hmm']}" if d.get("hmm") else "")
  steps = a["models"]["adamw_matched"]["mean"]["step"]["values"]
  fig.suptitle(f"seed 002 Tables 1-2 ({lang}) at size '{d['size']}' (model seeds "
               f"{','.join(map(str, a['seeds']))}; adversarial weight "
               f"{a['pilot']['chosen_weight']:g}, task {a['adversarial']['task']}; "
               f"equal-loss AdamW steps {','.join(str(int(s)) for s in sorted(set(steps)))})",
               fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
