r"""Cost of the flatness estimators as multiples of one gradient, measured in one run.

  python -m el_jax.flatness.bench --config=configs/copy_task.py:cpu [--probes=8]

On the copy-task model of the config and one training batch, times (all
jitted, params and batch passed as arguments) the gradient of the mean CE,
one Hutchinson probe (a forward-over-reverse HVP), a batch of `--probes`
probes over one linearisation (per probe), one Fisher draw (single-gradient
estimator: a forward, label sampling and a backward) and one per-example
Fisher draw. Rounds are interleaved so background load hits every function
alike; each ratio is the median over rounds of the per-round ratio. Targets:
batched probe <= 1.5x a gradient, Fisher draw <= 1.3x. The last line is
`flatness_bench {json}`.
"""
import json
import sys
import time

import jax
import numpy as np
from absl import flags

from el_jax import cli
from el_jax import losses
from el_jax import train
from el_jax.flatness import fisher as fisher_lib
from el_jax.flatness import trace as trace_lib
from el_jax.models import decoder


def _extra(fv):
  flags.DEFINE_integer("probes", 8, "probes in the batched Hutchinson measurement", flag_values=fv)
  flags.DEFINE_integer("calls", 10, "calls per function per round", flag_values=fv)
  flags.DEFINE_integer("repeats", 5, "interleaved rounds (the median ratio is reported)",
                       flag_values=fv)


def make_problem(config):
  """(loss_fn, logits_fn, params, stacked batch) for the config's copy-task model."""
  setup = train.Setup(config)
  graphdef, params = decoder.init(setup.model_cfg, 0)
  ce = losses.get_loss("ce")

  def logits_fn(params, batch):
    logits = decoder.apply(graphdef, params, batch["inputs"], batch["segment_ids"])
    return logits, batch["loss_mask"]

  def loss_fn(params, batch):
    logits, mask = logits_fn(params, batch)
    return (ce(logits, batch["targets"]) * mask).sum() / mask.sum()

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


def main(argv=None):
  config, _, fv = cli.parse(sys.argv if argv is None else argv, extra_flags=_extra,
                            require_workdir=False)
  cli.log_devices()
  setup, loss_fn, logits_fn, params, batch = make_problem(config)
  stacked = jax.tree.map(lambda x: x[None], batch)
  key = jax.random.key(0)
  p = fv.probes
  grad = jax.jit(jax.grad(loss_fn))
  fns = {
      "grad": lambda: grad(params, batch),
      "probe": lambda: trace_lib._trace_stacked(loss_fn, "hutchinson", 1, "rademacher", None,
                                                params, stacked, key),
      "probes": lambda: trace_lib._trace_stacked(loss_fn, "hutchinson", p, "rademacher", None,
                                                 params, stacked, key),
      "fisher_draw": lambda: fisher_lib._fisher_stacked(logits_fn, "single", 1, None, "labels", params,
                                                        stacked, key),
      "fisher_draw_per_example": lambda: fisher_lib._fisher_stacked(
          logits_fn, "per_example", 1, None, "labels", params, stacked, key),
  }
  per_call = {"probes": p}
  runners = {}
  for name, fn in fns.items():
    jax.block_until_ready(fn())  # compile
    runners[name] = _timer(fn, fv.calls)
    runners[name]()  # warm
  times = {name: [] for name in fns}
  for r in range(fv.repeats):
    for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
      times[name].append(runners[name]() / per_call.get(name, 1))
  g = np.asarray(times["grad"])
  ratio = {name: float(np.median(np.asarray(t) / g)) for name, t in times.items() if name != "grad"}
  m = setup.model_cfg
  n_params = decoder.num_params(params)
  print(f"model: {m.num_layers} layers x {m.embed_dim} wide, {n_params} params, batch "
        f"{batch['inputs'].shape[0]} x {batch['inputs'].shape[1]} tokens "
        f"({int(batch['loss_mask'].sum())} scored), {jax.devices()[0].platform}; "
        f"{fv.repeats} interleaved rounds of {fv.calls} calls")
  print(f"gradient                     {1e3 * np.median(g):8.2f} ms")
  labels = {"probe": "one Hutchinson probe (HVP)", "probes": f"batched probe ({p} per linearize)",
            "fisher_draw": "one Fisher draw (single)",
            "fisher_draw_per_example": "one Fisher draw (per-example)"}
  targets = {"probes": 1.5, "fisher_draw": 1.3}
  for name, label in labels.items():
    t = f"  target <= {targets[name]}x" if name in targets else ""
    print(f"{label:30s}{1e3 * np.median(times[name]):8.2f} ms  = {ratio[name]:.2f}x gradient{t}")
  out = {"grad_ms": 1e3 * float(np.median(g)), "probe_over_grad": ratio["probe"],
         "batched_probe_over_grad": ratio["probes"], "num_probes": p,
         "fisher_draw_over_grad": ratio["fisher_draw"],
         "fisher_draw_per_example_over_grad": ratio["fisher_draw_per_example"],
         "num_params": n_params}
  print("flatness_bench " + json.dumps(out))
  return out


if __name__ == "__main__":
  main()
