"""The pure training step and what builds it from a config: mesh, model config, initial state.

  state = step.init_state(model_cfg, tx, seed)      # {"params", "opt_state", "step"}
  state, metrics = step.train_step(graphdef, loss_fn, tx, groups, state, batch)

Every function here is a module-level pure function (tests call them un-jitted);
`el_jax.run.setup.Trainer` jits `train_step` with the state donated, the params replicated and
the batch sharded over the `data` axis of `make_mesh`. A task may supply another step with
the same signature (`el_jax.core.tasks.base.Task.step_fn`; the MLM task's adversarial step).
"""
import dataclasses
import sys

import jax
import jax.numpy as jnp
import optax

from el_jax.core import losses
from el_jax.infra import provenance
from el_jax.core.models import decoder


def model_config(config, vocab_size, context_len):
  """The DecoderConfig of `config.model` for the task's vocabulary and context, computing
  attention in `config.train.attention_blocks` query blocks."""
  return with_attention_blocks(decoder.config_from(config.model, vocab_size, context_len),
                               config)


def with_attention_blocks(model_cfg, config):
  """`model_cfg` with `attention_blocks` from `config.train` (1, one einsum, when absent)."""
  n = int(config.train.get("attention_blocks", 1))
  return model_cfg if n == model_cfg.attention_blocks else dataclasses.replace(
      model_cfg, attention_blocks=n)


def default_num_devices():
  """The devices `num_devices=0` means (`make_mesh`, `runner.fit_devices`): all of them,
  every process's (`jax.device_count()`). The test suite narrows it to one of its 8 forced
  CPU devices (conftest.py)."""
  return jax.device_count()


def make_mesh(num_devices=0):
  """1-D `data` mesh over the first `num_devices` devices (0 = `default_num_devices()`, all).
  With several processes (el_jax.infra.distributed) `jax.devices()` are those of every process, and
  the mesh takes them all."""
  devs = jax.devices()
  n = num_devices or default_num_devices()
  if n > len(devs):
    raise ValueError(f"num_devices={n} but only {len(devs)} devices are visible")
  if jax.process_count() > 1 and n != len(devs):
    raise ValueError(f"num_devices={n}: with {jax.process_count()} processes the mesh must take "
                     f"every device of every process; set num_devices=0 (or {len(devs)})")
  return jax.make_mesh((n,), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=devs[:n])


def init_state(model_cfg, tx, seed):
  _, params = decoder.init(model_cfg, seed)
  return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}


def masked_mean(x, m):
  return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def train_step(graphdef, loss_fn, tx, groups, state, batch, positions=None, reduce_fn=None):
  """One optimizer step. Returns (new_state, metrics).

  The objective is `reduce_fn(per_token_loss, loss_mask)` (`losses.get_reduction`;
  None = the masked mean, the "mean" reduction); the metric `loss` is that objective,
  `loss_<g>` the plain masked means.

  `groups`: the task's metric groups; the batch holds a `mask_<g>` for each
  (see `el_jax.core.tasks.base`), and the metrics `loss_<g>`, `ce_<g>`, `n_<g>`.
  `positions` (optional, static int array): the only positions where any of
  the batch's masks can be nonzero. Logits, losses and metrics are then
  computed there only (the model skips the last block's queries and MLP and
  the unembedding elsewhere); the result equals that of `positions=None` up
  to float rounding. `Trainer` passes the task's `scored_positions`.
  """
  if positions is not None:
    batch = dict(batch)
    for key in ("targets", "loss_mask", *(f"mask_{g}" for g in groups)):
      batch[key] = batch[key][:, positions]

  def objective(params):
    logits = decoder.apply(graphdef, params, batch["inputs"], batch["segment_ids"], positions)
    per_tok = loss_fn(logits, batch["targets"])
    return (reduce_fn or masked_mean)(per_tok, batch["loss_mask"]), (logits, per_tok)

  (loss, (logits, per_tok)), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
  updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
  params = optax.apply_updates(state["params"], updates)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
  stats = losses.margin_stats(logits, batch["targets"], batch["loss_mask"])
  metrics = {"loss": loss, "ce": masked_mean(ce, batch["loss_mask"])}
  for g in groups:
    m = batch[f"mask_{g}"]
    metrics[f"loss_{g}"] = masked_mean(per_tok, m)
    metrics[f"ce_{g}"] = masked_mean(ce, m)
    metrics[f"n_{g}"] = jnp.sum(m)
  metrics.update({
      "margin_mean": stats["margin_mean"],
      "margin_min": stats["margin_min"],
      "fitted_frac": stats["fitted_frac"],
      "grad_norm": optax.tree.norm(grads),
      "update_norm": optax.tree.norm(updates),
      "param_norm": optax.tree.norm(params),
  })
  new_state = {"params": params, "opt_state": opt_state, "step": state["step"] + 1}
  return new_state, metrics


# `train.cpu_dots`: XLA debug options for the CPU backend's matmuls, passed per compiled
# function (`jax.jit(compiler_options=...)`), so one process can time both (el_jax.tools.bench).
# "xla": XLA's own choice (in jax 0.10.2, dots run as YNNPACK fusions); every committed
# result was trained with it. "eigen": XLA's Eigen dot emitter, no XNNPACK / YNNPACK
# fusions: as fast on the CPU of the committed figures, slower on a 2-core Zen 4
# (docs/bench.md), different rounding. "auto": the set of CPU_KINDS for this CPU.
CPU_DOTS = {
    "xla": {},
    "eigen": {"xla_cpu_use_xnnpack": False, "xla_cpu_experimental_ynn_fusion_type": ""},
}

# `train.cpu_dots="auto"`: the CPU_DOTS set per CPU kind, the first row whose ISA flags
# (el_jax.infra.provenance.ISA_FLAGS, from /proc/cpuinfo) this CPU has all of. A row is what was
# measured on that kind (docs/bench.md, results/bench_vs_torch/); a CPU no row was measured
# on gets the last row, XLA's own choice. `cpu_kind()` says which row a process uses, and
# the bench JSON records it.
CPU_KINDS = (
    # AMD EPYC (Zen 4, 2 cores): YNNPACK's dots use both cores (a [1696, 128] x
    # [128, 512] dot at 210 GFLOP/s, 1.9x one core); Eigen's reach 105-137 GFLOP/s. The
    # Intel Xeons (Emerald Rapids, Cascade Lake) and the Zen 5 (the default step 1.15x the
    # Eigen one) measured the same way round (docs/bench.md).
    {"kind": "avx512", "flags": ("avx512f",), "cpu_dots": "xla"},
    # Not measured with ISA flags recorded: XLA's own choice.
    {"kind": "other", "flags": (), "cpu_dots": "xla"},
)


def cpu_kind(flags=None):
  """The CPU_KINDS row of this CPU (or of the ISA `flags` given)."""
  if flags is None:
    flags = provenance.cpu_model()[1]
  return next(row for row in CPU_KINDS if set(row["flags"]) <= set(flags))


def cpu_dots(config, flags=None):
  """The CPU_DOTS name `config.train.cpu_dots` stands for on this CPU ("auto" resolved)."""
  name = config.train.get("cpu_dots", "xla")
  return cpu_kind(flags)["cpu_dots"] if name == "auto" else name


def compiler_options(config):
  """The `jax.jit` compiler options of `config.train.cpu_dots` ({} off the CPU backend), less
  those the running XLA does not know (`known_options`)."""
  if jax.default_backend() != "cpu":
    return {}
  return known_options(CPU_DOTS[cpu_dots(config)])


# XLA's debug options come and go between jaxlib versions, and `jax.jit` fails on one its
# XLA does not know ("No such compile option"). Each option of CPU_DOTS is checked once per
# process against the running XLA (a one-op program compiled with it, a few ms); one it does
# not know is left out, with one line on stderr, and the options a run used are what
# `compiler_options` returns (`Trainer.compiler_options`; the bench JSON records them).
_KNOWN_OPTIONS = {}  # option name -> whether this process's XLA knows it


def known_options(options):
  """`options` ({XLA debug option: value}) without those the running XLA does not know."""
  out = {}
  for name, value in options.items():
    if name not in _KNOWN_OPTIONS:
      try:
        jax.jit(lambda x: x + 1).lower(jnp.zeros((), jnp.float32)).compile(
            compiler_options={name: value})
        _KNOWN_OPTIONS[name] = True
      except Exception as e:  # noqa: BLE001 -- jax's runtime error; only this one is ours
        if "No such compile option" not in str(e):
          raise
        _KNOWN_OPTIONS[name] = False
        print(f"el_jax: the XLA of jaxlib {jax.lib.__version__} has no compile option "
              f"{name}; left out", file=sys.stderr)
    if _KNOWN_OPTIONS[name]:
      out[name] = value
  return out


def ce_objectives(graphdef):
  """(loss_fn, logits_fn) of the mean CE on a batch's scored tokens (`loss_mask`).

  The pure functions of params and batch that el_jax.core.flatness measures:
  `loss_fn(params, batch) -> scalar`, `logits_fn(params, batch) -> (logits, mask)`.
  """
  ce = losses.get_loss("ce")

  def logits_fn(params, batch):
    return decoder.apply(graphdef, params, batch["inputs"], batch["segment_ids"]), batch["loss_mask"]

  def loss_fn(params, batch):
    logits, mask = logits_fn(params, batch)
    return masked_mean(ce(logits, batch["targets"]), mask)

  return loss_fn, logits_fn


def step_flops(jitted, *args):
  """(FLOPs of one call of the jitted function `jitted` on `args` (arrays or
  `jax.ShapeDtypeStruct`s), where the count comes from): XLA's cost analysis of the lowered
  program (before optimisation, nothing compiled or run); where the backend gives none there
  (the CUDA backend of jax 0.11), that of the compiled program; NaN when neither does."""
  lowered = jitted.lower(*args)
  for source, get in (("lowered", lowered.cost_analysis),
                      ("compiled", lambda: lowered.compile().cost_analysis())):
    cost = get()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    if cost and cost.get("flops"):
      return float(cost["flops"]), f"XLA cost analysis ({source})"
  return float("nan"), "none: XLA's cost analysis gave no FLOPs"
