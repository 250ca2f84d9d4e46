"""What the seed-000 page shows of Table 2: the small GPT-2's pretraining and the fine-tuning
setting, each run's test exact match of the label (all / easy / hard) beside the paper's, and
E1 + warmup against CE per text and start on `test_em_all` and on `test_em_hard`
(`stats.family`: permutation p over seeds, bootstrap interval, Holm over each metric's
comparisons), with the machines each table ran on. NumPy only."""
from el_jax.report import papers
from el_jax.report import stats

TABLE = "table.json"
TEXTS = ("kjv", "shakespeare")
STARTS = ("pretrained", "scratch")
METRICS = ("test_em_all", "test_em_easy", "test_em_hard")
COMPARED = ("test_em_all", "test_em_hard")


def _mmm(agg):
  return {k: agg[k] for k in ("mean", "min", "max")}


def comparisons(rows):
  """{metric: E1 + warmup against CE per (text, start) of `rows` (by label), one family}."""
  pairs = [(f"{t}_{s}_e1_warmup", f"{t}_{s}_ce") for t in TEXTS for s in STARTS
           if f"{t}_{s}_e1_warmup" in rows and f"{t}_{s}_ce" in rows]
  out = {}
  for m in COMPARED if pairs else ():
    out[m] = [{**c, "text": rows[c["a"]]["text"], "start": rows[c["a"]]["start"]}
              for c in stats.family([(a, rows[a]["per_seed"][m], b, rows[b]["per_seed"][m])
                                     for a, b in pairs])]
  return out


def analyze(src, config):
  doc = src.load(TABLE)
  rows = {r["label"]: r for r in doc["rows"]}
  comps = comparisons(rows)
  table = []
  for r in doc["rows"]:
    key = f"s000.t2.{r['text']}.{r['loss']}"
    table.append({"label": r["label"], "text": r["text"], "start": r["start"], "loss": r["loss"],
                  **{m: _mmm(r["aggregate"][m]) for m in METRICS},
                  "paper": key if key in papers.PAPER and r["start"] == "pretrained" else None})
  ce = [r["aggregate"]["test_em_all"]["mean"] for r in doc["rows"] if r["loss"] == "ce"]
  return {
      "pretraining": doc.get("pretraining"),
      "fine_tuning": doc["fine_tuning"],
      "table": table,
      "comparisons": comps,
      "n_comparisons": {m: len(cs) for m, cs in comps.items()},
      # {metric: {"<text>_<start>": its comparison}}
      "diff": {m: {f"{c['text']}_{c['start']}": c for c in cs} for m, cs in comps.items()},
      "ce_test_em_range": [min(ce), max(ce)] if ce else None,
      "means": {r["label"]: r["aggregate"]["test_em_all"]["mean"] for r in doc["rows"]},
      "ran_on": src.ran_on([TABLE]),
  }


def plot(analysis, src, config):
  """table.png: test EM (all / easy / hard) per run, a dot per seed, the paper's crosses."""
  from el_jax.report import plots as report_plots
  rows = src.load(TABLE)["rows"]
  report_plots.bars_with_seeds(
      rows, list(METRICS), src.path("table.png"), ylabel="label exact match",
      paper={(r["label"], "test_em_all"): papers.value(f"s000.t2.{r['text']}.{r['loss']}")
             for r in rows if r["start"] == "pretrained"},
      metric_names={m: m.replace("test_em_", "test ") for m in METRICS},
      title=f"label copy ({len(rows[0]['seeds']) if rows else 0} seeds; x: paper, a pretrained "
            f"GPT-2 of unstated size fine-tuned, test all)")
