"""Every model seed of a config, or the runs of a grid, as one compiled program.

`train_seeds(trainer, workdir, writer)` (`config.train.vmap_seeds=True`) trains the seeds of
`config.seeds` together: their
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

Stacked runs ("arms"): `train_arms(trainer, arms)` trains several runs, each with its own
config, workdir and metrics writer (`Arm`; `el_jax.run.job.train_arms` does the rest of
each run's job, `el_jax.run.grid.Grid.run(stacked=True)` a grid's runs), as one program:
every (run, seed) pair is one slot of the stacked state, with its own parameters, optimizer
state, batches (`task.batch(seed, step)`), schedule and loss hyperparameters. The runs may
differ in (`check_arms` refuses any other difference, in one line naming the field):

  seeds                      any, per run (a seed may appear in several runs)
  optim.lr, optim.warmup_steps, optim.decay, optim.final_lr_frac, optim.decay_frac
                             the learning-rate schedule: each run's own
                             `optim.make_schedule`, tabulated per step on the host
                             (`arm_hparams`), read by the step count of the slot's
                             optimizer state
  optim.weight_decay         AdamW's, a traced value (0 applies as `g + 0 * p` = `g`)
  loss.<name>.<field>        the loss's hyperparameters (lam, eps, coef, ...), traced values
  loss.name "ce" with "e1"   CE trains as E1 at lam 0: as a function of the logits it is
                             el_jax's CE bit for bit (values and gradients); in a compiled
                             step XLA fuses the two graphs differently, and the parameters
                             differ at float rounding (tests/test_stacked_arms.py)

The task, data, model (dtype included), optimizer kind and its other fields, the loss
reduction, batch, steps and the loop's cadence and devices are the same for every run.
Runs that differ in none of the fields above use the step of `train_seeds` unchanged. Each
run's metrics rows, checkpoints, final.json and summary are those of the run trained
alone (its `lr` column from its own schedule), up to float rounding: the suite's
tolerances of tests/test_vmap_seeds.py (tests/test_stacked_arms.py, copy task and
path-star). A diverging run stops the whole program, as it stops a grid trained run by run.

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
import dataclasses
import functools
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from el_jax.core import losses
from el_jax.core import step as step_lib
from el_jax.core import optim
from el_jax.core import tasks
from el_jax.infra import checkpoint
from el_jax.infra import timeline
from el_jax.run import config as config_lib
from el_jax.run import train
from el_jax.infra import workdir as wd
from el_jax.run import setup as setup_lib

IMPLS = setup_lib.VMAP_SEEDS_IMPLS  # "auto", "vmap", "map" (validated with the config by train)

# The fields stacked runs may differ in (module docstring): the schedule and weight decay of
# the optimizer, the stacked loss's hyperparameters (`loss.<name>.*`), and "ce" with "e1".
ARM_OPTIM_FIELDS = ("optim.lr", "optim.warmup_steps", "optim.decay", "optim.final_lr_frac",
                    "optim.decay_frac", "optim.weight_decay")
# Fields that may differ freely: which seeds, the progress bar, `train.vmap_seeds` (a stacked
# job stacks whatever it says), `train.tensorboard` (each run has its own metrics writer).
FREE_FIELDS = frozenset({"seeds", "progress", "train.vmap_seeds", "train.tensorboard"})
# A loss whose hyperparameter at 0 is CE: a CE run stacks with runs of that loss as that loss
# with the hyperparameter 0 (E1 at lam 0 is CE bit for bit as a function of the logits:
# tests/test_stacked_arms.py).
CE_AS = {"e1": "lam"}


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


# ----------------------------------------------------------------------------
# Stacked runs: what may differ, and the hyperparameters each slot carries


def stacked_loss(configs):
  """The loss name every slot of stacked `configs` trains with: their common `loss.name`,
  or "e1" for a mix of "ce" and "e1" (`CE_AS`); None for any other mix."""
  names = {c.loss.name for c in configs}
  if len(names) == 1:
    return names.pop()
  for name, field in CE_AS.items():
    if names == {"ce", name}:
      return name
  return None


def check_arms(configs, names=None):
  """Raises ValueError (one line, naming the field and the two runs) unless `configs` may
  train as one stacked program: equal but for `FREE_FIELDS`, `ARM_OPTIM_FIELDS`, the
  hyperparameters of the loss they stack as (`stacked_loss`) and "ce" with "e1"; each of
  them supported by a stacked program (`setup.stacking_refusals`). `names` (default
  "run 0", "run 1", ...) name the runs in the message."""
  configs = list(configs)
  if not configs:
    raise ValueError("no runs to stack")
  names = list(names) if names is not None else [f"run {i}" for i in range(len(configs))]
  for cfg, name in zip(configs, names):
    if not tasks.is_task_class(tasks.get(cfg.task)):
      raise ValueError(f"{name}: config.task={cfg.task!r} has a trainer of its own; its runs "
                       f"cannot be stacked (train them one after the other)")
    refused = setup_lib.stacking_refusals(cfg)
    if refused:
      raise ValueError(f"{name}: stacked runs do not support {', '.join(refused)}; train it "
                       f"alone")
  loss = stacked_loss(configs)
  mine = f"loss.{loss}." if loss in losses.LOSSES else None
  flat = [config_lib.flatten(config_lib.config_dict(c)) for c in configs]
  for cfg, f, name in zip(configs[1:], flat[1:], names[1:]):
    for key in config_lib.config_diff(flat[0], f, FREE_FIELDS):
      if key in ARM_OPTIM_FIELDS or (mine and (key.startswith(mine) or key == "loss.name")):
        continue
      raise ValueError(
          f"{names[0]} and {name} cannot train as one program: they differ in {key} "
          f"({flat[0].get(key, '<absent>')!r} vs {f.get(key, '<absent>')!r}); stacked runs "
          f"may differ only in seeds, {', '.join(ARM_OPTIM_FIELDS)}, the loss's "
          f"hyperparameters (loss.<name>.*) and loss.name 'ce' with 'e1'; train them one "
          f"after the other")


def same_training(configs):
  """Whether `configs` differ in nothing but `FREE_FIELDS` (the plain stacked step)."""
  flat = [config_lib.flatten(config_lib.config_dict(c)) for c in configs]
  return all(not config_lib.config_diff(flat[0], f, FREE_FIELDS) for f in flat[1:])


def schedule_table(setup):
  """The learning rate of each step 0 .. num_steps - 1 of `setup.schedule`, float32 (the
  optimizer of a stacked slot reads it at its step count)."""
  n = setup.config.train.num_steps
  return np.asarray(jax.jit(jax.vmap(setup.schedule))(jnp.arange(n, dtype=jnp.int32)),
                    np.float32)


def arm_hparams(setup, loss_name):
  """The hyperparameters one run (`setup`) carries as a slot of stacked runs that train
  `loss_name`: {"lr": its `schedule_table`, "weight_decay": float32, "loss": {field:
  float32}} (a CE run of an E1 stack: lam 0, `CE_AS`)."""
  cfg = setup.config
  if setup.loss_fn is None:  # a task's own objective (Task.own_model): no loss fields
    hp = {}
  elif cfg.loss.name == loss_name:
    hp = losses.hparams_from_config(cfg.loss)
  else:
    hp = {CE_AS[loss_name]: 0.0}
  return {"lr": schedule_table(setup), "weight_decay": np.float32(cfg.optim.weight_decay),
          "loss": {k: np.float32(v) for k, v in hp.items()}}


def hparam_step(trainer, loss_name):
  """The pure step of one slot, (state, batch, hparams) -> (state, metrics): the optimizer of
  the config's kind (`optim.make_transform`) with the slot's schedule table and weight
  decay, and the per-token loss `loss_name` with the slot's hyperparameters, all traced."""
  st = trainer.setup
  fn = losses.LOSSES[loss_name] if st.loss_fn is not None else None

  def one(state, batch, hp):
    table = hp["lr"]
    tx = optim.make_transform(st.config.optim,
                              lambda count: table[jnp.minimum(count, table.shape[0] - 1)],
                              weight_decay=hp["weight_decay"])
    loss_fn = None if fn is None else functools.partial(fn, **hp["loss"])
    return trainer.pure_step_with(loss_fn, tx)(state, batch)

  return one


class StackedTrainer:
  """The jitted functions of `len(seeds)` stacked seeds of `trainer.setup`.

  `init()` the stacked initial state, `stack(states)` / `unstack(state)` between per-seed
  states (placed as the sequential `trainer` places them) and the stacked one,
  `put_batch(host_batch(step))` the seeds' batches of `step`, stacked and placed,
  `step(state, batch)` -> (state, metrics with a leading seed axis), jitted with the state
  donated. The seed axis of states, batches and metrics is the mesh axis "seed", the batch
  rows are split over "data" (`seed_mesh_shape`). A seed may appear more than once (the
  same seed of several stacked runs).

  `hparams` (stacked runs): a pytree whose leaves have a leading axis of `len(seeds)`, each
  slot's hyperparameters (`arm_hparams`), kept on the device and passed to every call of
  `member_step(state, batch, hparams)` (`hparam_step`) for its slot; None: every slot runs
  `trainer.pure_step`.
  """

  def __init__(self, trainer, seeds, impl="auto", hparams=None, member_step=None):
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
    one = trainer.pure_step if hparams is None else member_step
    if self.impl == "vmap":
      stacked = jax.vmap(one)
    else:  # "map": the per-seed step in a loop over the seed axis, inside the one program
      def stacked(*args):
        return jax.lax.map(lambda a: one(*a), args)
    shardings = (self.state_sharding, self.batch_sharding)
    if hparams is not None:
      shardings += (self.seed_sharding,)
    step = jax.jit(stacked, in_shardings=shardings,
                   out_shardings=(self.state_sharding, self.seed_sharding),
                   donate_argnums=0, compiler_options=trainer.compiler_options)
    self._one, self._host_hparams = one, hparams
    if hparams is None:
      self.hparams, self.step = None, step
    else:
      self.hparams = jax.device_put(hparams, self.seed_sharding)
      self.step = lambda state, batch: step(state, batch, self.hparams)

  def slot_flops(self):
    """(FLOPs of one slot's training step, where the count comes from): XLA's cost analysis
    of the step one slot runs (`trainer.pure_step`, or its `member_step` with the slot's
    hyperparameters), lowered from abstract inputs (nothing runs), else compiled where the
    backend's lowered analysis gives none (`el_jax.core.step.step_flops`). The stacked
    program runs it for every slot: its FLOPs per step are `len(seeds)` times this."""
    tr = self.trainer
    state = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tr.abstract_state)
    host = self.setup.batch(self.seeds[0], 0)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in host.items()}
    args = (state, batch)
    if self._host_hparams is not None:
      args += (jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                            self._host_hparams),)
    return step_lib.step_flops(jax.jit(self._one), *args)

  def init(self):
    return self.stack([self.trainer.init(s) for s in self.seeds])

  def stack(self, states):
    return self._stack(*states)

  def unstack(self, state):
    """The per-seed states of a stacked `state` (one program for checkpoints and evaluation)."""
    return self._unstack(state)

  def host_batch(self, step):
    """The seeds' batches of `step` (the task's `batch(seed, step)`), stacked on the host."""
    batches = {}
    for s in self.seeds:
      if s not in batches:
        batches[s] = self.setup.batch(s, step)
    first = batches[self.seeds[0]]
    return {k: np.stack([batches[s][k] for s in self.seeds]) for k in first}

  def put_batch(self, host_batch):
    return jax.device_put(host_batch, self.batch_sharding)


@dataclasses.dataclass
class Arm:
  """One run of stacked runs: its Setup (`Setup.with_config`: its config, loss, optimizer
  and schedule on the job's task data), workdir and metrics writer."""
  setup: object
  workdir: str
  writer: object

  @property
  def seeds(self):
    return tuple(int(s) for s in self.setup.config.seeds)


def train_seeds(trainer, workdir, writer):
  """Trains every seed of `trainer.setup.config` as stacked groups (see the module docstring).

  Returns the final evaluations in the order of `config.seeds` (finished seeds read
  back), or None if `train.stop_at_step` stopped training early.
  """
  finals = train_arms(trainer, [Arm(trainer.setup, workdir, writer)])
  return None if finals is None else finals[0]


def train_arms(trainer, arms):
  """Trains every seed of every run of `arms` (`Arm`s of `trainer`'s task, model and loop:
  `check_arms`) as stacked groups, one group per starting step (see the module docstring).

  Returns, per arm, the final evaluations in the order of its seeds (finished seeds read
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
  finals, groups, stopped = [{} for _ in arms], {}, False
  for a, arm in enumerate(arms):
    for seed in arm.seeds:
      status, final = train.seed_status(seed, arm.workdir, tcfg, arm.writer)
      if status == "finished":
        finals[a][seed] = final
      elif status == "stopped":  # final: the step of its checkpoint
        train.catch_up_stopped(trainer, seed, final, arm.workdir, arm.writer)
        stopped = True
      else:
        groups.setdefault(final or 0, []).append((a, seed))  # final: the newest checkpoint step
  impl = tcfg.get("vmap_seeds_impl", "auto")
  for start, members in groups.items():
    for (a, seed), final in _train_group(trainer, arms, members, start, stop, impl).items():
      finals[a][seed] = final
  if stopped or stop < tcfg.num_steps:
    return None
  return [[f[s] for s in arm.seeds] for f, arm in zip(finals, arms)]


def _train_group(trainer, arms, members, start, stop, impl):
  """Trains `members` ((arm index, seed) pairs, all at step `start`) to `stop`; returns
  {(arm index, seed): final evaluation} ({} when stopped early by `train.stop_at_step`)."""
  tcfg = trainer.setup.config.train
  mngrs = [train.seed_manager(arms[a].workdir, s, tcfg) for a, s in members]
  seeds = [s for _, s in members]
  configs = [arm.setup.config for arm in arms]
  with timeline.part("setup"):
    if same_training(configs):
      stacked = StackedTrainer(trainer, seeds, impl)
    else:
      loss = stacked_loss(configs)
      per_arm = {a: arm_hparams(arms[a].setup, loss) for a in sorted({a for a, _ in members})}
      hparams = jax.tree.map(lambda *x: np.stack(x), *(per_arm[a] for a, _ in members))
      stacked = StackedTrainer(trainer, seeds, impl, hparams, hparam_step(trainer, loss))
    if timeline.active() is not None:  # the achieved FLOP/s of a recorded run
      flops, source = stacked.slot_flops()
      timeline.append("programs", {"slots": len(seeds), "steps": stop - start,
                                   "flops_per_slot_step": flops, "flops_source": source,
                                   "impl": stacked.impl})
  try:
    return _run_group(trainer, stacked, arms, members, mngrs, start, stop)
  finally:
    for m in mngrs:
      m.close()


def _run_group(trainer, stacked, arms, members, mngrs, start, stop):
  tcfg = trainer.setup.config.train
  one_run = len(arms) == 1

  def who(a, seed):  # a slot's name in messages
    return f"seed {seed}" if one_run else f"{arms[a].workdir} seed {seed}"

  shape = dict(zip(stacked.mesh.axis_names, stacked.mesh.devices.shape))
  what = (f"seeds {list(stacked.seeds)}" if one_run else
          f"{len(members)} seeds of {len({a for a, _ in members})} runs")
  print(f"{what}: trained as one program ({stacked.impl}, mesh seed "
        f"{shape['seed']} x data {shape['data']})", file=sys.stderr)
  with timeline.part("setup"):
    state = _start_state(trainer, stacked, members, mngrs, start, who)
  # Rows logged past the resume point (all of them when starting afresh) are recomputed,
  # and so is a final evaluation being redone.
  for a, seed in members:
    arms[a].writer.truncate(seed, start if start else -1,
                            eval_at=stop if start >= stop else None)
  missed = [train.missed_rows(arms[a].writer, seed, start, trainer.setup.config)
            for a, seed in members]
  if any(missed):  # rows of the checkpoint `start` an interrupted run did not log
    with timeline.part("eval", sync=state):
      for (a, seed), s, m in zip(members, stacked.unstack(state), missed):
        train.log_missed(trainer, seed, start, s["params"], arms[a].writer, m)

  def log_eval(step, state):
    rows = {}
    for (a, seed), s in zip(members, stacked.unstack(state)):
      rows[a, seed] = train.eval_row(trainer, seed, step, s["params"])
      arms[a].writer.write(rows[a, seed])
    return rows

  def check(pending, bar, t0):
    step, metrics = pending
    host = jax.device_get(metrics)
    for i, ((a, seed), mngr) in enumerate(zip(members, mngrs)):
      try:
        train.check_and_log((step, {k: v[i] for k, v in host.items()}), seed, arms[a].setup,
                            arms[a].writer, bar, t0)
      except FloatingPointError as e:
        err = e if one_run else FloatingPointError(f"{arms[a].workdir}: {e}")
        raise train.diverged_error(err, mngr) from None

  def save(done, state):
    # One signal-free stretch for every seed's checkpoint of `done` (el_jax.infra.workdir): an
    # interrupt never leaves some seeds saved and the others not (a kill -9 can: the next
    # run resumes each seed from its own newest checkpoint, `train_arms`).
    with wd.uninterrupted(f"the checkpoints of step {done}"):
      for mngr, s in zip(mngrs, stacked.unstack(state)):
        checkpoint.save(mngr, done, s)

  if start == 0 and tcfg.eval_every:
    with timeline.part("eval", sync=state):
      log_eval(0, state)
  with timeline.part("train"):
    state = train.run_steps(state, start, stop, tcfg, desc=what,
                            batch=lambda i: stacked.put_batch(stacked.host_batch(i)),
                            step=stacked.step, check=check, save=save, evaluate=log_eval)
  with timeline.part("checkpoint", sync=state):
    for mngr in mngrs:
      mngr.wait_until_finished()
  if stop < tcfg.num_steps:
    for a, seed in members:
      print(f"{who(a, seed)}: stopped at step {stop} (train.stop_at_step); run again without "
            f"it to continue to step {tcfg.num_steps}", file=sys.stderr)
    return {}
  with timeline.part("eval"):
    finals = log_eval(stop, state)
  with timeline.part("write"):
    for a, seed in members:
      wd.write_json(os.path.join(arms[a].workdir, f"seed_{seed}", "final.json"),
                    finals[a, seed])
  return finals


def _start_state(trainer, stacked, members, mngrs, start, who):
  """The stacked state of `members` at step `start`: the initial one, or their checkpoints."""
  if start == 0:
    return stacked.init()
  states = []
  for (a, seed), mngr in zip(members, mngrs):
    s = checkpoint.restore_latest(mngr, trainer.abstract_state, trainer.state_sharding)
    if s is None or int(s["step"]) != start:  # the checkpoint listing changed under us
      raise wd.WorkdirError(f"{who(a, seed)}: expected a checkpoint of step {start} in "
                            f"{mngr.directory}")
    print(f"{who(a, seed)}: resuming from the checkpoint of step {start}", file=sys.stderr)
    states.append(s)
  return stacked.stack(states)
