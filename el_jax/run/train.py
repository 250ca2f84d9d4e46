"""The training loop of one seed: steps, evaluations, checkpoints, resume.

  setup = setup_lib.Setup(config)       # el_jax.run.setup: task (its data), model, loss, optimizer, mesh
  trainer = setup_lib.Trainer(setup)    # el_jax.run.setup: the jitted step (donated state), init, decode
  final = train.train_seed(trainer, seed, workdir, writer)

`train_seed` trains one model seed to `train.num_steps`, resuming from its newest
checkpoint (`el_jax.infra.checkpoint`), logging rows through an `el_jax.infra.metrics.MetricsWriter`
and writing `seed_<s>/final.json`. The pieces it is made of (`read_final`,
`starting_state`, `eval_row`, `check_and_log`, `diverged_error`) are public: the stacked
seeds of `el_jax.run.seeds` use the same ones. The step is the task's (`Task.step_fn`,
default `el_jax.core.step.train_step`); this module names no task and no objective. A whole
run (lock, config check, summary, plots) is `el_jax.run.job.train_and_evaluate`.
"""
import os
import sys
import time

import jax
import numpy as np

from el_jax.infra import checkpoint
from el_jax.infra import distributed
from el_jax.core import flatness
from el_jax.infra import metrics as metrics_lib
from el_jax.infra import progress
from el_jax.infra import provenance
from el_jax.infra import timeline
from el_jax.core import step as step_lib
from el_jax.infra import workdir as wd
from el_jax.run import setup as setup_lib



# ----------------------------------------------------------------------------
# Host-side loop


def read_final(seed, sdir, num_steps):
  """The finished evaluation of a seed, or None if the seed must (re)train or re-evaluate.

  A damaged final.json is set aside (renamed, never deleted) and the seed is
  re-evaluated from its last checkpoint; one of fewer steps than `num_steps`
  (the run was continued with --allow_config_change=train.num_steps) is kept
  as final_step<N>.json and training continues.
  """
  path = os.path.join(sdir, "final.json")
  if not os.path.exists(path):
    return None
  check_ran_on(seed, sdir)
  try:
    final = wd.read_json(path, what=f"the final evaluation of seed {seed}")
  except wd.WorkdirError as e:
    moved = wd.set_aside(path)
    print(f"warning: {e}; kept it as {moved} and re-evaluating seed {seed} from its last "
          f"checkpoint", file=sys.stderr)
    return None
  if final.get("step", num_steps) < num_steps:
    kept = os.path.join(sdir, f"final_step{final['step']}.json")
    os.replace(path, kept)
    print(f"seed {seed}: finished at step {final['step']}, continuing to step {num_steps} "
          f"(its evaluation then is kept as {kept})", file=sys.stderr)
    return None
  print(f"seed {seed}: already finished, skipped (reading {path})", file=sys.stderr)
  return final


RAN_ON = "ran_on.json"  # seed_<s>/ran_on.json: where the seed trains (el_jax.infra.provenance)


def check_ran_on(seed, sdir, record=False):
  """Refuses (WorkdirError) a seed folder trained on another platform or device kind than this
  process's (`seed_<s>/ran_on.json`; none: trained before el_jax recorded it, on the CPU): its
  results and checkpoints are that platform's, not this one's. `record=True` writes this
  process's record when there is none (a seed starting or resuming here)."""
  here = provenance.ran_on()
  path = os.path.join(sdir, RAN_ON)
  there = wd.read_json(path, what=f"where seed {seed} trained") if os.path.exists(path) else None
  if (there is not None or os.path.exists(os.path.join(sdir, "final.json"))
      or checkpoint.latest_checkpoint_step(sdir) is not None):
    if not provenance.same_platform(there, here):
      raise wd.WorkdirError(
          f"seed {seed} in {sdir} was trained on {provenance.describe(there)}; this process runs "
          f"on {provenance.describe(here)}: its checkpoints and results are not this platform's. "
          f"Use another --workdir (or move {sdir} away to train it afresh here)")
  if record and there is None and distributed.is_main():
    wd.write_json(path, here)


def stop_step(tcfg):
  """The step training stops at: `train.stop_at_step` if set (and below `num_steps`)."""
  return tcfg.num_steps if not tcfg.get("stop_at_step", 0) else min(tcfg.stop_at_step,
                                                                     tcfg.num_steps)


def seed_status(seed, workdir, tcfg, writer):
  """Where seed `seed` of a run in `workdir` stands: ("finished", its final evaluation),
  ("stopped", the step of its newest checkpoint) when it already reached
  `train.stop_at_step`, or ("train", the step of its newest checkpoint or None). A
  checkpoint past `train.num_steps` is a WorkdirError."""
  sdir = os.path.join(workdir, f"seed_{seed}")
  final = distributed.from_main(lambda: read_final(seed, sdir, tcfg.num_steps))
  if final is not None:
    writer.backfill(seed)  # its TensorBoard events, if it finished without them
    return "finished", final
  os.makedirs(sdir, exist_ok=True)
  distributed.from_main(lambda: check_ran_on(seed, sdir, record=True))
  stop = stop_step(tcfg)
  latest = checkpoint.latest_checkpoint_step(sdir)
  if latest is not None and latest > tcfg.num_steps:
    raise wd.WorkdirError(
        f"seed {seed} has a checkpoint at step {latest}, past train.num_steps={tcfg.num_steps}; "
        f"set train.num_steps >= {latest}, or move {sdir} away to train it afresh")
  if latest is not None and latest >= stop and stop < tcfg.num_steps:
    print(f"seed {seed}: already at step {latest} >= train.stop_at_step={stop}; nothing to do",
          file=sys.stderr)
    writer.truncate(seed, latest)  # rows a killed run logged past its last checkpoint
    return "stopped", latest
  return "train", latest


def seed_manager(workdir, seed, tcfg, data_it=None):
  """The orbax manager of seed `seed`'s checkpoints (with a task's data-iterator item)."""
  return checkpoint.manager(os.path.join(workdir, f"seed_{seed}", "checkpoints"),
                            tcfg.checkpoint_every, tcfg.get("keep_checkpoints", 2),
                            item_names=checkpoint.DATA_ITEMS if data_it is not None else None)


def train_seed(trainer: setup_lib.Trainer, seed, workdir, writer, flat_hook=None):
  """Trains one seed to completion (resuming if possible); returns its final evaluation.

  Returns None if `train.stop_at_step` stopped it before `train.num_steps`.
  """
  st = trainer.setup
  tcfg = st.config.train
  status, final = seed_status(seed, workdir, tcfg, writer)
  if status == "stopped":  # final: the step of its checkpoint
    catch_up_stopped(trainer, seed, final, workdir, writer, flat_hook)
    return None
  if status != "train":
    return final
  data_it = st.task.data_iterator(seed)  # None: batches from st.batch(seed, step)
  mngr = seed_manager(workdir, seed, tcfg, data_it)
  try:
    return _train_seed(trainer, seed, workdir, writer, flat_hook, mngr, data_it)
  finally:
    mngr.close()


def missed_rows(writer, seed, step, config):
  """The rows the loop logs right after saving the checkpoint of `step` ("eval" every
  `train.eval_every` steps, "flatness" every `flatness.every`) that metrics.jsonl lacks for
  `seed`: a run interrupted or killed between that save and those rows. A resume starts
  after the checkpoint, so `log_missed` computes them from the restored state first."""
  t = config.train
  want = []
  if step and t.get("eval_every", 0) and step % t.eval_every == 0 and step < t.num_steps:
    want.append("eval")
  if step and setup_lib.flatness_every(config) and step % setup_lib.flatness_every(config) == 0:
    want.append("flatness")
  if not want:
    return []
  have = distributed.from_main(lambda: {r.get("kind") for r in writer.rows()
                                        if r.get("seed") == seed and r.get("step") == step})
  return [k for k in want if k not in have]


def log_missed(trainer, seed, step, params, writer, missed, flat_hook=None):
  """Logs the rows `missed` (`missed_rows`) of seed `seed` at `step` from its restored
  `params` (the flatness row only when there is a `flat_hook`)."""
  todo = [k for k in missed if k == "eval" or flat_hook is not None]
  if not todo:
    return
  print(f"seed {seed}: logging the {' and '.join(todo)} row of step {step}, which an "
        f"interrupted run did not", file=sys.stderr)
  for kind in todo:
    if kind == "eval":
      writer.write(eval_row(trainer, seed, step, params))
    else:
      writer.write({"seed": seed, "step": step, "kind": "flatness",
                    **flat_hook(params, seed, step)})


def catch_up_stopped(trainer, seed, step, workdir, writer, flat_hook=None):
  """A seed already at `train.stop_at_step` (its checkpoint of `step`): logs its
  `missed_rows` from that checkpoint, if any."""
  missed = missed_rows(writer, seed, step, trainer.setup.config)
  if not missed:
    return
  st = trainer.setup
  data_it = st.task.data_iterator(seed)
  mngr = seed_manager(workdir, seed, st.config.train, data_it)
  try:
    state, start = starting_state(trainer, seed, mngr, data_it)
    log_missed(trainer, seed, start, state["params"], writer, missed, flat_hook)
  finally:
    mngr.close()


def _with_params(trainer, state, params):
  """`state` with `params` and a fresh optimizer state for them (fine-tuning, init_from)."""
  return jax.device_put({"params": params, "opt_state": trainer.setup.tx.init(params),
                         "step": state["step"]}, trainer.state_sharding)


def starting_state(trainer, seed, mngr, data_it=None):
  """(state, step) seed `seed` starts from: its newest checkpoint in `mngr` (and the data
  iterator's state saved with it), else a fresh init, with the pretrained weights of
  `model.pretrained` or the params of `train.init_from` when set (fresh optimizer)."""
  st = trainer.setup
  cfg = st.config
  state = checkpoint.restore_latest(mngr, trainer.abstract_state, trainer.state_sharding, data_it)
  if state is not None:
    start = int(state["step"])
    print(f"seed {seed}: resuming from the checkpoint of step {start}", file=sys.stderr)
    if data_it is not None and data_it.step != start:
      raise RuntimeError(f"checkpoint {mngr.directory}/{start}: its data-iterator state is at "
                         f"step {data_it.step}, not {start}; the checkpoint is inconsistent")
    return state, start
  state = trainer.init(seed)
  pre = st.pretrained_params_for(seed)
  if pre is not None:  # fine-tuning: the checkpoint's weights (the seed's own), fresh optimizer
    # From host copies: the step donates its state, so the device buffers of one seed must
    # never be those of `st.pretrained_params` (the next seed starts from them too).
    host = jax.tree.map(np.asarray, pre)
    state = _with_params(trainer, state, jax.device_put(host, trainer.state_sharding["params"]))
    print(f"seed {seed}: starting from the pretrained weights of "
          f"{setup_lib.pretrained_path(cfg, seed)}", file=sys.stderr)
  if cfg.train.get("init_from", ""):  # continue another run's parameters with a fresh optimizer
    params, from_step = checkpoint.load_params_from(cfg.train.init_from, seed,
                                                    trainer.abstract_state["params"],
                                                    trainer.state_sharding["params"])
    state = _with_params(trainer, state, params)
    print(f"seed {seed}: starting from the parameters of {cfg.train.init_from} (step "
          f"{from_step}) with a fresh optimizer", file=sys.stderr)
  return state, 0


def eval_row(trainer, seed, step, params):
  """The metrics row of evaluating `params` (seed `seed`, step `step`) on every eval split."""
  row = {"seed": seed, "step": step, "kind": "eval"}
  for split, ds in trainer.setup.task.eval_sets():
    with progress.label(f"seed {seed} step {step}: evaluating {split}"):
      for key, val in trainer.evaluate(params, ds).items():
        row[f"{split}_{key}"] = val
  return row


def run_steps(state, start, stop, tcfg, *, batch, step, check, save, evaluate, desc,
              after_step=None):
  """The loop every run goes through, one seed or stacked seeds: steps `start` .. `stop`.

  `batch(step)` -> device batch; `step(state, batch)` -> (state, metrics), dispatched
  asynchronously. The metrics of the steps that are logged (step 1 and every
  `train.log_every`-th), checkpointed (`train.checkpoint_every`; 0: never) or last are fetched
  and checked (`check((step, metrics), bar, t0)`, which logs them and raises on a non-finite
  loss or parameter norm) after the next step is dispatched, and always before that step's
  checkpoint `save(done, state)`; the others are never copied to the host, so the device
  runs ahead of the host by as many steps as JAX queues (on an accelerator a per-step
  fetch would idle it between steps). A divergence is therefore caught at the next logged
  step, and never checkpointed. `evaluate(done, state)` runs every `train.eval_every` steps
  before the end, `after_step(done, state)` (the flatness hook) after every step. Returns the
  final state. While an `el_jax.infra.timeline` records, checkpoints and evaluations are
  charged to its "checkpoint" and "eval" parts (after the device finished the steps before).
  """
  pending = None  # (step, metrics) of the previous fetched step, checked after the next dispatch
  t0 = time.time()
  bar = progress.Bar(total=stop, initial=start, desc=desc)
  try:
    for i in range(start, stop):
      state, metrics = step(state, batch(i))
      if pending is not None:
        check(pending, bar, t0)
        pending = None
      done = i + 1
      every = tcfg.checkpoint_every
      saving = bool(every) and (done % every == 0 or done == stop)
      if saving or done == 1 or done == stop or done % tcfg.log_every == 0:
        pending = (done, metrics)
      if saving:
        check(pending, bar, t0)
        pending = None
        with timeline.part("checkpoint", sync=state):
          save(done, state)
      if tcfg.eval_every and done % tcfg.eval_every == 0 and done < tcfg.num_steps:
        with timeline.part("eval", sync=state):
          evaluate(done, state)
      if after_step is not None:
        after_step(done, state)
      bar.update(1)
    if pending is not None:
      check(pending, bar, t0)
  finally:
    bar.close()
  return state


def _train_seed(trainer, seed, workdir, writer, flat_hook, mngr, data_it=None):
  st = trainer.setup
  cfg = st.config
  tcfg = cfg.train
  stop = stop_step(tcfg)
  with timeline.part("setup"):
    state, start = starting_state(trainer, seed, mngr, data_it)
  # Rows logged past the resume point (all of them when starting afresh) are recomputed,
  # and so is a final evaluation being redone.
  writer.truncate(seed, start if start else -1, eval_at=stop if start >= stop else None)

  def log_eval(step, state):
    row = eval_row(trainer, seed, step, state["params"])
    writer.write(row)
    return row

  def check(pending, bar, t0):
    check_and_log(pending, seed, st, writer, bar, t0)

  def after_step(done, state):
    if done % setup_lib.flatness_every(cfg) == 0:
      row = flat_hook(state["params"], seed, done)
      writer.write({"seed": seed, "step": done, "kind": "flatness", **row})

  with timeline.part("eval"):
    if start == 0 and tcfg.eval_every:
      log_eval(0, state)
    elif start:
      log_missed(trainer, seed, start, state["params"], writer,
                 missed_rows(writer, seed, start, cfg), flat_hook)
  try:
    with timeline.part("train"):
      state = run_steps(
          state, start, stop, tcfg, desc=f"seed {seed}",
          batch=lambda i: trainer.put_batch(next(data_it) if data_it is not None
                                            else st.batch(seed, i)),
          step=trainer.step, check=check, evaluate=log_eval,
          save=lambda done, s: checkpoint.save(mngr, done, s, data_it),
          after_step=(after_step if flat_hook is not None and setup_lib.flatness_every(cfg)
                      else None))
  except FloatingPointError as e:
    raise diverged_error(e, mngr) from None
  with timeline.part("checkpoint", sync=state):
    mngr.wait_until_finished()
  if stop < tcfg.num_steps:
    print(f"seed {seed}: stopped at step {stop} (train.stop_at_step); run again without it "
          f"to continue to step {tcfg.num_steps}", file=sys.stderr)
    return None  # stopped early on purpose (train.stop_at_step)
  with timeline.part("eval"):
    final = log_eval(stop, state)
  if distributed.is_main():
    with timeline.part("write"):
      wd.write_json(os.path.join(workdir, f"seed_{seed}", "final.json"), final)
  return final


def diverged_error(err, mngr):
  """The FloatingPointError to raise for a diverged seed: `err` plus where a rerun resumes
  (the newest checkpoint of `mngr`) and how to continue with a lower learning rate."""
  last = mngr.latest_step()
  where = (f"the last checkpoint is step {last} ({mngr.directory}/{last}), where a rerun "
           f"resumes" if last is not None else
           "no checkpoint was saved before it, so a rerun starts this seed afresh")
  return FloatingPointError(
      f"{err}; {where}. Rerun with a lower --config.optim.lr (or more optim.warmup_steps, or "
      f"optim.grad_clip) and --allow_config_change=optim.lr (naming each field you change)")


def check_and_log(pending, seed, st, writer, bar, t0):
  step, metrics = pending
  m = metrics_lib.to_float(metrics)
  for g in st.task.groups:  # a batch without examples of a group has no loss for it
    if m[f"n_{g}"] == 0:
      m[f"loss_{g}"] = m[f"ce_{g}"] = None
  # param_norm is that of the parameters after this step's update: checking it
  # too keeps a diverged state (finite loss, overflowing update) out of the
  # checkpoint that may be saved right after this check.
  bad = [k for k in ("loss", "param_norm") if not np.isfinite(m[k])]
  if bad:
    raise FloatingPointError(
        f"non-finite training {' and '.join(bad)} (loss={m['loss']}, param_norm="
        f"{m['param_norm']}) at step {step} (seed {seed})")
  every = st.config.train.log_every
  if step % every == 0 or step == 1:
    row = {"seed": seed, "step": step, "kind": "train", "lr": float(st.schedule(step - 1)),
           "epoch": (step - 1) / st.steps_per_epoch, "time_s": round(time.time() - t0, 3), **m}
    writer.write(row)
    bar.set_postfix(loss=m["loss"])


def make_flatness_hook(trainer):
  """Measures Hessian / Fisher traces of the mean CE on fixed training batches."""
  st = trainer.setup
  fcfg = st.config.flatness  # only called when flatness.every is set
  loss_fn, logits_fn = step_lib.ce_objectives(trainer.graphdef)

  # Fixed batches (the first ones of epoch 0 for model seed 0): the same data at every measurement.
  batches = [st.batch(0, i % st.steps_per_epoch) for i in range(fcfg.num_batches)]

  def hook(params, seed, step):
    key = jax.random.key(1000 * seed + step)
    return flatness.measure_during_training(fcfg, loss_fn=loss_fn, logits_fn=logits_fn,
                                            params=params, batches=batches, key=key)

  return hook


