r"""The device queue: train the missing seeds of the paper-size jobs on a lent accelerator, and
merge the returned files here.

  python -m tools.device_queue session --out=$OUT --budget_s=540   # the lent GPU's one call
  python -m tools.device_queue run --budget_s=420 --out=$OUT       # the queue alone
  python -m tools.device_queue collect <returned *.json ...>        # here: merge the seeds
  python -m tools.device_queue status                              # what is still missing
  python -m tools.device_queue dtype --out=d.json                  # bf16 vs float32, this device
  python -m el_jax.experiment --config=tools/device_queue/config.py:cpu --stage=analyze

A lent accelerator is held for minutes (docs/accelerator.md): a job cannot be continued in
another session (a paper-size checkpoint does not come back), but independent seeds can. So
each job (`tools/device_queue/jobs.py`) is a set of arms (a loss setting each) and a list of
model seeds per arm. `run` takes the first stacked job with a seed missing (reading the
collected `<results_dir>/<job>.json`) and trains the missing seeds of all its arms as one
stacked program (`el_jax.run.job.train_arms`: one compile, every arm x seed a slot with its
own parameters, optimizer state, schedule and loss weight) in a temporary workdir, as many as
fit the time left: `tools/device_queue/sizing.py` predicts the call's parts from the measured
rates of this device kind (the committed verify sessions of results/verify/, the session's
own verify JSON, and the job's earlier calls on this kind) and stacks the most runs whose
prediction fits. The call runs under an `el_jax.infra.timeline` (seconds of setup, compiling,
training, evaluating, checkpointing and writing, and the achieved TFLOP/s of training) and
writes `<out>/<job>.<time>.json`: per arm the seeds' final evaluations, where they ran
(`el_jax.infra.provenance`), the timeline, and the sizing record (the prediction against the
timeline, per part). Then the next call, while time is left. `collect` merges such files into
`<results_dir>/<job>.json`: per arm, per seed, the metrics, the device of that seed and the
wall time and models of the program that trained it (the first measurement of a seed stands),
and per call its timeline and sizing record. The statistics (each arm's aggregate, its
comparison with the baseline once both have 3 seeds, Holm over the job's comparisons) are the
analysis's (`tools/device_queue/analysis.py`, `el_jax.report.stats.family`).

`session` is the whole call of a lent session: `python -m el_jax.tools.verify` (every part, or
with `--preflight` env and golden only, for a device kind that passed before) into
`<out>/verify.json`; if its golden step matches the CPU, the bf16 check of the bf16 jobs' tasks
on this device (`dtype`, tools/device_queue/dtype_check.py, into `<out>/dtype_check.json`: a
task that fails it has its bf16 jobs left out; not run again on a device kind whose check is
committed); then `run` with the time left. Commit verify.json as
`results/verify/verify_<device>_<date>.json` and dtype_check.json as
`results/device_queue/dtype_check_<device>.json`.

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
from tools.device_queue import sizing

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

VERIFY_DIR = os.path.join(ROOT, "results", "verify")


def verify_docs(extra=None):
  """The committed verify sessions ({file name: JSON}) and `extra` (a session's own verify
  JSON, which wins where both measured the same model: it is named last)."""
  docs = {}
  for path in sorted(glob.glob(os.path.join(VERIFY_DIR, "verify_*.json"))):
    docs[os.path.basename(path)] = wd.read_json(path, what="a committed verify session")
  if extra:
    docs["~session.json"] = extra
  return docs


def checkpoint_bytes(cfg):
  """Bytes of one run's saved state (params and two Adam moments, float32) where the job saves
  checkpoints, else 0."""
  if not cfg.train.checkpoint_every:
    return 0.0
  from el_jax.run import setup as setup_lib
  import jax
  st = setup_lib.Setup(cfg, validated=False)
  tr = setup_lib.Trainer(st)
  return float(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tr.abstract_state)))


def measured_slot_step_s(doc, kind):
  """Seconds per slot-step the job's earlier calls on `kind` trained at (train seconds /
  steps / slots of their timelines, the slowest), or None."""
  vals = []
  for c in doc.get("calls", []):
    if c.get("device_kind") != kind:
      continue
    for prog in c.get("timeline", {}).get("notes", {}).get("programs", []):
      if prog.get("steps") and c["timeline"]["parts_s"]["train"] > 0:
        vals.append(c["timeline"]["parts_s"]["train"] / prog["steps"] / prog["slots"])
  return max(vals) if vals else None


def plan_call(job, doc, size, left_s, rates, kind, max_seeds=None):
  """({arm: seeds}, prediction, why) of the job's next call in `left_s` seconds: sized by the
  kind's rates (`sizing.fit`) where there are any, else every missing seed (`max_seeds` per arm
  at most) with no prediction."""
  todo = {a: (v[:max_seeds] if max_seeds else v) for a, v in missing_seeds(job, doc).items()
          if v}
  if not todo:
    return {}, None, "complete"
  cfg, _ = arm_config(job, next(iter(todo)), next(iter(todo.values()))[:1], size)
  model = job["model"] if size == "paper" else f"{job['config']}:test"  # verify's row names
  rate = sizing.job_rate(rates, model, job["dtype"]) if rates else None
  if rate is None:
    return todo, None, f"no measured rate of {job['name']} on {kind}: every missing seed"
  per_slot = measured_slot_step_s(doc, kind)
  pick, pred = sizing.fit(rates, rate, cfg.train.num_steps, job["dtype"], left_s, todo,
                          checkpoint_bytes(cfg), per_slot, preflight=False)
  return pick, pred, (f"{pred['slots']} run(s) predicted in {pred['total_s']:.0f} s of "
                      f"{left_s:.0f} s left" if pick else
                      f"one run needs {pred['total_s']:.0f} s, {left_s:.0f} s left")


def run_job(job, pick, size, out, prediction=None, preflight_s=None):
  """Trains the seeds `pick` ({arm: seeds}) of `job` as one stacked program
  (`el_jax.run.job.train_arms`) under an `el_jax.infra.timeline`, and writes
  `<out>/<job>.<time>.json`: per arm its seeds' final evaluations, where it ran, the timeline
  with the achieved TFLOP/s of training, and the sizing record (`prediction` against the
  timeline). Returns (path, seconds)."""
  import jax
  from el_jax.infra import provenance
  from el_jax.infra import timeline
  from el_jax.run import job as job_lib
  from el_jax.run import runner
  tl = timeline.Timeline()
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
  plots = os.environ.get("EL_JAX_PLOTS")
  os.environ["EL_JAX_PLOTS"] = "0"  # a temporary workdir's figures: nothing comes back
  try:
    with tempfile.TemporaryDirectory(prefix=f"{job['name']}_") as tmp:
      with timeline.recording(tl):
        with timeline.part("setup"):
          built = {arm: arm_config(job, arm, seeds, size) for arm, seeds in pick.items()}
          for cfg, _ in built.values():
            runner.fit_devices(cfg)
        summaries = job_lib.train_arms([c for c, _ in built.values()],
                                       [os.path.join(tmp, arm) for arm in built])
        with timeline.part("write"):
          ran_on = provenance.ran_on()
  finally:
    if plots is None:
      os.environ.pop("EL_JAX_PLOTS", None)
    else:
      os.environ["EL_JAX_PLOTS"] = plots
  if summaries is None or any(x is None for x in summaries):
    raise RuntimeError(f"{job['name']}: the stacked runs stopped early")
  t = tl.as_dict()
  cfg0 = next(iter(built.values()))[0]
  slots = sum(len(v) for v in pick.values())
  steps = int(cfg0.train.num_steps)
  t.update(training_summary(t, slots, steps))
  doc = {"job": job["name"], "size": size, "config": job["config"],
         "variant": job["variant"] if size == "paper" else "test",
         "arms": {arm: {"overrides": over, "seeds": [int(x) for x in pick[arm]],
                        "per_seed": summ["per_seed"]}
                  for (arm, (_, over)), summ in zip(built.items(), summaries)},
         "ran_on": ran_on, "seconds": t["wall_s"], "slots": slots, "steps": steps,
         "finished": stamp, "num_params": summaries[0].get("num_params"),
         "jax_devices": len(jax.devices()), "timeline": t}
  if prediction is not None:
    doc["sizing"] = {"predicted": prediction,
                     "parts": sizing.compare(prediction["parts_s"],
                                             sizing.measured_parts(t, preflight_s))}
  path = os.path.join(out, f"{job['name']}.{stamp}.json")
  wd.write_json(path, doc)
  print(f"device_queue: {job['name']} {dict(pick)}: {t['wall_s']:.0f} s ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in t["parts_s"].items())
        + f"; training at {t['train_tflops']:.3g} TFLOP/s) -> {path}", file=sys.stderr,
        flush=True)
  return path, t["wall_s"]


def training_summary(t, slots, steps):
  """The achieved TFLOP/s of a timeline's training part: el_jax's FLOPs of one slot's step
  (`StackedTrainer.slot_flops`, noted by the stacked program) x slots x steps / the training
  seconds; and how far the parts sum from the wall time."""
  progs = t["notes"].get("programs", [])
  flops = sum(p["flops_per_slot_step"] * p["slots"] * p["steps"] for p in progs)
  train_s = t["parts_s"]["train"]
  return {"train_flops": flops, "train_tflops": flops / train_s / 1e12 if train_s > 0 else None,
          "parts_sum_s": round(sum(t["parts_s"].values()), 3)}


def measured_seed_s(doc, device_kind=None):
  """Wall seconds per model that the job's collected calls took (`arm_seconds / arm_seeds`:
  the wall of the program that trained it over the models it trained; compile, evaluation and
  checkpoints included), the largest over the seeds that ran on `device_kind` (every device
  when None); None when none did."""
  vals = [v["arm_seconds"] / v["arm_seeds"] for a in doc.get("arms", {}).values()
          for v in a.get("seeds", {}).values()
          if v.get("arm_seconds") and v.get("arm_seeds")
          and (device_kind is None or v.get("ran_on", {}).get("device_kind") == device_kind)]
  return max(vals) if vals else None


MAX_FILES = 6  # the device tool returns 8 files: verify.json, the session log and 6 job files


def run(budget_s, out, size="paper", jobs=None, results_dir=OUT, max_seeds=None, verify=None,
        max_files=MAX_FILES, preflight_s=None):
  """One call per unfinished stacked job, in priority order, while the budget lasts; returns
  the files.

  Each call trains the missing seeds of every arm of one job as one stacked program
  (`run_job`): as many as the device kind's measured rates say fit the time left
  (`plan_call`, `tools/device_queue/sizing.py`: verify's committed sessions of this kind and
  `verify`, the session's own), the prediction kept in the file beside the timeline; without
  rates for this kind, every missing seed (`max_seeds` per arm at most) if the job's collected
  seeds on this kind took no more than the time left per model (`measured_seed_s`), and at
  paper size nothing where neither says anything of this kind.
  """
  import jax
  kind = jax.devices()[0].device_kind
  rates = sizing.kind_rates(verify_docs(verify), kind)
  t_end = time.time() + budget_s
  os.makedirs(out, exist_ok=True)
  written = []
  for job in JOBS:
    if (jobs and job["name"] not in jobs) or job["kind"] != "arms":
      continue
    if len(written) >= max_files:
      print(f"device_queue: {max_files} job files written, the most one call returns: "
            f"stopping", file=sys.stderr)
      return written
    doc = read_results(job, results_dir, size)
    left = t_end - time.time()
    pick, pred, why = plan_call(job, doc, size, left, rates, kind, max_seeds)
    if why == "complete":
      continue
    if not pick:
      print(f"device_queue: {job['name']}: {why}: stopping", file=sys.stderr)
      return written
    per_model = measured_seed_s(doc, kind)
    n = sum(len(v) for v in pick.values())
    if pred is None and per_model is None and size == "paper":
      print(f"device_queue: {job['name']}: no measured rate of {kind} (verify's throughput "
            f"part, a session without --preflight, measures it) and no collected seed of it "
            f"there: not started blind; stopping", file=sys.stderr)
      return written
    if pred is None and per_model is not None and per_model * n > left:
      print(f"device_queue: {left:.0f} s left; {n} model(s) of {job['name']} need "
            f"{per_model * n:.0f} s as the job's collected seeds took on {kind}: stopping",
            file=sys.stderr)
      return written
    print(f"device_queue: {job['name']}: {why}", file=sys.stderr, flush=True)
    path, _ = run_job(job, pick, size, out, pred, preflight_s)
    written.append(path)
    preflight_s = None  # the session's preflight belongs to its first call
  return written


# ----------------------------------------------------------------------------
# collect (here): merge returned files into results/device_queue/<job>.json


def as_call(run_doc):
  """A returned file in the shape `run_job` writes: {"arms": {arm: {"overrides", "seeds",
  "per_seed"}}, "slots", ...} (a file of one arm, written before the stacked jobs, has "arm")."""
  if "arms" in run_doc:
    return run_doc
  d = {k: v for k, v in run_doc.items() if k not in ("arm", "overrides", "seeds", "per_seed")}
  d["arms"] = {run_doc["arm"]: {k: run_doc[k] for k in ("overrides", "seeds", "per_seed")}}
  d["slots"] = len(run_doc["seeds"])
  return d


def merge(doc, run_doc, job):
  """`doc` with the seeds of one returned file added; returns [(arm, seeds added)]. A seed
  already there is kept: the first measurement of a seed stands, a rerun is reported, not
  silently replaced. Each seed records the wall time and the models of the program that trained
  it (`arm_seconds`, `arm_seeds`); a call's timeline and sizing record go to `calls`."""
  if run_doc.get("job") != job["name"]:
    raise ValueError(f"{run_doc.get('job')!r} is not job {job['name']!r}")
  call = as_call(run_doc)
  out = []
  for arm, r in call["arms"].items():
    if arm not in job["arms"]:
      raise ValueError(f"job {job['name']}: unknown arm {arm!r}; arms: {list(job['arms'])}")
    a = doc.setdefault("arms", {}).setdefault(arm, {"overrides": r["overrides"], "seeds": {}})
    if a["overrides"] != r["overrides"]:
      raise ValueError(f"job {job['name']} arm {arm}: the returned run has overrides "
                       f"{r['overrides']}, the collected seeds {a['overrides']}; a changed "
                       f"arm is a new job")
    added = []
    for seed, final in zip(r["seeds"], r["per_seed"]):
      if str(seed) in a["seeds"]:
        print(f"collect: {job['name']} {arm} seed {seed} is already collected; the "
              f"returned one ({call['finished']}) is not merged", file=sys.stderr)
        continue
      a["seeds"][str(seed)] = {
          **{k: v for k, v in final.items() if isinstance(v, (int, float))
             and not isinstance(v, bool)},
          "ran_on": call["ran_on"], "finished": call["finished"],
          "arm_seconds": call["seconds"], "arm_seeds": call["slots"]}
      added.append(seed)
    out.append((arm, added))
  if "timeline" in call and not any(c["finished"] == call["finished"]
                                    for c in doc.get("calls", [])):
    doc.setdefault("calls", []).append({
        "finished": call["finished"], "device_kind": call["ran_on"].get("device_kind"),
        "slots": call["slots"], "steps": call["steps"],
        "arms": {arm: r["seeds"] for arm, r in call["arms"].items()},
        "timeline": call["timeline"], "sizing": call.get("sizing")})
  return out


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
      report.setdefault(name, []).extend(merge(doc, d, job))
    os.makedirs(results_dir, exist_ok=True)
    wd.write_json(results_path(job, results_dir, size), doc)
  return report


def status(results_dir=OUT, size="paper"):
  lines = []
  for job in JOBS:
    doc = read_results(job, results_dir, size)
    todo = missing_seeds(job, doc)
    have = {arm: len(job["seeds"]) - len(s) for arm, s in todo.items()}
    if job["kind"] != "arms":
      lines.append(f"{job['name']:14s} an experiment's recipe ({job['experiment']}): sized, "
                   f"not run by the queue")
      continue
    lines.append(f"{job['name']:14s} " + ", ".join(f"{a} {n}/{len(job['seeds'])}"
                                                   for a, n in have.items()))
  return "\n".join(lines)


VERIFY_SHARE = 0.55  # at most this share of a session's budget for verify (it needs ~5 min)
DTYPE_CHECK_S = 120  # the on-device bf16 check's time limit (a few `test`-size runs)


def dtype_tasks(jobs=None):
  """The tasks of the stacked jobs (of `jobs`, default all) that train in bf16."""
  return sorted({j["config"] for j in JOBS if j["kind"] == "arms" and j["dtype"] == "bfloat16"
                 and (not jobs or j["name"] in jobs)})


def committed_dtype_checks(results_dir, kind):
  """{task: ok} of the committed bf16 checks (`<results_dir>/dtype_check_*.json`) that ran on
  device kind `kind`."""
  out = {}
  for path in sorted(glob.glob(os.path.join(results_dir, "dtype_check_*.json"))):
    for task, r in wd.read_json(path, what="a committed bf16 check").items():
      if r.get("ran_on", {}).get("device_kind") == kind:
        out[task] = bool(r.get("ok"))
  return out


def dtype_step(out, tasks, timeout_s=DTYPE_CHECK_S, kind=None, results_dir=OUT):
  """The session's bf16 step: `python -m tools.device_queue dtype` for `tasks` in a process of
  its own (at most `timeout_s`), into `<out>/dtype_check.json`; returns {task: ok}. Tasks whose
  check on this device kind is committed (`committed_dtype_checks`) are not checked again."""
  import subprocess
  done = committed_dtype_checks(results_dir, kind) if kind else {}
  if all(t in done for t in tasks):
    print(f"device_queue: the bf16 check of {tasks} on {kind} is committed: not run again",
          flush=True)
    return {t: done[t] for t in tasks}
  path = os.path.join(out, "dtype_check.json")
  try:
    subprocess.run([sys.executable, "-m", "tools.device_queue", "dtype", f"--out={path}",
                    f"--tasks={','.join(tasks)}"], cwd=ROOT, check=False, timeout=timeout_s)
  except subprocess.TimeoutExpired:
    print(f"device_queue: the bf16 check ran past {timeout_s} s", flush=True)
  ran = wd.read_json(path, what="the bf16 check") if os.path.exists(path) else {}
  return {t: bool(ran.get(t, {}).get("ok")) for t in tasks}


def session(out, budget_s, preflight=False, size="paper", jobs=None, results_dir=OUT):
  """verify, the bf16 check, then `run` with the time left; returns the exit status (1:
  verify's golden step does not match the CPU, and nothing is trained, the numbers would not
  be el_jax's). The bf16 jobs train only where the on-device check of their task passed
  (`dtype_check`; the others are left for a later session)."""
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
  names = [j["name"] for j in JOBS if j["kind"] == "arms" and (not jobs or j["name"] in jobs)]
  tasks = dtype_tasks(names)
  if tasks:
    ok = dtype_step(out, tasks, kind=sizing.device_kind(verify), results_dir=results_dir)
    failed = [t for t, good in ok.items() if not good]
    if failed:
      print(f"device_queue: bf16 did not stay within the stated distance of float32 on this "
            f"device for {failed} (dtype_check.json): their bf16 jobs are not trained",
            flush=True)
      names = [n for n in names if not (job_by_name(n)["dtype"] == "bfloat16"
                                        and job_by_name(n)["config"] in failed)]
  spent = time.time() - t0
  left = budget_s - spent - 15
  print(f"device_queue: verify and the bf16 check took {spent:.0f} s; the queue gets "
        f"{left:.0f} s", flush=True)
  files = run(left, out, size, names, results_dir, verify=verify, preflight_s=spent) if names \
      else []
  print(f"device_queue: session done in {time.time() - t0:.0f} s, {len(files)} job file(s)",
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
  r.add_argument("--out", required=True, help="folder for the job files (the device's $OUT)")
  r.add_argument("--jobs", default="", help=f"comma-separated subset of {JOB_NAMES}")
  r.add_argument("--max_seeds", type=int, default=0, help="seeds per arm at most (0 = all missing)")
  r.add_argument("--verify", default="", help="JSON of python -m el_jax.tools.verify: its "
                 "measured rates size the calls (with the committed sessions of this kind)")
  common(r)
  c = sub.add_parser("collect", help="merge returned job files into the results folder")
  c.add_argument("paths", nargs="+")
  common(c)
  s = sub.add_parser("status", help="seeds collected per job and arm")
  common(s)
  d = sub.add_parser("dtype", help="bf16 against float32 at test size on this device")
  d.add_argument("--out", required=True, help="the JSON written")
  d.add_argument("--tasks", default="", help="comma-separated tasks (default: those of the "
                 "bf16 jobs)")
  common(d)
  args = ap.parse_args(argv)
  if args.cmd == "dtype":
    from tools.device_queue import dtype_check
    res = {}
    for task in [t for t in args.tasks.split(",") if t] or dtype_tasks():
      res[task] = dtype_check.check(task)
      wd.write_json(args.out, res)  # after each task: a later timeout keeps what is done
      print(f"dtype_check {task}: ok={res[task]['ok']} (worst train {res[task]['worst_train_ratio']:.2g}"
            f", eval {res[task]['worst_eval_ratio']:.2g} of the bound)", flush=True)
    return 0 if all(r["ok"] for r in res.values()) else 1
  cfg = _config(args)
  if args.cmd == "session":
    return session(args.out, args.budget_s, args.preflight, cfg.size, _jobs(args.jobs),
                   cfg.results_dir)
  if args.cmd == "run":
    verify = wd.read_json(args.verify, what="el_jax.tools.verify's results") if args.verify else None
    files = run(args.budget_s, args.out, cfg.size, _jobs(args.jobs), cfg.results_dir,
                args.max_seeds or None, verify)
    print(f"device_queue: wrote {len(files)} job file(s)")
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
