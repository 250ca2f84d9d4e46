r"""Steady-state train-step speed of the copy-task model, and the E-losses' overhead.

  python -m el_jax.bench --config=configs/copy_task.py:cpu [--config.x=...] [--steps=50]

Prints the compiled step time (median of `--repeats` timed windows of
`--steps` steps each, after a warm-up) for CE and each E-loss on the same
shape and data, the overhead of each E-loss against CE measured in this
run, and as its last line `tokens_per_s=<float>` for the configured loss.
"""
import sys
import time

import jax
import numpy as np
from absl import flags

from el_jax import cli
from el_jax import train


def _extra(fv):
  flags.DEFINE_integer("steps", 30, "timed steps per window", flag_values=fv)
  flags.DEFINE_integer("repeats", 5, "timed windows (the median is reported)", flag_values=fv)
  flags.DEFINE_integer("warmup", 5, "untimed steps after compilation", flag_values=fv)
  flags.DEFINE_bool("compare_losses", True, "also time ce/e1/e2/e3 for the overhead table",
                    flag_values=fv)


def time_steps(config, steps, repeats, warmup):
  """Median seconds per train step for `config` (compilation excluded)."""
  setup = train.Setup(config)
  trainer = train.Trainer(setup)
  state = trainer.init(0)
  batches = [trainer.put_batch(setup.batch(0, i)) for i in range(min(setup.steps_per_epoch, 8))]
  for i in range(warmup):
    state, m = trainer.step(state, batches[i % len(batches)])
  jax.block_until_ready((state, m))
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for i in range(steps):
      state, m = trainer.step(state, batches[i % len(batches)])
    jax.block_until_ready((state, m))
    times.append((time.perf_counter() - t0) / steps)
  tokens = setup.contexts_per_batch * config.data.context_len
  return float(np.median(times)), tokens, setup


def main(argv=None):
  config, _, fv = cli.parse(sys.argv if argv is None else argv, extra_flags=_extra,
                            require_workdir=False)
  cli.log_devices()
  names = ["ce", "e1", "e2", "e3"] if fv.compare_losses else [config.loss.name]
  if config.loss.name not in names:
    names.append(config.loss.name)
  results = {}
  for name in names:
    cfg = config.copy_and_resolve_references()
    cfg.loss.name = name
    results[name] = time_steps(cfg, fv.steps, fv.repeats, fv.warmup)
  sec, tokens, setup = results[config.loss.name]
  m = setup.model_cfg
  print(f"model: {m.num_layers} layers x {m.embed_dim} wide, {m.num_heads} heads, "
        f"{'rotary' if m.position == 'rotary' else 'learned'} positions, "
        f"{setup.contexts_per_batch} x {config.data.context_len} tokens per step, "
        f"{jax.device_count()} {jax.devices()[0].platform} device(s), optimizer {config.optim.name}")
  for name, (s, _, _) in results.items():
    line = f"loss={name:3s} step_ms={1e3 * s:8.3f} tokens_per_s={tokens / s:10.1f}"
    if name != "ce" and "ce" in results:
      line += f" overhead_vs_ce={100 * (s / results['ce'][0] - 1):+.1f}%"
    print(line)
  print(f"tokens_per_s={tokens / sec:.1f}")


if __name__ == "__main__":
  main()
