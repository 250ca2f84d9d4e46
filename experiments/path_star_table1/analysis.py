"""What the seed-000 page shows of Table 1: the setting, each run's test / valid / train EM
and decision accuracy beside the paper's, the comparisons on test EM (`stats.family`: the
permutation p over seeds, bootstrap interval, Holm over the table's comparisons), the training
CE per token group, and the earlier files the section discusses (the table before the trainer
redesign and its controls, the four-times-longer runs), each table with the machines it ran on.
Every file but table1.json is optional (a test run has only that). NumPy only."""
from el_jax.report import papers
from el_jax.report import stats

MAIN = "table1.json"
BEFORE = "table1_before_redesign.json"  # the table and controls of before the trainer redesign
LONG = "long/table1.json"  # G(2,3), 10,000 steps
COMPARISONS = (("E1 + warmup", "CE"), ("CE + warmup", "CE"), ("E1 + warmup", "CE + warmup"))
GRAPHS = ("G(2,3)", "G(5,3)")


def _mmm(agg):
  return {k: agg[k] for k in ("mean", "min", "max")}


def paper_mean(key):
  """The mean of a Table 1 entry ("0.289 (0.123, 0.472)" -> 0.289)."""
  return float(papers.entry(key)[0].split()[0])


def _paper_key(graph, run):
  key = f"s000.t1.{graph}.{run}"
  return key if key in papers.PAPER else None


def comparisons(rows):
  """E1 + warmup and CE + warmup against CE, and E1 + warmup against CE + warmup, on each
  graph: one family (`stats.family`, Holm over all of them)."""
  pairs = [(f"{g} {a}", f"{g} {b}") for g in GRAPHS for a, b in COMPARISONS
           if f"{g} {a}" in rows and f"{g} {b}" in rows]
  return stats.family([(a, rows[a]["per_seed"]["test_em_all"], b,
                        rows[b]["per_seed"]["test_em_all"]) for a, b in pairs])


def _train_ce(r, rest_key="rest"):
  ce = r["train_ce"]
  rest = ce.get(rest_key, ce.get("other_tokens"))
  return {"decision": ce["decision"], "rest": rest,
          "ratio": ce["decision"]["end"] / rest["end"]}


def _main(src):
  doc = src.load(MAIN)
  rows = {r["label"]: r for r in doc["rows"]}
  run_of = {r["label"]: r["run"] for r in doc["rows"]}
  comps = [{**c, "vs": run_of[c["b"]]} for c in comparisons(rows)]
  table = []
  for r in doc["rows"]:
    a = r["aggregate"]
    table.append({
        "label": r["label"], "graph": r["graph"], "run": r["run"],
        "test_em": _mmm(a["test_em_all"]), "decision": a["test_em_decision"]["mean"],
        "legal": a["test_decision_legal"]["mean"], "valid_em": a["valid_em_all"]["mean"],
        "train_em": a["train_em_all"]["mean"], "paper": _paper_key(r["graph"], r["run"])})
  cfg = doc["rows"][0]["config"]
  by_graph = {g: [r["aggregate"]["test_em_all"]["mean"] for r in doc["rows"] if r["graph"] == g]
              for g in GRAPHS}
  e1_ends = [x["end"] for r in doc["rows"] if r["run"] == "E1 + warmup"
             for x in r["train_ce"].values()]
  return {
      "setting": {"data": {k: cfg["data"][k] for k in ("path_len", "num_nodes", "num_train",
                                                       "num_valid", "num_test", "data_seed")},
                  "model": {k: cfg["model"][k] for k in ("num_layers", "embed_dim", "num_heads")},
                  "optim": {k: cfg["optim"][k] for k in ("lr", "grad_clip", "warmup_steps")},
                  "train": {k: cfg["train"][k] for k in ("batch_size", "num_steps")},
                  "seeds": doc["rows"][0]["seeds"]},
      "table": table,
      "comparisons": comps,
      "n_comparisons": len(comps),
      "min_p": min(c["p_value"] for c in comps),
      "test_em_range": {g: [min(v), max(v)] for g, v in by_graph.items() if v},
      "rows": {r["label"]: {"test_em": r["aggregate"]["test_em_all"]["mean"],
                            "train_em": r["aggregate"]["train_em_all"]["mean"],
                            "decision_legal": r["aggregate"]["test_decision_legal"]["mean"],
                            "test_em_seeds": r["per_seed"]["test_em_all"]} for r in doc["rows"]},
      "train_ce": [{"graph": r["graph"], "run": r["run"], **_train_ce(r)} for r in doc["rows"]],
      "e1_train_ce_end": [min(e1_ends), max(e1_ends)] if e1_ends else None,
      "paper_mean": {k: paper_mean(k) for k in (f"s000.t1.{g}.{r}" for g in GRAPHS
                                                 for r in ("CE", "E1 + warmup"))},
      "ran_on": src.ran_on([MAIN]),
  }


def _before(src, main_rows):
  """The table before the trainer redesign against today's rows, and its controls."""
  before = src.load(BEFORE)
  now = {(r["graph"], r["run"]): r for r in main_rows}
  moved = []
  for b in before:
    if b["stage"] != "main":
      continue
    n = now[(b["graph"], b["label"])]
    pairs = list(zip(b["per_seed_test_em"], n["per_seed"]["test_em_all"]))
    moved.append({"graph": b["graph"], "run": b["label"], "before": b["test_em"]["mean"],
                  "now": n["aggregate"]["test_em_all"]["mean"],
                  "identical": sum(x == y for x, y in pairs), "n": len(pairs),
                  "largest_move": max(abs(x - y) for x, y in pairs)})
  controls = {f"{r['graph']} {r['label']}": {
      "graph": r["graph"], "run": r["label"], "test_em": _mmm(r["test_em"]),
      "train_em": r["train_em"]["mean"], "legal": r["test"]["decision_legal"]["mean"],
      "decision_ce": r["train_ce"]["decision"], "seeds": r["seeds"]}
      for r in before if r["stage"] == "controls"}
  return {"before_after": moved, "before_after_ran_on": src.ran_on([MAIN, BEFORE]),
          "controls": controls, "controls_ran_on": src.ran_on([BEFORE])}


def _long(src):
  doc = src.load(LONG)
  return {"rows": [{"graph": r["graph"], "run": r["run"],
                    "steps": r["overrides"]["train.num_steps"],
                    "test_em": _mmm(r["aggregate"]["test_em_all"]),
                    "train_em": r["aggregate"]["train_em_all"]["mean"],
                    **_train_ce(r, "other_tokens"), "seeds": r["seeds"]} for r in doc["rows"]],
          "ran_on": src.ran_on([LONG])}


def analyze(src, config):
  out = _main(src)
  out["before_redesign"] = (_before(src, src.load(MAIN)["rows"]) if src.exists(BEFORE)
                            else None)
  out["long"] = _long(src) if src.exists(LONG) else None
  return out


def plot(analysis, src, config):
  """table1.png (test / valid / train EM per run, a dot per seed, the paper's crosses) and
  table1_positions.png (teacher-forced test accuracy per output token), for table1.json and
  for long/table1.json where it is there. (table1_losses.png needs the run folders: run.py.)"""
  for rel in (MAIN, LONG):
    if src.exists(rel):
      draw(src.load(rel)["rows"], src.path(rel.rsplit("/", 1)[0]) if "/" in rel else src.folder)


def draw(rows, out):
  """The two figures of one grid file's rows into `out`; returns their paths."""
  import os

  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  from el_jax.report import plots as report_plots
  order = {g: i for i, g in enumerate(GRAPHS)}
  rows = sorted(rows, key=lambda r: (order[r["graph"]], r["stage"] != "main"))
  paths = [os.path.join(out, "table1.png")]
  metrics = [m for m in ("test_em_all", "valid_em_all", "train_em_all")
             if any(m in r["per_seed"] for r in rows)]
  degrees = sorted({int(r["graph"][2]) for r in rows})
  report_plots.bars_with_seeds(
      rows, metrics, paths[-1], ylabel="exact match, greedy",
      chance=1 / degrees[0] if len(degrees) == 1 else None,
      paper={(r["label"], "test_em_all"): r["paper"]["mean"] for r in rows if r.get("paper")},
      title="Table 1, path-star graphs (x: paper's test mean; 1/d is the Clever-Hans level: "
            + ", ".join(f"{1 / d:.1f} for d = {d}" for d in degrees) + ")")
  fig, ax = plt.subplots(figsize=(6, 4.2))
  for r in rows:
    n = len([k for k in r["aggregate"] if k.startswith("test_tf_pos")])
    ax.plot(range(n), [r["aggregate"][f"test_tf_pos{j}"]["mean"] for j in range(n)], "o-",
            label=r["label"])
  ax.set_xticks(range(3), ["0\n(source / goal)", "1\n(decision)", "2"])
  ax.set_xlabel("output token, in output order")
  ax.set_ylabel("teacher-forced test accuracy (mean over seeds)")
  ax.set_ylim(-0.02, 1.02)
  ax.legend(fontsize=7)
  ax.set_title("per-token accuracy given the true earlier tokens")
  fig.tight_layout()
  paths.append(os.path.join(out, "table1_positions.png"))
  fig.savefig(paths[-1], dpi=120)
  plt.close(fig)
  return paths
