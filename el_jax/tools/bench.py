r"""Steady-state train-step speed of the copy-task model, and the E-losses' overhead.

  python -m el_jax.tools.bench --config=configs/copy_task.py:cpu [--config.x=...] [--steps=30]

Compiles the train step of CE and of each E-loss on the same shape and data,
then times them in interleaved windows of `--steps` steps (round r times
ce, e1, e2, e3 one after the other, `--repeats` rounds), so that load from
other processes hits every loss alike. Prints the median step time per loss,
the overhead of each E-loss against CE (median over rounds of the per-round
ratio, with its min..max over rounds as a noise bar), in wall time and in
this process's CPU time (less sensitive to other processes on a shared
machine), and as its last line `tokens_per_s=<float>` for the configured loss.
`--all_positions` times the step with logits at every position instead of
only the scored ones; `--flops` adds XLA's FLOP estimate per step, the measured matmul
peak (2048^2 float32 through jnp, the best of XLA's and Eigen's matmuls) and the MFU (model FLOPs per second over that peak);
`--host` times what the host does per step instead (the batch, with the epoch's permutation
cached and rebuilt every step as before, putting it on the devices, fetching one step's
metrics; docs/accelerator.md); `--profile` traces the configured loss's step with the JAX profiler and prints the time of
XLA's ops by kind (dots, elementwise fusions, reductions, layout copies), and with
`--profile_top=N` the N instructions with the most time (kind and result shape).
No XLA flags are set here; `--config.train.cpu_dots=eigen` times the step with XLA's
Eigen matmuls instead of its default (YNNPACK) ones (docs/bench.md).

`--seeds=S` times instead S model seeds trained one jitted step per seed (the
sequential loop of `train.train_seed`) against the stacked program of
`train.vmap_seeds` (`el_jax.run.seeds`, each of `--seeds_impls`), in interleaved
rounds, and prints seed-steps per second for each with the per-round ratio to
sequential (median, min..max), in wall and in process CPU time.

`tools/bench_vs_torch/` uses `StepRunner` to time el_jax against
Hugging Face GPT-NeoX on PyTorch in alternating windows; docs/bench.md has
the figures.
"""
import sys
import time

import jax
import numpy as np
from absl import flags

from el_jax.run import cli
from el_jax.infra import metrics as metrics_lib
from el_jax.run import seeds as seeds_lib
from el_jax.core import step as step_lib
from el_jax.core.tasks import base
from el_jax.run import setup as setup_lib


def _extra(fv):
  flags.DEFINE_integer("steps", 30, "timed steps per window", flag_values=fv)
  flags.DEFINE_integer("repeats", 5, "timed rounds (the median is reported)", flag_values=fv)
  flags.DEFINE_integer("warmup", 5, "untimed steps after compilation", flag_values=fv)
  flags.DEFINE_bool("compare_losses", True, "also time ce/e1/e2/e3 for the overhead table",
                    flag_values=fv)
  flags.DEFINE_bool("all_positions", False, "time the step that computes logits at every "
                    "position (as before the scored-positions gather)", flag_values=fv)
  flags.DEFINE_integer("seeds", 0, "time S seeds: sequential steps vs the stacked program of "
                       "train.vmap_seeds (0 = time the losses instead)", flag_values=fv)
  flags.DEFINE_list("seeds_impls", ["map", "vmap"], "stacked implementations timed with "
                    "--seeds (el_jax.run.seeds.IMPLS)", flag_values=fv)
  flags.DEFINE_bool("flops", False, "also print XLA's FLOP estimate per step (one more "
                    "compilation per loss), the matmul peak and the MFU", flag_values=fv)
  flags.DEFINE_bool("host", False, "time instead what the host does per training step: the "
                    "batch (its epoch's permutation cached, and rebuilt every step as before the "
                    "cache), putting it on the devices, and fetching one step's metrics",
                    flag_values=fv)
  flags.DEFINE_bool("profile", False, "profile --steps steps of the configured loss with the "
                    "JAX profiler and print where the time goes, by kind of XLA op",
                    flag_values=fv)
  flags.DEFINE_integer("profile_top", 0, "with --profile, also list the N XLA instructions "
                       "with the most time (kind, result shape)", lower_bound=0, flag_values=fv)


class StepRunner:
  """The compiled train step of `config` with its own state and batches.

  `runner(steps)` runs `steps` steps and returns the mean seconds per step of
  that window (compilation and `warmup` steps happen in the constructor).
  `score_all_positions=True` times the step that computes the logits at every
  position instead of the scored ones only (`setup_lib.Trainer`).
  """

  def __init__(self, config, warmup=5, score_all_positions=False):
    self.config = config
    self.setup = setup = setup_lib.Setup(config)
    self.trainer = trainer = setup_lib.Trainer(setup, score_all_positions=score_all_positions)
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


class SeedsRunner:
  """`num_seeds` seeds of `setup`'s config advanced together, in `mode` "sequential" (one
  jitted `Trainer.step` per seed, as `train.train_seed`) or a stacked implementation of
  `el_jax.run.seeds` ("map", "vmap"). `runner(steps)` runs `steps` steps of every seed and
  returns the wall seconds per step (all seeds); `last_cpu` is the process CPU time."""

  def __init__(self, setup, num_seeds, mode, warmup=5):
    trainer = setup_lib.Trainer(setup)
    self.mode, seeds = mode, tuple(range(num_seeds))
    nb = min(setup.steps_per_epoch, 8)
    if mode == "sequential":
      self.step = trainer.step
      self.states = [trainer.init(s) for s in seeds]
      self.batches = [[trainer.put_batch(setup.batch(s, i)) for s in seeds] for i in range(nb)]
    else:
      stacked = seeds_lib.StackedTrainer(trainer, seeds, mode)
      self.step = stacked.step
      self.states = [stacked.init()]
      self.batches = [[stacked.put_batch(stacked.host_batch(i))] for i in range(nb)]
    self._i = 0
    self(max(warmup, 1))  # the first call compiles

  def __call__(self, steps):
    t0, c0 = time.perf_counter(), time.process_time()
    states = self.states
    for _ in range(steps):
      batches = self.batches[self._i % len(self.batches)]
      states = [self.step(s, b)[0] for s, b in zip(states, batches)]
      self._i += 1
    jax.block_until_ready(states)
    self.states = states
    self.last_cpu = (time.process_time() - c0) / steps
    return (time.perf_counter() - t0) / steps


def bench_seeds(config, num_seeds, impls, steps, repeats, warmup):
  """Prints seed-steps per second of sequential and stacked training (interleaved rounds)."""
  setup = setup_lib.Setup(config)
  modes = ["sequential", *impls]
  runners = {m: SeedsRunner(setup, num_seeds, m, warmup) for m in modes}
  wall = {m: [] for m in modes}
  cpu = {m: [] for m in modes}
  for r in range(repeats):
    for m in (modes if r % 2 == 0 else modes[::-1]):
      wall[m].append(runners[m](steps))
      cpu[m].append(runners[m].last_cpu)
  m = setup.model_cfg
  print(f"model: {m.num_layers} layers x {m.embed_dim} wide, "
        f"{type(setup.task).rows_per_step(config)} x {setup.task.context_len} tokens per step "
        f"per seed, {jax.device_count()} {jax.devices()[0].platform} device(s); {num_seeds} "
        f"seeds; {repeats} interleaved rounds of {steps} steps")
  for mode in modes:
    line = (f"seeds={num_seeds} mode={mode:10s} seed_steps_per_s="
            f"{num_seeds / float(np.median(wall[mode])):8.2f} cpu_seed_steps_per_s="
            f"{num_seeds / float(np.median(cpu[mode])):8.2f}")
    if mode != "sequential":
      # seed-steps/s ratio = sequential time / stacked time, per round
      med, lo, hi = overhead({"a": wall["sequential"], "b": wall[mode]}, "a", "b")
      cmed, clo, chi = overhead({"a": cpu["sequential"], "b": cpu[mode]}, "a", "b")
      line += (f" ratio_vs_sequential: wall {1 + med:.2f} (rounds {1 + lo:.2f}..{1 + hi:.2f}),"
               f" cpu {1 + cmed:.2f} (rounds {1 + clo:.2f}..{1 + chi:.2f})")
    print(line)


def matmul_peak(n=2048, reps=5):
  """FLOP/s of the best of `reps` n x n float32 matmuls through jnp, over every matmul
  library of `step_lib.CPU_DOTS` on CPU (the denominator of the MFU figures: one peak for the
  machine, whichever library a step uses)."""
  import jax.numpy as jnp
  a = jnp.ones((n, n), jnp.float32)
  options = ([step_lib.known_options(o) for o in step_lib.CPU_DOTS.values()]
             if jax.default_backend() == "cpu" else [{}])
  best = float("inf")
  for opts in options:
    f = jax.jit(jnp.dot).lower(a, a).compile(compiler_options=dict(opts))
    jax.block_until_ready(f(a, a))
    for _ in range(reps):
      t0 = time.perf_counter()
      jax.block_until_ready(f(a, a))
      best = min(best, time.perf_counter() - t0)
  return 2.0 * n ** 3 / best


# One HLO instruction line: `[ROOT] %name = <result type> opcode(`; the result type is one
# shape or a tuple of them (a multi-output fusion's, which holds spaces), with layouts.
_INSTRUCTION = r"\s*(?:ROOT )?%?([\w.\-]+) = (\((?:[^()]|\([^()]*\))*\)|\S+) ([\w\-]+)\("


def _op_kinds(hlo_text):
  """{instruction name: kind} of a compiled module's HLO text: "dot" for dots and fusions
  that contain one, "reduce", "layout" (transposes / copies only), "elementwise"."""
  import re
  comps, cur = {}, None
  for line in hlo_text.splitlines():
    m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
    if m:
      cur = comps.setdefault(m.group(1), [])
    elif cur is not None:
      cur.append(line)
  kinds = {}
  for lines in comps.values():
    for line in lines:
      m = re.match(_INSTRUCTION, line)
      if not m:
        continue
      name, _, op = m.groups()
      if op == "fusion":
        called = re.search(r"calls=%?([\w.\-]+)", line)
        body = comps.get(called.group(1), []) if called else []
        ops = {i.group(3) for i in (re.match(_INSTRUCTION, b) for b in body) if i}
      else:
        ops = {op}
      if ops & {"dot", "convolution"}:
        kinds[name] = "dot"
      elif ops & {"reduce", "reduce-window"}:
        kinds[name] = "reduce"
      elif ops and ops <= {"transpose", "copy", "bitcast", "parameter", "reshape", "broadcast",
                           "tuple", "get-tuple-element"}:
        kinds[name] = "layout"
      else:
        kinds[name] = "elementwise"
  return kinds


def _op_shapes(hlo_text):
  """{instruction name: its result shape} of a compiled module's HLO text."""
  import re
  out = {}
  for line in hlo_text.splitlines():
    m = re.match(_INSTRUCTION, line)
    if m:
      out[m.group(1)] = re.sub(r"\{[^}]*\}(?=,|\)|$)", "", m.group(2))  # no layouts
  return out


def op_times(runner, steps):
  """Wall ms per step and {instruction: (kind, result shape, op ms per step summed over XLA's
  threads)} of `runner`'s step, from a JAX profiler trace of `steps` steps."""
  import collections
  import glob
  import gzip
  import json
  import tempfile
  compiled = runner.trainer.step.lower(runner.state, runner.batches[0]).compile()
  text = compiled.as_text()
  kinds, shapes = _op_kinds(text), _op_shapes(text)
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d, create_perfetto_trace=True):
      wall = runner(steps)
    trace = json.load(gzip.open(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[0]))
  ms = collections.defaultdict(float)
  for e in trace["traceEvents"] if isinstance(trace, dict) else trace:
    if e.get("ph") == "X" and e.get("name") in kinds:
      ms[e["name"]] += e["dur"] / 1e3 / steps
  return 1e3 * wall, {n: (kinds[n], shapes.get(n, "?"), t) for n, t in ms.items()}


def by_kind(ops):
  """{kind: op ms per step} of `op_times`'s per-instruction times."""
  out = {}
  for kind, _, t in ops.values():
    out[kind] = out.get(kind, 0.0) + t
  return out


def host_time(config, steps):
  """{"batch_ms" (cached permutation), "batch_uncached_ms" (the permutation built every step,
  as the loop did before it was cached per epoch), "put_ms", "fetch_ms"} per step: the host's
  share of a training step of `config` (seed 0, steps 0..`steps`-1; the first epoch's
  permutation is built before the timed steps, as the loop's first step would)."""
  import json as json_lib
  setup = setup_lib.Setup(config)
  trainer = setup_lib.Trainer(setup)
  out = {"steps": steps, "num_train": setup.task.num_train,
         "rows_per_step": type(setup.task).rows_per_step(config)}
  setup.batch(0, 0)

  def timed(fn):
    t0 = time.perf_counter()
    for i in range(steps):
      fn(i)
    return 1e3 * (time.perf_counter() - t0) / steps

  out["batch_ms"] = timed(lambda i: setup.batch(0, i))

  def uncached(i):
    base._epoch_order.cache_clear()
    setup.batch(0, i)
  out["batch_uncached_ms"] = timed(uncached)
  host = [setup.batch(0, i) for i in range(min(steps, 8))]
  out["put_ms"] = timed(lambda i: jax.block_until_ready(trainer.put_batch(host[i % len(host)])))
  state = trainer.init(0)
  state, m = trainer.step(state, trainer.put_batch(host[0]))
  jax.block_until_ready(m)
  out["fetch_ms"] = timed(lambda i: metrics_lib.to_float(m))
  out["platform"] = jax.devices()[0].platform
  print("host_time " + json_lib.dumps(out))
  return out


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
  if fv.profile_top and not fv.profile:
    raise ValueError(f"--profile_top={fv.profile_top} lists the ops of --profile's trace: "
                     f"add --profile")
  cli.log_devices()
  if fv.host:
    r = host_time(config, max(fv.steps, 1))
    print(f"host ms per step: batch {r['batch_ms']:.3f} (permutation built every step, as "
          f"before: {r['batch_uncached_ms']:.3f}), put {r['put_ms']:.3f}, fetch of one step's "
          f"metrics {r['fetch_ms']:.3f} ({r['num_train']} training examples, "
          f"{r['rows_per_step']} rows per step)")
    return
  if fv.seeds:
    bad = [i for i in fv.seeds_impls if i not in ("map", "vmap")]
    if fv.seeds < 1 or bad:
      raise ValueError(f"--seeds={fv.seeds} --seeds_impls={','.join(fv.seeds_impls)}: give "
                       f"--seeds >= 1 and implementations among map, vmap")
    bench_seeds(config, fv.seeds, fv.seeds_impls, fv.steps, fv.repeats, fv.warmup)
    return
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
  peak = None
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
      flops = runners[name].flops()
      peak = peak or matmul_peak()
      line += f" gflops={flops / 1e9:.4f} mfu={100 * flops / s / peak:.1f}%"
    print(line)
  if fv.flops:
    print(f"matmul_peak_gflops={peak / 1e9:.1f} (2048^2 float32 through jnp, best of 5 per CPU matmul library)")
  if fv.profile:
    wall, per_op = op_times(runners[config.loss.name], fv.steps)
    ops = by_kind(per_op)
    total = sum(ops.values())
    print(f"profile (loss={config.loss.name}, train.cpu_dots={config.train.get('cpu_dots', 'xla')}): "
          f"{wall:.1f} ms/step wall, {total:.1f} ms/step of XLA ops summed over threads")
    for kind, ms in sorted(ops.items(), key=lambda kv: -kv[1]):
      print(f"  {kind:12s} {ms:8.2f} ms/step {100 * ms / total:5.1f}%")
    if fv.profile_top:
      print(f"the {fv.profile_top} ops with the most time (ms/step, share of the op time, kind, "
            f"XLA instruction, result shape):")
      for name, (kind, shape, ms) in sorted(per_op.items(), key=lambda kv: -kv[1][2])[
          :fv.profile_top]:
        print(f"  {ms:7.2f} {100 * ms / total:5.1f}% {kind:11s} {name:36s} {shape}")
  print(f"tokens_per_s={tokens / float(np.median(times[config.loss.name])):.1f}")


if __name__ == "__main__":
  main()
