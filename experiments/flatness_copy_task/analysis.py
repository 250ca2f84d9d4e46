"""What the seed-002 page shows of the copy-task flatness runs: the measurement setting, the
trajectory of the first seed (every measured step, each run's Tr(H) with its stderr, Tr(F) and
top eigenvalue), and per run and seed the step the training set was fitted, Tr(H) after it
(mean, min, max over the measurements at or after that step), at the end, and the final
training CE, margin and hard-test EM."""
import numpy as np

FILE = "copy_task.json"
KEYS = ("hessian_trace", "hessian_trace_stderr", "fisher_trace", "top_eigenvalue")


def after_convergence(s):
  """Tr(H) at every measurement at or after the step the training set was fitted: mean, min,
  max and their number (None before it is fitted)."""
  conv = s["converged_step"]
  post = [p["hessian_trace"] for p in s["flatness"] if conv is not None and p["step"] >= conv]
  if not post:
    return None
  return {"mean": float(np.mean(post)), "min": min(post), "max": max(post), "n": len(post)}


def ce_fall(s, fraction=0.01):
  """CE's Tr(H) after its loss saturated: from the first measurement at or after the step the
  training set was fitted at which Tr(F) is below `fraction` of its first measurement (the
  model's own predictions almost certain) to the last one, and whether it fell at every
  measurement in between. None if Tr(F) never fell that far after the fit."""
  fl, conv = s["flatness"], s["converged_step"]
  start = next((i for i, p in enumerate(fl) if conv is not None and p["step"] >= conv
                and p["fisher_trace"] < fraction * fl[0]["fisher_trace"]), None)
  if start is None:
    return None
  tr = [p["hessian_trace"] for p in fl[start:]]
  return {"from": {"step": fl[start]["step"], "trace": tr[0]},
          "to": {"step": fl[-1]["step"], "trace": tr[-1]},
          "falling": bool(all(b < a for a, b in zip(tr, tr[1:])))}


def analyze(src, config):
  d = src.load(FILE)
  res = d["results"]
  runs = list(res)
  seed = sorted(res[runs[0]]["per_seed"])[0]
  series = {run: {p["step"]: p for p in res[run]["per_seed"][seed]["flatness"]} for run in runs}
  steps = sorted(set().union(*[set(s) for s in series.values()]))
  trajectory = {"seed": seed, "steps": steps,
                "points": {run: [{k: series[run][st][k] for k in KEYS} if st in series[run]
                                 else None for st in steps] for run in runs}}
  summary = []
  for run, r in res.items():
    for sd, s in r["per_seed"].items():
      summary.append({"run": run, "seed": sd, "converged_step": s["converged_step"],
                      "after_convergence": after_convergence(s),
                      "final_trace": s["final"]["hessian_trace"],
                      "final_step": s["final"]["step"],
                      "final_train_ce": s["final_train"]["ce"],
                      "final_margin": s["final_train"]["margin_mean"],
                      "test_em_hard": s["final_eval"]["test_em_hard"]})
  ce = res["ce"]["per_seed"][seed]
  return {"command": d["meta"]["command"], "seeds": d["meta"]["args"]["seeds"],
          "every": d["meta"]["args"]["every"],
          "num_probes": d["meta"]["measurement"]["num_probes"],
          "num_batches": d["meta"]["measurement"]["num_batches"],
          "runs": runs, "trajectory": trajectory, "summary": summary,
          "by_run": {x["run"]: x for x in summary if x["seed"] == seed},
          "ce_fall": ce_fall(ce),
          "ran_on": src.ran_on([FILE])}
