r"""The paper-size jobs for an accelerator, in priority order, run a few seeds per session.

  python experiments/device_queue.py run --budget_s=420 --out=$OUT     # on the GPU machine
  python experiments/device_queue.py collect <returned *.json ...>      # here: merge, test
  python experiments/device_queue.py status                            # what is still missing

A lent accelerator is held for minutes (docs/accelerator.md): a job cannot be continued in
another session (a paper-size checkpoint does not come back), but independent seeds can.
So each job is a set of arms (a loss setting each) and a list of model seeds per arm; `run`
takes the first job with a seed missing (reading the committed
`results/device_queue/<job>.json`), trains the missing seeds of one arm as one stacked
program (`train.vmap_seeds`) in a temporary workdir, and writes the per-seed final
evaluations, with where they ran (`el_jax.provenance`) and how long it took, to
`<out>/<job>.<arm>.<time>.json`; then the next arm, while the time left (`--budget_s`) covers
what the arm before took. `collect` merges such files into `results/device_queue/<job>.json`:
per arm, per seed, the metrics and the device of that seed; once each arm has >= 3 seeds,
the comparison of each arm with the job's baseline on its metric (difference of means,
two-sided permutation p over seeds, its floor for these seed counts, bootstrap interval,
Holm over the job's comparisons). The page docs/results/accelerator.md shows every job's
seeds so far and the test (`python -m el_jax.report`).

The jobs (priority order; `JOBS`):
  copy_lc1        seed 000 Fig. 1 at one string per context: configs/copy_task.py:paper_lc1
                  (GPT-NeoX 4 x 1024, L_c = 1, L_p = 50, 8 strings per step, 20k steps), CE
                  against E1 (lam 1) + 1000 warmup steps (the paper's "lam = 1 works at scale",
                  "warmup 500 or 1000": no tuning on the device), 5 seeds per arm; hard-test EM
  path_star_g23   seed 000 Table 1, G(2,3) at the reference's budget: configs/path_star.py:paper
                  (GPT-mini 6 x 384, batch 256, lr 1e-4), 100 epochs of the 200k graphs (78,100
                  steps), the reference's test set; CE (100 warmup steps) against E1 (lam 1) +
                  1000 warmup steps; 5 seeds per arm; test exact match of the whole path
  path_star_g53   the same on G(5,3)

Sizes: `--size=paper` (the jobs above) and `--size=test` (the same jobs on the `test`
configs, seconds on a CPU: the suite runs `run` and `collect` there, tests/test_device_queue.py).
"""
import argparse
import datetime
import glob
import json
import math
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from el_jax import stats  # noqa: E402
from el_jax import workdir as wd  # noqa: E402

OUT = os.path.join(ROOT, "results", "device_queue")
STEPS_PER_EPOCH_PS = 200_000 // 256  # path-star paper: 781 steps per epoch of 200k graphs


def _job(name, title, config, variant, metric, arms, baseline, seeds, overrides, paper=None,
         test_overrides=None):
  return {"name": name, "title": title, "config": config, "variant": variant, "metric": metric,
          "arms": arms, "baseline": baseline, "seeds": list(seeds), "overrides": overrides,
          "paper": paper or {}, "test_overrides": test_overrides or {}}


E1_WARMUP = {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 1000}
# Device run settings every job shares: the seeds of an arm as one program, one checkpoint at
# the end (a 4 x 1024 model's is 0.6 GB per seed; nothing of it comes back anyway), no progress
# bar in a log that is read afterwards.
COMMON = {"train.vmap_seeds": True, "progress": False}
JOBS = (
    _job("copy_lc1", "Copy task, one string per context (seed 000 Fig. 1, k = 1), paper size",
         "copy_task", "paper_lc1", "test_em_hard",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**COMMON, "train.eval_every": 5000, "train.checkpoint_every": 20_000,
          "train.eval_batch_contexts": 1000},
         paper={"ce": "hard-test accuracy falls as the context grows (Fig. 1a; its values "
                       "are only in the plot)"},
         test_overrides={"train.eval_every": 4, "train.checkpoint_every": 8}),
    _job("path_star_g23", "Path-star G(2,3) (seed 000 Table 1), the reference's budget",
         "path_star", "paper", "test_em_all",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**COMMON, "data.degree": 2, "data.path_len": 3, "data.test_file": "reference",
          "train.num_steps": 100 * STEPS_PER_EPOCH_PS, "train.eval_every": 0,
          "train.checkpoint_every": 100 * STEPS_PER_EPOCH_PS, "train.eval_batch_size": 5000},
         paper={"ce": "0.289 (0.123, 0.472)", "e1_warmup": "0.655 (0.486, 0.976)"},
         test_overrides={"data.test_file": "", "train.num_steps": 8,
                         "train.checkpoint_every": 8, "train.eval_batch_size": 16}),
    _job("path_star_g53", "Path-star G(5,3) (seed 000 Table 1), the reference's budget",
         "path_star", "paper", "test_em_all",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**COMMON, "data.degree": 5, "data.path_len": 3, "data.test_file": "reference",
          "train.num_steps": 100 * STEPS_PER_EPOCH_PS, "train.eval_every": 0,
          "train.checkpoint_every": 100 * STEPS_PER_EPOCH_PS, "train.eval_batch_size": 5000},
         paper={"ce": "0.001 (0.000, 0.005)", "e1_warmup": "0.117 (0.094, 0.139)"},
         test_overrides={"data.degree": 3, "data.test_file": "", "train.num_steps": 8,
                         "train.checkpoint_every": 8, "train.eval_batch_size": 16}),
)
JOB_NAMES = tuple(j["name"] for j in JOBS)


def job_by_name(name):
  for j in JOBS:
    if j["name"] == name:
      return j
  raise ValueError(f"unknown job {name!r}; jobs: {JOB_NAMES}")


def results_path(job, out_dir=OUT, size="paper"):
  return os.path.join(out_dir, f"{job['name']}{'' if size == 'paper' else '_' + size}.json")


def read_results(job, out_dir=OUT, size="paper"):
  path = results_path(job, out_dir, size)
  if not os.path.exists(path):
    return {"job": job["name"], "arms": {}}
  return wd.read_json(path, what=f"the device-queue results of {job['name']}")


def missing_seeds(job, doc):
  """{arm: [seeds not yet in `doc`]} in the job's arm order."""
  return {arm: [s for s in job["seeds"] if str(s) not in doc.get("arms", {}).get(arm, {})
                .get("seeds", {})] for arm in job["arms"]}


def arm_config(job, arm, seeds, size):
  from el_jax import config as config_lib
  variant = job["variant"] if size == "paper" else "test"
  over = {**job["overrides"], **job["arms"][arm]}
  if size != "paper":
    over.update(job["test_overrides"])
  cfg = config_lib.get_config(job["config"], variant, over)
  cfg.seeds = tuple(int(s) for s in seeds)
  return cfg, over


# ----------------------------------------------------------------------------
# run (on the accelerator)


def run_arm(job, arm, seeds, size, out):
  """Trains `seeds` of `job`'s `arm` (one stacked program); writes and returns the file."""
  import jax
  from el_jax import job as job_lib
  from el_jax import provenance
  from el_jax import runner
  cfg, over = arm_config(job, arm, seeds, size)
  runner.fit_devices(cfg)
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
  t0 = time.time()
  with tempfile.TemporaryDirectory(prefix=f"{job['name']}_{arm}_") as tmp:
    summary = job_lib.train_and_evaluate(cfg, os.path.join(tmp, "run"))
  seconds = time.time() - t0
  doc = {"job": job["name"], "arm": arm, "size": size, "config": job["config"],
         "variant": job["variant"] if size == "paper" else "test", "overrides": over,
         "seeds": [int(s) for s in seeds], "per_seed": summary["per_seed"],
         "ran_on": provenance.ran_on(), "seconds": round(seconds, 1),
         "steps": int(cfg.train.num_steps), "finished": stamp,
         "num_params": summary.get("num_params"), "jax_devices": len(jax.devices())}
  path = os.path.join(out, f"{job['name']}.{arm}.{stamp}.json")
  wd.write_json(path, doc)
  print(f"device_queue: {job['name']} {arm} seeds {list(seeds)}: {seconds:.0f} s -> {path}",
        file=sys.stderr, flush=True)
  return path, seconds


ARM_OVERHEAD_S = {"paper": 60.0, "test": 30.0}  # compile, data, evaluations, start-up per arm
SAFETY = 1.2  # estimates are from short windows: leave 20% over them


def seed_step_s(job, verify, size="paper"):
  """Seconds per seed-step of `job` measured by `el_jax.verify` (its JSON), or None: the
  stacked seeds' rate where verify timed this model stacked, else one seed's step time
  (stacking is never slower per seed on an accelerator, so this over-estimates)."""
  th = ((verify or {}).get("parts", {}).get("throughput") or {})
  model = f"{job['config']}:{job['variant'] if size == 'paper' else 'test'}"
  for r in th.get("seeds", []):
    if r["model"] == model and r["mode"] == "vmap":
      return 1.0 / r["seed_steps_per_s"]
  for r in th.get("rows", []):
    if r["model"] == model and r["dtype"] == "float32" and not r["all_positions"]:
      return r["step_s"]
  return None


def seeds_that_fit(job, n_missing, arms_left, left_s, per_seed_step, steps, size):
  """How many seeds per arm fit `left_s` for the `arms_left` arms still to run (the same count
  for each, so the arms stay balanced), at most `n_missing`."""
  per_seed = steps * per_seed_step * SAFETY
  room = left_s - arms_left * ARM_OVERHEAD_S[size]
  return max(0, min(n_missing, int(room // (arms_left * per_seed))))


MAX_ARMS = 6  # the device tool returns 8 files: verify.json, the session log and 6 arm files


def run(budget_s, out, size="paper", jobs=None, results_dir=OUT, max_seeds=None, verify=None,
        max_arms=MAX_ARMS):
  """Runs arms of the first unfinished jobs while the budget lasts; returns the files.

  With `verify` (the JSON of `python -m el_jax.verify`), each arm gets as many of its missing
  seeds as the measured step time says fit the time left (`seeds_that_fit`); without one, an
  arm runs only if the arm before it took less than the time left (the first always runs).
  """
  t_end = time.time() + budget_s
  os.makedirs(out, exist_ok=True)
  written, last = [], None
  for job in JOBS:
    if jobs and job["name"] not in jobs:
      continue
    todo = missing_seeds(job, read_results(job, results_dir, size))
    per_step = seed_step_s(job, verify, size)
    for i, (arm, seeds) in enumerate(todo.items()):
      if not seeds:
        continue
      if len(written) >= max_arms:
        print(f"device_queue: {max_arms} arm files written, the most one call returns: "
              f"stopping", file=sys.stderr)
        return written
      seeds = seeds[:max_seeds] if max_seeds else seeds
      left = t_end - time.time()
      if per_step is not None:
        cfg, _ = arm_config(job, arm, seeds, size)
        arms_left = sum(1 for s in list(todo.values())[i:] if s)
        k = seeds_that_fit(job, len(seeds), arms_left, left, per_step, cfg.train.num_steps, size)
        if k < 1:
          print(f"device_queue: {left:.0f} s left; one seed of {job['name']} {arm} needs about "
                f"{cfg.train.num_steps * per_step * SAFETY + ARM_OVERHEAD_S[size]:.0f} s "
                f"(measured {per_step * 1e3:.2f} ms per seed-step): stopping", file=sys.stderr)
          return written
        seeds = seeds[:k]
      elif last is not None and last * 1.15 > left:
        print(f"device_queue: {left:.0f} s left, the last arm took {last:.0f} s: stopping "
              f"before {job['name']} {arm}", file=sys.stderr)
        return written
      path, last = run_arm(job, arm, seeds, size, out)
      written.append(path)
  return written


# ----------------------------------------------------------------------------
# collect (here): merge returned files into results/device_queue/<job>.json


def _p_floor(n_a, n_b):
  """The smallest two-sided p an exact permutation test of n_a vs n_b values can give."""
  return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def comparisons(job, doc):
  """Each arm against the baseline on the job's metric, once both have >= 3 seeds."""
  arms = doc.get("arms", {})
  base = arms.get(job["baseline"], {}).get("seeds", {})
  out = []
  for arm in job["arms"]:
    if arm == job["baseline"] or arm not in arms:
      continue
    a = [v[job["metric"]] for _, v in sorted(arms[arm]["seeds"].items(), key=lambda kv: int(kv[0]))]
    b = [v[job["metric"]] for _, v in sorted(base.items(), key=lambda kv: int(kv[0]))]
    if len(a) < 3 or len(b) < 3:
      continue
    c = stats.compare(a, b)
    c.update(a=arm, b=job["baseline"], metric=job["metric"], p_floor=_p_floor(len(a), len(b)))
    out.append(c)
  for c, p in zip(out, stats.holm([c["p_value"] for c in out])):
    c["p_holm"] = p
  return out


def merge(doc, run_doc, job):
  """`doc` with the seeds of one returned arm file added (a seed already there is kept:
  the first measurement of a seed stands, a rerun is reported, not silently replaced)."""
  if run_doc.get("job") != job["name"]:
    raise ValueError(f"{run_doc.get('job')!r} is not job {job['name']!r}")
  arm = run_doc["arm"]
  if arm not in job["arms"]:
    raise ValueError(f"job {job['name']}: unknown arm {arm!r}; arms: {list(job['arms'])}")
  a = doc.setdefault("arms", {}).setdefault(arm, {"overrides": run_doc["overrides"],
                                                   "seeds": {}})
  if a["overrides"] != run_doc["overrides"]:
    raise ValueError(f"job {job['name']} arm {arm}: the returned run has overrides "
                     f"{run_doc['overrides']}, the collected seeds {a['overrides']}; a changed "
                     f"arm is a new job")
  added = []
  for seed, final in zip(run_doc["seeds"], run_doc["per_seed"]):
    if str(seed) in a["seeds"]:
      print(f"collect: {job['name']} {arm} seed {seed} is already collected; the returned "
            f"one ({run_doc['finished']}) is not merged", file=sys.stderr)
      continue
    a["seeds"][str(seed)] = {
        **{k: v for k, v in final.items() if isinstance(v, (int, float))
           and not isinstance(v, bool)},
        "ran_on": run_doc["ran_on"], "finished": run_doc["finished"],
        "arm_seconds": run_doc["seconds"], "arm_seeds": len(run_doc["seeds"])}
    added.append(seed)
  return added


def collect(paths, results_dir=OUT, size="paper"):
  """Merges returned arm files into the job files; returns {job: [(arm, seeds added)]}."""
  by_job = {}
  for p in paths:
    run_doc = wd.read_json(p, what="a device-queue arm result")
    if run_doc.get("size", "paper") != size:
      raise ValueError(f"{p} is of size {run_doc.get('size')!r}, not {size!r}")
    by_job.setdefault(run_doc.get("job"), []).append(run_doc)
  report = {}
  for name, docs in by_job.items():
    job = job_by_name(name)
    doc = read_results(job, results_dir, size)
    doc.update(job=name, title=job["title"], config=job["config"],
               variant=job["variant"] if size == "paper" else "test", metric=job["metric"],
               baseline=job["baseline"], seeds_wanted=job["seeds"], paper=job["paper"],
               command="python experiments/device_queue.py run (docs/accelerator.md)")
    for d in sorted(docs, key=lambda d: d["finished"]):
      report.setdefault(name, []).append((d["arm"], merge(doc, d, job)))
    for arm, a in doc["arms"].items():
      vals = [v[job["metric"]] for v in a["seeds"].values()]
      a["n"] = len(vals)
      a["aggregate"] = stats.aggregate([{job["metric"]: v} for v in vals])[job["metric"]] \
          if vals else None
      a["devices"] = sorted({v["ran_on"].get("device_kind", "?") for v in a["seeds"].values()})
    doc["comparisons"] = comparisons(job, doc)
    os.makedirs(results_dir, exist_ok=True)
    wd.write_json(results_path(job, results_dir, size), doc)
  return report


def status(results_dir=OUT, size="paper"):
  lines = []
  for job in JOBS:
    doc = read_results(job, results_dir, size)
    todo = missing_seeds(job, doc)
    have = {arm: len(job["seeds"]) - len(s) for arm, s in todo.items()}
    lines.append(f"{job['name']:14s} " + ", ".join(f"{a} {n}/{len(job['seeds'])}"
                                                   for a, n in have.items()))
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = ap.add_subparsers(dest="cmd", required=True)
  r = sub.add_parser("run", help="train missing seeds while the budget lasts")
  r.add_argument("--budget_s", type=float, default=420)
  r.add_argument("--out", required=True, help="folder for the arm files (the device's $OUT)")
  r.add_argument("--size", default="paper", choices=("paper", "test"))
  r.add_argument("--jobs", default="", help=f"comma-separated subset of {JOB_NAMES}")
  r.add_argument("--max_seeds", type=int, default=0, help="seeds per arm at most (0 = all missing)")
  r.add_argument("--results_dir", default=OUT)
  r.add_argument("--verify", default="", help="JSON of python -m el_jax.verify: size the arms "
                 "by its measured step times")
  c = sub.add_parser("collect", help="merge returned arm files into results/device_queue/")
  c.add_argument("paths", nargs="+")
  c.add_argument("--size", default="paper", choices=("paper", "test"))
  c.add_argument("--results_dir", default=OUT)
  s = sub.add_parser("status", help="seeds collected per job and arm")
  s.add_argument("--size", default="paper", choices=("paper", "test"))
  s.add_argument("--results_dir", default=OUT)
  args = ap.parse_args(argv)
  if args.cmd == "run":
    jobs = [j for j in args.jobs.split(",") if j]
    for j in jobs:
      job_by_name(j)
    verify = wd.read_json(args.verify, what="el_jax.verify's results") if args.verify else None
    files = run(args.budget_s, args.out, args.size, jobs, args.results_dir, args.max_seeds or None,
                verify)
    print(f"device_queue: wrote {len(files)} arm file(s)")
    return 0
  if args.cmd == "collect":
    paths = [p for pat in args.paths for p in (sorted(glob.glob(pat)) or [pat])]
    rep = collect(paths, args.results_dir, args.size)
    for name, arms in rep.items():
      for arm, seeds in arms:
        print(f"collect: {name} {arm}: seeds {seeds} added")
    print(status(args.results_dir, args.size))
    return 0
  print(status(args.results_dir, args.size))
  return 0


if __name__ == "__main__":
  sys.exit(main())
