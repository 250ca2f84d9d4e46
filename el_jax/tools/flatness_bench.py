r"""Cost of the flatness estimators as multiples of one gradient, measured in one run.

  python -m el_jax.tools.flatness_bench --config=configs/copy_task.py:cpu [--probes=8,32]

On the copy-task model of the config and one training batch (and
`--batch_multiples` larger ones), times the gradient of the mean CE, one
Hutchinson probe, a probe in a batch of each `--probes` count (the library's
default path: forward-over-forward v^T H v, `hvp_ops.quadratic_form`), a probe
in a batch with the per-layer split (`per_layer=True`: an HVP per probe over
one `jax.linearize`, the former default path), one Fisher draw
(single-gradient estimator: a forward, label sampling and a backward) and one
per-example Fisher draw. Every function is compiled ahead of time with params
and batch as arguments; XLA's `cost_analysis()` of the same executable gives
its FLOPs, printed per probe (or draw) over the gradient's. Rounds are
interleaved so background load hits every function alike; each time ratio is
the median over rounds of the per-round ratio. Targets: a probe in
a batch <= 1.5x a gradient at 64 x 55 tokens, a Fisher draw <= 1.3x. The last
line is `flatness_bench {json}`.

Results (results/flatness_bench/bench.log: `python -m el_jax.tools.flatness_bench
--config=configs/copy_task.py:cpu`, 5 rounds, 2 shared CPU cores with a load
average of 2-10 from other jobs; ratios move by about +-15% between runs):

| path (64 x 55 tokens)                                   | time / gradient | FLOPs / gradient |
|---------------------------------------------------------|-----------------|------------------|
| one probe, v^T H v                                      | 1.51x           | 1.71x            |
| probe in a batch of 8 (the default)                     | **1.24x**       | 1.41x            |
| probe in a batch of 32                                  | 1.22x           | 1.38x            |
| probe in 8, per-layer HVP (the former default)          | 1.88x           | 2.09x            |
| one Fisher draw (single)                                | **1.08x**       | 1.00x            |
| one Fisher draw (per-example)                           | 1.28x           | 1.01x            |

At the 8 x 55 training batch: probe in a batch of 8 1.87x, one probe 1.64x,
per-layer 2.82x, Fisher draw 1.09x (the gradient, 18 ms, is small enough for
per-op overhead and the drawing of the probes to weigh).

What helped: (1) for the trace only v^T H v is needed, not H v: the second
derivative of L(params + t v) by forward-over-forward needs 4 matmuls per
probe per weight matmul (V x, W x', 2 V x', W x'') where an HVP needs 6 (the
tangents of x W, g W^T and g^T x), so an HVP can never get below ~2x a
gradient (FLOPs 2.09x, above). (2) Nested `jax.jvp` computes the first-order
tangents twice and XLA's CSE removed only part of it (89 of the 108 dots of
the jaxpr stay; 1.81x FLOPs); evaluating the jaxpr with identical equations
merged (`hvp_ops._eval_merged`) leaves 69 dots, 1 + 4 per weight matmul and
1 + 5 per attention product, and 1.41x FLOPs. Batched probes then run larger
matmuls than the gradient, so their time ratio is below their FLOP ratio.
What did not: more probes per batch (32: 1.38x FLOPs, about the time of 8); `jax.experimental.jet` (Taylor
mode; 1.47x FLOPs per probe at 8 x 55, as it also multiplies the zero
second-order parameter term) returned NaN or wrong values under vmap at
64 x 55 in JAX 0.10.2, so it is not used; merging in the HVP path (it has no
duplicates: the same FLOPs); an optimization barrier after drawing the probes
(2.00x vs 2.02x at 8 x 55); bfloat16 (this CPU has AVX2/FMA only, and the
results would differ far beyond float32 rounding); remat and donation (the
probes keep no residuals and return scalars). At the 8 x 55 training batch,
drawing 8 x 404k Rademacher signs (threefry) alone costs ~0.14x a gradient per
probe.
"""
import functools
import json
import sys
import time

import jax
import numpy as np
from absl import flags

from el_jax.run import cli
import el_jax.core.flatness.fisher as fisher_lib
import el_jax.core.flatness.trace as trace_lib
from el_jax.core.models import decoder
from el_jax.infra import provenance
from el_jax.core import step as step_lib
from el_jax.run import setup as setup_lib


def _extra(fv):
  flags.DEFINE_list("probes", ["8", "32"], "probe counts per batch for the batched Hutchinson "
                    "rows (the first is the headline figure and the per-layer row's count)",
                    flag_values=fv)
  flags.DEFINE_integer("calls", 10, "calls per function per round (fewer for big probe "
                       "batches: calls * 8 / probes, at least 1)", flag_values=fv)
  flags.DEFINE_integer("repeats", 5, "interleaved rounds (the median ratio is reported)",
                       flag_values=fv)
  flags.DEFINE_list("batch_multiples", ["1", "8"], "batch sizes to time, as multiples of the "
                    "training batch (the small one is dispatch-bound on CPU)", flag_values=fv)


def _positive_ints(name, values):
  try:
    out = [int(v) for v in values]
  except ValueError:
    out = []
  if not out or min(out) < 1:
    raise ValueError(f"--{name}={','.join(values)} must be a list of integers >= 1")
  return out


def make_problem(config):
  """(setup, loss_fn, logits_fn, params, batch) for the config's copy-task model."""
  setup = setup_lib.Setup(config)
  graphdef, params = decoder.init(setup.model_cfg, 0)
  loss_fn, logits_fn = step_lib.ce_objectives(graphdef)

  batch = {k: np.asarray(v) for k, v in setup.batch(0, 0).items()}
  return setup, loss_fn, logits_fn, params, batch


def _timer(fn, calls):
  def run():
    t0 = time.perf_counter()
    for _ in range(calls):
      out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls
  return run


def _flops(compiled):
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan")))


def measure(loss_fn, logits_fn, params, batch, probe_counts, calls, repeats):
  """Per-probe / per-draw time and XLA FLOPs of each estimator piece over one gradient's.

  Every function is compiled ahead of time (its `cost_analysis()` gives the
  FLOPs) and the compiled executable is timed. Rounds are interleaved; the
  time ratio is the median over rounds of the per-round ratio.

  Returns:
    (gradient ms, gradient FLOPs, {name: (ms per unit, time ratio, FLOP ratio)}).
  """
  stacked = jax.tree.map(lambda x: x[None], batch)
  key = jax.random.key(0)
  trace = lambda p, per_layer: trace_lib._trace_stacked.lower(
      loss_fn, "hutchinson", p, "rademacher", None, per_layer, params, stacked, key).compile()
  fisher = lambda est: fisher_lib._fisher_stacked.lower(
      logits_fn, est, 1, None, "labels", params, stacked, key).compile()
  pieces = {"grad": (jax.jit(jax.grad(loss_fn)).lower(params, batch).compile(), (params, batch), 1)}
  pieces["probe"] = (trace(1, False), (params, stacked, key), 1)
  for p in probe_counts:
    pieces[f"probes_{p}"] = (trace(p, False), (params, stacked, key), p)
  p0 = probe_counts[0]
  pieces[f"probes_per_layer_{p0}"] = (trace(p0, True), (params, stacked, key), p0)
  pieces["fisher_draw"] = (fisher("single"), (params, stacked, key), 1)
  pieces["fisher_draw_per_example"] = (fisher("per_example"), (params, stacked, key), 1)
  runners = {}
  for name, (compiled, args, units) in pieces.items():
    fn = functools.partial(compiled, *args)
    jax.block_until_ready(fn())  # warm
    runners[name] = _timer(fn, max(1, calls * 8 // max(units, 8)))
  times = {name: [] for name in pieces}
  names = list(pieces)
  for r in range(repeats):
    for name in (names if r % 2 == 0 else names[::-1]):
      times[name].append(runners[name]() / pieces[name][2])
  g = np.asarray(times["grad"])
  g_flops = _flops(pieces["grad"][0])
  out = {}
  for name, (compiled, _, units) in pieces.items():
    if name != "grad":
      out[name] = (1e3 * float(np.median(times[name])),
                   float(np.median(np.asarray(times[name]) / g)),
                   _flops(compiled) / units / g_flops)
  return 1e3 * float(np.median(g)), g_flops, out


def _label(name):
  if name == "probe":
    return "one Hutchinson probe (v^T H v)", None
  if name.startswith("probes_per_layer_"):
    return f"probe in {name.rsplit('_', 1)[1]}, per-layer (HVP)", None
  if name.startswith("probes_"):
    return f"probe in a batch of {name.rsplit('_', 1)[1]}", 1.5
  return {"fisher_draw": ("one Fisher draw (single)", 1.3),
          "fisher_draw_per_example": ("one Fisher draw (per-example)", None)}[name]


@cli.guard
def main(argv=None):
  config, _, fv = cli.parse(sys.argv if argv is None else argv, extra_flags=_extra,
                            require_workdir=False, doc=__doc__)
  probe_counts = _positive_ints("probes", fv.probes)
  multiples = _positive_ints("batch_multiples", fv.batch_multiples)
  cli.log_devices()
  setup, loss_fn, logits_fn, params, batch = make_problem(config)
  m = setup.model_cfg
  n_params = decoder.num_params(params)
  print(f"model: {m.num_layers} layers x {m.embed_dim} wide, {n_params} params, "
        f"{jax.devices()[0].platform}; {fv.repeats} interleaved rounds of {fv.calls} calls "
        f"({fv.calls} * 8 / probes for probe batches), probes per batch {probe_counts}")
  print("columns: time per probe (or draw), its median ratio to one gradient over the rounds, "
        "and XLA's FLOP count per probe over the gradient's")
  out = {"num_params": n_params, "num_probes": probe_counts}
  for mult in multiples:
    b = jax.tree.map(lambda x: np.concatenate([x] * mult), batch)
    g_ms, g_flops, res = measure(loss_fn, logits_fn, params, b, probe_counts, fv.calls,
                                 fv.repeats)
    print(f"batch {b['inputs'].shape[0]} x {b['inputs'].shape[1]} tokens "
          f"({int(b['loss_mask'].sum())} scored; {mult}x the training batch): "
          f"gradient {g_ms:.2f} ms, {g_flops / 1e9:.3f} GFLOP")
    for name, (ms, ratio, flops) in res.items():
      label, target = _label(name)
      t = f"  (target <= {target}x)" if target else ""
      print(f"  {label:36s}{ms:9.2f} ms = {ratio:.2f}x gradient, FLOPs {flops:.2f}x{t}")
    p0 = probe_counts[0]
    out[f"x{mult}"] = {
        "contexts": int(b["inputs"].shape[0]), "grad_ms": g_ms, "grad_gflop": g_flops / 1e9,
        "probe_over_grad": res["probe"][1],
        "batched_probe_over_grad": res[f"probes_{p0}"][1],
        "batched_probe_over_grad_by_probes": {p: res[f"probes_{p}"][1] for p in probe_counts},
        "per_layer_probe_over_grad": res[f"probes_per_layer_{p0}"][1],
        "fisher_draw_over_grad": res["fisher_draw"][1],
        "fisher_draw_per_example_over_grad": res["fisher_draw_per_example"][1],
        "flops_over_grad": {k: v[2] for k, v in res.items()}}
  out["ran_on"] = provenance.ran_on()
  print("flatness_bench " + json.dumps(out))
  return out


if __name__ == "__main__":
  main()
