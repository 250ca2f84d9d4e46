r"""Steady-state train-step speed of the copy-task model, and the E-losses' overhead.

  python -m el_jax.bench --config=configs/copy_task.py:cpu [--config.x=...] [--steps=30]

Compiles the train step of CE and of each E-loss on the same shape and data,
then times them in interleaved windows of `--steps` steps (round r times
ce, e1, e2, e3 one after the other, `--repeats` rounds), so that load from
other processes hits every loss alike. Prints the median step time per loss,
the overhead of each E-loss against CE (median over rounds of the per-round
ratio, with its min..max over rounds as a noise bar), in wall time and in
this process's CPU time (less sensitive to other processes on a shared
machine), and as its last line `tokens_per_s=<float>` for the configured loss.
`--all_positions` times the step with logits at every position instead of
only the scored ones; `--flops` adds XLA's FLOP estimate per step.
No XLA flags are set here: XNNPACK / oneDNN dots measured no faster on this
model (docs/bench.md).

`experiments/bench_vs_torch.py` uses `StepRunner` to time el_jax against
Hugging Face GPT-NeoX on PyTorch in alternating windows; docs/bench.md has
the figures.
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
  flags.DEFINE_integer("repeats", 5, "timed rounds (the median is reported)", flag_values=fv)
  flags.DEFINE_integer("warmup", 5, "untimed steps after compilation", flag_values=fv)
  flags.DEFINE_bool("compare_losses", True, "also time ce/e1/e2/e3 for the overhead table",
                    flag_values=fv)
  flags.DEFINE_bool("all_positions", False, "time the step that computes logits at every "
                    "position (as before the scored-positions gather)", flag_values=fv)
  flags.DEFINE_bool("flops", False, "also print XLA's FLOP estimate per step (one more "
                    "compilation per loss)", flag_values=fv)


class StepRunner:
  """The compiled train step of `config` with its own state and batches.

  `runner(steps)` runs `steps` steps and returns the mean seconds per step of
  that window (compilation and `warmup` steps happen in the constructor).
  `score_all_positions=True` times the step that computes the logits at every
  position instead of the scored ones only (`train.Trainer`).
  """

  def __init__(self, config, warmup=5, score_all_positions=False):
    self.config = config
    self.setup = setup = train.Setup(config)
    self.trainer = trainer = train.Trainer(setup, score_all_positions=score_all_positions)
    self.state = trainer.init(0)
    self.batches = [trainer.put_batch(setup.batch(0, i))
                    for i in range(min(setup.steps_per_epoch, 8))]
    self.rows = type(setup.task).rows_per_step(config)
    self.tokens = self.rows * setup.task.context_len
    self._i = 0
    self(max(warmup, 1))  # the first call compiles

  def __call__(self, steps):
    t0, c0 = time.perf_counter(), time.process_time()
    state, m = self.state, None
    for _ in range(steps):
      state, m = self.trainer.step(state, self.batches[self._i % len(self.batches)])
      self._i += 1
    jax.block_until_ready((state, m))
    self.state = state
    # CPU seconds of this process (all threads) per step: less sensitive than
    # wall time to other processes competing for the cores.
    self.last_cpu = (time.process_time() - c0) / steps
    return (time.perf_counter() - t0) / steps

  def flops(self):
    """XLA's FLOP estimate of one compiled train step (compiles it once more)."""
    cost = self.trainer.step.lower(self.state, self.batches[0]).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", float("nan")))


def time_steps(config, steps, repeats, warmup):
  """Median seconds per train step for `config` (compilation excluded)."""
  runner = StepRunner(config, warmup)
  times = [runner(steps) for _ in range(repeats)]
  return float(np.median(times)), runner.tokens, runner.setup


def time_interleaved(configs, steps, repeats, warmup, **runner_kwargs):
  """Times several configs in interleaved windows.

  Args:
    configs: dict name -> config.
    steps, repeats, warmup: as in `time_steps`.
    **runner_kwargs: passed on to `StepRunner`.

  Returns:
    (dict name -> list of per-window wall seconds per step, one per round,
     dict name -> the same in process CPU seconds, dict name -> StepRunner).
  """
  runners = {name: StepRunner(cfg, warmup, **runner_kwargs) for name, cfg in configs.items()}
  times = {name: [] for name in configs}
  cpu = {name: [] for name in configs}
  for r in range(repeats):
    order = list(configs) if r % 2 == 0 else list(configs)[::-1]
    for name in order:
      times[name].append(runners[name](steps))
      cpu[name].append(runners[name].last_cpu)
  return times, cpu, runners


def overhead(times, name, base="ce"):
  """Per-round ratios times[name] / times[base] - 1: (median, min, max)."""
  ratios = np.asarray(times[name]) / np.asarray(times[base]) - 1.0
  return float(np.median(ratios)), float(ratios.min()), float(ratios.max())


@cli.guard
def main(argv=None):
  config, _, fv = cli.parse(sys.argv if argv is None else argv, extra_flags=_extra,
                            require_workdir=False, doc=__doc__)
  cli.log_devices()
  names = ["ce", "e1", "e2", "e3"] if fv.compare_losses else [config.loss.name]
  if config.loss.name not in names:
    names.append(config.loss.name)
  configs = {}
  for name in names:
    cfg = config.copy_and_resolve_references()
    cfg.loss.name = name
    configs[name] = cfg
  times, cpu, runners = time_interleaved(configs, fv.steps, fv.repeats, fv.warmup,
                                         score_all_positions=fv.all_positions)
  setup = runners[config.loss.name].setup
  tokens = runners[config.loss.name].tokens
  m = setup.model_cfg
  print(f"model: {m.num_layers} layers x {m.embed_dim} wide, {m.num_heads} heads, "
        f"{'rotary' if m.position == 'rotary' else 'learned'} positions, "
        f"{runners[config.loss.name].rows} x {setup.task.context_len} tokens per step, "
        f"{jax.device_count()} {jax.devices()[0].platform} device(s), optimizer {config.optim.name}; "
        f"logits at {'all' if fv.all_positions else len(setup.scored_positions)} positions "
        f"per context; {fv.repeats} interleaved rounds of {fv.steps} steps")
  for name in names:
    s = float(np.median(times[name]))
    line = (f"loss={name:3s} step_ms={1e3 * s:8.3f} cpu_ms={1e3 * float(np.median(cpu[name])):8.3f} "
            f"tokens_per_s={tokens / s:10.1f}")
    if name != "ce" and "ce" in times:
      med, lo, hi = overhead(times, name)
      cmed, clo, chi = overhead(cpu, name)
      line += (f" overhead_vs_ce: wall {100 * med:+.1f}% (rounds {100 * lo:+.1f}..{100 * hi:+.1f}),"
               f" cpu {100 * cmed:+.1f}% (rounds {100 * clo:+.1f}..{100 * chi:+.1f})")
    if fv.flops:
      line += f" gflops={runners[name].flops() / 1e9:.4f}"
    print(line)
  print(f"tokens_per_s={tokens / float(np.median(times[config.loss.name])):.1f}")


if __name__ == "__main__":
  main()
