r"""The plan of each paper variant (`run(config)`): `el_jax.tools.plan.plan` on forced CPU
devices, written as plan.json (every number, per variant) and plan.md (the table) under
`config.results_dir`."""
import json
import os
import platform
import sys
import time

from el_jax.tools import plan as plan_lib

COMMAND = "python -m el_jax.experiment --config=tools/plan_paper/config.py:cpu"


def table(runs, num_devices, mfu):
  """The markdown table of `runs` ({label: plan})."""
  chips = plan_lib.CHIPS
  head = ("| config | params | rows x tokens (per step) | FLOPs/step (XLA) | XLA / 6ND | "
          "bytes/device: args + temp = peak | steps x seeds | "
          + " | ".join(f"{c['name']} h" for c in chips.values())
          + " | " + " | ".join(f"{c['name']} h, bf16" for k, c in chips.items() if k != "tpu_v5e")
          + " | compile s |")
  lines = [head, "|" + "---|" * (head.count("|") - 1)]
  for label, p in runs.items():
    b = p["bytes_per_device"]
    m = p["model"]
    lines.append(
        f"| `{label}` | {plan_lib.fmt_count(p['params'])} | {p['rows_per_step']:,} x "
        f"{m['context_len']:,} = {p['tokens_per_step']:,} | {p['flops_per_step']:.3g} | "
        f"{p['flops_per_step'] / p['flops_6nd']:.2f} | {plan_lib.fmt_bytes(b['arguments'])} + "
        f"{plan_lib.fmt_bytes(b['temporaries'])} = {plan_lib.fmt_bytes(b['peak_estimate'])} | "
        f"{p['num_steps']:,} x {p['num_seeds']} | "
        + " | ".join(plan_lib.fmt_hours(p["chips"][k]["hours_all_seeds"]) for k in chips)
        + " | " + " | ".join(plan_lib.fmt_hours(p["chips"][k]["hours_all_seeds_bf16"])
                             for k in chips if k != "tpu_v5e")
        + f" | {p['compile_s']:.1f} |")
  peaks = "; ".join(f"{c['name']} {c['f32'] / 1e12:g} ({c['f32_as']}) / {c['bf16'] / 1e12:g} (bf16) "
                    f"TFLOP/s" for c in chips.values())
  notes = [
      "",
      f"Accelerator-hours: the whole run (train.num_steps steps of every seed, evaluations not "
      f"counted) on {num_devices} chips at MFU {mfu}, hours = FLOPs/step x steps / (peak x MFU) / "
      f"3600 x seeds. The `h` columns use the peak that applies to model.dtype under JAX's "
      f"default matmul precision (every paper variant is float32: a bfloat16 pass on TPU, TF32 on "
      f"A100 / H100); `h, bf16` the bf16 dense peak (a run with model.dtype=\"bfloat16\"). "
      f"Dense peaks: {peaks}.",
      "FLOPs/step: XLA's cost analysis of the step compiled for one of the "
      f"{num_devices} devices (the SPMD program), x {num_devices}; it counts the optimizer "
      "update that every replica runs. 6ND = 6 x params x tokens per step. Bytes per device: "
      "XLA CPU's memory analysis (arguments = params + optimizer state + the batch shard; the "
      "outputs alias the donated state); a TPU / GPU compilation differs: an estimate.",
  ]
  for label, p in runs.items():
    for note in p["notes"]:
      notes.append(f"`{label}`: {note}")
  notes.append("Sources: " + "; ".join(f"{c['name']}: {c['source']}" for c in chips.values()))
  return "\n".join(lines + notes) + "\n"


def labels(config):
  """The "name:variant" of every config the plan covers: `config.only`, or every paper variant."""
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
  """Plans every config of `labels(config)`; writes plan.json and plan.md; returns plan.json's
  content."""
  plan_lib.force_cpu_devices(config.num_devices)  # before JAX starts its backend
  import jax
  if jax.device_count() < config.num_devices:
    raise ValueError(f"config.num_devices={config.num_devices}: JAX's backend was started with "
                     f"{jax.device_count()} devices before the plan could force them; run the "
                     f"plan in a process of its own (python -m el_jax.experiment ...)")
  from el_jax.run import config as config_lib
  from el_jax.infra import provenance
  runs = {}
  for label in labels(config):
    name, variant = label.split(":")
    t0 = time.perf_counter()
    p = plan_lib.plan(config_lib.get_config(name, variant), config.num_devices,
                      config.rows or None, config.mfu)
    p["config"] = f"configs/{name}.py:{variant}"
    p["plan_wall_s"] = round(time.perf_counter() - t0, 2)
    print(plan_lib.report(p, p["config"]), flush=True)
    runs[label] = p
  os.makedirs(config.results_dir, exist_ok=True)
  overrides = [f"--config.{k}={config[k]}" for k, default in
               (("num_devices", 8), ("mfu", 0.4), ("only", ""), ("rows", 0))
               if config[k] != default]
  meta = {"num_devices": config.num_devices, "mfu": config.mfu, "peak": "dtype",
          "ran_on": provenance.ran_on(),
          "jax": jax.__version__, "machine": f"{platform.machine()} {os.cpu_count()} cores",
          "chips": plan_lib.CHIPS, "command": " ".join([COMMAND, *overrides])}
  doc = {**meta, "runs": runs}
  with open(os.path.join(config.results_dir, "plan.json"), "w") as f:
    json.dump(doc, f, indent=1)
  with open(os.path.join(config.results_dir, "plan.md"), "w") as f:
    f.write(f"# Paper-size runs, planned before launch (`{meta['command'].strip()}`)\n\n")
    f.write(table(runs, config.num_devices, config.mfu))
  print(f"wrote {config.results_dir}/plan.json and plan.md", file=sys.stderr)
  return doc
