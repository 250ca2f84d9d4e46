"""What the seed-001 page shows: the validation selection of each loss's setting
(`stats.select` over its grid on select.json), the compute of each stage, and for the copy task
(test.json) and label copy (label_copy.json) each chosen setting's test EM with its comparisons
(`stats.family`): every loss against CE without warmup (`vs_ce`), every loss with warmup
against CE + warmup (`vs_ce_warmup`), each family Holm-adjusted, and the best of seed 001's
losses against E1 (`best_baseline_vs_e1`: chosen on the test numbers, one comparison, not
adjusted). Then the groups the page's sentences name (the losses that fix the copy task's hard
strings, the ones that keep or lose label copy), the label-copy grid (a diagnostic), and the
same E1 + warmup vs CE comparison in the label_copy experiment's table. NumPy only."""
import math

from el_jax.report import stats

from experiments.loss_baselines.config import (E_LOSSES, GRID, SELECT_METRIC, TEST_METRIC,
                                               point_name)

REFERENCES = ("ce_no_warmup", "ce")  # the two CE rows every loss is measured against
ALPHA = 0.05  # the level at which a Holm-adjusted p counts as a difference on the page
COPIES = 0.9  # label copy: a loss "keeps" copying above this hard-test EM, "breaks" below


def setting(point):
  """"gamma=1.0, ...": a grid point's loss settings (`loss.focal.gamma` shown as `gamma`; the
  reweighting block's fields as `reweight.strategy`), "-" for none."""
  name = point.get("loss.name")
  items = [f"{k.split('.', 1)[1].removeprefix(f'{name}.')}={v}" for k, v in point.items()
           if k != "loss.name"]
  return ", ".join(items) or "-"


def choices(rows, metric=SELECT_METRIC):
  """{loss: {"point", "label", "scores"}}: the validation selection (`stats.select`: highest
  mean `metric`, the first grid point on a tie) of every loss of GRID whose every grid point
  has a row in `rows` (select.json's); `scores` {point label: mean}, in the grid's order."""
  by_label = {r["label"]: r for r in rows}
  out = {}
  for loss, points in GRID.items():
    labels = [point_name(p) for p in points]
    if not all(k in by_label for k in labels):
      continue
    scores = {k: by_label[k]["aggregate"][metric]["mean"] for k in labels}
    best = stats.select(scores)
    out[loss] = {"point": points[labels.index(best)], "label": best, "scores": scores}
  return out


def families(rows, metric=TEST_METRIC):
  """The comparison families of a chosen-settings file's rows ({name: [stats.family entries]}),
  as the module docstring says; a family whose reference row is missing is left out."""
  by = {r["label"]: r for r in rows}
  labels = list(by)
  per = {k: r["per_seed"][metric] for k, r in by.items()}
  out = {}
  if "ce_no_warmup" in by and len(labels) > 1:
    out["vs_ce"] = stats.family([(k, per[k], "ce_no_warmup", per["ce_no_warmup"])
                                 for k in labels if k != "ce_no_warmup"])
  warm = [k for k in labels if k not in REFERENCES and by[k]["warmup"]]
  if "ce" in by and warm:
    out["vs_ce_warmup"] = stats.family([(k, per[k], "ce", per["ce"]) for k in warm])
  base = [k for k in labels if k not in (*REFERENCES, *E_LOSSES)]
  if base and "e1" in by:
    # the best of seed 001's losses on the test numbers themselves (the first on a tie): a
    # comparison chosen after looking, which the page says and does not adjust
    best = stats.select({k: by[k]["aggregate"][metric]["mean"] for k in base})
    out["best_baseline_vs_e1"] = stats.family([(best, per[best], "e1", per["e1"])])
  return out


def chosen_part(src, name):
  """One chosen-settings file (test.json or label_copy.json): its rows with their comparisons
  and the size of each family (the Holm floor a p is noted at)."""
  doc = src.load(name)
  fam = families(doc["rows"])
  comp = {(f, c["a"]): c for f, cs in fam.items() for c in cs}
  rows = {r["label"]: {"setting": setting(r["point"]), "warmup": r["warmup"],
                       "test_em_easy": r["aggregate"]["test_em_easy"],
                       "test_em_hard": r["aggregate"][TEST_METRIC],
                       "vs_ce": comp.get(("vs_ce", r["label"])),
                       "vs_ce_warmup": comp.get(("vs_ce_warmup", r["label"]))}
          for r in doc["rows"]}
  best = fam.get("best_baseline_vs_e1")
  return {"seeds": doc["rows"][0]["seeds"], "rows": rows,
          "family_size": {f: len(cs) for f, cs in fam.items()},
          "best_vs_e1": best[0] if best else None, "ran_on": src.ran_on([name])}


def _select(src, table):
  rows = src.load("select.json")["rows"]
  chosen = choices(rows)
  by_loss = {}
  for r in rows:
    by_loss.setdefault(r["loss"], []).append(r)
  grid = {}
  for loss in table["grid"]:
    c = chosen.get(loss)
    grid[loss] = {"points": [{"setting": setting(r["point"]),
                              "valid": r["aggregate"][SELECT_METRIC]["mean"],
                              "chosen": c is not None and r["label"] == c["label"]}
                             for r in by_loss.get(loss, [])],
                  "chosen": setting(c["point"]) if c else None}
  budget = {loss: len(rs) for loss, rs in by_loss.items()}
  others = [n for loss, n in budget.items() if loss != "ce"] or [None]
  # the widened grids: four or more points; their choices at an end of the grid
  at_end = [loss for loss, c in chosen.items() if len(GRID[loss]) >= 4
            and list(c["scores"]).index(c["label"]) in (0, len(GRID[loss]) - 1)]
  return {"seeds": rows[0]["seeds"], "grid": grid,
          "scores": {r["label"]: r["aggregate"][SELECT_METRIC]["mean"] for r in rows},
          "budget": budget, "budget_min": min(others), "budget_max": max(others),
          "at_end": at_end, "ran_on": src.ran_on(["select.json", "table.json"])}


def _copy_sentences(part):
  """The groups the copy-task sentences name: the losses whose hard-test EM differs from CE's
  after Holm (`fixes_vs_ce`, `fixes_vs_ce_warmup`: p_holm < ALPHA, above), seed 001's among
  them, and the smallest unadjusted p of the others against CE without warmup."""
  rows = part["rows"]
  fixes = {f: [k for k, r in rows.items() if r[f] and r[f]["p_holm"] < ALPHA and r[f]["diff"] > 0]
           for f in ("vs_ce", "vs_ce_warmup")}
  others = [(r["vs_ce"]["p_value"], k) for k, r in rows.items()
            if r["vs_ce"] and k not in fixes["vs_ce"]]
  p, k = min(others) if others else (None, None)
  return {"fixes_vs_ce": fixes["vs_ce"], "fixes_vs_ce_warmup": fixes["vs_ce_warmup"],
          "seed001_fixing": [k for k in fixes["vs_ce"] if k not in (*REFERENCES, *E_LOSSES)],
          "others_min_p": {"a": k, "p_value": p}}


def _label_copy_sentences(part):
  """The losses that keep copying the label (hard-test EM above COPIES: their range and
  smallest p against each CE row) and the ones that break (below it)."""
  rows = {k: r for k, r in part["rows"].items() if k not in REFERENCES}
  keep = {k: r for k, r in rows.items() if r["test_em_hard"]["mean"] > COPIES}
  low = lambda xs: min(xs, default=None)  # noqa: E731
  return {"keep": list(keep), "break": [k for k in rows if k not in keep],
          "keep_min": low(r["test_em_hard"]["mean"] for r in keep.values()),
          "keep_max": max((r["test_em_hard"]["mean"] for r in keep.values()), default=None),
          "keep_min_p_vs_ce": low(r["vs_ce"]["p_value"] for r in keep.values()),
          "keep_min_p_vs_ce_warmup": low(r["vs_ce_warmup"]["p_value"] for r in keep.values())}


def _by_seed(row):
  """{seed: hard-test EM} of a grid row."""
  return {str(s): v for s, v in zip(row["seeds"], row["per_seed"][TEST_METRIC])}


def _two_runs(src):
  """E1 + warmup against CE on KJV in this experiment and in the label_copy experiment's table:
  the two comparisons and E1's per-seed hard-test EM, by seed (None without that table)."""
  if not src.exists("../label_copy/table.json"):
    return {"two_runs": None}
  there = src.load("../label_copy/table.json")
  mine = {r["label"]: r for r in src.load("label_copy.json")["rows"]}
  row = next(r for r in there["rows"] if r["label"] == "kjv_pretrained_e1_warmup")
  c = next(c for c in there["comparisons"]["test_em_hard"]
           if c["a"] == "kjv_pretrained_e1_warmup")
  return {"two_runs": {"there": {k: c[k] for k in ("diff", "ci95", "p_value", "p_holm")},
                       "there_e1_by_seed": _by_seed(row), "here_e1_by_seed": _by_seed(mine["e1"]),
                       "pretraining_valid_ce": there["pretraining"]["valid_ce_text"]}}


def _label_copy_grid(src):
  if not src.exists("label_copy_grid.json"):
    return None
  rows = src.load("label_copy_grid.json")["rows"]
  by = {}
  for r in rows:
    by.setdefault(r["loss"], []).append(r)
  return {"losses": {loss: {"points": [{"setting": setting(r["point"]),
                                        "valid": r["aggregate"][SELECT_METRIC]["mean"]}
                                       for r in rs], "seeds": rs[0]["seeds"]}
                     for loss, rs in by.items()},
          "ran_on": src.ran_on(["label_copy_grid.json"])}


def analyze(src, config):
  """Every part whose files exist (a `test` run has no label-copy grid, no seed-000 sweep and
  no label_copy experiment beside it: those parts are None)."""
  table = src.load("table.json")
  sweep = (src.load("../copy_task_cpu_sweep/selection.json")
           if src.exists("../copy_task_cpu_sweep/selection.json") else None)
  test = chosen_part(src, "test.json")
  label_copy = chosen_part(src, "label_copy.json")
  compute = {name: {"runs": len(rows), "minutes": math.fsum(r["seconds"] for r in rows) / 60}
             for name, rows in ((n, src.load(f"{n}.json")["rows"])
                                for n in ("select", "test", "label_copy"))}
  return {
      "warmup_steps": table["warmup_steps"], "select_metric": table["select_metric"],
      "pretraining": ({k: table["pretraining"][k] for k in ("command", "valid_ce_text")}
                      if "pretraining" in table else None),
      "ce_sweep": sweep and {"candidates": sweep["budget"]["ce"],
                             "ce_warmup750": sweep["ce_candidates"]["ce_warmup750"]},
      "select": _select(src, table),
      "compute": compute,
      "compute_ran_on": src.ran_on(["select.json", "test.json", "label_copy.json"]),
      "test": {**test, **_copy_sentences(test)},
      "label_copy": {**label_copy, **_label_copy_sentences(label_copy), **_two_runs(src)},
      "label_copy_grid": _label_copy_grid(src),
  }


def plot(analysis, src, config):
  """table.png: hard-test EM of every chosen setting, a bar (mean) per task with a dot per
  seed, one group per loss (`el_jax.report.plots.bars_with_seeds`)."""
  from el_jax.report import plots as report_plots
  titles = {"test": "copy task", "label_copy": "label copy, KJV"}
  docs = {p: src.load(f"{p}.json") for p in titles if src.exists(f"{p}.json")}
  if not docs:
    return
  series = []
  for part, doc in docs.items():
    rows = doc["rows"]
    series.append({"label": f"{titles[part]} ({len(rows[0]['seeds'])} seeds)",
                   "aggregate": {r["label"]: r["aggregate"][TEST_METRIC] for r in rows},
                   "per_seed": {r["label"]: r["per_seed"][TEST_METRIC] for r in rows}})
  first = next(iter(docs.values()))["rows"]
  losses = [r["label"] for r in first if all(r["label"] in s["per_seed"] for s in series)]
  names = {k: k.replace("_", "\n") for k in losses}
  names.update({"ce": "ce", "ce_no_warmup": "ce, no\nwarmup"})
  report_plots.bars_with_seeds(series, losses, src.path("table.png"),
                               ylabel="hard test exact match",
                               title="chosen setting of each loss (with warmup, but for "
                                     "ce_no_warmup): hard test exact match", metric_names=names)
