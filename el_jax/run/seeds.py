"""Every model seed of a config as one compiled program (`config.train.vmap_seeds=True`).

`train_seeds(trainer, workdir, writer)` trains the seeds of `config.seeds` together: their
states are stacked along a leading seed axis (params, optimizer state and step of seed i
are `leaf[i]`) and one jitted, donated call advances every seed by one step
(`StackedTrainer.step`). The stacked initial state is that of each seed's
`Trainer.init(seed)` (the sequential run's compiled init, so it is the same bit for bit,
and compiled once for both modes), stacked on the device. Everything else is as
in `train.train_seed`, seed by seed: the same batches (`task.batch(seed, step)`), the same
metrics rows ({"seed", "step", "kind": "train" | "eval", ...}), orbax checkpoints under
`seed_<s>/checkpoints` in the format of a sequential run (so a workdir can be resumed with
or without `vmap_seeds`, and `checkpoint.restore_params` / `train.init_from` read it), and
`seed_<s>/final.json`, evaluated with the `Trainer.evaluate` of a sequential run on that
seed's slice of the parameters. Per-seed results equal sequential training up to float
rounding (tests/test_vmap_seeds.py).

Seeds that resume from different steps (a sequential run stopped midway, a run killed
between two seeds' checkpoints) are trained as one group per starting step, one group
after the other. `train.stop_at_step` stops every seed there (a sequential run stops after
the first unfinished seed).

How the stacked step runs the seeds (`train.vmap_seeds_impl`, `IMPLS`):

  "vmap"  `jax.vmap(step_lib.train_step)`: every matmul becomes one batched matmul over the
          seeds. On several devices the seed axis is sharded (`seed_mesh_shape`).
  "map"   `jax.lax.map` over the seeds inside the one program: a loop whose body is the
          step of one seed, with unbatched matmuls as in sequential training, on the
          stacked state.
  "auto"  (default) "map" on CPU, "vmap" on accelerators.

On this 2-core CPU (the copy-task `cpu` model, 4 seeds; docs/bench.md, "Seeds as one
program") "vmap" runs at 0.72x the seed-steps per second of sequential training, and so
does a Python loop over the seeds unrolled inside the one program (0.65-0.75x, with or
without forcing the seeds to run one after the other). A profile shows the batched
YNNPACK matmuls of "vmap" taking 2.4x the time of the 4 separate ones; as unrolling is as
slow, the likely cause is the S-fold working set (cache misses), not the batching itself. "map" reuses one seed's
temporaries and runs at 0.92-0.98x (rounds 0.83-1.06): parity within this machine's noise,
not a gain (likely cost, not measured: copying each seed's state slice in and out of the
loop).
So "auto" picks "map" on CPU. `spmd_axis_name` is not needed: the step has no sharding
constraints inside, the seed axis is sharded through the jit's in/out shardings.

Unsupported (refused by `validate_config`, not ignored): flatness measurements during
training, adversarial pretraining, `model.pretrained` and `train.init_from`; at run time,
several processes (el_jax.infra.distributed) and tasks whose batches come from a data iterator.
"""
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from el_jax.infra import checkpoint
from el_jax.run import train
from el_jax.infra import workdir as wd
from el_jax.run import setup as setup_lib

IMPLS = setup_lib.VMAP_SEEDS_IMPLS  # "auto", "vmap", "map" (validated with the config by train)


def resolve_impl(impl, platform=None):
  """The implementation "auto" stands for on `platform` (default: that of the devices)."""
  if impl != "auto":
    return impl
  return "map" if (platform or jax.devices()[0].platform) == "cpu" else "vmap"


def seed_mesh_shape(num_seeds, num_devices, impl):
  """(seed, data) axis sizes of the mesh of `num_seeds` stacked seeds on `num_devices`.

  "vmap" shards the seed axis over gcd(num_seeds, num_devices) devices and splits each
  seed's batch over the rest (8 devices: 4 seeds -> 4 x 2, 2 seeds -> 2 x 4, 10 seeds ->
  2 x 4, 3 seeds -> 1 x 8). "map" indexes the seed axis one seed at a time, so every
  device holds every seed: 1 x num_devices.
  """
  seed = math.gcd(num_seeds, num_devices) if impl == "vmap" else 1
  return seed, num_devices // seed


def make_seed_mesh(num_seeds, num_devices, impl):
  """The ("seed", "data") mesh of `seed_mesh_shape` over the first `num_devices` devices."""
  shape = seed_mesh_shape(num_seeds, num_devices, impl)
  auto = jax.sharding.AxisType.Auto
  return jax.make_mesh(shape, ("seed", "data"), axis_types=(auto, auto),
                       devices=jax.devices()[:num_devices])


def stack_trees(trees):
  return jax.tree.map(lambda *x: jnp.stack(x), *trees)


class StackedTrainer:
  """The jitted functions of `len(seeds)` stacked seeds of `trainer.setup`.

  `init()` the stacked initial state, `stack(states)` / `unstack(state)` between per-seed
  states (placed as the sequential `trainer` places them) and the stacked one,
  `put_batch(host_batch(step))` the seeds' batches of `step`, stacked and placed,
  `step(state, batch)` -> (state, metrics with a leading seed axis), jitted with the state
  donated. The seed axis of states, batches and metrics is the mesh axis "seed", the batch
  rows are split over "data" (`seed_mesh_shape`).
  """

  def __init__(self, trainer, seeds, impl="auto"):
    st = trainer.setup
    self.trainer, self.setup, self.seeds = trainer, st, tuple(int(s) for s in seeds)
    self.impl = resolve_impl(impl)
    if self.impl not in IMPLS[1:]:
      raise ValueError(f"train.vmap_seeds_impl={impl!r} must be one of {IMPLS}")
    n = len(self.seeds)
    self.mesh = make_seed_mesh(n, trainer.num_devices, self.impl)
    self.seed_sharding = NamedSharding(self.mesh, P("seed"))
    self.batch_sharding = NamedSharding(self.mesh, P("seed", "data"))
    self.abstract_state = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct((n, *a.shape), a.dtype), trainer.abstract_state)
    self.state_sharding = jax.tree.map(lambda _: self.seed_sharding, self.abstract_state)
    self._stack = jax.jit(lambda *trees: stack_trees(trees), out_shardings=self.seed_sharding)
    # Slices placed as the sequential Trainer places a state: replicated on its `data` mesh.
    self._unstack = jax.jit(lambda state: tuple(jax.tree.map(lambda x: x[i], state)
                                                for i in range(n)),
                            out_shardings=trainer.repl)
    one = trainer.pure_step
    if self.impl == "vmap":
      stacked = jax.vmap(one)
    else:  # "map": the per-seed step in a loop over the seed axis, inside the one program
      def stacked(state, batch):
        return jax.lax.map(lambda args: one(*args), (state, batch))
    self.step = jax.jit(stacked, in_shardings=(self.state_sharding, self.batch_sharding),
                        out_shardings=(self.state_sharding, self.seed_sharding),
                        donate_argnums=0, compiler_options=trainer.compiler_options)

  def init(self):
    return self.stack([self.trainer.init(s) for s in self.seeds])

  def stack(self, states):
    return self._stack(*states)

  def unstack(self, state):
    """The per-seed states of a stacked `state` (one program for checkpoints and evaluation)."""
    return self._unstack(state)

  def host_batch(self, step):
    """The seeds' batches of `step` (the task's `batch(seed, step)`), stacked on the host."""
    batches = [self.setup.batch(s, step) for s in self.seeds]
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}

  def put_batch(self, host_batch):
    return jax.device_put(host_batch, self.batch_sharding)


def train_seeds(trainer, workdir, writer):
  """Trains every seed of `trainer.setup.config` as stacked groups (see the module docstring).

  Returns the final evaluations in the order of `config.seeds` (finished seeds read
  back), or None if `train.stop_at_step` stopped training early.
  """
  cfg = trainer.setup.config
  tcfg = cfg.train
  if jax.process_count() > 1:
    raise ValueError(f"train.vmap_seeds=True is not supported with {jax.process_count()} "
                     f"processes; set train.vmap_seeds=False")
  if trainer.setup.task.data_iterator(int(cfg.seeds[0])) is not None:
    raise ValueError(f"train.vmap_seeds=True does not support a task whose batches come from "
                     f"a data iterator ({type(trainer.setup.task).__name__}.data_iterator, e.g. "
                     f"data.pipeline='grain'); use its default batches or set "
                     f"train.vmap_seeds=False")
  stop = train.stop_step(tcfg)
  finals, groups, stopped = {}, {}, False
  for seed in (int(s) for s in cfg.seeds):
    status, final = train.seed_status(seed, workdir, tcfg, writer)
    if status == "finished":
      finals[seed] = final
    elif status == "stopped":  # final: the step of its checkpoint
      train.catch_up_stopped(trainer, seed, final, workdir, writer)
      stopped = True
    else:
      groups.setdefault(final or 0, []).append(seed)  # final: the newest checkpoint step
  impl = tcfg.get("vmap_seeds_impl", "auto")
  for start, seeds in groups.items():
    finals.update(_train_group(trainer, seeds, start, stop, workdir, writer, impl))
  if stopped or stop < tcfg.num_steps:
    return None
  return [finals[int(s)] for s in cfg.seeds]


def _train_group(trainer, seeds, start, stop, workdir, writer, impl):
  """Trains `seeds` (all at step `start`) to `stop`; returns {seed: final evaluation}
  ({} when stopped early by `train.stop_at_step`)."""
  tcfg = trainer.setup.config.train
  mngrs = [train.seed_manager(workdir, s, tcfg) for s in seeds]
  try:
    return _run_group(trainer, StackedTrainer(trainer, seeds, impl), mngrs, start, stop,
                      workdir, writer)
  finally:
    for m in mngrs:
      m.close()


def _run_group(trainer, stacked, mngrs, start, stop, workdir, writer):
  st = trainer.setup
  tcfg = st.config.train
  seeds = stacked.seeds
  shape = dict(zip(stacked.mesh.axis_names, stacked.mesh.devices.shape))
  print(f"seeds {list(seeds)}: trained as one program ({stacked.impl}, mesh seed "
        f"{shape['seed']} x data {shape['data']})", file=sys.stderr)
  if start == 0:
    state = stacked.init()
  else:
    states = []
    for seed, mngr in zip(seeds, mngrs):
      s = checkpoint.restore_latest(mngr, trainer.abstract_state, trainer.state_sharding)
      if s is None or int(s["step"]) != start:  # the checkpoint listing changed under us
        raise wd.WorkdirError(f"seed {seed}: expected a checkpoint of step {start} in "
                              f"{mngr.directory}")
      print(f"seed {seed}: resuming from the checkpoint of step {start}", file=sys.stderr)
      states.append(s)
    state = stacked.stack(states)
    del states
  # Rows logged past the resume point (all of them when starting afresh) are recomputed,
  # and so is a final evaluation being redone.
  for seed in seeds:
    writer.truncate(seed, start if start else -1, eval_at=stop if start >= stop else None)
  missed = {seed: train.missed_rows(writer, seed, start, st.config) for seed in seeds}
  if any(missed.values()):  # rows of the checkpoint `start` an interrupted run did not log
    for seed, s in zip(seeds, stacked.unstack(state)):
      train.log_missed(trainer, seed, start, s["params"], writer, missed[seed])

  def log_eval(step, state):
    rows = {}
    for seed, s in zip(seeds, stacked.unstack(state)):
      rows[seed] = train.eval_row(trainer, seed, step, s["params"])
      writer.write(rows[seed])
    return rows

  def check(pending, bar, t0):
    step, metrics = pending
    host = jax.device_get(metrics)
    for i, (seed, mngr) in enumerate(zip(seeds, mngrs)):
      try:
        train.check_and_log((step, {k: v[i] for k, v in host.items()}), seed, st, writer,
                            bar, t0)
      except FloatingPointError as e:
        raise train.diverged_error(e, mngr) from None

  def save(done, state):
    # One signal-free stretch for every seed's checkpoint of `done` (el_jax.infra.workdir): an
    # interrupt never leaves some seeds saved and the others not (a kill -9 can: the next
    # run resumes each seed from its own newest checkpoint, `train_seeds`).
    with wd.uninterrupted(f"the checkpoints of step {done}"):
      for mngr, s in zip(mngrs, stacked.unstack(state)):
        checkpoint.save(mngr, done, s)

  if start == 0 and tcfg.eval_every:
    log_eval(0, state)
  state = train.run_steps(state, start, stop, tcfg, desc=f"seeds {list(seeds)}",
                          batch=lambda i: stacked.put_batch(stacked.host_batch(i)),
                          step=stacked.step, check=check, save=save, evaluate=log_eval)
  for mngr in mngrs:
    mngr.wait_until_finished()
  if stop < tcfg.num_steps:
    for seed in seeds:
      print(f"seed {seed}: stopped at step {stop} (train.stop_at_step); run again without "
            f"it to continue to step {tcfg.num_steps}", file=sys.stderr)
    return {}
  finals = log_eval(stop, state)
  for seed in seeds:
    wd.write_json(os.path.join(workdir, f"seed_{seed}", "final.json"), finals[seed])
  return finals
