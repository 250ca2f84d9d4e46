"""What the speed page shows of plan.json: per paper variant its size, FLOPs, memory and the
accelerator-hours of the whole run on each chip (and in bf16 where a chip's bf16 peak differs
from its float32 one), with the chips' dense peaks; `ran` is False when no plan was made. Beside
it, the MFU an accelerator really gave the paper-size steps (`el_jax.tools.verify`'s throughput
rows, results/verify/) and by what factor the plan's MFU is above it."""
import os

PLAN = "plan.json"
VERIFY = "../verify"


def measured(src, mfu):
  """The lowest and highest MFU of verify's throughput rows (percent), and the plan's `mfu`
  over each (the factor by which the plan's hours are optimistic); None without a verify file."""
  vals = []
  for f in src.files(VERIFY):
    if os.path.basename(f).startswith("verify_"):
      for r in src.load(f)["parts"].get("throughput", {}).get("rows", []):
        if r.get("mfu") is not None and r["mfu"] == r["mfu"]:
          vals.append(r["mfu"])
  if not vals:
    return {"measured_mfu_pct": None, "optimistic_by": None}
  return {"measured_mfu_pct": [100 * min(vals), 100 * max(vals)],
          "optimistic_by": [mfu / max(vals), mfu / min(vals)]}


def analyze(src, config):
  if not src.exists(PLAN):
    return {"ran": False, "file": src.name(PLAN), "mfu": config.mfu,
            **measured(src, config.mfu)}
  d = src.load(PLAN)
  chips = list(d["chips"])
  bf16 = [c for c in chips if d["chips"][c]["bf16"] != d["chips"][c]["f32"]]
  runs = []
  for label, p in d["runs"].items():
    runs.append({
        "label": label, "params_m": p["params"] / 1e6, "rows_per_step": p["rows_per_step"],
        "context_len": p["model"]["context_len"], "tokens_per_step": p["tokens_per_step"],
        "flops_per_step": p["flops_per_step"],
        "xla_over_6nd": p["flops_per_step"] / p["flops_6nd"],
        "peak_bytes": p["bytes_per_device"]["peak_estimate"], "num_steps": p["num_steps"],
        "num_seeds": p["num_seeds"],
        "hours": [p["chips"][c]["hours_all_seeds"] for c in chips],
        "hours_bf16": [p["chips"][c]["hours_all_seeds_bf16"] for c in bf16]})
  return {
      "ran": True, "file": src.name(PLAN),
      "chips": [{"key": c, "name": d["chips"][c]["name"], "f32_tflops": d["chips"][c]["f32"] / 1e12,
                 "f32_as": d["chips"][c]["f32_as"], "bf16_tflops": d["chips"][c]["bf16"] / 1e12}
                for c in chips],
      "bf16_chips": [d["chips"][c]["name"] for c in bf16],
      "runs": runs, "command": d["command"].strip(), "machine": d["machine"], "jax": d["jax"],
      "num_devices": d["num_devices"], "mfu": d["mfu"], **measured(src, d["mfu"]),
      "ran_on": src.ran_on([PLAN]),
  }
