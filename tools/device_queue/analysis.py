"""What the accelerator page shows of the device queue's collected seeds: per job and arm the
per-seed metric in seed order, its mean (min, max) and sd, every float metric's aggregate and
the counts every seed shares, how the seeds were stacked, the devices; each arm against the
job's baseline once both have `jobs.MIN_MODELS` seeds (`stats.family`: difference of means,
permutation p and its floor, bootstrap interval, Holm over the job's comparisons); each job's
dtype and why; where the time of each recorded call went (its timeline: setup, compile, train,
eval, checkpoint, write, the achieved TFLOP/s) against its prediction; and, before any call, the
prediction of the next calls from the measured rates of each device kind that verify measured
(`tools/device_queue/sizing.py`; the target: path-star G(2,3) at the reference's budget, 5 seeds
x CE and E1 + warmup, in one call of `sizing.CALL_S`)."""
import math
import os

from el_jax.report import stats

from tools.device_queue import jobs as jobs_lib
from tools.device_queue import sizing

TARGET = "path_star_g23"  # the job the prediction is for: all its runs in one call


def _job_names(config):
  return [j for j in config.jobs.split(",") if j] or list(jobs_lib.JOB_NAMES)


def _arm(a, metric):
  seeds = sorted(a["seeds"], key=int)
  per_seed = [a["seeds"][s] for s in seeds]
  first = per_seed[0]
  counts = {k: v for k, v in first.items()
            if isinstance(v, int) and not isinstance(v, bool) and k != "seed"
            and all(p.get(k) == v for p in per_seed)}
  keep = {k: v for k, v in a["overrides"].items() if k.startswith(("loss.", "optim."))}
  return {"setting": [f"{k}={v}" for k, v in keep.items()],
          "seeds": [int(s) for s in seeds], "n": len(seeds),
          "values": [p[metric] for p in per_seed],
          "aggregate": stats.aggregate([{metric: float(p[metric])} for p in per_seed])[metric],
          "aggregates": stats.aggregate([{k: v for k, v in p.items() if k != "seed"}
                                         for p in per_seed]),
          "counts": counts,
          "stacked": [p.get("arm_seeds") for p in per_seed],
          "devices": sorted({p["ran_on"].get("device_kind", "?") for p in per_seed})}


def _rel(src, path):
  """`path` (from the repository root) relative to the analysis's folder."""
  return os.path.relpath(os.path.join(src.root, path), src.folder)


def _flops(src, config, job):
  """(FLOPs per step of one run of `job`, where from) for a job verify did not time: the
  committed plan of its config (`el_jax.tools.plan`, results/plan_paper/plan.json), or None."""
  rel = _rel(src, config.plan_file)
  if not config.plan_file or not src.exists(rel):
    return None, None
  run = src.load(rel)["runs"].get(f"{job['config']}:{job['variant']}")
  if not run or job["overrides"].get("data.degree", 2) != 2:  # the plan is of the config as is
    return None, None
  return run["flops_per_step"], (f"{src.name(rel)} ({run['num_devices']} CPU devices: the "
                                 f"optimizer's update counted {run['num_devices']} times)")


def _steps(job):
  from_plan = {"pcfg_mlm": 30_000, "hmm_mlm": 30_000}  # configs/*_mlm.py:paper train.num_steps
  return job["overrides"].get("train.num_steps", from_plan.get(job["config"]))


def predictions(src, config):
  """Per device kind that verify measured: the rates (`sizing.kind_rates`) and, per job, the
  prediction of all its runs in one call, what fits one call, and the bound."""
  vdir = _rel(src, config.verify_dir)
  names = [f for f in src.files(vdir) if os.path.basename(f).startswith("verify_")]
  docs = {os.path.basename(f): src.load(f) for f in names}
  kinds = sorted({sizing.device_kind(d) for d in docs.values()} - {None})
  out = {}
  for kind in kinds:
    rates = sizing.kind_rates(docs, kind)
    per_job = {}
    for job in jobs_lib.JOBS:
      if job["name"] == "copy_lc1":  # complete
        continue
      flops, fsrc = (None, None) if job["model"] else _flops(src, config, job)
      rate = sizing.job_rate(rates, job["model"], job["dtype"], flops)
      steps = _steps(job)
      if rate is None or steps is None:
        per_job[job["name"]] = {"sized": False, "title": job["title"]}
        continue
      runs = len(job["arms"]) * len(job["seeds"])
      missing = {a: list(job["seeds"]) for a in job["arms"]}
      pick, one_call = sizing.fit(rates, rate, steps, job["dtype"], sizing.CALL_S, missing,
                                  preflight=True)
      allp = sizing.predict(rates, rate, runs, steps, job["dtype"])
      per_job[job["name"]] = {
          "sized": True, "title": job["title"], "kind": job["kind"], "runs": runs,
          "steps": steps, "dtype": job["dtype"], "all": allp,
          "fits": allp["total_s"] <= sizing.CALL_S,
          "runs_that_fit": sum(len(v) for v in pick.values()), "one_call": one_call,
          "steps_that_fit": sizing.steps_that_fit(rates, rate, runs, job["dtype"],
                                                  sizing.CALL_S),
          "flops_source": fsrc or rate["source"],
          # the same numbers in the units the page prints them in
          "step_ms": allp["step_s"] * 1e3, "single_step_ms": allp["single_step_s"] * 1e3,
          "gflop_per_run_step": allp["flops_per_slot_step"] / 1e9,
          "single_tflops": allp["flops_per_slot_step"] / allp["single_step_s"] / 1e12,
          "single_mfu": (allp["flops_per_slot_step"] / allp["single_step_s"]
                         / (allp["peak_tflops"] * 1e12)),
          "bound_call_s": allp["total_s"] - allp["parts_s"]["train"] + allp["bound_train_s"],
          # the MFU the training would need for the whole call to fit
          "mfu_needed": allp["bound_train_s"] / (sizing.CALL_S - allp["total_s"]
                                                 + allp["parts_s"]["train"]),
          "steps_fraction": (sizing.steps_that_fit(rates, rate, runs, job["dtype"],
                                                   sizing.CALL_S) / steps),
          "calls_needed": (math.ceil(runs / sum(len(v) for v in pick.values()))
                           if pick else None),
          "call_minutes": allp["total_s"] / 60}
    stack = rates.get("stack")
    mfus = [r["mfu"] for r in rates["steps"].values() if r.get("mfu") is not None]
    out[kind] = {"rates": rates, "jobs": per_job, "best_mfu": max(mfus) if mfus else None,
                 "stack": stack and {**stack, "single_step_ms": stack["single_step_s"] * 1e3,
                                     "stacked_step_ms": stack["stacked_step_s"] * 1e3}}
  return {"call_s": sizing.CALL_S, "target": TARGET, "kinds": out,
          "files": [src.name(f) for f in names]}


def _calls(d):
  """The recorded calls of a collected job file: timeline, TFLOP/s, sizing per part."""
  out = []
  for c in d.get("calls", []):
    t = c["timeline"]
    out.append({"finished": c["finished"], "device": c["device_kind"], "slots": c["slots"],
                "steps": c["steps"], "wall_s": t["wall_s"], "parts_s": t["parts_s"],
                "unaccounted_s": t["unaccounted_s"], "train_tflops": t.get("train_tflops"),
                "sizing": (c.get("sizing") or {}).get("parts")})
  return out


def analyze(src, config):
  out, files = {}, []
  dtypes = [{"job": j["name"], "title": j["title"], "kind": j["kind"], "dtype": j["dtype"],
             "why": j["dtype_why"]} for j in jobs_lib.JOBS]
  for name in _job_names(config):
    job = jobs_lib.job_by_name(name)
    rel = jobs_lib.results_name(job, config.size)
    if not src.exists(rel):
      continue
    files.append(rel)
    d = src.load(rel)
    metric = job["metric"]
    arms = {arm: _arm(d["arms"][arm], metric) for arm in job["arms"] if arm in d["arms"]}
    base = arms.get(job["baseline"])
    pairs = [(arm, a["values"], job["baseline"], base["values"]) for arm, a in arms.items()
             if arm != job["baseline"] and base is not None
             and min(a["n"], base["n"]) >= jobs_lib.MIN_MODELS]
    comparisons = stats.family(pairs)
    for c in comparisons:
      c["at_floor"] = stats.at_floor(c["p_value"], c["p_floor"])
    out[name] = {"title": job["title"], "metric": metric,
                 "baseline": job["baseline"], "wanted": len(job["seeds"]), "arms": arms,
                 "paper": job["paper"], "comparisons": comparisons,
                 "min_models": jobs_lib.MIN_MODELS, "calls": _calls(d)}
  return {"ran": bool(out), "pattern": src.name("<job>.json"), "jobs": out,
          "ran_on": src.ran_on(files), "dtypes": dtypes,
          "calls": [dict(c, job=n) for n, j in out.items() for c in j["calls"]],
          "sizing": predictions(src, config)}
