r"""Paper-size runs checked before launch: compile the train step of any config, count its cost.

  python -m el_jax.tools.plan --config=configs/path_star.py:paper [--num_devices=8] [--mfu=0.4]
      [--batch=<rows per step>] [--peak=dtype|bf16] [--out=plan.json]

Builds the config's model, optimizer, loss and the jitted train step exactly as
`el_jax.run.setup.Trainer` does (params and optimizer state replicated, the batch sharded over
the `data` axis of a mesh of `--num_devices` devices, the state donated), from abstract
inputs (`jax.ShapeDtypeStruct`): no data set is built and nothing is allocated. The batch's
shapes come from the task's `abstract_batch_spec(config)` (el_jax.core.tasks). The command runs
on `--num_devices` forced CPU devices (`jax_num_cpu_devices`, set before JAX starts its
backend), compiles the step with XLA's CPU backend and prints:

  parameters       from `jax.eval_shape` of the initialisation
  FLOPs per step   XLA's cost analysis of the compiled step. With N devices the compiled
                   module is the SPMD program of one device (checked: a matmul sharded
                   over 8 devices reports 1/8 of its 1-device FLOPs), so the step's FLOPs
                   are the per-device count x N. That product counts the optimizer update,
                   which every device runs on its replica, N times: it is what N chips
                   execute. 6 * params * tokens is printed beside it as a sanity check.
  bytes per device XLA's memory analysis of the same program: arguments (params, optimizer
                   state, the device's batch shard), outputs, outputs aliased to the donated
                   arguments, temporaries; peak ~ arguments + outputs - aliased + temporaries.
                   These are the CPU backend's buffers; a TPU / GPU compilation lays out and
                   fuses differently, so take them as an estimate.
  tokens per step  rows x context length (and the positions whose logits the step computes:
                   the task's `scored_positions`, all positions when None)
  accelerator-hours of the whole run (train.num_steps steps of every seed in config.seeds,
                   the seeds trained one after the other, evaluations not counted) on a TPU
                   v5e, an A100 and an H100 at `--mfu` (default 0.4):
                     hours = FLOPs per step x num_steps / (peak FLOP/s x MFU) / 3600,
                   summed over seeds; the FLOPs per step are those of all N devices, so this
                   is chip-hours on N chips.

Which peak (`--peak`): "dtype" (the default) takes, for each chip, the dense matmul peak that
applies to `config.model.dtype` under JAX's default matmul precision (docs.jax.dev/en/latest/
201/precision.html: float32 dots run as bfloat16 passes on TPU and as TF32 on A100 / H100).
The models here are float32 unless config.model.dtype="bfloat16", so a float32 config gets
TPU v5e 197 (bf16), A100 156 (TF32), H100 494.5 (TF32) TFLOP/s; a bfloat16 config gets the
bf16 dense peaks 197 / 312 / 989. "bf16" takes the bf16 dense peaks for every dtype (what a
run with model.dtype="bfloat16" would see). Peaks are per chip, dense (no 2:4 sparsity):

  TPU v5e    197 TFLOP/s bf16; 16 GB HBM           https://cloud.google.com/tpu/docs/v5e
  A100 SXM   312 bf16 / 156 TF32 dense; 40/80 GB   NVIDIA A100 datasheet, https://www.nvidia.com/
             content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-
             1758950-r4-web.pdf ("624 / 312 TFLOPS*" with sparsity)
  H100 SXM   989 bf16 / 494.5 TF32 dense; 80 GB    NVIDIA H100 datasheet, https://www.nvidia.com/
             en-us/data-center/h100/ (listed "1,979 / 989 teraFLOPS*", *with sparsity: dense is
             half)

The step planned is `el_jax.core.step.train_step`, the step of every task except the MLM task with
`adversarial.enabled`, whose extra meta-learning term (el_jax.core.adversarial) needs its downstream
data and is not planned: the plain MLM step is, and the output says so. `--batch` overrides
the rows per step (it must be a multiple of the devices); a bad config or a batch that does
not split is one line `error: ...` (el_jax.run.cli).

Library use (the test suite and tools/plan_paper/): `plan(config, num_devices, rows,
mfu)` returns the same numbers as a dict on the devices JAX already has.
"""
import functools
import json
import os
import sys
import time

from absl import flags

from el_jax.run import cli
from el_jax.run import setup as setup_lib

DEFAULT_MFU = 0.4
DEFAULT_DEVICES = 8
TF = 1e12

# Dense matmul peaks per chip (module docstring): "bf16" and "f32" (what float32 dots run at
# under JAX's default precision: one bfloat16 pass on TPU, TF32 on A100 / H100).
CHIPS = {
    "tpu_v5e": {"name": "TPU v5e", "bf16": 197 * TF, "f32": 197 * TF, "f32_as": "bf16 pass",
                "hbm_bytes": 16e9,
                "source": "https://cloud.google.com/tpu/docs/v5e (peak compute per chip, bf16: "
                          "197 TFLOPs; HBM 16 GB)"},
    "a100": {"name": "A100 SXM", "bf16": 312 * TF, "f32": 156 * TF, "f32_as": "TF32",
             "hbm_bytes": 80e9,
             "source": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                       "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (BF16 Tensor Core "
                       "312 TFLOPS dense, 624 with sparsity; TF32 156 dense; 40 or 80 GB)"},
    "h100": {"name": "H100 SXM", "bf16": 989 * TF, "f32": 494.5 * TF, "f32_as": "TF32",
             "hbm_bytes": 80e9,
             "source": "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: BF16 Tensor "
                       "Core 1,979 TFLOPS and TF32 989 TFLOPS with sparsity, half of that dense; "
                       "80 GB)"},
}
PEAKS = ("dtype", "bf16")


def accelerator_hours(flops_per_step, num_steps, peak_flops, mfu):
  """Chip-hours of `num_steps` steps of `flops_per_step` FLOPs (all chips together) at
  `mfu` x `peak_flops` FLOP/s per chip."""
  return flops_per_step * num_steps / (peak_flops * mfu) / 3600.0


def chip_peak(chip, dtype, peak="dtype"):
  """(peak FLOP/s, what the matmuls run as) of `chip` (a CHIPS entry) for `dtype`."""
  if peak == "bf16" or dtype == "bfloat16":
    return chip["bf16"], "bf16"
  return chip["f32"], chip["f32_as"]


def force_cpu_devices(n):
  """Makes JAX start its CPU backend with `n` devices; no effect once the backend is up (an
  in-process caller, e.g. the test suite, keeps the devices it has)."""
  import jax
  try:
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", int(n))
  except RuntimeError:
    pass


def _check_args(num_devices, rows, mfu, peak):
  if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
    raise ValueError(f"--num_devices={num_devices!r} must be an integer >= 1")
  if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
    raise ValueError(f"--batch={rows!r} must be an integer >= 1 (rows per step; 0 = the config's)")
  if not 0.0 < float(mfu) <= 1.0:
    raise ValueError(f"--mfu={mfu} must be in (0, 1] (the fraction of the chip's peak reached)")
  if peak not in PEAKS:
    raise ValueError(f"--peak={peak!r}; allowed: {PEAKS}")


def abstract_graphdef(model_cfg):
  """The model's graphdef without materialising its parameters (`nnx.eval_shape`)."""
  # Heavy (JAX, Flax): imported when a plan is made, after `force_cpu_devices`.
  import jax
  from flax import nnx
  from el_jax.core.models import decoder
  model = nnx.eval_shape(lambda: decoder.module_class(model_cfg)(
      model_cfg, rngs=nnx.Rngs(params=jax.random.key(0))))
  graphdef, _ = nnx.split(model, nnx.Param)
  return graphdef


def abstract_batch(groups, rows, context_len, sharding):
  """ShapeDtypeStructs of a training batch (el_jax.core.tasks.base's keys) sharded by `sharding`."""
  import jax
  import jax.numpy as jnp

  def arr(dtype):
    return jax.ShapeDtypeStruct((rows, context_len), dtype, sharding=sharding)
  return {"inputs": arr(jnp.int32), "targets": arr(jnp.int32), "segment_ids": arr(jnp.int32),
          "loss_mask": arr(jnp.float32), **{f"mask_{g}": arr(jnp.float32) for g in groups}}


def compile_step(config, num_devices=DEFAULT_DEVICES, rows=None, compiler_options=None):
  """(compiled step, info dict) of `config`'s train step on a `num_devices` mesh with `rows`
  rows per step (None = the config's), from abstract inputs. `compiler_options` are added to
  the config's (`el_jax.core.step.compiler_options`), e.g. {"xla_backend_optimization_level": 0}
  (LLVM's optimisation off: a faster compilation with the same HLO, so the same cost and
  memory analyses; the test suite uses it)."""
  # Heavy (JAX and the library): imported when a plan is made, after `force_cpu_devices`,
  # so that `--help` and argument errors answer at once.
  import jax
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P
  from el_jax.core import losses
  from el_jax.core import optim
  from el_jax.core import step as step_lib
  from el_jax.core import tasks
  from el_jax.core.models import decoder

  setup_lib.validate_config(config)
  task_cls = tasks.get_task_class(config.task)
  spec = task_cls.abstract_batch_spec(config)
  rows = spec["rows"] if rows is None else rows
  mesh = step_lib.make_mesh(num_devices)
  n = mesh.devices.size
  if rows % n:
    what = task_cls.describe_batch(config) if rows == spec["rows"] else f"--batch={rows}"
    raise ValueError(f"{what}: {rows} rows per step cannot be split over {n} devices; use a "
                     f"batch that is a multiple of {n} (--batch), or another --num_devices")
  t_len = int(spec["context_len"])
  model_cfg = step_lib.model_config(config, spec["vocab_size"], t_len)
  loss_fn = losses.get_loss_from_config(config.loss)
  reduce_fn = losses.get_reduction_from_config(config.loss)
  tx, _ = optim.make_optimizer(config.optim, config.train.num_steps)
  repl, data_sh = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

  t0 = time.perf_counter()
  graphdef = abstract_graphdef(model_cfg)
  abstract = jax.eval_shape(functools.partial(step_lib.init_state, model_cfg, tx), 0)
  state = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl), abstract)
  state_sh = jax.tree.map(lambda _: repl, abstract)
  batch = abstract_batch(task_cls.groups, rows, t_len, data_sh)
  positions = spec["scored_positions"]
  step_kw = {"positions": positions}
  if config.loss.get("reduction", "mean") != "mean":  # as el_jax.run.setup.Trainer
    step_kw["reduce_fn"] = reduce_fn
  step = jax.jit(functools.partial(step_lib.train_step, graphdef, loss_fn, tx, task_cls.groups,
                                   **step_kw),
                 in_shardings=(state_sh, data_sh), out_shardings=(state_sh, repl),
                 donate_argnums=0,
                 compiler_options={**step_lib.compiler_options(config), **(compiler_options or {})})
  lowered = step.lower(state, batch)
  t1 = time.perf_counter()
  compiled = lowered.compile()
  t2 = time.perf_counter()

  notes = []
  if "adversarial" in config and config.adversarial.get("enabled", False):
    notes.append("adversarial.enabled: planned the plain MLM step (el_jax.core.step.train_step); the "
                 "adversarial term of el_jax.core.adversarial (a ridge head fitted on D1 and a second "
                 "loss on D2 per step) is not counted")
  if config.model.get("pretrained", ""):
    notes.append("model.pretrained: planned with the config's model sizes (el_jax.run.train checks "
                 "that they equal the checkpoint's)")
  info = {
      "task": config.task, "model_cfg": model_cfg, "spec": spec, "rows": rows, "num_devices": n,
      "context_len": t_len, "params": decoder.num_params(abstract["params"]),
      "logit_positions": t_len if positions is None else len(positions),
      "trace_lower_s": t1 - t0, "compile_s": t2 - t1, "notes": notes,
  }
  return compiled, info


def plan(config, num_devices=DEFAULT_DEVICES, rows=None, mfu=DEFAULT_MFU, peak="dtype",
         compiler_options=None):
  """The plan of `config` (module docstring) as a JSON-able dict, on the devices JAX has
  (`compiler_options`: see `compile_step`)."""
  _check_args(num_devices, rows, mfu, peak)
  compiled, info = compile_step(config, num_devices, rows, compiler_options)
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  flops_dev = float(cost.get("flops", float("nan")))
  mem = compiled.memory_analysis()
  n, rows, t_len, params = info["num_devices"], info["rows"], info["context_len"], info["params"]
  mc = info["model_cfg"]
  flops_step = flops_dev * n
  tokens = rows * t_len
  steps, seeds = int(config.train.num_steps), len(config.seeds)
  byts = {"arguments": int(mem.argument_size_in_bytes), "outputs": int(mem.output_size_in_bytes),
          "aliased": int(mem.alias_size_in_bytes), "temporaries": int(mem.temp_size_in_bytes)}
  byts["peak_estimate"] = (byts["arguments"] + byts["outputs"] - byts["aliased"]
                           + byts["temporaries"])
  chips = {}
  for key, chip in CHIPS.items():
    p, runs_as = chip_peak(chip, mc.dtype, peak)
    per_seed = accelerator_hours(flops_step, steps, p, mfu)
    chips[key] = {"name": chip["name"], "peak_flops": p, "matmuls_as": runs_as,
                  "hours_per_seed": per_seed, "hours_all_seeds": per_seed * seeds,
                  "hours_all_seeds_bf16": accelerator_hours(flops_step, steps, chip["bf16"], mfu)
                  * seeds,
                  "hbm_bytes": chip["hbm_bytes"],
                  "fits_hbm": byts["peak_estimate"] <= chip["hbm_bytes"], "source": chip["source"]}
  return {
      "task": info["task"], "num_devices": n, "platform": compiled_platform(),
      "model": {"preset": config.model.preset, "num_layers": mc.num_layers,
                "num_heads": mc.num_heads, "embed_dim": mc.embed_dim, "mlp_dim": mc.mlp_dim,
                "vocab_size": mc.vocab_size, "context_len": t_len, "dtype": mc.dtype},
      "params": params,
      "rows_per_step": rows, "rows_per_device": rows // n, "config_rows_per_step": info["spec"]["rows"],
      "tokens_per_step": tokens, "logit_positions_per_step": rows * info["logit_positions"],
      "num_steps": steps, "num_seeds": seeds,
      "flops_per_step_per_device": flops_dev, "flops_per_step": flops_step,
      "flops_6nd": 6.0 * params * tokens,
      "bytes_accessed_per_device": float(cost.get("bytes accessed", float("nan"))),
      "bytes_per_device": byts,
      "trace_lower_s": round(info["trace_lower_s"], 2), "compile_s": round(info["compile_s"], 2),
      "mfu": float(mfu), "peak": peak, "chips": chips, "notes": info["notes"],
  }


def paper_variants(prefix="paper"):
  """[(config name, variant)] of every configs/*.py variant named `prefix` or `prefix_*`
  whose task the generic loop trains with the decoder (a `Task` without a model of its own,
  `Task.own_model`: one el_jax.tools.plan can plan)."""
  # Heavy (the task registry imports JAX): only when the variants are listed.
  from el_jax.run import config as config_lib
  from el_jax.core import tasks
  out = []
  for fname in sorted(os.listdir(config_lib.configs_dir())):
    if not fname.endswith(".py") or fname.startswith("_"):
      continue
    name = fname[:-3]
    module = config_lib.load_config_module(name)
    for variant in getattr(module, "VARIANTS", ()):
      if variant == prefix or variant.startswith(prefix + "_"):
        target = tasks.get(module.get_config(variant).task)
        if tasks.is_task_class(target) and not target.own_model:
          out.append((name, variant))
  return out


def compiled_platform():
  import jax
  return f"{jax.devices()[0].platform} (jax {jax.__version__})"


# ----------------------------------------------------------------------------
# Printing


def fmt_bytes(b):
  for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
    if abs(b) >= size:
      return f"{b / size:.2f} {unit}"
  return f"{b} B"


def fmt_count(x):
  for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
    if abs(x) >= size:
      return f"{x / size:.2f}{unit}"
  return str(x)


def fmt_hours(h):
  return f"{h:,.1f}" if h >= 1 else f"{h:.3f}"


def report(p, label=""):
  """The plan `p` as readable text."""
  m, b = p["model"], p["bytes_per_device"]
  n = p["num_devices"]
  lines = [
      f"plan: {label or p['task']} (task {p['task']}) on {n} device(s), {p['platform']}; "
      f"trace + lower {p['trace_lower_s']:.1f} s, compile {p['compile_s']:.1f} s",
      f"  model        {m['preset']} {m['num_layers']} layers x {m['embed_dim']}, {m['num_heads']} "
      f"heads, MLP {m['mlp_dim']}, vocab {m['vocab_size']:,}, context {m['context_len']:,}, "
      f"{m['dtype']}: {p['params']:,} parameters ({fmt_count(p['params'])})",
      f"  batch        {p['rows_per_step']:,} rows x {m['context_len']:,} tokens = "
      f"{p['tokens_per_step']:,} tokens per step ({p['rows_per_device']:,} rows per device"
      + (f"; the config's {p['config_rows_per_step']:,} rows overridden"
         if p["rows_per_step"] != p["config_rows_per_step"] else "")
      + f"); logits at {p['logit_positions_per_step']:,} positions per step",
      f"  run          {p['num_steps']:,} steps x {p['num_seeds']} seed(s)",
      f"  FLOPs/step   {p['flops_per_step']:.4g} (XLA cost analysis: {p['flops_per_step_per_device']:.4g}"
      f" per device x {n}); 6 x params x tokens = {p['flops_6nd']:.4g}",
      f"  bytes/device arguments {fmt_bytes(b['arguments'])}, outputs {fmt_bytes(b['outputs'])} "
      f"(aliased to the donated state {fmt_bytes(b['aliased'])}), temporaries "
      f"{fmt_bytes(b['temporaries'])}; peak ~ {fmt_bytes(b['peak_estimate'])}",
      f"  accelerator-hours of the whole run at MFU {p['mfu']:.2f} ({n} chips; "
      + ("peak for model.dtype under JAX's default matmul precision" if p["peak"] == "dtype"
         else "bf16 dense peak") + "):",
      f"    {'chip':10s} {'peak TFLOP/s':>12s} {'matmuls as':>10s} {'per seed':>12s} "
      f"{'all seeds':>12s} {'peak bytes fit HBM':>19s}",
  ]
  for c in p["chips"].values():
    lines.append(f"    {c['name']:10s} {c['peak_flops'] / TF:12.1f} {c['matmuls_as']:>10s} "
                 f"{fmt_hours(c['hours_per_seed']):>12s} {fmt_hours(c['hours_all_seeds']):>12s} "
                 f"{('yes' if c['fits_hbm'] else 'no') + ' (' + fmt_bytes(c['hbm_bytes']) + ')':>19s}")
  for note in p["notes"]:
    lines.append(f"  note: {note}")
  return "\n".join(lines)


def _extra(fv):
  flags.DEFINE_integer("num_devices", DEFAULT_DEVICES, "devices of the data-parallel mesh "
                       "(forced CPU devices)", flag_values=fv)
  flags.DEFINE_float("mfu", DEFAULT_MFU, "model FLOPs utilisation assumed for the "
                     "accelerator-hours, in (0, 1]", flag_values=fv)
  flags.DEFINE_integer("batch", 0, "rows per step (0 = the config's; a multiple of "
                       "--num_devices)", flag_values=fv)
  flags.DEFINE_string("peak", "dtype", "chip peak: 'dtype' (the matmul peak of model.dtype "
                      "under JAX's default precision) or 'bf16' (bf16 dense peak)", flag_values=fv)
  flags.DEFINE_string("out", "", "also write the plan as JSON to this file", flag_values=fv)


def config_label(argv):
  for a in argv[1:]:
    if a.startswith("--config="):
      return a[len("--config="):]
  return ""


@cli.guard
def main(argv=None):
  argv = sys.argv if argv is None else argv
  config, _, fv = cli.parse(argv, extra_flags=_extra, require_workdir=False, doc=__doc__)
  rows = fv.batch or None
  _check_args(fv.num_devices, rows, fv.mfu, fv.peak)
  force_cpu_devices(fv.num_devices)  # before anything starts JAX's backend
  p = plan(config, fv.num_devices, rows, fv.mfu, fv.peak)
  label = config_label(argv)
  p["config"] = label
  print(report(p, label))
  if fv.out:
    os.makedirs(os.path.dirname(os.path.abspath(fv.out)), exist_ok=True)
    with open(fv.out, "w") as f:
      json.dump(p, f, indent=1)
    print(f"wrote {fv.out}", file=sys.stderr)


if __name__ == "__main__":
  main()
