"""What the sweep's section shows: every run's hard-string EM (train, validation, test) by
context, the choice on validation (`stats.select_rows`: E1's candidates and CE's at one string
per context), and what packing strings into a context did to CE and E1 in the scan."""
from el_jax.report import stats

STAGES = ("scan", "scan2", "scan3")  # in this order; scan3 (CE's extra candidates) optional
METRIC = "valid_em_hard"  # the choice's metric: never a test number
CE_EXTRA = "scan3"  # the stage that gives CE as many candidates as E1
NOTE = "chosen on the validation split; test numbers were not used"


def stage_rows(src):
  """{stage: its rows} of the stages' JSON that exist under the results folder (at least one)."""
  out = {}
  for stage in STAGES:
    rel = f"{stage}.json"
    if not src.exists(rel):
      continue
    doc = src.load(rel)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
      raise ValueError(f"{src.name(rel)} is not a grid's results file (a JSON object with "
                       f"'rows'); run the stage {stage} again")
    out[stage] = doc["rows"]
  if not out:
    raise ValueError(f"no stage's JSON ({', '.join(f'{s}.json' for s in STAGES)}) under "
                     f"{src.name('.')}: run the stages first (python -m el_jax.experiment "
                     f"--config=experiments/copy_task_cpu_sweep/config.py:cpu)")
  return out


def _setting(row):
  return {k: v for k, v in row["overrides"].items() if k.startswith(("loss.", "optim."))}


def _choose(rows):
  """`stats.select_rows` over candidate rows by the mean of METRIC: (chosen row, scores)."""
  return stats.select_rows(rows, METRIC, name=lambda r: r["loss"])


def selection(rows_by_stage, context):
  """The choice at `context` (one string per context): the E1 run with the highest mean
  validation hard EM, and, where the CE_EXTRA stage ran, CE's best with as many candidates
  (`ce_*` and `budget`: candidates per loss). selection.json's content."""
  at = [(stage, r) for stage, rows in rows_by_stage.items() for r in rows
        if r["overrides"]["data.context_len"] == context]
  cands = [r for _, r in at if r["overrides"]["loss.name"] != "ce"]
  ce = [r for _, r in at if r["overrides"]["loss.name"] == "ce"]
  ce_stages = {stage for stage, r in at if r["overrides"]["loss.name"] == "ce"}
  if not cands:
    raise ValueError(f"no E-loss runs at one string per context (context {context}) in the "
                     f"sweep's JSON")
  best, scores = _choose(cands)
  out = {"metric": METRIC, "context_len": context, "seeds": best["seeds"],
         "candidates": scores, "chosen_run": best["loss"], "chosen_overrides": _setting(best),
         "note": NOTE, "budget": {"e1": len(cands), "ce": len(ce)}}
  if CE_EXTRA in ce_stages:  # CE tuned alike
    ce_best, ce_scores = _choose(ce)
    out.update({"ce_candidates": ce_scores, "ce_chosen_run": ce_best["loss"],
                "ce_chosen_overrides": _setting(ce_best)})
  return out


def _ranked(scores, chosen):
  """Candidates best first (a tie keeps the listed order), the chosen one marked."""
  return [{"run": k, "score": v, "chosen": k == chosen}
          for k, v in sorted(scores.items(), key=lambda kv: -kv[1])]


def _scan_at(scan, context):
  """CE's hard-test EM and the best E1 run's (means over seeds) at one context of the scan."""
  rs = [r for r in scan if r["overrides"]["data.context_len"] == context]
  ce = [r["aggregate"]["test_em_hard"]["mean"] for r in rs if r["loss"] == "ce"]
  e1 = [r["aggregate"]["test_em_hard"]["mean"] for r in rs if r["loss"].startswith("e1")]
  return {"context": context, "ce_test_em_hard": ce[0] if len(ce) == 1 else None,
          "e1_best_test_em_hard": max(e1) if e1 else None}


def analyze(src, config):
  rows = stage_rows(src)
  context = config.select_context
  sel = selection(rows, context)
  if src.exists("selection.json") and src.load("selection.json") != sel:
    raise ValueError(f"{src.name('selection.json')} is not the choice its stages' JSON gives: "
                     f"run python -m el_jax.experiment --config=experiments/copy_task_cpu_sweep/"
                     f"config.py:select")
  table = [{"context": r["overrides"]["data.context_len"],
            "strings": r["overrides"]["data.context_len"] // context, "run": r["loss"],
            "train_em_hard": r["aggregate"]["train_em_hard"]["mean"],
            "valid_em_hard": r["aggregate"]["valid_em_hard"],
            "test_em_hard": r["aggregate"]["test_em_hard"], "seeds": r["seeds"],
            "file": f"{stage}.json"}
           for stage, rs in rows.items() for r in rs]
  table.sort(key=lambda t: -t["context"])  # stable: the files' order within a context
  scan = rows.get("scan", [])
  packed = max((r["overrides"]["data.context_len"] for r in scan), default=context)
  files = [f"{stage}.json" for stage in rows]
  return {
      "table": table,
      "selection": sel,
      "e1_ranked": _ranked(sel["candidates"], sel["chosen_run"]),
      "ce_ranked": (_ranked(sel["ce_candidates"], sel["ce_chosen_run"])
                    if "ce_candidates" in sel else None),
      "scan": {"one": _scan_at(scan, context), "packed": _scan_at(scan, packed)},
      "ran_on": src.ran_on(files),
  }
