r"""Two real steps of each paper variant (`run(config)`), each in a worker process of its own.

What differs from a launch: the batch is `config.rows` rows (the paper's is larger), the mesh is
one CPU device (params and Adam state of the 202M-parameter PCFG model replicated on 8 forced
CPU devices would take ~25 GB), and nothing is evaluated or checkpointed (the loop of
`el_jax.run.train.train_seed` is not used: only the step). By default each worker gets an empty
`EL_JAX_CACHE` (`config.fresh_cache`): its data are built from scratch, as on a machine that
never ran the task (the data modules' "built ..." messages are kept as `data_log`).

Writes `two_steps.json` (per variant: overrides, seconds to build the data / the trainer / each
step, the step-1 and step-2 losses and norms; variants run before and not run now are kept) and
`two_steps.md` under `config.results_dir`.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from el_jax.run import setup as setup_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMAND = "python -m el_jax.experiment --config=tools/paper_two_steps/config.py:cpu"


def overrides(name, variant, rows):
  """Config overrides of the two-step run of `name:variant`: `rows` rows per step, one
  device, no progress bar."""
  from el_jax.run import config as config_lib
  from el_jax.core import tasks
  cfg = config_lib.get_config(name, variant)
  task_cls = tasks.get_task_class(cfg.task)
  out = {"num_devices": 1, "progress": False, "train.num_steps": 2}
  if "batch_strings" in cfg.train:  # the copy task: strings, packed k per context
    k = task_cls.rows_per_step(cfg)
    k = cfg.train.batch_strings // k  # strings per context
    out["train.batch_strings"] = rows * k
  else:
    out["train.batch_size"] = rows
  return out


def worker(label, rows, out_path):
  """Trains 2 steps of `label` ("name:variant") and writes its record to `out_path`."""
  import jax
  import numpy as np
  from el_jax.run import config as config_lib
  from el_jax.infra import metrics as metrics_lib
  name, variant = label.split(":")
  ov = overrides(name, variant, rows)
  cfg = config_lib.get_config(name, variant, ov)
  from el_jax.infra import provenance
  rec = {"config": f"configs/{name}.py:{variant}", "overrides": ov, "status": "running",
         "jax": jax.__version__, "devices": f"{jax.device_count()} {jax.devices()[0].platform}",
         "ran_on": provenance.ran_on()}
  t0 = time.perf_counter()
  setup = setup_lib.Setup(cfg)  # the task: its data, built or read from the cache
  rec["data_s"] = round(time.perf_counter() - t0, 2)
  task = setup.task
  rec.update({"vocab_size": task.vocab_size, "context_len": task.context_len,
              "num_train": task.num_train, "rows_per_step": type(task).rows_per_step(cfg)})
  t0 = time.perf_counter()
  trainer = setup_lib.Trainer(setup)
  state = trainer.init(0)
  jax.block_until_ready(state)
  rec["trainer_s"] = round(time.perf_counter() - t0, 2)
  rec["params"] = int(sum(np.size(x) for x in jax.tree.leaves(state["params"])))
  data_it = task.data_iterator(0)
  steps = []
  for step in range(2):
    t0 = time.perf_counter()
    batch = next(data_it) if data_it is not None else setup.batch(0, step)
    assert batch["inputs"].shape == (rec["rows_per_step"], task.context_len), batch["inputs"].shape
    state, metrics = trainer.step(state, trainer.put_batch(batch))
    m = metrics_lib.to_float(metrics)
    steps.append({"step": step + 1, "seconds": round(time.perf_counter() - t0, 2),
                  **{k: m[k] for k in ("loss", "ce", "grad_norm", "update_norm", "param_norm")}})
  rec["steps"] = steps
  rec["step1_includes_compile"] = True
  finite = all(np.isfinite([s["loss"], s["grad_norm"], s["param_norm"]]).all() for s in steps)
  rec["status"] = "ran" if finite else "ran: non-finite loss or norms"
  with open(out_path, "w") as f:
    json.dump(rec, f, indent=1)


def run_one(label, rows, timeout, fresh_cache=True):
  """The record of `label` from a worker process (or why it did not run)."""
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "rec.json")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if fresh_cache:
      env["EL_JAX_CACHE"] = os.path.join(d, "cache")
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", f"from tools.paper_two_steps.run import worker; "
           f"worker({label!r}, {int(rows)}, {path!r})"]
    try:
      proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            env=env)
    except subprocess.TimeoutExpired:
      return {"config": label,
              "status": f"not run: did not finish within config.timeout_s={timeout} s"}
    wall = round(time.perf_counter() - t0, 1)
    if proc.returncode != 0 or not os.path.exists(path):
      lines = [x for x in proc.stderr.splitlines() if x.strip()]
      return {"config": label, "status": f"failed (exit {proc.returncode}): "
                                         f"{lines[-1] if lines else '?'}", "wall_s": wall}
    with open(path) as f:
      rec = json.load(f)
    rec["wall_s"] = wall
    rec["data_cache"] = "fresh (data built in this run)" if fresh_cache else "shared"
    rec["data_log"] = [x.strip() for x in proc.stderr.splitlines() if " built" in x]
    return rec


def table(records):
  lines = ["| config | status | params | rows x tokens | data s | trainer s | step 1 s (compile) "
           "| step 2 s | loss step 1 -> 2 | grad norm step 1 |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for label, r in records.items():
    if "steps" not in r:
      lines.append(f"| `{label}` | {r['status']} | | | | | | | | |")
      continue
    s1, s2 = r["steps"]
    lines.append(f"| `{label}` | {r['status']} | {r['params'] / 1e6:.2f}M | {r['rows_per_step']} x "
                 f"{r['context_len']:,} | {r['data_s']:.1f} | {r['trainer_s']:.1f} | "
                 f"{s1['seconds']:.1f} | {s2['seconds']:.1f} | {s1['loss']:.4f} -> "
                 f"{s2['loss']:.4f} | {s1['grad_norm']:.3g} |")
  return "\n".join(lines) + "\n"


def labels(config):
  """The "name:variant" of every config run: `config.only`, or every paper variant."""
  from el_jax.tools import plan as plan_lib
  every = [f"{n}:{v}" for n, v in plan_lib.paper_variants()]
  if not config.only:
    return every
  from el_jax.run import config as config_lib
  out = [x for x in config.only.split(",") if x]
  for x in out:
    name, _, variant = x.partition(":")
    try:
      config_lib.get_config(name, variant)
    except ValueError as e:
      raise ValueError(f"config.only: {x!r} is not a config variant ({e}); the paper variants: "
                       f"{', '.join(every)}") from None
  return out


def run(config):
  """Runs two steps of every config of `labels(config)`; writes two_steps.json and
  two_steps.md; returns two_steps.json's content."""
  if config.rows < 1:
    raise ValueError(f"config.rows={config.rows} must be >= 1")
  os.makedirs(config.results_dir, exist_ok=True)
  path = os.path.join(config.results_dir, "two_steps.json")
  records = {}
  if os.path.exists(path):  # variants run earlier (e.g. with `only`) are kept
    with open(path) as f:
      records = json.load(f).get("runs", {})
  doc = {}
  for label in labels(config):
    print(f"{label}: ...", file=sys.stderr, flush=True)
    records[label] = run_one(label, config.rows, config.timeout_s, config.fresh_cache)
    r = records[label]
    print(f"{label}: {r['status']}"
          + (f", steps {[s['seconds'] for s in r['steps']]} s, losses "
             f"{[round(s['loss'], 4) for s in r['steps']]}" if "steps" in r else ""),
          file=sys.stderr, flush=True)
    doc = {"rows": config.rows, "machine": f"{os.cpu_count()} CPU cores", "runs": records}
    with open(path, "w") as f:
      json.dump(doc, f, indent=1)
  with open(os.path.join(config.results_dir, "two_steps.md"), "w") as f:
    f.write("# Two real training steps of each paper variant on the CPU\n\n"
            f"`{COMMAND}` (tools/paper_two_steps/run.py explains what differs from a launch: a "
            "smaller batch, one CPU device, no evaluation). Seconds are wall time on the "
            "shared 2-core CPU (other jobs running); `data s` builds the variant's full data "
            "from scratch (an empty cache); step 1 includes the step's compilation.\n\n")
    f.write(table(records))
  print(f"wrote {path} and two_steps.md", file=sys.stderr)
  return doc
