r"""One command that checks an accelerator before it trains anything, and measures it.

  python -m el_jax.tools.verify --out=verify.json              # on the GPU / TPU machine (~3-4 min)
  python -m el_jax.tools.verify --size=test --out=/tmp/v.json  # the same parts at test size (CPU)

Each part runs in its own process (so one that fails or hangs cannot take the others with
it, and the PyTorch part never shares the accelerator with a JAX process holding its
memory), and everything goes to the one JSON file `--out`:

  env         devices, memory, versions (`el_jax.infra.provenance.ran_on`), nvidia-smi, and the two
              ceilings measured on random data: a bf16 and a float32 (default precision:
              TF32 on NVIDIA GPUs) n x n matmul, in FLOP/s
  golden      the golden first step of `configs/copy_task.py:test` (`el_jax.tools.golden`) at the
              highest matmul precision against the committed CPU numbers (must match to rel
              1e-4, the CPU test's tolerance), and at the default precision and in bf16
              (reported, not required)
  seeds       3 seeds x 8 steps of the same config trained one after the other and as one
              stacked program (`el_jax.run.seeds`, "auto": vmap off the CPU), highest precision:
              losses and final parameters must agree (rel 2e-4 / 1e-3, the suite's)
  main        `python -m el_jax.main` end to end at test size (copy task and path-star), the
              copy task once more on the same workdir (must report it finished, train nothing)
  throughput  train-step time of `path_star:paper` and `copy_task:paper_lc1` (fp32 and bf16,
              scored positions as trained; fp32 at every position: equal work with PyTorch),
              FLOPs per step (XLA's cost analysis), MFU against the measured ceiling of the
              dtype; and `copy_task:paper_lc1` seeds, sequential against stacked
  torch       the same models and batches in PyTorch on the same device (Hugging Face
              GPT-NeoX / GPT-2, SDPA attention, AdamW + clipping; float32 with TF32 matmuls as
              JAX's default, and bf16 autocast), eager, with `torch.compile` and with CUDA
              graphs (`mode="reduce-overhead"`, on CUDA) where the part's time allows, and the
              ratio el_jax / torch of each

Exit status 0 when every required check (golden at highest precision, seeds, main) passed,
1 otherwise; the last lines printed are a short table. Parts: `--parts=env,golden,...`.
At `--size=test` every model is the `test` config's, so the suite runs this command on the
CPU in seconds (tests/test_verify.py); the torch part is skipped there when no torch is
installed.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

PARTS = ("env", "golden", "seeds", "main", "throughput", "torch")
REQUIRED = ("golden", "seeds", "main")  # parts whose failure fails the command
GOLDEN_RTOL = 1e-4  # tests/test_train.py::test_golden_one_step
SEEDS_RTOL_METRICS, SEEDS_RTOL_PARAMS = 2e-4, 1e-3  # tests/test_vmap_seeds.py

# What each size measures: the throughput configs (name, config file, variant, overrides),
# the matmul side for the ceilings, timing windows, stacked seeds.
SIZES = {
    "full": {"matmul_n": 8192, "steps": 50, "rounds": 5, "warmup": 10, "seeds": 5,
             "models": (("path_star:paper", "path_star", "paper", {}),
                        ("copy_task:paper_lc1", "copy_task", "paper_lc1", {}))},
    "test": {"matmul_n": 256, "steps": 3, "rounds": 2, "warmup": 1, "seeds": 2,
             "models": (("path_star:test", "path_star", "test", {}),
                        ("copy_task:test", "copy_task", "test", {}))},
}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _now():
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _rel(a, b):
  return abs(a - b) / max(abs(b), 1e-30)


# ----------------------------------------------------------------------------
# Parts (each in its own process: `--part=<name>`)


def matmul_rate(n, dtype, reps=10):
  """FLOP/s of an n x n x n matmul of random `dtype` data at the default precision (the median
  of `reps` timed calls after a warm-up; inputs rotated between two pairs)."""
  # heavy: JAX / torch, imported in this part's own process (the parent imports neither)
  import jax
  import jax.numpy as jnp
  keys = jax.random.split(jax.random.key(0), 4)
  xs = [jax.random.normal(k, (n, n), jnp.float32).astype(dtype) for k in keys]
  f = jax.jit(jnp.dot)
  jax.block_until_ready(f(xs[0], xs[1]))
  times = []
  for i in range(reps):
    a, b = (xs[0], xs[1]) if i % 2 == 0 else (xs[2], xs[3])
    t0 = time.perf_counter()
    jax.block_until_ready(f(a, b))
    times.append(time.perf_counter() - t0)
  times.sort()
  return 2.0 * n ** 3 / times[len(times) // 2]


def part_env(size):
  # heavy: JAX / torch, imported in this part's own process (the parent imports neither)
  import jax
  import jax.numpy as jnp
  from el_jax.infra import provenance
  dev = jax.devices()[0]
  try:
    mem = {k: int(v) for k, v in (dev.memory_stats() or {}).items()
           if k in ("bytes_limit", "bytes_in_use", "peak_bytes_in_use")}
  except Exception as e:  # noqa: BLE001 -- a backend without memory stats
    mem = {"error": str(e)}
  smi = ""
  try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,"
                          "clocks.sm,clocks.max.sm", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout.strip()
  except (OSError, subprocess.TimeoutExpired):
    pass
  n = SIZES[size]["matmul_n"]
  peaks = {"bfloat16": matmul_rate(n, jnp.bfloat16), "float32": matmul_rate(n, jnp.float32)}
  with jax.default_matmul_precision("highest"):
    peaks["float32_highest"] = matmul_rate(n, jnp.float32)
  return {"ok": True, "ran_on": provenance.ran_on(), "devices": [str(d) for d in jax.devices()],
          "memory": mem, "nvidia_smi": smi, "python": sys.version.split()[0],
          "matmul_n": n, "peak_flops": peaks}


def part_golden(size):
  # heavy: JAX / torch, imported in this part's own process (the parent imports neither)
  import jax
  from el_jax.tools import golden
  with jax.default_matmul_precision("highest"):
    highest = golden.first_step()
  default = golden.first_step()
  bf16 = golden.first_step({"model.dtype": "bfloat16"})
  rel = {name: {k: _rel(v[k], golden.STEP_1[k]) for k in golden.KEYS}
         for name, v in (("highest", highest), ("default", default), ("bfloat16", bf16))}
  worst = max(rel["highest"].values())
  return {"ok": worst <= GOLDEN_RTOL, "rtol": GOLDEN_RTOL, "cpu": golden.STEP_1,
          "highest": highest, "default": default, "bfloat16": bf16, "rel_err": rel,
          "max_rel_err_highest": worst}


def part_seeds(size):
  # heavy: JAX / torch, imported in this part's own process (the parent imports neither)
  import jax
  import numpy as np
  from el_jax.run import config as config_lib
  from el_jax.run import seeds as seeds_lib
  from el_jax.run import setup as setup_lib
  seeds = (0, 1, 2)
  cfg = config_lib.get_config("copy_task", "test", {"num_devices": 1, "progress": False})
  cfg.seeds = seeds
  n = cfg.train.num_steps
  with jax.default_matmul_precision("highest"):
    setup = setup_lib.Setup(cfg)
    trainer = setup_lib.Trainer(setup)
    seq_m, seq_p = [], []
    for s in seeds:
      state, ms = trainer.init(s), []
      for i in range(n):
        state, m = trainer.step(state, trainer.put_batch(setup.batch(s, i)))
        ms.append({k: float(v) for k, v in jax.device_get(m).items()})
      seq_m.append(ms)
      seq_p.append(jax.device_get(state["params"]))
    stacked = seeds_lib.StackedTrainer(trainer, seeds, "auto")
    state, st_m = stacked.init(), []
    for i in range(n):
      state, m = stacked.step(state, stacked.put_batch(stacked.host_batch(i)))
      st_m.append(jax.device_get(m))
    st_p = jax.device_get(state["params"])
  worst_m = 0.0
  for j in range(len(seeds)):
    for i in range(n):
      for k, v in seq_m[j][i].items():
        g = float(st_m[i][k][j])
        if not k.startswith("n_") and np.isfinite(v):
          worst_m = max(worst_m, abs(g - v) / (abs(v) + 1e-5 / SEEDS_RTOL_METRICS))
  worst_p = 0.0
  for j in range(len(seeds)):
    for a, b in zip(jax.tree.leaves(seq_p[j]), jax.tree.leaves(jax.tree.map(lambda x: x[j], st_p))):
      worst_p = max(worst_p, float(np.max(np.abs(np.asarray(b) - np.asarray(a))
                                          / (np.abs(np.asarray(a)) + 1e-5 / SEEDS_RTOL_PARAMS))))
  return {"ok": worst_m <= SEEDS_RTOL_METRICS and worst_p <= SEEDS_RTOL_PARAMS,
          "impl": stacked.impl, "seeds": list(seeds), "steps": n,
          "max_rel_err_metrics": worst_m, "max_rel_err_params": worst_p,
          "rtol_metrics": SEEDS_RTOL_METRICS, "rtol_params": SEEDS_RTOL_PARAMS}


def part_main(size):
  out, ok = {}, True
  with tempfile.TemporaryDirectory() as tmp:
    for name in ("copy_task", "path_star"):
      wdir = os.path.join(tmp, name)
      argv = [sys.executable, "-m", "el_jax.main", f"--config={ROOT}/configs/{name}.py:test",
              f"--workdir={wdir}"]
      runs = []
      # The copy task twice (the second run must find it finished); path-star once.
      for attempt in (("train", "again") if name == "copy_task" else ("train",)):
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
        runs.append({"rc": p.returncode, "seconds": round(time.perf_counter() - t0, 1),
                     "stderr_tail": p.stderr[-1500:]})
      summary = {}
      path = os.path.join(wdir, "summary.json")
      if os.path.exists(path):
        with open(path) as f:
          summary = json.load(f)
      finished_again = len(runs) == 1 or "already finished" in runs[1]["stderr_tail"]
      good = (all(r["rc"] == 0 for r in runs) and bool(summary.get("per_seed"))
              and finished_again)
      ok = ok and good
      out[name] = {"ok": good, "runs": runs, "ran_on": summary.get("ran_on"),
                   "aggregate": {k: v.get("mean") for k, v in summary.get("aggregate", {}).items()
                                 if k.startswith("test_")}}
  return {"ok": ok, **out}


def model_shape(setup):
  """What `el_jax.tools.torch_bench` builds the same model and batch from (JSON)."""
  m = setup.model_cfg
  return {"preset": setup.config.model.preset, "num_layers": m.num_layers,
          "num_heads": m.num_heads, "embed_dim": m.embed_dim, "mlp_dim": m.mlp_dim,
          "vocab": m.vocab_size, "seq": setup.task.context_len,
          "batch": type(setup.task).rows_per_step(setup.config),
          "layer_norm_eps": m.layer_norm_eps, "activation": m.activation,
          "lr": setup.config.optim.lr, "grad_clip": setup.config.optim.grad_clip,
          "weight_decay": setup.config.optim.weight_decay}


def step_flops(runner):
  """(FLOPs of one train step, where the count comes from): XLA's cost analysis of the lowered
  program (before optimisation, no compile); where a backend gives none there (the CUDA
  backend of jax 0.11 gives none), that of the compiled program."""
  from el_jax.core import step as step_lib  # heavy: JAX, in this part's own process
  return step_lib.step_flops(runner.trainer.step, runner.state, runner.batches[0])


def _timed(runner, steps, rounds):
  times = sorted(runner(steps) for _ in range(rounds))
  return times[len(times) // 2], times


_PARTIAL = {"path": None}  # a child's --part_out: a long part saves what it has so far


def _save_partial(res):
  if _PARTIAL["path"]:
    with open(_PARTIAL["path"], "w") as f:
      json.dump({**res, "ok": False, "error": "partial: the part did not finish"}, f, indent=1)


def part_throughput(size, peaks=None):
  """Seeds first (the device queue sizes its arms from them), then the step of each model and
  dtype; what is measured is saved after each row, so a part stopped at its timeout keeps it."""
  # heavy: JAX / torch, imported in this part's own process (the parent imports neither)
  import jax
  from el_jax.tools import bench
  from el_jax.run import config as config_lib
  from el_jax.run import setup as setup_lib
  s = SIZES[size]
  peaks = peaks or {}
  res = {"rows": [], "seeds": [], "shapes": {}, "platform": jax.devices()[0].platform}
  # Seeds of the copy task (the queue's first job): sequential steps against one stacked program.
  name, cfg_name, variant, over = s["models"][1]
  cfg = config_lib.get_config(cfg_name, variant, {**over, "num_devices": 1, "progress": False})
  setup = setup_lib.Setup(cfg)
  for mode in ("vmap", "sequential"):
    runner = bench.SeedsRunner(setup, s["seeds"], mode, s["warmup"])
    med, times = _timed(runner, s["steps"], s["rounds"])
    res["seeds"].append({"model": name, "mode": mode, "seeds": s["seeds"], "step_s": med,
                         "step_s_rounds": times, "seed_steps_per_s": s["seeds"] / med})
    print(f"throughput {name} {s['seeds']} seeds {mode}: {med * 1e3:.3f} ms/step",
          file=sys.stderr, flush=True)
    del runner
    _save_partial(res)
  del setup
  for name, cfg_name, variant, over in s["models"]:
    for dtype, all_pos in (("float32", False), ("bfloat16", False), ("float32", True)):
      cfg = config_lib.get_config(cfg_name, variant, {**over, "model.dtype": dtype,
                                                      "num_devices": 1, "progress": False})
      t0 = time.perf_counter()
      runner = bench.StepRunner(cfg, s["warmup"], score_all_positions=all_pos)
      setup_s = time.perf_counter() - t0
      med, times = _timed(runner, s["steps"], s["rounds"])
      flops, flops_source = step_flops(runner)
      peak = peaks.get(dtype)
      scored = runner.setup.scored_positions
      scored_tokens = runner.rows * (runner.setup.task.context_len if scored is None
                                     else len(scored))
      res["rows"].append({
          "model": name, "dtype": dtype, "all_positions": all_pos, "step_s": med,
          "step_s_rounds": times, "tokens_per_step": runner.tokens,
          "scored_tokens_per_step": scored_tokens, "tokens_per_s": runner.tokens / med,
          "flops_per_step": flops, "flops_source": flops_source, "tflops": flops / med / 1e12,
          "mfu": (flops / med / peak) if peak else None, "setup_s": round(setup_s, 1)})
      print(f"throughput {name} {dtype}{' all positions' if all_pos else ''}: "
            f"{med * 1e3:.3f} ms/step, {flops / med / 1e12:.2f} TFLOP/s", file=sys.stderr,
            flush=True)
      if dtype == "float32" and not all_pos:
        res["shapes"][name] = model_shape(runner.setup)
      del runner
      _save_partial(res)
  return {"ok": True, **res}


COMPILE_RESERVE_S = 60  # a compiled PyTorch mode starts only with this much of the part's time


def part_torch(size, shapes=None, el_jax_rows=None, peaks=None, budget_s=None):
  """PyTorch's step of each model and dtype in every mode of `torch_bench.MODES` that runs
  here: all eager rows first, then `torch.compile`, then CUDA graphs, each compiled mode only
  with `COMPILE_RESERVE_S` of the part's `budget_s` left (a mode left out is listed in
  "skipped" with why). A row's MFU is at el_jax's FLOPs of the same work (its all-positions
  float32 step) over the measured ceiling of the dtype."""
  # heavy: JAX / torch, imported in this part's own process (the parent imports neither)
  from el_jax.tools import torch_bench
  if not torch_bench.available():
    return {"ok": None, "skipped": "no torch in this Python"}
  import torch
  s = SIZES[size]
  t_end = time.time() + budget_s if budget_s else None
  device_type = "cuda" if torch.cuda.is_available() else "cpu"
  equal = {r["model"]: r["flops_per_step"] for r in el_jax_rows or []
           if r["all_positions"] and r["dtype"] == "float32"}
  res = {"rows": [], "skipped": [], **torch_bench.versions()}
  for mode in torch_bench.MODES:
    for name, shape in (shapes or {}).items():
      for dtype in ("float32", "bfloat16"):
        why = torch_bench.mode_refusal(mode, device_type)
        if why is None and mode != "eager" and t_end is not None \
            and t_end - time.time() < COMPILE_RESERVE_S:
          why = f"out of the part's time (less than {COMPILE_RESERVE_S} s left)"
        if why is None:
          try:
            r = torch_bench.time_steps(shape, dtype, steps=s["steps"], rounds=s["rounds"],
                                       warmup=s["warmup"], mode=mode)
          except Exception as e:  # noqa: BLE001 -- a mode that fails here is recorded, not fatal
            if mode == "eager":
              raise
            why = f"{type(e).__name__}: {str(e)[:300]}"
        if why is not None:
          res["skipped"].append({"model": name, "dtype": dtype, "mode": mode, "why": why})
          continue
        row = {"model": name, "dtype": dtype, **r}
        flops = equal.get(name)
        if flops:
          row["flops_per_step_equal_work"] = flops
          if (peaks or {}).get(dtype):
            row["mfu"] = flops / r["step_s"] / peaks[dtype]
        res["rows"].append(row)
        print(f"torch {name} {dtype} {mode}: {r['step_s'] * 1e3:.3f} ms/step on {r['device']}"
              + (f" (compiled in {r['compile_s']:.1f} s)" if r["compile_s"] else ""),
              file=sys.stderr, flush=True)
        _save_partial(res)
  return {"ok": True, **res}


# ----------------------------------------------------------------------------
# Parent: every part in its own process, one JSON


def _run_part(part, size, extra, timeout):
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "part.json")
    inp = os.path.join(tmp, "in.json")
    with open(inp, "w") as f:
      json.dump(extra, f)
    t0 = time.perf_counter()
    try:
      p = subprocess.run([sys.executable, "-m", "el_jax.tools.verify", f"--part={part}",
                          f"--size={size}", f"--part_out={out}", f"--part_in={inp}"],
                         cwd=ROOT, timeout=timeout, stdout=subprocess.PIPE, text=True)
      rc, err = p.returncode, None
    except subprocess.TimeoutExpired:
      rc, err = None, f"timed out after {timeout} s"
    seconds = round(time.perf_counter() - t0, 1)
    if os.path.exists(out):
      with open(out) as f:
        res = json.load(f)
    else:
      res = {"ok": False, "error": err or f"exited with status {rc} before writing a result"}
    res["seconds"] = seconds
    return res


def _ratio_rows(results):
  """el_jax / torch step-time ratios (scored positions as trained, and equal work), one per
  PyTorch mode timed."""
  th = results.get("throughput", {}).get("rows", [])
  to = results.get("torch", {}).get("rows", [])
  out = []
  for t in to:
    for equal in (False, True):
      mine = [r for r in th if r["model"] == t["model"] and r["dtype"] == t["dtype"]
              and r["all_positions"] == equal]
      if mine:
        out.append({"model": t["model"], "dtype": t["dtype"], "equal_work": equal,
                    "mode": t.get("mode", "eager"),
                    "el_jax_step_s": mine[0]["step_s"], "torch_step_s": t["step_s"],
                    "speedup": t["step_s"] / mine[0]["step_s"]})
  return out


def summary_lines(res):
  parts = res["parts"]
  lines = []
  env = parts.get("env", {})
  ro = env.get("ran_on") or {}
  lines.append(f"device: {ro.get('device_kind')} x{ro.get('device_count')} "
               f"({ro.get('platform')}), jax {ro.get('jax')}")
  pk = env.get("peak_flops") or {}
  if pk:
    lines.append("matmul ceilings TFLOP/s: " + ", ".join(f"{k} {v / 1e12:.1f}" for k, v in pk.items()))
  for p in PARTS:
    r = parts.get(p)
    if r is not None:
      lines.append(f"{p:10s} ok={r.get('ok')} ({r.get('seconds')} s)"
                   + (f" error: {r['error']}" if r.get("error") else "")
                   + (f" skipped: {r['skipped']}" if r.get("skipped") else ""))
  g = parts.get("golden", {})
  if "max_rel_err_highest" in g:
    lines.append(f"golden rel err: highest {g['max_rel_err_highest']:.2e}, default "
                 f"{max(g['rel_err']['default'].values()):.2e}, bf16 "
                 f"{max(g['rel_err']['bfloat16'].values()):.2e}")
  for r in parts.get("throughput", {}).get("rows", []):
    mfu = f"{r['mfu'] * 100:.1f}%" if r.get("mfu") else "-"
    lines.append(f"{r['model']:22s} {r['dtype']:8s} {'all ' if r['all_positions'] else 'scored'}"
                 f" {r['step_s'] * 1e3:8.3f} ms/step  MFU {mfu}")
  for r in parts.get("throughput", {}).get("seeds", []):
    lines.append(f"{r['model']} {r['seeds']} seeds {r['mode']}: {r['seed_steps_per_s']:.1f} "
                 f"seed-steps/s")
  for r in res.get("vs_torch", []):
    lines.append(f"vs torch {r['mode']:15s} {r['model']:22s} {r['dtype']:8s} "
                 f"{'equal work' if r['equal_work'] else 'as trained'}: {r['speedup']:.2f}x")
  return lines


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", default="verify.json", help="the JSON file written")
  ap.add_argument("--size", default="full", choices=tuple(SIZES))
  ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
  ap.add_argument("--timeout", type=float, default=240, help="seconds per part at most")
  ap.add_argument("--budget_s", type=float, default=0, help="seconds for all parts (0 = no "
                  "limit beyond --timeout each); a part that would start with less than 15 s "
                  "left is skipped")
  ap.add_argument("--part", default="", help=argparse.SUPPRESS)
  ap.add_argument("--part_out", default="", help=argparse.SUPPRESS)
  ap.add_argument("--part_in", default="", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.part:  # a child: one part, its JSON to --part_out
    _PARTIAL["path"] = args.part_out
    extra = {}
    if args.part_in:
      with open(args.part_in) as f:
        extra = json.load(f)
    fn = {"env": part_env, "golden": part_golden, "seeds": part_seeds, "main": part_main,
          "throughput": part_throughput, "torch": part_torch}[args.part]
    try:
      res = fn(args.size, **extra)
    except Exception as e:  # noqa: BLE001 -- recorded in the JSON, the other parts go on
      traceback.print_exc()
      res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    with open(args.part_out, "w") as f:
      json.dump(res, f, indent=1)
    return 0
  parts = [p for p in args.parts.split(",") if p]
  unknown = sorted(set(parts) - set(PARTS))
  if unknown:
    ap.error(f"--parts: unknown {unknown}; valid: {','.join(PARTS)}")
  res = {"command": "python -m el_jax.tools.verify " + " ".join(argv if argv is not None
                                                          else sys.argv[1:]),
         "started": _now(), "size": args.size, "parts": {}}
  t_end = time.time() + args.budget_s if args.budget_s else None
  for part in parts:
    timeout = args.timeout
    if t_end is not None:
      left = t_end - time.time()
      if left < 15:
        res["parts"][part] = {"ok": None, "skipped": f"out of time ({left:.0f} s of "
                                                     f"--budget_s={args.budget_s:g} left)"}
        continue
      timeout = min(timeout, left)
    extra = {}
    if part == "throughput":
      extra["peaks"] = res["parts"].get("env", {}).get("peak_flops") or {}
    if part == "torch":
      th = res["parts"].get("throughput", {})
      extra.update(shapes=th.get("shapes") or {}, el_jax_rows=th.get("rows") or [],
                   peaks=res["parts"].get("env", {}).get("peak_flops") or {},
                   budget_s=max(timeout - 15, 0))
    print(f"verify: {part} ...", file=sys.stderr, flush=True)
    res["parts"][part] = _run_part(part, args.size, extra, timeout)
    res["vs_torch"] = _ratio_rows(res["parts"])
    with open(args.out, "w") as f:  # after every part: a later hang keeps what is done
      json.dump(res, f, indent=1)
  res["finished"] = _now()
  # Passed: every required part that was asked for ran and passed (a skipped one fails it).
  res["ok"] = all(res["parts"][p].get("ok") is True for p in REQUIRED if p in res["parts"])
  with open(args.out, "w") as f:
    json.dump(res, f, indent=1)
  for line in summary_lines(res):
    print(line)
  print(f"verify: {'passed' if res['ok'] else 'FAILED'} ({', '.join(parts)}); {args.out}")
  return 0 if res["ok"] else 1


if __name__ == "__main__":
  sys.exit(main())
