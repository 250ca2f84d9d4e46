"""`run(config)`: the parent of the benchmark. Starts one worker process per side
(tools/bench_vs_torch/worker.py: each el_jax setting, each PyTorch attention implementation and
thread count), lets each compile and warm up once, then alternates timed windows of
`config.steps` steps over the sides (`config.rounds` rounds, the order reversed every other
round, so that load from other processes hits every side alike), and writes the medians, the
per-round ratios of tokens/s and the issue's targets to `<results_dir>/<config.out>`.

torch is not a dependency of el_jax: the PyTorch side runs in its own virtual environment,
`.venv-torch` in the repository root, created on first use with `pip install torch==2.13.0
transformers` (the CPU wheel; a CUDA build is refused). `config.impls=""` times the el_jax sides
only, without it. The PyTorch side is the same whichever line of JAX el_jax's side runs
(requirements.txt or requirements-py312.txt): `.venv-torch` is made once, with
$EL_JAX_TORCH_PYTHON, else a Python 3.11 on PATH (torch 2.13.0's CPU wheel on the development
machines is for 3.11), else the Python running this.

The PyTorch step: logits = GPTNeoXForCausalLM(inputs), CE over all positions, backward,
clip_grad_norm_(1.0), AdamW.step, zero_grad. The el_jax step is `el_jax.run.train.Trainer.step`
as trained (masked loss, plus its logging metrics: per-group losses and CE, margin statistics,
grad/update/param norms); its `_all_positions` sides compute the logits and loss at every
position, the same work as PyTorch.
"""
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys

from tools.bench_vs_torch import worker as worker_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
TORCH_VENV = os.path.join(ROOT, ".venv-torch")
TORCH_PY = os.path.join(TORCH_VENV, "bin", "python")
TORCH_REQ = ["torch==2.13.0", "transformers"]
COMMAND = "python -m el_jax.experiment --config=tools/bench_vs_torch/config.py:cpu"
TARGETS = (("scored positions vs best torch", 1.3, False),
           ("all positions (equal work) vs best torch", 1.0, True))


def ensure_torch_venv():
  if os.path.exists(TORCH_PY):
    ok = subprocess.run([TORCH_PY, "-c", "import torch, transformers"],
                        capture_output=True).returncode == 0
    if ok:
      return
  print(f"creating {TORCH_VENV} with {' '.join(TORCH_REQ)} ...", file=sys.stderr)
  py311 = shutil.which("python3.11")
  if py311 and subprocess.run([py311, "-c", ""], capture_output=True).returncode != 0:
    py311 = None  # (a pyenv shim of a version it has not selected)
  base = (os.environ.get("EL_JAX_TORCH_PYTHON") or py311
          or getattr(sys, "_base_executable", sys.executable))
  subprocess.run([base, "-m", "venv", TORCH_VENV], check=True)
  subprocess.run([TORCH_PY, "-m", "pip", "install", "--quiet", *TORCH_REQ], check=True)
  out = subprocess.run([TORCH_PY, "-c", "import torch; print(torch.version.cuda)"],
                       capture_output=True, text=True, check=True).stdout.strip()
  if out != "None":
    raise RuntimeError(f"pip installed a CUDA build of torch (cuda {out}) in {TORCH_VENV}; "
                       f"install the CPU wheel there by hand (pip install torch==2.13.0+cpu)")


class Worker:
  """A worker process: `info` (what it reported after setting up), `run(steps)` (seconds per
  step of a timed window)."""

  def __init__(self, python, spec, env=None):
    self.proc = subprocess.Popen([python, WORKER, json.dumps(spec)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    self.info = self._read()

  def _read(self):
    for line in self.proc.stdout:
      if line.startswith(worker_lib.TAG):
        return json.loads(line[len(worker_lib.TAG):])
    raise RuntimeError(f"worker {self.proc.args[:2]} exited with {self.proc.wait()}")

  def run(self, steps):
    self.proc.stdin.write(f"run {steps}\n")
    self.proc.stdin.flush()
    return self._read()["sec"]

  def close(self):
    try:
      self.proc.stdin.write("quit\n")
      self.proc.stdin.close()
    except BrokenPipeError:
      pass
    self.proc.wait()


def _env(malloc):
  """The environment of an el_jax worker: el_jax.infra.hostmem's malloc settings ("tuned",
  el_jax's default) or glibc's own ("glibc", as before el_jax set them)."""
  env = dict(os.environ)
  env.pop("EL_JAX_MALLOC", None)
  if malloc == "glibc":
    env["EL_JAX_MALLOC"] = "glibc"
  return env


def _ints(config, key):
  try:
    vals = [int(n) for n in str(config[key]).split(",") if n]
  except ValueError:
    vals = []
  if not vals or min(vals) < 1:
    raise ValueError(f"config.{key}={config[key]!r}: give integers >= 1, comma-separated")
  return vals


def settings(config):
  """The checked sides of `config`: (model config flags, el_jax cpu_dots values, extra
  cpu_dots sets, attention blocks, mallocs, CPU device counts, torch implementations, torch
  thread counts)."""
  from el_jax.core import step as step_lib
  config_args = config.model_config.split()
  dots = [d for d in config.cpu_dots.split(",") if d]
  try:
    extra = json.loads(config.extra_cpu_dots)
  except ValueError:
    extra = None
  if not isinstance(extra, dict) or not all(isinstance(v, dict) for v in extra.values()):
    raise ValueError(f"config.extra_cpu_dots={config.extra_cpu_dots!r} must be a JSON object of "
                     "objects, e.g. '{\"vec512\": {\"xla_cpu_prefer_vector_width\": 512}}'")
  bad = [d for d in dots if d not in step_lib.CPU_DOTS and d not in extra and d != "auto"]
  if not dots or bad:
    raise ValueError(f"config.cpu_dots={config.cpu_dots!r}: give some of "
                     f"{list(step_lib.CPU_DOTS) + ['auto'] + list(extra)}")
  mallocs = [m for m in config.malloc.split(",") if m]
  if not mallocs or any(m not in ("tuned", "glibc") for m in mallocs):
    raise ValueError(f"config.malloc={config.malloc!r}: give some of tuned, glibc")
  if config.steps < 1 or config.rounds < 1:
    raise ValueError(f"config.steps={config.steps}, config.rounds={config.rounds}: each >= 1")
  return (config_args, dots, extra, _ints(config, "attention_blocks"), mallocs,
          _ints(config, "cpu_devices"), [s for s in config.impls.split(",") if s],
          _ints(config, "threads"))


ANALYSIS_FIELDS = ("files", "cpu_kinds", "ab_files")  # what the analysis reads, not the run


def command(config):
  """The command that makes `config`'s run: the cpu variant with the fields that differ."""
  from tools.bench_vs_torch import config as config_file
  base = config_file.get_config("cpu")
  over = [f"--config.{k}={shlex.quote(str(config[k]))}" for k in config.keys()
          if k in base and k not in ANALYSIS_FIELDS and config[k] != base[k]]
  return " ".join([COMMAND, *over])


def run(config):
  config_args, dots, extra, blocks, mallocs, ndevs, impls, threads = settings(config)
  # the load of other processes: before any worker of this run compiles (the timed windows
  # keep about 2 cores busy themselves, so the load average while they run is about 2 higher)
  load_before = os.getloadavg()
  if impls:
    ensure_torch_venv()

  def el_jax_spec(d, allpos, n, b):
    return {"side": "el_jax", "config_args": config_args, "warmup": config.warmup,
            "all_positions": allpos, "cpu_dots": d, "cpu_devices": n, "extra_dots": extra,
            "attention_blocks": b}

  jax_w = Worker(sys.executable, el_jax_spec(dots[0], False, 1, blocks[0]), env=_env(mallocs[0]))
  shape = dict(jax_w.info["shape"])
  from el_jax.run import cli
  model, _ = cli.parse(["bench_vs_torch"] + config_args, require_workdir=False)
  if model.optim.name != "adamw" or model.optim.weight_decay or model.optim.warmup_steps:
    print("note: the torch side always uses AdamW with constant lr, no weight decay",
          file=sys.stderr)
  shape.update(lr=float(model.optim.lr), clip=float(model.optim.grad_clip or 1e30))
  workers = {jax_w.info["side"]: jax_w}
  # Every combination of devices, matmuls and attention blocks with the first malloc setting;
  # the others (the before of el_jax.infra.hostmem) with the first of each only.
  combos = [(mallocs[0], n, d, b) for n in ndevs for d in dots for b in blocks] + [
      (malloc, ndevs[0], dots[0], blocks[0]) for malloc in mallocs[1:]]
  for malloc, n, d, b in combos:
    for allpos in ((False, True) if config.all_positions_too else (False,)):
      name = worker_lib.side_name(d, allpos, n, malloc, b)
      if name not in workers:
        workers[name] = Worker(sys.executable, el_jax_spec(d, allpos, n, b), env=_env(malloc))
  for n in threads:
    for impl in impls:
      name = f"torch_{impl}" + (f"_t{n}" if len(threads) > 1 else "")
      try:
        workers[name] = Worker(TORCH_PY, {"side": "torch", "attn": impl, "shape": shape,
                                          "warmup": config.warmup, "threads": n,
                                          "venv": TORCH_VENV})
      except RuntimeError as e:
        print(f"skipping attention implementation {impl!r}: {e}", file=sys.stderr)
  for name, w in workers.items():
    print(f"{name}: {json.dumps(w.info)}", file=sys.stderr)
  load0 = os.getloadavg()
  times = {name: [] for name in workers}
  names = list(workers)
  for r in range(config.rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
      times[name].append(workers[name].run(config.steps))
    print(f"round {r}: " + "  ".join(f"{n} {1e3 * times[n][-1]:.1f} ms" for n in names),
          file=sys.stderr)
  load1 = os.getloadavg()
  for w in workers.values():
    w.close()

  tokens = jax_w.info["tokens_per_step"]
  summary = {}
  for name in names:
    med = statistics.median(times[name])
    summary[name] = {"step_ms_median": 1e3 * med, "tokens_per_s": tokens / med,
                     "step_ms_windows": [1e3 * t for t in times[name]]}
  # MFU: model FLOPs per second over the measured matmul peak. The FLOPs are XLA's count of
  # el_jax's step (cost analysis); torch does the all-positions work, so it gets the FLOPs
  # of el_jax's all-positions step (its own count where that side was timed).
  peak = max(w.info["matmul_peak_flops"] for n, w in workers.items() if n.startswith("el_jax"))
  jax_sides = [n for n in names if n.startswith("el_jax")]
  all_flops = next((workers[n].info["flops_per_step"] for n in jax_sides
                    if n.endswith("_all_positions")), float("nan"))
  for name in names:
    flops = workers[name].info.get("flops_per_step", all_flops)
    summary[name]["flops_per_step"] = flops
    summary[name]["mfu"] = flops / (summary[name]["step_ms_median"] / 1e3) / peak
  ratios = {}
  for a in jax_sides:
    for name in names:
      if name == a or name in jax_sides and jax_sides.index(name) < jax_sides.index(a):
        continue
      per_round = [t / j for t, j in zip(times[name], times[a])]
      ratios[f"{a}/{name}"] = {"median": statistics.median(per_round), "min": min(per_round),
                               "max": max(per_round),
                               "of_medians": summary[a]["tokens_per_s"]
                               / summary[name]["tokens_per_s"]}
  torch_sides = [n for n in names if n.startswith("torch")]
  targets = {}
  for label, want, allpos in TARGETS:
    cands = [n for n in jax_sides if n.endswith("_all_positions") == allpos]
    if not cands or not torch_sides:
      continue
    best = max(cands, key=lambda n: summary[n]["tokens_per_s"])
    rival = max(torch_sides, key=lambda n: summary[n]["tokens_per_s"])
    got = ratios[f"{best}/{rival}"]["median"]
    targets[label] = {"el_jax": best, "torch": rival, "ratio": got, "target": want,
                      "met": got >= want}
    # the default step (train.cpu_dots="xla", one attention einsum), whether or not it is best
    default = "el_jax_all_positions" if allpos else "el_jax"
    if default in jax_sides:
      targets[label]["default_ratio"] = ratios[f"{default}/{rival}"]["median"]
  from el_jax.infra import provenance
  from el_jax.infra import workdir as wd
  result = {
      "command": command(config), "config": config.to_dict(),
      "config_args": config_args, "shape": shape, "steps_per_window": config.steps,
      "rounds": config.rounds, "cpu_count": os.cpu_count(), "machine": platform.machine(),
      "loadavg_before_setup": load_before, "loadavg_start": load0, "loadavg_end": load1,
      "workers": {n: w.info for n, w in workers.items()},
      "results": summary, "ratio_tokens_per_s": ratios, "matmul_peak_flops": peak,
      "targets": targets,
      "ran_on": provenance.ran_on(),  # CPU model and ISA flags: speed is this CPU's
  }
  out = os.path.join(config.results_dir, config.out)
  os.makedirs(config.results_dir, exist_ok=True)
  wd.write_json(out, result)
  print(f"shape: {shape['num_layers']} layers x {shape['embed_dim']} wide, "
        f"{shape['num_heads']} heads, MLP {shape['mlp_dim']}, vocab {shape['vocab']}, "
        f"batch {shape['batch']} x {shape['seq']} tokens; {config.rounds} alternating rounds "
        f"of {config.steps} steps; load average {load_before[0]:.1f} before setup, "
        f"{load0[0]:.1f} -> {load1[0]:.1f} while timing")
  print(f"matmul peak (2048^2 f32 through jnp, best of XLA's and Eigen's matmuls, best "
        f"worker): {peak / 1e9:.1f} GFLOP/s")
  for name in names:
    s = summary[name]
    print(f"{name:30s} step_ms={s['step_ms_median']:8.2f} tokens_per_s={s['tokens_per_s']:9.1f}"
          f" GFLOP/step={s['flops_per_step'] / 1e9:6.3f} MFU={100 * s['mfu']:5.1f}%")
  for key, r in ratios.items():
    print(f"ratio {key} (tokens/s) = {r['median']:.3f} (per-round median; rounds "
          f"{r['min']:.3f}..{r['max']:.3f})")
  for label, t in targets.items():
    print(f"target {label}: {t['el_jax']} / {t['torch']} = {t['ratio']:.3f}, wanted >= "
          f"{t['target']}: {'met' if t['met'] else 'MISSED'}" + (
              f" (the default step: {t['default_ratio']:.3f})" if "default_ratio" in t else ""))
  print(f"wrote {out}")
  return result
