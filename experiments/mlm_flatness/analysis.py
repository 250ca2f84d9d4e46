"""What the seed-002 page shows of Figures 1 / 3, 2 and 5 (and the probe's sanity checks):
every file of results/mlm_flatness/ (each a recipe of config.py) summarised, and every test
the page quotes computed here from the files' per-point values, with `el_jax.report.stats`.

Per file (`files[<path without .json>]`):

* its points (each model seed at each measured checkpoint, or each size) and the ranges the
  prose quotes (valid gap, KL, loss; probe accuracies in %; feature ranks);
* the sanity rows of each probe task (majority, the block alone, Bayes, the lookup table, the
  words, every random init, the trained models) and each task's trained models against their
  own random inits (`stats.vs_random_init`: paired over the models, one model over its probe
  seeds; Figures 2 / 5 with several models per size: per size, since two sizes of one
  architecture share their random inits);
* Figures 1 / 3 (`training`): the pilot, the per-checkpoint rows, and the last checkpoint
  against the first (Tr(H) B.1, each probe, fine-tuning), paired: over the model seeds with
  several models (one mean per model), over the Tr(H) repetitions and probe seeds of one model
  otherwise; Holm over the table (`stats.family`);
* Figures 2 / 5 (`size`, `embedded`): every size against the first, over the models of each
  size (unpaired permutation, Holm over the Tr(H) and probe tests; the valid loss outside the
  family), or over one model's repetitions and probe seeds.

A probe is blind at a checkpoint when two models give the same test accuracy with the same
selected epoch on at least two probe seeds (`BLIND_SEEDS`): its answer is then set by the probe
seed, not the model. A paired test of such a probe gets no p (and leaves its Holm family).

Across files: the PCFG encoders at two pre-training budgets (`pcfg_budget`), the two maskings
(`pcfg_masking`) and two budgets of one masking (`pcfg_steps`), paired by model seed; B.1
against Hutchinson at the first checkpoint (`b1_vs_hutchinson`).

NumPy and the standard library only (through `el_jax.report.stats`): no JAX.
"""
import itertools
import math
import statistics

import numpy as np

from el_jax.report import stats

ANALYSIS = "analysis.json"
BLIND_SEEDS = 2  # probe seeds on which two models coincide before a probe counts as blind
# The continuation after the AdamW pre-training: its points' step key and its name.
CONTINUATIONS = {"sgd": ("sgd_step", "SGD"), "adamw": ("adamw_cont_step", "AdamW")}
# Files compared across (key: (file a, file b)); each is analysed where both exist.
PCFG_BUDGET = ("training_pcfg", "pcfg_12k/pretrained_pcfg")
PCFG_MASKING = ("pcfg_tasks/pretrained_pcfg", "pcfg_bert/pretrained_pcfg")
PCFG_STEPS = {"12k": ("pcfg_bert/pretrained_pcfg", "pcfg_bert_12k/pretrained_pcfg"),
              "48k": ("pcfg_bert_12k_100k/pretrained_pcfg", "pcfg_bert_48k_100k/pretrained_pcfg")}
B1_VS_HUTCHINSON = ("training_pcfg", "training_hmm")


def _pct(x):
  return 100 * x


def _mean(xs):
  """The mean as the pages always took it (math.fsum / n)."""
  xs = [float(x) for x in xs]
  return math.fsum(xs) / len(xs)


def _range(xs):
  xs = [float(x) for x in xs]
  return {"values": xs, "min": min(xs), "max": max(xs), "mean": _mean(xs)}


def _spread(xs, scale=1):
  """[mean, std (ddof 1)] over models of the values scaled by `scale`."""
  xs = [scale * x for x in xs]
  return [statistics.fmean(xs), statistics.stdev(xs)]


def _with_floor(c):
  """A comparison with `at_floor`: its p at the smallest its design can give."""
  floor = (stats.p_floor("unpaired", c["n_a"], c["n_b"]) if "n_a" in c
           else stats.p_floor("paired", c["n"]))
  return {**c, "at_floor": stats.at_floor(c["p_value"], floor)}


# ----------------------------------------------------------------------------
# One file


def seeds_of(d):
  """The model seeds of a file's points, in the order first measured."""
  return list(dict.fromkeys(p.get("seed", 0) for p in d["points"]))


def step_key(d):
  """The key of a point's position along the file's x axis."""
  if d["figure"] == "training":
    return CONTINUATIONS[d.get("continued_with", "sgd")][0]
  return "size" if d["figure"] in ("size", "embedded") else "step"


def _probe_summary(r):
  out = {"test_acc": r.get("test_acc"), "epoch": r.get("epoch"),
         "pct": [_pct(r["test_acc_mean"]), _pct(r["test_acc_std"])]}
  if "feature_rank" in r:
    out["feature_rank"] = r["feature_rank"]
  return out


def point_summary(p, key):
  out = {"seed": p.get("seed", 0), "x": p[key]}
  for k in ("valid_mlm_loss", "valid_gap", "valid_kl", "trace_b1", "trace_b1_std",
            "trace_hutchinson", "trace_hutchinson_stderr", "grown_max_logit_diff", "num_params",
            "num_params_embedded", "step"):
    if k in p:
      out[k] = p[k]
  out["probe"] = {t: _probe_summary(r) for t, r in p["probe"].items()}
  if "fine_tune" in p:
    out["fine_tune"] = {t: _probe_summary(r) for t, r in p["fine_tune"].items()}
  return out


def blind_at(points, task):
  """Whether the probe of `task` is blind over these points (one checkpoint of several
  models): two models with the same (test accuracy, epoch) on >= BLIND_SEEDS probe seeds."""
  res = [list(zip(p["probe"][task]["test_acc"], p["probe"][task].get("epoch") or
                  [None] * len(p["probe"][task]["test_acc"]))) for p in points]
  for x, y in itertools.combinations(res, 2):
    if sum(a == b for a, b in zip(x, y)) >= BLIND_SEEDS:
      return True
  return False


def _ranges(pts):
  out = {}
  for k in ("valid_gap", "valid_kl", "valid_mlm_loss", "trace_b1_std", "grown_max_logit_diff"):
    if pts and all(k in p for p in pts):
      out[k] = _range([p[k] for p in pts])
  return out


def probe_ranges(pts):
  """Per task: the models' probe accuracies (%) and their features' ranks."""
  out = {}
  for t in pts[0]["probe"]:
    accs = [p["probe"][t]["test_acc_mean"] for p in pts]
    r = {"pct": [_pct(x) for x in accs], "min_pct": _pct(min(accs)), "max_pct": _pct(max(accs))}
    if all("feature_rank" in p["probe"][t] for p in pts):
      ranks = [p["probe"][t]["feature_rank"] for p in pts]
      r.update(rank_min=min(ranks), rank_max=max(ranks))
    out[t] = r
  return out


def vs_random_init(trained, sanity, blind=False):
  """`stats.vs_random_init` of `trained` ({key: point}) with the page's scaled numbers, its
  floor and whether the trained probe is blind."""
  out = {}
  for task, c in stats.vs_random_init(trained, sanity).items():
    c = _with_floor(c)
    out[task] = {**c, "mean_a_pct": _pct(c["mean_a"]), "mean_b_pct": _pct(c["mean_b"]),
                 "diff_pct": _pct(c["diff"]), "n_keys": len(c["keys"]), "paired": "n_a" not in c,
                 "design": f"{c['n_a']} vs {c['n_b']}" if "n_a" in c else f"{c['n']} pairs",
                 "blind": bool(blind and blind_at([trained[k] for k in c["keys"]], task))}
  return out


def _chosen(r):
  c = r.get("chosen")
  return ({"whiten": bool(c.get("whiten")), "lr": c["lr"], "weight_decay": c["weight_decay"]}
          if c else None)


def _probe_row(label, r):
  return {"label": label, "acc": [_pct(r["test_acc_mean"]), _pct(r["test_acc_std"])],
          "chosen": _chosen(r), "rank": ([r["feature_rank"], r["num_features"]]
                                         if "feature_rank" in r else None)}


def _value_row(label, x):
  return {"label": label, "value": _pct(x)}


def _sizes_by_models(d):
  """{size: [its point of each model seed]} of a Figures 2 / 5 file of several model seeds,
  None for one model."""
  if len(d.get("seeds", [0])) < 2:
    return None
  out = {}
  for p in d["points"]:
    out.setdefault(p["size"], []).append(p)
  return out


def sanity_table(d, task, s, key):
  """The sanity rows of one probe task, in the page's order."""
  bayes = ("Bayes: posterior of the hidden state (forward-backward)" if d["language"] == "hmm"
           else "Bayes: the inside algorithm (the label is its argmax)")
  rows = [_value_row("majority class", s["majority"])]
  if "block_majority" in s:
    rows.append(_value_row("the block alone (majority class of the sentence's block)",
                           s["block_majority"]))
  rows += [_value_row(bayes, s["bayes"]),
           _probe_row("lookup table (exact conditionals) probe", s["lookup_table"])]
  if "words" in s:
    rows.append(_probe_row("the words alone (one-hot word at each position) probe", s["words"]))
  sized = d["figure"] in ("size", "embedded")
  by = _sizes_by_models(d) if sized else None
  if by:  # one row per size: mean (std over its models), the settings chosen per model
    inits = {size: [s["random_init"][f"{size} seed {p['seed']}"] for p in pts]
             for size, pts in by.items()}
    # A size stopped early ("128/2/4/512@1000") has its architecture's inits: one row for
    # them all, named by the architecture, where every such size's inits probe the same.
    by_arch = {}
    for size, rs in inits.items():
      by_arch.setdefault(size.split("@")[0], []).append([r["test_acc_mean"] for r in rs])
    shared = {a: len(v) > 1 and all(x == v[0] for x in v) for a, v in by_arch.items()}
    shown = set()
    for size, pts in by.items():
      arch = size.split("@")[0]
      init_rows = () if arch in shown else (
          (f"random init (size {arch if shared[arch] else size}), {len(pts)} models",
           inits[size]),)
      if shared[arch]:
        shown.add(arch)
      for name, rs in init_rows + ((f"trained, size {size}, {len(pts)} models",
                                    [p["probe"][task] for p in pts]),):
        rows.append({"label": name + " probe",
                     "spread": _spread([r["test_acc_mean"] for r in rs], 100),
                     "rank_mean": statistics.fmean(r["feature_rank"] for r in rs),
                     "width": rs[0]["num_features"]})
  else:
    for k, r in s["random_init"].items():
      rows.append(_probe_row(f"random init ({'size ' if sized else 'model seed '}{k}) probe", r))
  if sized:
    if not by:
      for p in d["points"]:
        rows.append(_probe_row(f"trained, size {p['size']} probe", p["probe"][task]))
  else:
    steps = sorted({p[key] for p in d["points"]})
    for p in d["points"]:
      if p[key] in (steps[0], steps[-1]):
        rows.append(_probe_row(f"trained (model seed {p['seed']}, step {p[key]}) probe",
                               p["probe"][task]))
  for k, r in s.get("fine_tune_random_init", {}).items():
    rows.append({**_probe_row(f"random init (model seed {k}) fine-tuned", r), "chosen": None,
                 "rank": None, "fine_tune": True})
  if not sized:
    for p in d["points"]:
      if "fine_tune" in p:
        rows.append({**_probe_row(f"trained (model seed {p['seed']}, step {p[key]}) fine-tuned",
                                  p["fine_tune"][task]), "chosen": None, "rank": None,
                     "fine_tune": True})
  name = f"task-{task}" if d["language"] == "hmm" else f"task {task}"
  return {"name": name, "num_test": s["num_test"], "rows": rows}


def sanity_summary(d, key):
  """Per task: the sanity numbers the prose quotes (in %) and the table."""
  out = {}
  for task, s in d["sanity"].items():
    inits = [r["test_acc_mean"] for r in s["random_init"].values()]
    row = {"num_test": s["num_test"], "majority_pct": _pct(s["majority"]),
           "bayes_pct": _pct(s["bayes"]), "lookup_pct": _pct(s["lookup_table"]["test_acc_mean"]),
           "random_init": {"pct": [_pct(x) for x in inits], "min_pct": _pct(min(inits)),
                           "max_pct": _pct(max(inits)), "mean_pct": _pct(_mean(inits)),
                           "rank_first": next(iter(s["random_init"].values())).get(
                               "feature_rank")},
           "table": sanity_table(d, task, s, key)}
    if "block_majority" in s:
      row["block_majority_pct"] = _pct(s["block_majority"])
    if "context_value" in s:
      row["context_value"] = s["context_value"]
    if "words" in s:
      row["words_pct"] = _pct(s["words"]["test_acc_mean"])
    out[task] = row
  return out


# ----------------------------------------------------------------------------
# Figures 1 / 3: the last checkpoint against the first


_LABELS = {"trace_b1": "Tr(H) B.1", "probe": "task {} probe (points)",
           "fine_tune": "task {} fine-tuned (points)"}


def trend(d, key):
  """The last checkpoint against the first, paired: {x, means, over, tests: {quantity:
  comparison}, holm_m}. Quantities "trace_b1", "probe <task>", "fine_tune <task>". With
  several model seeds a pair is one model (its B.1 mean over repetitions, its probe /
  fine-tuning mean over seeds); with one, a Tr(H) repetition (the same inputs at both) or a
  probe / fine-tuning seed. A blind probe's test has no p and is not in the Holm family."""
  pts = d["points"]
  seeds = seeds_of(d)
  first, last = min(p[key] for p in pts), max(p[key] for p in pts)
  at = {(p.get("seed", 0), p[key]): p for p in pts}
  missing = [(s, x) for s in seeds for x in (first, last) if (s, x) not in at]
  if missing:
    raise ValueError(f"{key}: (seed, step) {missing} not measured")
  a, b = [at[(s, first)] for s in seeds], [at[(s, last)] for s in seeds]
  over_models = len(seeds) > 1
  series, units = {}, {}
  if over_models:
    series["trace_b1"] = ([p["trace_b1"] for p in a], [p["trace_b1"] for p in b])
    units["trace_b1"] = "model seeds"
    for kind in ("probe", "fine_tune"):
      if all(kind in p for p in a + b):
        for t in a[0][kind]:
          series[f"{kind} {t}"] = ([p[kind][t]["test_acc_mean"] for p in a],
                                   [p[kind][t]["test_acc_mean"] for p in b])
          units[f"{kind} {t}"] = "model seeds"
  else:
    (p0,), (p1,) = a, b
    series["trace_b1"] = (p0["trace_b1_reps"], p1["trace_b1_reps"])
    units["trace_b1"] = "repetitions (same inputs)"
    for kind, what in (("probe", "probe seeds of one model"),
                       ("fine_tune", "fine-tuning seeds of one model")):
      if kind in p0 and kind in p1:
        for t in p0[kind]:
          series[f"{kind} {t}"] = (p0[kind][t]["test_acc"], p1[kind][t]["test_acc"])
          units[f"{kind} {t}"] = what
  blind = {q: q.startswith("probe ") and over_models and (
      blind_at(a, q.split()[1]) or blind_at(b, q.split()[1])) for q in series}
  tested = [q for q in series if not blind[q]]
  fam = dict(zip(tested, stats.family([(f"{q} at {last}", series[q][1], f"{q} at {first}",
                                        series[q][0]) for q in tested], paired=True)))
  tests = {}
  for q, (before, after) in series.items():
    c = fam.get(q) or stats.paired_compare(after, before)
    what, _, task = q.partition(" ")
    scale, digits = (1, 1) if what == "trace_b1" else (100, 2)
    c = _with_floor(c)
    if blind[q]:
      c = {k: v for k, v in c.items() if k not in ("p_value", "p_holm", "at_floor")}
    tests[q] = {**c, "over": units[q], "blind": blind[q], "label": _LABELS[what].format(task),
                "scale": scale, "digits": digits, "mean_a_s": scale * c["mean_a"],
                "mean_b_s": scale * c["mean_b"], "diff_s": scale * c["diff"]}
  means = {k: [float(np.mean([p[k] for p in a])), float(np.mean([p[k] for p in b]))]
           for k in ("trace_b1", "trace_hutchinson", "valid_mlm_loss")}
  return {"x": [first, last], "over": "model seeds" if over_models else "one model",
          "means": means, "tests": tests, "holm_m": len(tested)}


def training_summary(d, out):
  opt = d.get("continued_with", "sgd")
  key, shown = CONTINUATIONS[opt]
  lr_key = "sgd_lr" if opt == "sgd" else "adamw_cont_lr"
  out.update(optimizer=opt, optimizer_name=shown, lr=d[lr_key],
             pilot_start=d["pilot_start_valid_loss"], pilot_steps=d["args"]["pilot_steps"],
             pilot=[{"lr": lr, "chosen": float(lr) == d[lr_key],
                     "valid_mlm_loss": p["valid_mlm_loss"], "change": p["change"]}
                    for lr, p in d["pilot"].items()],
             batch_size=d["config"]["train"]["batch_size"],
             several=len(seeds_of(d)) > 1,
             tasks=list(d["points"][0]["probe"]))
  out["trend"] = trend(d, key)
  last = out["trend"]["x"][1]
  lasts = {str(p["seed"]): p for p in d["points"] if p[key] == last}
  out["vs_random_init"] = vs_random_init(lasts, d["sanity"], blind=len(lasts) > 1)


# ----------------------------------------------------------------------------
# Figures 2 / 5: sizes


def size_trend(d):
  """One model per size: the last size against the first over the Tr(H) repetitions and the
  probe seeds of one model each (unpaired permutation), Holm over the table."""
  a, b = d["points"][0], d["points"][-1]
  pairs = [("trace_b1", b["trace_b1_reps"], "trace_b1", a["trace_b1_reps"])]
  pairs += [(f"probe {t}", b["probe"][t]["test_acc"], f"probe {t}", a["probe"][t]["test_acc"])
            for t in a["probe"]]
  fam = [_with_floor(c) for c in stats.family(pairs)]
  tests = {c["a"]: c for c in fam}
  for q, c in tests.items():
    scale, digits = (1, 1) if q == "trace_b1" else (100, 2)
    c.update(label="Tr(H) B.1" if q == "trace_b1" else f"task-{q.split()[1]} probe (points)",
             mean_a_s=scale * c["mean_a"], mean_b_s=scale * c["mean_b"], diff_s=scale * c["diff"],
             digits=digits, units="repetitions" if q == "trace_b1" else "probe seeds",
             diff_pct=_pct(c["diff"]))
  return {"x": [a["size"], b["size"]], "over": "one model",
          "means": {"trace_b1": [a["trace_b1"], b["trace_b1"]]}, "tests": tests,
          "holm_m": len(fam)}


def size_models(d):
  """Several models per size: every size against the first over the models (one value per
  model; unpaired permutation: the models of two sizes are independent), Holm over every
  Tr(H) and probe test of the table; the valid MLM loss the same way, outside the family (it
  says whether the sizes are compared at equal loss)."""
  by = _sizes_by_models(d)
  sizes, seeds = list(by), d["seeds"]
  at = {(p["size"], p["seed"]): p for p in d["points"]}
  missing = [(s, k) for s in sizes for k in seeds if (s, k) not in at]
  if missing:
    raise ValueError(f"sizes / seeds not measured: {missing}")
  tasks = list(d["points"][0]["probe"])
  quantities = {"valid_mlm_loss": lambda p: p["valid_mlm_loss"],
                "trace_b1": lambda p: p["trace_b1"],
                "trace_hutchinson": lambda p: p["trace_hutchinson"]}
  quantities.update({f"probe {t}": (lambda p, t=t: p["probe"][t]["test_acc_mean"])
                     for t in tasks})

  def col(s, fn):
    return [float(fn(at[(s, k)])) for k in seeds]
  pairs = [(s, q, col(s, fn), col(sizes[0], fn)) for s in sizes[1:]
           for q, fn in quantities.items() if q != "valid_mlm_loss"]
  fam = stats.family([(f"{s} {q}", va, sizes[0], vb) for s, q, va, vb in pairs])
  got = {(s, q): c for (s, q, _, _), c in zip(pairs, fam)}
  names = {"valid_mlm_loss": ("valid MLM loss (nats)", 1, 4), "trace_b1": ("Tr(H) B.1", 1, 1),
           "trace_hutchinson": ("Tr(H) Hutchinson", 1, 1)}
  vs_first = {}
  for s in sizes[1:]:
    vs_first[s] = {}
    for q, fn in quantities.items():
      c = got.get((s, q)) or stats.compare(col(s, fn), col(sizes[0], fn))
      name, k, dg = names.get(q, (f"task-{q.split()[-1]} probe (points)", 100, 2))
      vs_first[s][q] = {**_with_floor(c), "label": name, "mean_a_s": k * c["mean_a"],
                        "mean_b_s": k * c["mean_b"], "diff_s": k * c["diff"], "digits": dg,
                        "in_family": "p_holm" in c}
  return {"over": "model seeds", "seeds": list(seeds), "sizes": sizes,
          "means": {s: {q: float(np.mean(col(s, fn))) for q, fn in quantities.items()}
                    for s in sizes},
          "vs_first": vs_first, "holm_m": len(fam)}


def size_claim(c, quantity):
  """A size-against-the-first test as the page's phrase: its word decided by its (Holm) p
  ("higher" / "lower" at p < 0.05, else "not told apart"), the difference in its unit."""
  p = c.get("p_holm", c["p_value"])
  word = ("higher" if c["diff"] > 0 else "lower") if p < 0.05 else "not told apart"
  k, unit, dg = ((100, " points", 2) if quantity.startswith("probe") else
                 (1, " nats", 4) if quantity == "valid_mlm_loss" else (1, "", 1))
  return {"word": word, "diff_s": k * c["diff"], "unit": unit, "digits": dg}


def size_summary(d, out):
  by = _sizes_by_models(d)
  tasks = list(d["points"][0]["probe"])
  out["embedded_into"] = d.get("embedded_into")
  out["tasks"] = tasks
  if by:
    out["sizes"] = size_models(d)
    for s, qs in out["sizes"]["vs_first"].items():
      for q, c in qs.items():
        c["claim"] = size_claim(c, q)
    out["rows"] = []
    for size, pts in by.items():
      p0 = pts[0]
      out["rows"].append({
          "size": size, "grown": bool(d.get("embedded_into") and size != d["embedded_into"]),
          "params": p0.get("num_params_embedded", p0["num_params"]), "steps": p0["step"],
          "valid_mlm_loss": _spread([p["valid_mlm_loss"] for p in pts]),
          "valid_gap": statistics.fmean(p["valid_gap"] for p in pts),
          "trace_b1": _spread([p["trace_b1"] for p in pts]),
          "trace_hutchinson": _spread([p["trace_hutchinson"] for p in pts]),
          "probe": {t: _spread([p["probe"][t]["test_acc_mean"] for p in pts], 100)
                    for t in tasks}})
    # Two sizes of one architecture (128/2/4/512@1000 and 128/2/4/512) share their random
    # inits: the check is per size, each size's models paired with their own inits.
    out["vs_random_init"] = {size: vs_random_init({f"{size} seed {p['seed']}": p for p in pts},
                                                  {t: {"random_init": {
                                                      k: v for k, v in s["random_init"].items()
                                                      if k.startswith(f"{size} seed ")}}
                                                   for t, s in d["sanity"].items()})
                             for size, pts in by.items()}
    out["vs_random_init_total"] = {
        t: {"above": sum(c[t]["trained_above_random_in"] for c in out["vs_random_init"].values()),
            "models": sum(c[t]["n_keys"] for c in out["vs_random_init"].values()),
            "inits": len({(p["size"].split("@")[0], p["seed"]) for p in d["points"]})}
        for t in tasks}
  else:
    out["sizes"] = size_trend(d)
    out["rows"] = [{"size": p["size"], "grown": bool(d.get("embedded_into") and
                                                     p["size"] != d["embedded_into"]),
                    "params": p.get("num_params_embedded", p["num_params"]),
                    "valid_mlm_loss": p["valid_mlm_loss"], "valid_gap": p["valid_gap"],
                    "trace_b1": p["trace_b1"], "trace_b1_std": p["trace_b1_std"],
                    "trace_hutchinson": p["trace_hutchinson"],
                    "trace_hutchinson_stderr": p["trace_hutchinson_stderr"],
                    "probe": {t: [_pct(p["probe"][t]["test_acc_mean"]),
                                  _pct(p["probe"][t]["test_acc_std"])] for t in tasks}}
                   for p in d["points"]]
    out["vs_random_init"] = vs_random_init({p["size"]: p for p in d["points"]}, d["sanity"])


# ----------------------------------------------------------------------------


def file_summary(src, rel, d):
  key = step_key(d)
  seeds = seeds_of(d)
  out = {"figure": d["figure"], "language": d["language"], "hmm": d.get("hmm", "uniform"),
         "args": d["args"], "seeds": seeds, "n_seeds": len(seeds),
         "points_per_seed": sum(p.get("seed", 0) == seeds[0] for p in d["points"]),
         "wall_min": d["wall_s"] / 60 if "wall_s" in d else None,
         "points": [point_summary(p, key) for p in d["points"]],
         "ranges": _ranges(d["points"]), "probe": probe_ranges(d["points"]),
         "sanity": sanity_summary(d, key), "ran_on": src.ran_on([rel])}
  if "config" in d:
    out["steps"] = d["config"]["train"]["num_steps"]
  if d["figure"] == "training":
    training_summary(d, out)
  elif d["figure"] == "pretrained":
    out["vs_random_init"] = vs_random_init({str(p["seed"]): p for p in d["points"]}, d["sanity"])
  else:
    size_summary(d, out)
  return out


# ----------------------------------------------------------------------------
# Across files


def adamw_steps(d):
  """The AdamW pre-training's steps of a training figure file (its `adamw` row), where its
  step-0 points were measured."""
  (row,) = [r for r in d["rows"] if r.get("phase") == "adamw"]
  return row["config"]["train"]["num_steps"]


def pcfg_budget(short, long_, task="C"):
  """The PCFG encoders of two pre-training budgets, seed by seed: `short` a training figure
  file (its step-0 points: the AdamW run's end), `long_` a pretrained figure file of the same
  seeds and probe protocol. Per seed (gap, probe) at both budgets and the random init's probe;
  the long budget's probe against the short one's and the random init's against the long
  one's, paired by model seed."""
  first = {p["seed"]: p for p in short["points"] if p.get("sgd_step", 0) == 0}
  last = {p["seed"]: p for p in long_["points"]}
  seeds = sorted(set(first) & set(last))
  inits = long_["sanity"][task]["random_init"]
  rows = [{"seed": s, "gap_short": first[s]["valid_gap"],
           "probe_short": first[s]["probe"][task]["test_acc_mean"],
           "gap_long": last[s]["valid_gap"], "probe_long": last[s]["probe"][task]["test_acc_mean"],
           "random_init": inits[str(s)]["test_acc_mean"]} for s in seeds]
  for r in rows:
    r.update({f"{k}_pct": _pct(r[k]) for k in ("probe_short", "probe_long", "random_init")})
  longer = _with_floor(stats.paired_compare([r["probe_long"] for r in rows],
                                            [r["probe_short"] for r in rows]))
  to_init = _with_floor(stats.paired_compare([r["random_init"] for r in rows],
                                             [r["probe_long"] for r in rows]))
  n = longer["n"]
  return {"task": task, "rows": rows, "steps": [adamw_steps(short), long_["config"]["train"][
      "num_steps"]], "longer": {**longer, "diff_pct": _pct(longer["diff"]),
                                "abs_diff_pct": _pct(abs(longer["diff"]))},
          "to_init": {**to_init, "diff_pct": _pct(to_init["diff"])},
          "gap_means": [statistics.fmean(r["gap_short"] for r in rows),
                        statistics.fmean(r["gap_long"] for r in rows)],
          "word": "lower" if longer["diff"] < 0 else "higher",
          "count": longer["n_down"] if longer["diff"] < 0 else longer["n_up"],
          "above_long": sum(r["probe_long"] > r["random_init"] for r in rows), "n": n}


def paired_by_seed(one, other, la, lb):
  """Two pretrained figure files of the same seeds, probe protocol and tasks (two maskings, or
  two budgets of one recipe), seed by seed: per quantity ("valid gap", each task's probe) the
  two files' values, the random inits (which must be the same in both: the same models'
  initialisations), how many models of each sit above their own init, and `lb` - `la` paired
  by model seed (a sign flip)."""
  a = {p["seed"]: p for p in one["points"]}
  b = {p["seed"]: p for p in other["points"]}
  seeds = sorted(set(a) & set(b))
  if len(seeds) < 2:
    raise ValueError(f"paired_by_seed needs >= 2 model seeds in both files, got {seeds}")
  series = {"valid gap": ([a[s]["valid_gap"] for s in seeds], [b[s]["valid_gap"] for s in seeds],
                          None)}
  for task, row in one["sanity"].items():
    inits = [row["random_init"][str(s)]["test_acc_mean"] for s in seeds]
    again = [other["sanity"][task]["random_init"][str(s)]["test_acc_mean"] for s in seeds]
    if any(abs(u - v) > 1e-6 for u, v in zip(inits, again)):
      raise ValueError(f"task {task}: the two files' random inits differ ({inits} vs {again}): "
                       f"not the same models' initialisations")
    series[f"task {task}"] = ([a[s]["probe"][task]["test_acc_mean"] for s in seeds],
                              [b[s]["probe"][task]["test_acc_mean"] for s in seeds], inits)
  n = len(seeds)
  rows = []
  for q, (x, y, inits) in series.items():
    c = _with_floor(stats.paired_compare(y, x))
    k, dg = (1, 3) if inits is None else (100, 2)
    row = {"quantity": q, "probe": inits is not None, "digits": dg, "a": _spread(x, k),
           "b": _spread(y, k), "diff_s": k * c["diff"], "test": c, "values_a": x, "values_b": y}
    if inits is not None:
      dy = 100 * statistics.fmean(u - v for u, v in zip(y, inits))
      dx = 100 * statistics.fmean(u - v for u, v in zip(x, inits))
      row.update(inits=_spread(inits, k), init_values=inits,
                 above_a=sum(u > i for u, i in zip(x, inits)),
                 above_b=sum(u > i for u, i in zip(y, inits)), diff_init_a=dx, diff_init_b=dy)
    rows.append(row)
  return {"seeds": seeds, "n": n, "la": la, "lb": lb, "rows": rows}


def b1_vs_hutchinson(d, index=0):
  """B.1 against Hutchinson at one point, with both uncertainties: the difference in combined
  standard errors, and a ratio only where Hutchinson's estimate is 2 standard errors above 0."""
  p = d["points"][index]
  b1, n = p["trace_b1"], len(p["trace_b1_reps"])
  se_b1 = p["trace_b1_std"] / math.sqrt(n)
  h, se_h = p["trace_hutchinson"], p["trace_hutchinson_stderr"]
  z = (b1 - h) / math.sqrt(se_b1 ** 2 + se_h ** 2)
  return {"b1": b1, "b1_std": p["trace_b1_std"], "n": n, "hutchinson": h, "stderr": se_h,
          "diff": b1 - h, "z_abs": abs(z), "ratio": b1 / h if h - 2 * se_h > 0 else None}


def analyze(src, config):
  files = {}
  docs = {}
  for rel in src.files(""):
    if rel == ANALYSIS:
      continue
    d = src.load(rel)
    if not isinstance(d, dict) or "figure" not in d or "points" not in d:
      continue
    key = rel[:-len(".json")]
    docs[key] = d
    files[key] = file_summary(src, rel, d)
  out = {"files": files}
  if all(k in docs for k in PCFG_BUDGET):
    a, b = PCFG_BUDGET
    out["pcfg_budget"] = {**pcfg_budget(docs[a], docs[b]),
                          "ran_on": src.ran_on([f"{a}.json", f"{b}.json"])}
  if all(k in docs for k in PCFG_MASKING):
    a, b = PCFG_MASKING
    out["pcfg_masking"] = {**paired_by_seed(docs[a], docs[b], "one mask", "BERT masking"),
                           "ran_on": src.ran_on([f"{a}.json", f"{b}.json"])}
  out["pcfg_steps"] = {}
  for name, (a, b) in PCFG_STEPS.items():
    if a in docs and b in docs:
      na, nb = (docs[k]["config"]["train"]["num_steps"] for k in (a, b))
      if na == nb:
        raise ValueError(f"pcfg_steps {name}: both files pre-trained {na} steps")
      out["pcfg_steps"][name] = {**paired_by_seed(docs[a], docs[b], f"{na} steps", f"{nb} steps"),
                                 "ran_on": src.ran_on([f"{a}.json", f"{b}.json"])}
  out["b1_vs_hutchinson"] = {k: b1_vs_hutchinson(docs[k]) for k in B1_VS_HUTCHINSON if k in docs}
  return out
