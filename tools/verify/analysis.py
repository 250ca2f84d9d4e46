"""What the accelerator and speed pages show of `python -m el_jax.tools.verify`'s sessions
(results/verify/verify_<session>.json, in name order): each session's verdict and checks, the
train-step speed rows with their MFU, the seeds stacked against sequential, and el_jax against
PyTorch on the same device, eager, `torch.compile` and CUDA graphs where verify timed them
(with PyTorch's MFU at equal work, and el_jax against the fastest of them)."""
import os

PREFIX = "verify_"
PRECISIONS = ("bfloat16", "float32", "float32_highest")


def files(src):
  return [f for f in src.files() if os.path.basename(f).startswith(PREFIX)]


def _device(v):
  ro = (v.get("parts", {}).get("env") or {}).get("ran_on") or {}
  return f"{ro.get('device_kind', '?')} (jax {ro.get('jax', '?')})"


def _mfu(x):
  return x if x is not None and x == x else None


def session(v):
  """One verify JSON: its checks, speed rows and PyTorch comparison."""
  parts = v["parts"]
  g, sd, mn = parts.get("golden", {}), parts.get("seeds", {}), parts.get("main", {})
  pk = parts.get("env", {}).get("peak_flops", {})
  th = parts.get("throughput", {})
  device = _device(v)
  tor = {(t["model"], t["dtype"], t.get("mode", "eager")): t
         for t in parts.get("torch", {}).get("rows", [])}
  return {
      "device": device, "ok": bool(v.get("ok")),
      "preflight": not ({"seeds", "main"} & set(parts)),
      "golden_highest": g.get("max_rel_err_highest"),
      "golden_rel_err": g.get("rel_err"),
      "golden_default_max": max(g["rel_err"]["default"].values()) if "rel_err" in g else None,
      "golden_bf16_max": max(g["rel_err"]["bfloat16"].values()) if "rel_err" in g else None,
      "seeds": ({k: sd[k] for k in ("max_rel_err_metrics", "max_rel_err_params", "impl")}
                if "max_rel_err_metrics" in sd else None),
      "main": mn.get("ok") if mn else None,
      "peak_tflops": {k: pk[k] / 1e12 for k in PRECISIONS if k in pk},
      "throughput": [{"device": device, "model": r["model"], "dtype": r["dtype"],
                      "all_positions": r["all_positions"], "step_ms": r["step_s"] * 1e3,
                      "mtokens_per_s": r["tokens_per_s"] / 1e6,
                      "gflop_per_step": r["flops_per_step"] / 1e9, "mfu": _mfu(r.get("mfu"))}
                     for r in th.get("rows", [])],
      "stacked": [{"device": device, "model": r["model"], "seeds": r["seeds"], "mode": r["mode"],
                   "step_ms": r["step_s"] * 1e3, "seed_steps_per_s": r["seed_steps_per_s"]}
                  for r in th.get("seeds", [])],
      "vs_torch": vs_torch(device, v, tor),
  }


MODES = ("eager", "compile", "reduce-overhead")  # el_jax.tools.torch_bench.MODES


def vs_torch(device, v, tor):
  """One row per (model, dtype, el_jax positions): el_jax's step against PyTorch's in each
  mode (None: not measured in this session), the fastest PyTorch mode, and the speed-ups."""
  rows = {}
  for c in v.get("vs_torch", []):
    mode = c.get("mode", "eager")  # sessions before the compiled modes timed eager only
    key = (c["model"], c["dtype"], c["equal_work"])
    r = rows.setdefault(key, {"device": device, "model": c["model"], "dtype": c["dtype"],
                              "equal_work": c["equal_work"], "el_jax_ms": c["el_jax_step_s"] * 1e3,
                              "modes": dict.fromkeys(MODES)})
    r["modes"][mode] = c["torch_step_s"] * 1e3
  out = []
  for (model, dtype, _), r in rows.items():
    timed = {m: ms for m, ms in r["modes"].items() if ms is not None}
    best = min(timed, key=timed.get)
    mfu = {m: tor.get((model, dtype, m), {}).get("mfu") for m in MODES}
    out.append({**r, "torch_ms": r["modes"]["eager"], "compile_ms": r["modes"]["compile"],
                "graphs_ms": r["modes"]["reduce-overhead"], "torch_mfu": mfu["eager"],
                "best_mode": best, "best_ms": timed[best], "best_mfu": mfu[best],
                "speedup": (r["modes"]["eager"] / r["el_jax_ms"]
                            if r["modes"]["eager"] is not None else None),
                "speedup_best": timed[best] / r["el_jax_ms"],
                "compiled_measured": len(timed) > 1})
  return out


def analyze(src, config):
  names = files(src)
  sessions = {os.path.splitext(os.path.basename(f))[0].removeprefix(PREFIX): session(src.load(f))
              for f in names}
  return {
      "ran": bool(sessions), "pattern": src.name(f"{PREFIX}*.json"),
      "sessions": sessions,
      "vs_torch": [r for s in sessions.values() for r in s["vs_torch"]],
      "ran_on": src.ran_on(names),
  }
