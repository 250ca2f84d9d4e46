"""What the suite's two sections show: Figure 1's context-length table (CE and E1 + warmup per
k, E1 + warmup against CE as one Holm family, `stats.family`) and width table, width 128 against
256 on the width runs' seeds, the runs that do not fit their training strings, the largest
cross-machine difference of one config and seed (the reason the widths cannot be compared
finely); Table 3's rows against CE (no warmup) as one Holm family, the paper's numbers, what
the training data covers of the easy test strings, and the means over the first four seeds.
Plus the figures fig1.png and table3.png (`plot`)."""
import math

import numpy as np

from el_jax.report import papers
from el_jax.report import stats

METRIC = "test_em_hard"  # the comparisons' metric; one Holm family per stage
T3_BASELINE = "CE (no warmup)"
UNDERFIT = 0.9  # a run whose mean hard-train EM is below this does not fit its training strings
EARLY = 4  # an earlier version of Table 3 had the first four seeds (2-5)
CROSS_MACHINE = "../cross_machine/cross_machine.json"


def baseline_of(stage, label):
  """The label of the CE row a run is compared with (same context / width), or None."""
  if stage == "table3":
    return None if label == T3_BASELINE else T3_BASELINE
  if label.startswith("CE "):
    return None
  return "CE " + label.split(" ", 1)[1]


def comparisons(stage, rows):
  """Each run against its CE run (`baseline_of`) on hard-test EM, in the rows' order: one
  `stats.family` (unpaired: every run has its own initialisations)."""
  by = {r["label"]: r for r in rows}
  pairs = [(r["label"], baseline_of(stage, r["label"])) for r in rows]
  return stats.family([(a, by[a]["per_seed"][METRIC], b, by[b]["per_seed"][METRIC])
                       for a, b in pairs if b in by])


def _range(xs):
  return {"min": min(xs), "max": max(xs)} if xs else None


def _k(label):
  return int(label.split("k=")[1].split()[0])


def _side(row):
  return {"test_em_hard": row["aggregate"]["test_em_hard"],
          "train_em_hard": row["aggregate"]["train_em_hard"]["mean"]}


def fig1_context(src):
  doc = src.load("fig1_context.json")
  rows = doc["rows"]
  by = {r["label"]: r for r in rows}
  vs_ce = {c["a"]: c for c in comparisons("fig1_context", rows)}
  table = {}
  for r in rows:
    if r["label"].startswith("CE "):
      e = by.get("E1+warmup " + r["label"][len("CE "):])
      table[str(_k(r["label"]))] = {
          "k": _k(r["label"]), "context": r["overrides"]["data.context_len"], "ce": _side(r),
          "e1": _side(e) if e else None, "vs_ce": vs_ce.get(e["label"]) if e else None,
          "seeds": r["seeds"]}
  one = min(r["overrides"]["data.context_len"] for r in rows)  # one string per context
  packed = [r for r in rows if r["overrides"]["data.context_len"] > one]
  mean = lambda rs, name: [r["aggregate"][METRIC]["mean"] for r in rs  # noqa: E731
                           if r["label"].startswith(name + " ")]
  return {
      "rows": table,
      "seeds": rows[0]["seeds"],
      "family_size": len(vs_ce),
      "ce_train_em_hard": _range([r["aggregate"]["train_em_hard"]["mean"] for r in rows
                                  if r["label"].startswith("CE ")]),
      "ce_packed_test_em_hard": _range(mean(packed, "CE")),
      "e1_packed_test_em_hard": _range(mean(packed, "E1+warmup")),
      "packed_min_p": min((c["p_value"] for a, c in vs_ce.items()
                           if by[a]["overrides"]["data.context_len"] > one), default=None),
      "ran_on": src.ran_on(["fig1_context.json"]),
  }


def fig1_width(src):
  """The width table (sorted by width, then k), and each width at k = 1 against width 128 (the
  context stage's k = 1 runs) on the width runs' seeds: one family per width of CE's and E1 +
  warmup's comparison."""
  rows = src.load("fig1_width.json")["rows"]
  by = {r["label"]: r for r in rows}
  table = []
  for r in rows:
    if r["label"].startswith("CE "):
      e = by.get("E1+warmup " + r["label"][len("CE "):])
      table.append({"k": _k(r["label"]), "context": r["overrides"]["data.context_len"],
                    "width": r["overrides"]["model.embed_dim"], "ce": _side(r),
                    "e1": _side(e) if e else None, "seeds": r["seeds"]})
  table.sort(key=lambda t: (t["width"], t["k"]))
  narrow = {r["label"]: r for r in src.load("fig1_context.json")["rows"]}
  vs_128 = {}
  for width in sorted({t["width"] for t in table}):
    pairs = []
    for name in ("CE", "E1+warmup"):
      wide, base = by.get(f"{name} k=1 d={width}"), narrow.get(f"{name} k=1")
      if wide is None or base is None:
        continue
      base_seeds = [base["per_seed"][METRIC][base["seeds"].index(s)] for s in wide["seeds"]]
      pairs.append((name, wide["per_seed"][METRIC], "width 128", base_seeds))
    vs_128[str(width)] = {c["a"]: {**c, "seeds": by[f"{c['a']} k=1 d={width}"]["seeds"]}
                          for c in stats.family(pairs)}
  return {
      "rows": table,
      "seeds": rows[0]["seeds"],
      "vs_128": vs_128,
      "underfit_train_em_hard": _range([r["aggregate"]["train_em_hard"]["mean"] for r in rows
                                        if r["aggregate"]["train_em_hard"]["mean"] < UNDERFIT]),
      "underfit": [r["label"] for r in rows
                   if r["aggregate"]["train_em_hard"]["mean"] < UNDERFIT],
      "ran_on": src.ran_on(["fig1_width.json"]),
  }


def table3(src):
  rows = src.load("table3.json")["rows"]
  vs_ce = {c["a"]: c for c in comparisons("table3", rows)}
  out = {}
  for r in rows:
    key = f"s000.t3.{r['label']}"
    m = r["aggregate"]
    out[r["label"]] = {
        "paper_key": key if key in papers.PAPER else None,
        "test_cl_easy": m["test_cl_easy"], "valid_em_hard": m["valid_em_hard"],
        "test_em_hard": m["test_em_hard"], "train_em_hard": m["train_em_hard"]["mean"],
        "vs_ce": vs_ce.get(r["label"]), "data_coverage": r["data_coverage"],
        "early_test_em_hard": float(np.mean(r["per_seed"][METRIC][:EARLY])),
        "seeds": r["seeds"]}
  return {"rows": out, "seeds": rows[0]["seeds"], "family_size": len(vs_ce),
          "early_seeds": rows[0]["seeds"][:EARLY], "ran_on": src.ran_on(["table3.json"])}


def analyze(src, config):
  out = {}
  if src.exists("table3.json"):
    out["table3"] = table3(src)
  if src.exists("fig1_context.json"):
    out["fig1_context"] = fig1_context(src)
    if src.exists("fig1_width.json"):
      out["fig1_width"] = fig1_width(src)
  if src.exists(CROSS_MACHINE):
    # The same config and seed run on two machines: the largest per-seed difference.
    out["cross_machine_max_abs_diff"] = max(
        p["max_abs_diff"] for p in src.load(CROSS_MACHINE)["pairs"])
  return out


def _width(row):
  return row["overrides"].get("model.embed_dim") or row["config"]["model"]["embed_dim"]


def plot_fig1(context_rows, width_rows, path):
  """Figure 1 from grid rows: hard EM (mean, min..max over seeds) against context length,
  one line per width; top row test strings, bottom row training strings (so a run that did
  not fit its training set, the paper's premise, shows)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  widths = {}
  for r in list(context_rows) + list(width_rows):
    widths.setdefault(_width(r), []).append(r)
  fig, axes = plt.subplots(2, 2, figsize=(10, 6.6), sharex=True, sharey=True)
  for col, name in enumerate(("CE", "E1+warmup")):
    for row, key in enumerate(("test_em_hard", "train_em_hard")):
      ax = axes[row, col]
      for d, rs in sorted(widths.items()):
        pts = sorted((r["overrides"]["data.context_len"], r["aggregate"][key])
                     for r in rs if r["label"].startswith(name + " "))
        if not pts:
          continue
        x = [p[0] for p in pts]
        mean = [p[1]["mean"] for p in pts]
        lo = [p[1]["mean"] - p[1]["min"] for p in pts]
        hi = [p[1]["max"] - p[1]["mean"] for p in pts]
        ax.errorbar(x, mean, yerr=[lo, hi], marker="o", capsize=3, label=f"embed {d}")
      ax.axhline(1 / 26, color="gray", ls=":", lw=1, label="chance (1/26)")
      ax.set_xscale("log", base=2)
      ax.set_title(f"{name}: hard {key.split('_')[0]} strings", fontsize=10)
      ax.grid(alpha=0.3)
    axes[1, col].set_xlabel("context length (tokens; one string per "
                            f"{context_rows[0]['overrides']['data.context_len']})")
  axes[0, 0].set_ylabel("test EM (mean, min-max over seeds)")
  axes[1, 0].set_ylabel("train EM (mean, min-max)")
  axes[0, 0].legend(fontsize=8)
  c = context_rows[0]["config"]
  easy = min(r["aggregate"]["test_em_easy"]["min"] for rs in widths.values() for r in rs)
  fig.suptitle(f"Copy task L_c={c['data']['seq_len']}, L_p={c['data']['pad_len']}, "
               f"{c['model']['num_layers']} layers, {c['train']['num_steps']} steps; easy test "
               f"EM is >= {math.floor(easy * 100) / 100:.2f} for every seed", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot(analysis, src, config):
  """fig1.png and table3.png from the stages' JSON (those that exist); returns their paths."""
  from el_jax.report import plots as report_plots
  paths = []
  if src.exists("fig1_context.json"):
    p = src.path("fig1.png")
    width = src.load("fig1_width.json")["rows"] if src.exists("fig1_width.json") else []
    plot_fig1(src.load("fig1_context.json")["rows"], width, p)
    paths.append(p)
  if src.exists("table3.json"):
    rows = src.load("table3.json")["rows"]
    p = src.path("table3.png")
    report_plots.bars_with_seeds(
        rows, ["test_cl_easy", "test_em_hard"], p, chance=1 / 26,
        paper={(r["label"], "test_cl_easy"): r["paper"] for r in rows
               if r.get("paper") is not None},
        metric_names={"test_cl_easy": "test CL, easy strings (paper: x, L_c=5)",
                      "test_em_hard": "test EM, hard strings"},
        title="Table 3 ablations, copy task")
    paths.append(p)
  return paths
