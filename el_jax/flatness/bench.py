r"""Cost of the flatness estimators as multiples of one gradient, measured in one run.

  python -m el_jax.flatness.bench --config=configs/copy_task.py:cpu [--probes=8]

On the copy-task model of the config and one training batch, times (all
jitted, params and batch passed as arguments) the gradient of the mean CE,
one Hutchinson probe (a forward-over-reverse HVP), a batch of `--probes`
probes over one linearisation (per probe), one Fisher draw (single-gradient
estimator: a forward, label sampling and a backward) and one per-example
Fisher draw. Rounds are interleaved so background load hits every function
alike; each ratio is the median over rounds of the per-round ratio. Targets:
batched probe <= 1.5x a gradient, Fisher draw <= 1.3x. Timed at the training
batch (2 contexts: on CPU so small that per-op dispatch dominates and the HVP,
with ~3x the ops of a gradient, costs ~3x) and at `--batch_multiples` larger
ones (the size a flatness measurement should use anyway). The last line is
`flatness_bench {json}`.
"""
import json
import sys
import time

import jax
import numpy as np
from absl import flags

from el_jax import cli
from el_jax import train
from el_jax.flatness import fisher as fisher_lib
from el_jax.flatness import trace as trace_lib
from el_jax.models import decoder


def _extra(fv):
  flags.DEFINE_integer("probes", 8, "probes in the batched Hutchinson measurement", flag_values=fv)
  flags.DEFINE_integer("calls", 10, "calls per function per round", flag_values=fv)
  flags.DEFINE_integer("repeats", 5, "interleaved rounds (the median ratio is reported)",
                       flag_values=fv)
  flags.DEFINE_list("batch_multiples", ["1", "8"], "batch sizes to time, as multiples of the "
                    "training batch (the small one is dispatch-bound on CPU)", flag_values=fv)


def make_problem(config):
  """(loss_fn, logits_fn, params, stacked batch) for the config's copy-task model."""
  setup = train.Setup(config)
  graphdef, params = decoder.init(setup.model_cfg, 0)
  loss_fn, logits_fn = train.ce_objectives(graphdef)

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


def measure(loss_fn, logits_fn, params, batch, probes, calls, repeats):
  """Median over interleaved rounds of (time / gradient time) for each estimator piece."""
  stacked = jax.tree.map(lambda x: x[None], batch)
  key = jax.random.key(0)
  grad = jax.jit(jax.grad(loss_fn))
  fns = {
      "grad": lambda: grad(params, batch),
      "probe": lambda: trace_lib._trace_stacked(loss_fn, "hutchinson", 1, "rademacher", None,
                                                params, stacked, key),
      "probes": lambda: trace_lib._trace_stacked(loss_fn, "hutchinson", probes, "rademacher",
                                                 None, params, stacked, key),
      "fisher_draw": lambda: fisher_lib._fisher_stacked(logits_fn, "single", 1, None, "labels",
                                                        params, stacked, key),
      "fisher_draw_per_example": lambda: fisher_lib._fisher_stacked(
          logits_fn, "per_example", 1, None, "labels", params, stacked, key),
  }
  runners = {}
  for name, fn in fns.items():
    jax.block_until_ready(fn())  # compile
    runners[name] = _timer(fn, calls)
    runners[name]()  # warm
  times = {name: [] for name in fns}
  for r in range(repeats):
    for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
      times[name].append(runners[name]() / (probes if name == "probes" else 1))
  g = np.asarray(times["grad"])
  ratio = {name: float(np.median(np.asarray(t) / g)) for name, t in times.items() if name != "grad"}
  return 1e3 * float(np.median(g)), {k: 1e3 * float(np.median(v)) for k, v in times.items()}, ratio


LABELS = {"probe": "one Hutchinson probe (HVP)", "probes": "batched probe (per probe)",
          "fisher_draw": "one Fisher draw (single)",
          "fisher_draw_per_example": "one Fisher draw (per-example)"}
TARGETS = {"probes": 1.5, "fisher_draw": 1.3}


@cli.guard
def main(argv=None):
  config, _, fv = cli.parse(sys.argv if argv is None else argv, extra_flags=_extra,
                            require_workdir=False, doc=__doc__)
  cli.log_devices()
  setup, loss_fn, logits_fn, params, batch = make_problem(config)
  m = setup.model_cfg
  n_params = decoder.num_params(params)
  print(f"model: {m.num_layers} layers x {m.embed_dim} wide, {n_params} params, "
        f"{jax.devices()[0].platform}; {fv.repeats} interleaved rounds of {fv.calls} calls, "
        f"{fv.probes} probes per linearisation")
  out = {"num_params": n_params, "num_probes": fv.probes}
  for mult in [int(x) for x in fv.batch_multiples]:
    b = jax.tree.map(lambda x: np.concatenate([x] * mult), batch)
    g_ms, ms, ratio = measure(loss_fn, logits_fn, params, b, fv.probes, fv.calls, fv.repeats)
    print(f"batch {b['inputs'].shape[0]} x {b['inputs'].shape[1]} tokens "
          f"({int(b['loss_mask'].sum())} scored; {mult}x the training batch): "
          f"gradient {g_ms:.2f} ms")
    for name, label in LABELS.items():
      t = f"  (target <= {TARGETS[name]}x)" if name in TARGETS else ""
      print(f"  {label:32s}{ms[name]:9.2f} ms = {ratio[name]:.2f}x gradient{t}")
    out[f"x{mult}"] = {"contexts": int(b["inputs"].shape[0]), "grad_ms": g_ms,
                       "probe_over_grad": ratio["probe"],
                       "batched_probe_over_grad": ratio["probes"],
                       "fisher_draw_over_grad": ratio["fisher_draw"],
                       "fisher_draw_per_example_over_grad": ratio["fisher_draw_per_example"]}
  print("flatness_bench " + json.dumps(out))
  return out


if __name__ == "__main__":
  main()
