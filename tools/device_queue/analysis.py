"""What the accelerator page shows of the device queue's collected seeds: per job and arm the
per-seed metric in seed order, its mean (min, max) and sd, every float metric's aggregate and
the counts every seed shares, how the seeds were stacked, the devices; each arm against the
job's baseline once both have `jobs.MIN_MODELS` seeds (`stats.family`: difference of means,
permutation p and its floor, bootstrap interval, Holm over the job's comparisons)."""
from el_jax.report import stats

from tools.device_queue import jobs as jobs_lib


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


def analyze(src, config):
  out, files = {}, []
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
                 "min_models": jobs_lib.MIN_MODELS}
  return {"ran": bool(out), "pattern": src.name("<job>.json"), "jobs": out,
          "ran_on": src.ran_on(files)}
