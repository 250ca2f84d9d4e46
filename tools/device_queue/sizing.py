"""Sizing before spending: how long a job's call takes on a device kind, from what that kind
measured, and how many of its runs fit the time a call has. Plain Python (the analysis and
the queue import it; no JAX).

The rates of a device kind (`kind_rates`) come from `el_jax.tools.verify`'s JSON files of that
kind (results/verify/verify_*.json, and the session's own): the train-step time of each model
and dtype (one seed, scored positions), XLA's FLOPs per step, the setup time of that
measurement (data, model, compile, warm-up), the matmul ceilings, the stacked seeds' step time
of the copy-task model, and the preflight (verify's env and golden parts).

A call's parts (`predict`), for `slots` runs (arms x seeds) of `steps` steps stacked as one
program, in the job's dtype:

  preflight       verify's env + golden parts as the kind's sessions took them (the slowest)
  setup_compile   verify's setup of the model (data, model, compiling the step, warm-up)
  train           steps x the stacked step time, `stacked_step_s`: one seed's measured step
                  time t1 split into a share that does not grow with the slots (launches,
                  host work) and one that does, the split measured on this kind by the
                  copy-task seeds stacked against one seed (t_n = t1 (f + (1 - f) n), f from
                  t1 and t_n of that model); the job's own earlier calls on this kind replace
                  t1 by what they measured per slot-step
  eval            one more compile of the model's size (the setup time again): evaluation's
                  own compute is a fraction of a percent of training's FLOPs here
  checkpoint      0 for a job that saves none (`train.checkpoint_every=0`); else the state's
                  bytes at `CHECKPOINT_BYTES_PER_S` (assumed, not measured)
  write           `WRITE_S` (assumed)

`bound_s` is the training part at 100% of the kind's measured matmul ceiling of the dtype
(FLOPs x steps x slots / ceiling): no rate can beat it. `fit` gives the most slots whose
predicted call fits the time left, balanced over the arms that still miss seeds.
"""
import math

CALL_S = 540.0  # a call at most 9 minutes (of a session's 15), preflight included
CHECKPOINT_BYTES_PER_S = 1e9  # assumed disk rate for a checkpoint (no job of the queue saves one)
WRITE_S = 2.0  # assumed: final.json, summary.json, the job's file
PREDICTED_PARTS = ("preflight", "setup_compile", "train", "eval", "checkpoint", "write")


def device_kind(verify):
  return ((verify.get("parts", {}).get("env") or {}).get("ran_on") or {}).get("device_kind")


def kind_rates(verify_docs, kind):
  """The measured rates of device kind `kind` from verify JSON docs ({name: doc}, later names
  win where two measured the same thing), or None when none of them ran on `kind`."""
  docs = [(n, d) for n, d in sorted(verify_docs.items()) if device_kind(d) == kind]
  if not docs:
    return None
  out = {"device_kind": kind, "sessions": [n for n, _ in docs], "peak_flops": {}, "steps": {},
         "stack": None, "preflight_s": None, "preflight_session": None}
  for name, d in docs:
    parts = d.get("parts", {})
    env, golden = parts.get("env") or {}, parts.get("golden") or {}
    if env.get("peak_flops"):
      out["peak_flops"] = dict(env["peak_flops"])
    if env.get("seconds") is not None and golden.get("seconds") is not None:
      pre = env["seconds"] + golden["seconds"]
      if out["preflight_s"] is None or pre > out["preflight_s"]:
        out["preflight_s"], out["preflight_session"] = pre, name
    th = parts.get("throughput") or {}
    for r in th.get("rows", []):
      if not r.get("all_positions"):
        out["steps"][f"{r['model']}|{r['dtype']}"] = {
            "model": r["model"], "dtype": r["dtype"], "step_s": r["step_s"],
            "flops_per_step": r.get("flops_per_step"), "setup_s": r.get("setup_s"),
            "mfu": r.get("mfu"), "session": name}
    seeds = {r["mode"]: r for r in th.get("seeds", [])}
    if "vmap" in seeds:
      v = seeds["vmap"]
      one = out["steps"].get(f"{v['model']}|float32")
      if one is not None and v["seeds"] > 1:
        n, t1, tn = v["seeds"], one["step_s"], v["step_s"]
        fixed = (n * t1 - tn) / ((n - 1) * t1)
        out["stack"] = {"model": v["model"], "seeds": n, "single_step_s": t1,
                        "stacked_step_s": tn, "fixed_share": min(max(fixed, 0.0), 1.0),
                        "session": name}
  return out


def stacked_step_s(t1, slots, fixed_share):
  """Seconds per step of `slots` stacked runs whose one-run step takes `t1` (module docstring)."""
  return t1 * (fixed_share + (1.0 - fixed_share) * slots)


def job_rate(rates, model, dtype, flops_per_step=None):
  """{"step_s", "setup_s", "flops_per_step", "source"} of one run of the job's model in `dtype`
  on the kind of `rates`: verify's row of `model` where there is one; else, from `model`'s row
  in float32 or the kind's fastest row, scaled by the job's FLOPs (`flops_per_step`) at the
  same FLOP/s; None without any."""
  steps = rates["steps"]
  row = steps.get(f"{model}|{dtype}") if model else None
  if row is not None:
    return {"step_s": row["step_s"], "setup_s": row["setup_s"],
            "flops_per_step": row["flops_per_step"],
            "source": f"verify {row['session']}: {model} {dtype}"}
  if not flops_per_step or not steps:
    return None
  same = [r for r in steps.values() if r["dtype"] == dtype] or list(steps.values())
  best = max(same, key=lambda r: (r["flops_per_step"] or 0) / r["step_s"])
  rate = best["flops_per_step"] / best["step_s"]
  return {"step_s": flops_per_step / rate, "setup_s": best["setup_s"],
          "flops_per_step": flops_per_step,
          "source": f"the job's FLOPs at the FLOP/s of verify {best['session']}: "
                    f"{best['model']} {best['dtype']}"}


def predict(rates, rate, slots, steps, dtype, checkpoint_bytes=0.0, measured_slot_step_s=None,
            preflight=True):
  """The predicted parts of one call (module docstring) and what they rest on."""
  t1 = measured_slot_step_s if measured_slot_step_s is not None else rate["step_s"]
  fixed = rates["stack"]["fixed_share"] if rates.get("stack") else 0.0
  step_s = stacked_step_s(t1, slots, fixed)
  peak = rates["peak_flops"].get(dtype)
  flops = rate["flops_per_step"]
  parts = {"preflight": (rates["preflight_s"] or 0.0) if preflight else 0.0,
           "setup_compile": rate["setup_s"] or 0.0,
           "train": steps * step_s,
           "eval": rate["setup_s"] or 0.0,
           "checkpoint": checkpoint_bytes * slots / CHECKPOINT_BYTES_PER_S,
           "write": WRITE_S}
  tflops = slots * flops / step_s / 1e12 if flops else None
  return {"slots": slots, "steps": steps, "dtype": dtype, "parts_s": parts,
          "total_s": sum(parts.values()), "step_s": step_s, "single_step_s": t1,
          "fixed_share": fixed, "flops_per_slot_step": flops, "tflops": tflops,
          "mfu": (tflops * 1e12 / peak) if (tflops and peak) else None,
          "peak_tflops": peak / 1e12 if peak else None,
          "bound_train_s": (slots * flops * steps / peak) if (flops and peak) else None,
          "rate_source": rate["source"],
          "t1_source": "the job's earlier calls" if measured_slot_step_s is not None
          else rate["source"]}


def fit(rates, rate, steps, dtype, left_s, missing, checkpoint_bytes=0.0,
        measured_slot_step_s=None, preflight=False):
  """({arm: seeds to train}, the prediction of that call): the most slots whose predicted
  call fits `left_s`, taken from `missing` ({arm: [seeds]}, in the job's arm order) round-robin
  over the arms (balanced: each arm gets as many, the first arms one more when the count does
  not divide); ({}, the prediction of one slot) when not even one fits."""
  order = [(arm, s) for i in range(max((len(v) for v in missing.values()), default=0))
           for arm, v in missing.items() if i < len(v) for s in [v[i]]]
  best, pred = 0, None
  for n in range(1, len(order) + 1):
    p = predict(rates, rate, n, steps, dtype, checkpoint_bytes, measured_slot_step_s, preflight)
    if p["total_s"] > left_s:
      if pred is None:
        pred = p
      break
    best, pred = n, p
  pick = {}
  for arm, s in order[:best]:
    pick.setdefault(arm, []).append(s)
  return {arm: sorted(v) for arm, v in pick.items()}, pred


def steps_that_fit(rates, rate, slots, dtype, left_s, checkpoint_bytes=0.0, preflight=True):
  """The most steps `slots` stacked runs can train in a call of `left_s` (0 if none)."""
  p = predict(rates, rate, slots, 0, dtype, checkpoint_bytes, preflight=preflight)
  room = left_s - p["total_s"]
  return max(0, int(math.floor(room / p["step_s"]))) if room > 0 else 0


def compare(predicted, measured):
  """The sizing record of a call: per part the predicted and measured seconds and their ratio
  (measured / predicted; None where nothing was predicted)."""
  out = {}
  for k in PREDICTED_PARTS:
    p, m = predicted.get(k), measured.get(k)
    out[k] = {"predicted_s": p, "measured_s": m,
              "ratio": (m / p) if (p and m is not None) else None}
  return out


def measured_parts(timeline, preflight_s=None):
  """A call's timeline (`el_jax.infra.timeline`) in the parts of a prediction."""
  t = timeline["parts_s"]
  return {"preflight": preflight_s, "setup_compile": t["setup"] + t["compile"],
          "train": t["train"], "eval": t["eval"], "checkpoint": t["checkpoint"],
          "write": t["write"]}
