"""What the seed-000 page shows of the scale trends, for every task whose JSON is there: per
point each method's test metric at its setting chosen on validation (`stats.select` over the
tuning rows, recomputed), the comparisons (`stats.family`: the primary family E1 + warmup vs CE
and the secondary family of the two controls, each Holm over its tests; where seed s of every
arm shares a unit, E1 + warmup vs CE paired by that unit too), the training fit, the tuning
budgets, each arm against chance (a sign flip over its seeds), the intervals that exclude 0
beside a p that does not, the wall time and machine each row records, and the trend test fixed
in config.PREREGISTERED (`stats.trend_slope`, per doubling of the axis). NumPy only."""
import math

from el_jax.infra import provenance
from el_jax.report import stats

from experiments.scale_trends.config import (FAMILIES, METHODS, METHOD_NAMES, PAIRS,
                                             PREREGISTERED, TASKS)

# The design whose test seeds are fine-tuning seeds of one pretrained model per point.
ONE_MODEL_PER_POINT = ("label_copy",)
PER_DOUBLING = math.log(2)  # trend_slope's slope is per unit of ln(x)


def _mmm(agg):
  return {k: agg[k] for k in ("mean", "min", "max")}


def _key(a, b):
  return f"{a}_vs_{b}"


def done_points(doc):
  """The points whose choice was made and whose three test runs have rows, in order."""
  labels = {r["label"] for r in doc["rows"]}
  return [p for p in doc["selection"] if all(f"{p} {m}" in labels for m in METHODS)]


def selection(doc, tune, points):
  """{point: {method: {"chosen", "scores"}}}: each method's candidates (in the JSON's order)
  scored by the mean validation metric of their tuning row, chosen by `stats.select`."""
  by = {r["label"]: r for r in tune["rows"]}
  out = {}
  for p in points:
    out[p] = {}
    for m in METHODS:
      scores = {c: by[f"{p} {m} {c}"]["aggregate"][doc["select_metric"]]["mean"]
                for c in doc["candidates"][m]}
      out[p][m] = {"chosen": stats.select(scores), "scores": scores}
  return out


def families(rows, points, metric):
  """{family: `stats.family` of its pairs at every point}, each comparison with its `point`,
  `pair` and `family`."""
  out = {}
  for name, pairs in FAMILIES:
    todo = [(p, a, b) for p in points for a, b in pairs]
    cs = stats.family([(f"{p} {a}", rows[f"{p} {a}"]["per_seed"][metric], f"{p} {b}",
                        rows[f"{p} {b}"]["per_seed"][metric]) for p, a, b in todo])
    out[name] = [{**c, "point": p, "pair": _key(a, b), "family": name}
                 for c, (p, a, b) in zip(cs, todo)]
  return out


def paired_unit(doc):
  """What seed s shares across the arms beyond its data (label_copy_models: the pretrained
  model), as the JSON records it; None for the other designs."""
  if doc.get("paired_unit"):
    return doc["paired_unit"]
  return next((e["e1_warmup_vs_ce_paired"]["unit"] for e in doc.get("trend", [])
               if "e1_warmup_vs_ce_paired" in e), None)


def fixed_before_test_runs(doc):
  """Whether the JSON records its test runs as made after PREREGISTERED was fixed."""
  if "fixed_before_test_runs" in doc:
    return bool(doc["fixed_before_test_runs"])
  return bool((doc.get("trend_test") or {}).get("fixed_before_test_runs", False))


def slope(xs, rows, points, metric, counts):
  """The trend test on the points: the slope of E1 + warmup - CE per doubling of x with its
  bootstrap interval (`stats.trend_slope`), and whether PREREGISTERED's claim holds."""
  t = stats.trend_slope(xs, [rows[f"{p} e1_warmup"]["per_seed"][metric] for p in points],
                        [rows[f"{p} ce"]["per_seed"][metric] for p in points])
  equal = len(set(counts.values())) == 1
  return {"per_doubling": PER_DOUBLING * t["slope"],
          "ci95": [PER_DOUBLING * x for x in t["ci95"]], "diffs": t["diffs"], "sign": t["sign"],
          "decided": t["decided"], "n_seeds_min": t["n_seeds_min"],
          # an interval is shown (and read) from MIN_CI_N seeds a point; PREREGISTERED needs 5
          "readable": t["n_seeds_min"] >= stats.MIN_CI_N,
          "few_seeds": t["n_seeds_min"] < PREREGISTERED["min_test_seeds"],
          "claimed": t["decided"] and t["n_seeds_min"] >= PREREGISTERED["min_test_seeds"]
                     and equal}


def _cpu(row):
  return provenance.describe(row["ran_on"]) if row.get("ran_on") else None


def task_analysis(src, task):
  doc, tune = src.load(f"{task}.json"), src.load(f"{task}_tune.json")
  rows = {r["label"]: r for r in doc["rows"]}
  metric, vmetric = doc["test_metric"], doc["select_metric"]
  fit = metric.replace("test_", "train_")
  points = done_points(doc)
  fams = families(rows, points, metric)
  by_point = {(c["point"], c["pair"]): c for cs in fams.values() for c in cs}
  unit = paired_unit(doc)
  paired = {}
  if unit and points:
    cs = stats.family([(f"{p} e1_warmup", rows[f"{p} e1_warmup"]["per_seed"][metric], f"{p} ce",
                        rows[f"{p} ce"]["per_seed"][metric]) for p in points], paired=True)
    paired = {p: {**c, "unit": unit} for p, c in zip(points, cs)}
  counts = {m: len(doc["candidates"][m]) for m in METHODS}
  sel = selection(doc, tune, points)
  at = {}
  for p in points:
    r = {m: rows[f"{p} {m}"] for m in METHODS}
    at[p] = {
        "point": p, "x": r["ce"]["x"], "seeds": r["e1_warmup"]["seeds"],
        "test": {m: _mmm(r[m]["aggregate"][metric]) for m in METHODS},
        "fit": ({m: r[m]["aggregate"][fit]["mean"] for m in METHODS}
                if all(fit in r[m]["aggregate"] for m in METHODS) else None),
        "cmp": {_key(a, b): by_point[(p, _key(a, b))] for a, b in PAIRS},
        "paired": paired.get(p),
        "vs_chance": ({m: stats.paired_compare(r[m]["per_seed"][metric],
                                               [doc["chance"]] * len(r[m]["seeds"]))
                       for m in METHODS} if doc.get("chance") is not None else None),
    }
  series = {_key(a, b): {f: [at[p]["cmp"][_key(a, b)][f] for p in points]
                         for f in ("diff", "ci95", "p_value", "p_holm", "mean_a", "mean_b")}
            for a, b in PAIRS}
  if paired:
    series["e1_warmup_vs_ce_paired"] = {f: [paired[p][f] for p in points]
                                        for f in ("diff", "p_value", "p_holm", "n_up", "n_down")}
  if doc.get("chance") is not None and points:  # each arm against chance, point by point
    series["vs_chance"] = {m: {f: [at[p]["vs_chance"][m][f] for p in points]
                               for f in ("mean_a", "diff", "p_value", "p_floor")}
                           for m in METHODS}
  tune_rows = [r for r in tune["rows"] if r["point"] in points]
  wall = {}
  for p in points:
    tr = [r for r in tune_rows if r["point"] == p]
    wall[p] = {"tune_seconds": [min(r["seconds"] for r in tr), max(r["seconds"] for r in tr)],
               "tune_cpus": sorted({_cpu(r) or "" for r in tr}),
               "test": {m: {"seconds": rows[f"{p} {m}"]["seconds"], "cpu": _cpu(rows[f"{p} {m}"])}
                        for m in METHODS}}
  narrow = [{"point": c["point"], "pair": c["pair"], "ci95": c["ci95"], "p_value": c["p_value"],
             "label": " vs ".join(METHOD_NAMES[m] for m in c["pair"].split("_vs_"))}
            for cs in fams.values() for c in cs
            if c.get("ci95") and (c["ci95"][0] > 0 or c["ci95"][1] < 0) and c["p_value"] >= 0.05]
  return {
      "axis": doc["axis"], "test_metric": metric, "select_metric": vmetric, "fit_metric": fit,
      "tune_seeds": doc["tune_seeds"], "test_seeds": doc["test_seeds"],
      "n_points_designed": len(doc["test_seeds"]), "chance": doc.get("chance"),
      "points": points, "at": at, "series": series, "paired_unit": unit,
      "n_primary": len(fams["primary"]), "n_secondary": len(fams["secondary"]),
      "selection": sel,
      "candidates": counts, "equal_budgets": len(set(counts.values())) == 1,
      "fixed_before_test_runs": fixed_before_test_runs(doc),
      "one_model_per_point": task in ONE_MODEL_PER_POINT,
      "slope": (slope([at[p]["x"] for p in points], rows, points, metric, counts)
                if len(points) >= PREREGISTERED["min_points"] else None),
      "per_seed": {label: {"seeds": r["seeds"], "test": r["per_seed"][metric],
                           "test_max": max(r["per_seed"][metric]),
                           "train": r["per_seed"].get(fit)} for label, r in rows.items()},
      "fit_by_method": ({m: [at[p]["fit"][m] for p in points] for m in METHODS}
                        if all(at[p]["fit"] for p in points) else None),
      "chosen_at": {p: [sel[p][m]["chosen"] for m in METHODS] for p in points},
      "chosen_of": {m: [sel[p][m]["chosen"] for p in points] for m in METHODS},
      "test_mean_range": [min(r["aggregate"][metric]["mean"] for r in doc["rows"]),
                          max(r["aggregate"][metric]["mean"] for r in doc["rows"])],
      "train_mean_max": max(r["aggregate"][fit]["mean"] for r in doc["rows"]
                            if fit in r["aggregate"]),
      "tune_range": ([min(r["aggregate"][vmetric]["mean"] for r in tune_rows),
                      max(r["aggregate"][vmetric]["mean"] for r in tune_rows)]
                     if tune_rows else None),
      "tune_best": {p: max(r["aggregate"][vmetric]["mean"] for r in tune_rows
                           if r["point"] == p) for p in points},
      "narrow_intervals": narrow,
      "n_comparisons": sum(len(cs) for cs in fams.values()),
      "wall": wall,
      "ran_on": src.ran_on([f"{task}.json"]),
      "tune_ran_on": src.ran_on([f"{task}_tune.json"]),
  }


def analyze(src, config):
  tasks = {t: task_analysis(src, t) for t in TASKS if src.exists(f"{t}.json")}
  return {"tasks": tasks, "methods": METHOD_NAMES, "preregistered": PREREGISTERED,
          "slope_ran_on": src.ran_on([f"{t}.json" for t in tasks])}


def plot(analysis, src, config):
  """<task>.png for each task: left, each comparison's difference with its 95% interval
  against the axis; right, each method's per-seed test metric per point."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  for task, t in analysis["tasks"].items():
    if not t["points"]:
      continue
    at = [t["at"][p] for p in t["points"]]
    xs = list(range(len(at)))
    ticks = [f"{e['point']}\n({e['x']:,})" for e in at]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, (a, b) in enumerate(PAIRS):
      cs = [e["cmp"][_key(a, b)] for e in at]
      off = (i - 1) * 0.08
      ax1.errorbar([x + off for x in xs], [c["diff"] for c in cs],
                   yerr=[[c["diff"] - c["ci95"][0] for c in cs],
                         [c["ci95"][1] - c["diff"] for c in cs]],
                   marker="o", capsize=3, label=f"{METHOD_NAMES[a]} - {METHOD_NAMES[b]}")
    ax1.axhline(0, color="gray", lw=0.8)
    ax1.set_xticks(xs, ticks)
    ax1.set_xlabel(t["axis"])
    ax1.set_ylabel(f"difference of mean {t['test_metric']} (95% bootstrap)")
    ax1.legend(fontsize=8)
    ax1.set_title(f"{task}: effect against scale (test seeds)")
    ax2.set_title("each method at its setting chosen on validation")
    for i, m in enumerate(METHODS):
      off = (i - 1) * 0.12
      for x, e in zip(xs, at):
        v = t["per_seed"][f"{e['point']} {m}"]["test"]
        ax2.scatter([x + off] * len(v), v, s=12, color=f"C{i}", alpha=0.6)
        ax2.plot([x + off - 0.04, x + off + 0.04], [sum(v) / len(v)] * 2, color=f"C{i}", lw=2,
                 label=METHOD_NAMES[m] if x == 0 else None)
    if t["chance"] is not None:
      ax2.axhline(t["chance"], color="gray", ls=":", lw=0.8, label="chance")
    ax2.set_xticks(xs, ticks)
    ax2.set_xlabel(t["axis"])
    ax2.set_ylabel(f"{t['test_metric']} per seed (bar: mean)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(src.path(f"{task}.png"), dpi=110)
    plt.close(fig)
