r"""The device queue: train the missing seeds of the paper-size jobs on a lent accelerator, and
merge the returned files here.

  python -m tools.device_queue session --out=$OUT --budget_s=540   # the lent GPU's one call
  python -m tools.device_queue run --budget_s=420 --out=$OUT       # the queue alone
  python -m tools.device_queue collect <returned *.json ...>        # here: merge the seeds
  python -m tools.device_queue status                              # what is still missing
  python -m el_jax.experiment --config=tools/device_queue/config.py:cpu --stage=analyze

A lent accelerator is held for minutes (docs/accelerator.md): a job cannot be continued in
another session (a paper-size checkpoint does not come back), but independent seeds can. So
each job (`tools/device_queue/jobs.py`) is a set of arms (a loss setting each) and a list of
model seeds per arm; `run` takes the first job with a seed missing (reading the collected
`<results_dir>/<job>.json`), trains the missing seeds of one arm as one stacked program
(`train.vmap_seeds`) in a temporary workdir, and writes the per-seed final evaluations, with
where they ran (`el_jax.infra.provenance`) and how long it took, to
`<out>/<job>.<arm>.<time>.json`; then the next arm. With verify's JSON (`--verify`) each arm
gets as many of its missing seeds as verify's measured step times say fit the time left
(`--budget_s`), the same count for every arm of the job. `collect` merges such files into
`<results_dir>/<job>.json`: per arm, per seed, the metrics and the device of that seed (the
first measurement of a seed stands). The statistics (each arm's aggregate, its comparison with
the baseline once both have 3 seeds, Holm over the job's comparisons) are the analysis's
(`tools/device_queue/analysis.py`, `el_jax.report.stats.family`). `session` is the whole call of
a lent session: `python -m el_jax.tools.verify` (every part, or with `--preflight` env and golden
only, for a device kind that passed before) into `<out>/verify.json`, then, if its golden step
matches the CPU, `run` with the time left; commit verify.json as
`results/verify/verify_<device>_<date>.json`.

`--variant` picks the config (tools/device_queue/config.py): `paper` (the default; `cpu` is
the same) runs the jobs as listed and collects into results/device_queue/; `test` runs the same
jobs on the `test` configs (seconds on a CPU) and collects into runs/device_queue_test/. This
command line is the tool's own: a session's steps run on different machines.
"""
import argparse
import datetime
import glob
import os
import sys
import tempfile
import time

from el_jax.infra import workdir as wd

from tools.device_queue import config as config_file
from tools.device_queue import jobs as jobs_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "results", "device_queue")
JOBS = jobs_lib.JOBS
JOB_NAMES = jobs_lib.JOB_NAMES
job_by_name = jobs_lib.job_by_name
COMMAND = "python -m tools.device_queue"


def results_path(job, out_dir=OUT, size="paper"):
  return os.path.join(out_dir, jobs_lib.results_name(job, size))


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
  from el_jax.run import config as config_lib
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
  from el_jax.run import job as job_lib
  from el_jax.infra import provenance
  from el_jax.run import runner
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
  """Seconds per seed-step of `job` measured by `el_jax.tools.verify` (its JSON), or None: the
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


def measured_seed_s(doc, device_kind=None):
  """Wall seconds per seed that the job's collected arms took (`arm_seconds / arm_seeds`:
  compile, evaluation and checkpoints included), the largest over the arms that ran on
  `device_kind` (every device when None); None when none did. On the H200 a copy-task arm
  of 3 stacked seeds took 90 s per seed, where verify's stacked step time promised 35 s of
  training: the arm's own record is the better guide to what fits."""
  vals = [v["arm_seconds"] / v["arm_seeds"] for a in doc.get("arms", {}).values()
          for v in a.get("seeds", {}).values()
          if v.get("arm_seconds") and v.get("arm_seeds")
          and (device_kind is None or v.get("ran_on", {}).get("device_kind") == device_kind)]
  return max(vals) if vals else None


MAX_ARMS = 6  # the device tool returns 8 files: verify.json, the session log and 6 arm files


def run(budget_s, out, size="paper", jobs=None, results_dir=OUT, max_seeds=None, verify=None,
        max_arms=MAX_ARMS):
  """Runs arms of the first unfinished jobs while the budget lasts; returns the files.

  With `verify` (the JSON of `python -m el_jax.tools.verify`), each arm gets as many of its missing
  seeds as the measured step time says fit the time left (`seeds_that_fit`), and where the
  job's collected arms ran on this device kind, no more than their wall time per seed allows
  (`measured_seed_s`; the smaller count wins, the same for each arm left); with neither, an
  arm runs only if the arm before it took less than the time left (the first always runs).
  """
  import jax
  device_kind = jax.devices()[0].device_kind
  t_end = time.time() + budget_s
  os.makedirs(out, exist_ok=True)
  written, last = [], None
  for job in JOBS:
    if jobs and job["name"] not in jobs:
      continue
    doc = read_results(job, results_dir, size)
    todo = missing_seeds(job, doc)
    per_step = seed_step_s(job, verify, size)
    per_seed = measured_seed_s(doc, device_kind)
    for i, (arm, seeds) in enumerate(todo.items()):
      if not seeds:
        continue
      if len(written) >= max_arms:
        print(f"device_queue: {max_arms} arm files written, the most one call returns: "
              f"stopping", file=sys.stderr)
        return written
      seeds = seeds[:max_seeds] if max_seeds else seeds
      left = t_end - time.time()
      if per_step is not None or per_seed is not None:
        cfg, _ = arm_config(job, arm, seeds, size)
        arms_left = sum(1 for s in list(todo.values())[i:] if s)
        k, why = len(seeds), []
        if per_step is not None:
          k = min(k, seeds_that_fit(job, len(seeds), arms_left, left, per_step,
                                    cfg.train.num_steps, size))
          why.append(f"about {cfg.train.num_steps * per_step * SAFETY + ARM_OVERHEAD_S[size]:.0f}"
                     f" s at verify's {per_step * 1e3:.2f} ms per seed-step")
        if per_seed is not None:
          k = min(k, int(left // (arms_left * per_seed)))
          why.append(f"{per_seed:.0f} s as the job's collected arms took on {device_kind}")
        if k < 1:
          print(f"device_queue: {left:.0f} s left for {arms_left} arm(s); one seed of "
                f"{job['name']} {arm} needs {' or '.join(why)}: stopping", file=sys.stderr)
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
               command=f"{COMMAND} run (docs/accelerator.md)")
    # the statistics are the analysis's (tools/device_queue/analysis.py): none kept here
    doc.pop("comparisons", None)
    for a in doc.get("arms", {}).values():
      for k in ("n", "aggregate", "devices"):
        a.pop(k, None)
    for d in sorted(docs, key=lambda d: d["finished"]):
      report.setdefault(name, []).append((d["arm"], merge(doc, d, job)))
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


VERIFY_SHARE = 0.55  # at most this share of a session's budget for verify (it needs ~5 min)


def session(out, budget_s, preflight=False, size="paper", jobs=None, results_dir=OUT):
  """verify, then `run` with the time left; returns the exit status (1: verify's golden step
  does not match the CPU, and nothing is trained, the numbers would not be el_jax's)."""
  import subprocess
  t0 = time.time()
  os.makedirs(out, exist_ok=True)
  vpath = os.path.join(out, "verify.json")
  parts = "env,golden" if preflight else "env,golden,seeds,main,throughput,torch"
  subprocess.run([sys.executable, "-m", "el_jax.tools.verify", f"--out={vpath}",
                  f"--size={'full' if size == 'paper' else 'test'}", f"--parts={parts}",
                  f"--budget_s={budget_s * VERIFY_SHARE:.0f}"], cwd=ROOT, check=False)
  verify = wd.read_json(vpath, what="el_jax.tools.verify's results")
  golden = verify["parts"].get("golden", {})
  if not golden.get("ok"):
    print(f"device_queue: the golden step does not match the CPU "
          f"({golden.get('error') or golden.get('skipped') or golden.get('rel_err')}); nothing "
          f"is trained", flush=True)
    return 1
  left = budget_s - (time.time() - t0) - 15
  print(f"device_queue: verify took {time.time() - t0:.0f} s; the queue gets {left:.0f} s",
        flush=True)
  files = run(left, out, size, jobs, results_dir, verify=verify)
  print(f"device_queue: session done in {time.time() - t0:.0f} s, {len(files)} arm file(s)",
        flush=True)
  return 0


def _config(args):
  """The config of `--variant`, with `--results_dir` over its results folder."""
  cfg = config_file.get_config(args.variant)
  if args.results_dir:
    cfg.results_dir = args.results_dir
  return cfg


def _jobs(text):
  jobs = [j for j in text.split(",") if j]
  for j in jobs:
    job_by_name(j)
  return jobs


def main(argv=None):
  ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
  sub = ap.add_subparsers(dest="cmd", required=True)

  def common(p):
    p.add_argument("--variant", default="paper", choices=config_file.VARIANTS,
                   help="tools/device_queue/config.py: the size of the jobs and the results "
                        "folder")
    p.add_argument("--results_dir", default="",
                   help="the collected results (default: the variant's results_dir)")
  e = sub.add_parser("session", help="verify, then run the queue with the time left")
  e.add_argument("--out", required=True)
  e.add_argument("--budget_s", type=float, default=540, help="seconds for the whole session")
  e.add_argument("--preflight", action="store_true", help="verify env and golden only")
  e.add_argument("--jobs", default="")
  common(e)
  r = sub.add_parser("run", help="train missing seeds while the budget lasts")
  r.add_argument("--budget_s", type=float, default=420)
  r.add_argument("--out", required=True, help="folder for the arm files (the device's $OUT)")
  r.add_argument("--jobs", default="", help=f"comma-separated subset of {JOB_NAMES}")
  r.add_argument("--max_seeds", type=int, default=0, help="seeds per arm at most (0 = all missing)")
  r.add_argument("--verify", default="", help="JSON of python -m el_jax.tools.verify: size the arms "
                 "by its measured step times")
  common(r)
  c = sub.add_parser("collect", help="merge returned arm files into the results folder")
  c.add_argument("paths", nargs="+")
  common(c)
  s = sub.add_parser("status", help="seeds collected per job and arm")
  common(s)
  args = ap.parse_args(argv)
  cfg = _config(args)
  if args.cmd == "session":
    return session(args.out, args.budget_s, args.preflight, cfg.size, _jobs(args.jobs),
                   cfg.results_dir)
  if args.cmd == "run":
    verify = wd.read_json(args.verify, what="el_jax.tools.verify's results") if args.verify else None
    files = run(args.budget_s, args.out, cfg.size, _jobs(args.jobs), cfg.results_dir,
                args.max_seeds or None, verify)
    print(f"device_queue: wrote {len(files)} arm file(s)")
    return 0
  if args.cmd == "collect":
    paths = [p for pat in args.paths for p in (sorted(glob.glob(pat)) or [pat])]
    rep = collect(paths, cfg.results_dir, cfg.size)
    for name, arms in rep.items():
      for arm, seeds in arms:
        print(f"collect: {name} {arm}: seeds {seeds} added")
    print(status(cfg.results_dir, cfg.size))
    return 0
  print(status(cfg.results_dir, cfg.size))
  return 0
