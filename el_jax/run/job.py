"""One job: a config trained in a workdir, start to summary.

  from el_jax.run import job
  job.run(config, workdir)                    # what `python -m el_jax.main` does
  job.train_and_evaluate(config, workdir)     # a task of the generic loop

`run` dispatches on what `config.task` is registered with (`el_jax.core.tasks`): a `Task`
subclass is trained by `train_and_evaluate`; an experiment with a trainer of its own (a
`(config, workdir)` function, e.g. ntp_linear) is called. `train_and_evaluate` owns the
workdir: it validates the config once, takes the lock (`el_jax.infra.workdir.Lock`), refuses a
workdir trained with another config (except `--allow_config_change` fields, recorded in
config.json), reports a finished run without building anything, trains each seed with the
loop of `el_jax.run.train` (or all seeds as one program, `el_jax.run.seeds`, with
`train.vmap_seeds`), then writes summary.json (`el_jax.report.stats.aggregate`) and the task's
plots. Layout of `workdir`:

  config.json            the config it was trained with (a different one is refused, except
                         fields named by `allow_config_change`, logged in `config_changes`)
  .lock                  pid / host of the run using the workdir (`el_jax.infra.workdir.Lock`)
  metrics.jsonl          one JSON row per log / eval / flatness event (field `seed`)
  tb/seed_<s>/           TensorBoard events of those rows, a tag per kind and key (train/loss,
                         eval/test_em_hard; `el_jax.infra.tensorboard`; train.tensorboard=False:
                         none): `tensorboard --logdir <workdir>/tb`
  summary.json           final metrics per split, per seed and aggregated over seeds, and
                         `ran_on` (el_jax.infra.provenance: platform, device, versions, precision)
  seed_<s>/checkpoints/  orbax checkpoints (automatic resume; `train.keep_checkpoints`)
  seed_<s>/final.json    final evaluation of that seed (a finished seed is skipped on re-run)
  seed_<s>/ran_on.json   where the seed trained; a seed of another platform or device kind
                         is refused, never resumed or reported as this one's
  *.png                  the task's plots

JSON files are written atomically; a torn last metrics line, a damaged final.json /
summary.json or checkpoint are handled on resume (`el_jax.run.train.train_seed`,
`el_jax.infra.metrics.MetricsWriter`).
"""
import contextlib
import os
import sys

import jax

from el_jax.infra.checkpoint import latest_checkpoint_step
from el_jax.run import config as config_lib
from el_jax.infra import distributed
from el_jax.core import flatness
from el_jax.infra import metrics as metrics_lib
from el_jax.core.models import decoder
from el_jax.infra import progress
from el_jax.infra import provenance
from el_jax.infra import tensorboard
from el_jax.infra import timeline
from el_jax.run import seeds as seeds_lib
from el_jax.report import stats
from el_jax.core import tasks
from el_jax.core.tasks import SPLITS
from el_jax.run import train
from el_jax.infra import workdir as wd
from el_jax.run import setup as setup_lib


# Fields of every task that may change between runs on one workdir: they do not
# change what a finished seed computed (which seeds run, devices, logging and
# stopping). Each task adds its own (`Task.resumable_fields`).
RESUMABLE_FIELDS = frozenset({
    "seeds", "progress", "num_devices", "train.stop_at_step", "train.log_every",
    "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
    "train.vmap_seeds", "train.vmap_seeds_impl", "train.tensorboard"})


def resumable_fields(config):
  """`RESUMABLE_FIELDS` plus those of the config's task."""
  name = config.get("task")
  target = tasks.get(name) if name in tasks.REGISTRY else None
  return RESUMABLE_FIELDS | (target.resumable_fields if tasks.is_task_class(target) else frozenset())


def check_workdir_config(config, workdir, allow=()):
  """Refuses to resume (or read back finished seeds of) a workdir trained with another config.

  Without this a finished seed's final.json would be reported for a config
  that never trained it. Fields in `resumable_fields(config)` may differ;
  those named in `allow` (`--allow_config_change`) too, and are returned as
  {key: [old, new]} (see `el_jax.run.config.check_config`).
  """
  return config_lib.check_config(config, workdir, resumable_fields(config), allow)


def _resume_points(config, workdir):
  """{seed: the step it continues from ("finished" / None = from scratch)} (for the change log)."""
  out = {}
  for seed in config.seeds:
    sdir = os.path.join(workdir, f"seed_{int(seed)}")
    out[str(int(seed))] = ("finished" if os.path.exists(os.path.join(sdir, "final.json"))
                           else latest_checkpoint_step(sdir))
  return out


def train_and_evaluate(config, workdir, allow_config_change=()):
  """Trains every seed of `config`, writes metrics, summary.json and plots; returns the summary.

  Returns None if `train.stop_at_step` stopped training early. The workdir is
  locked while this runs (`el_jax.infra.workdir.Lock`); `allow_config_change` names
  the optimizer / loss fields that may differ from the config it was trained
  with (`el_jax.run.config.parse_allowed`).
  """
  setup_lib.validate_config(config)
  allow = config_lib.parse_allowed(allow_config_change)
  workdir = os.path.expanduser(workdir)
  if jax.process_count() > 1:
    return _train_and_evaluate_processes(config, workdir, allow)
  created = not os.path.exists(workdir)
  if not created:
    check_workdir_config(config, workdir, allow)  # fail fast, before taking the lock
    check_steps(config, workdir)
  lock = wd.Lock(workdir)
  try:
    try:
      lock.acquire()
    except wd.NotWritable:
      # A finished run on a read-only workdir (an archive, a shared folder) is reported
      # without locking: nothing is written.
      summary = None if created else _finished_read_only(config, workdir, allow)
      if summary is None:
        raise
      return summary
    try:
      return _train_and_evaluate(config, workdir, allow)
    finally:
      lock.release()
  except BaseException:
    # A run refused before it wrote anything leaves no empty workdir behind.
    if created and os.path.isdir(workdir) and not os.listdir(workdir):
      os.rmdir(workdir)
    raise


def check_steps(config, workdir):
  """Refuses a `train.num_steps` below the step a seed of `workdir` already reached (its
  final evaluation or newest checkpoint): the run would report results of more steps than
  its config says (possible with --allow_config_change=train.num_steps)."""
  n = config.train.num_steps
  for seed in config.seeds:
    sdir = os.path.join(workdir, f"seed_{int(seed)}")
    path = os.path.join(sdir, "final.json")
    try:
      final = wd.read_json(path).get("step") if os.path.exists(path) else None
    except (wd.WorkdirError, AttributeError):  # damaged: re-evaluated by train.read_final
      final = None
    ckpt = latest_checkpoint_step(sdir)
    reached = max((x for x in (final, ckpt) if isinstance(x, int)), default=None)
    if reached is not None and reached > n:
      what = "finished" if final == reached else "has a checkpoint"
      raise wd.WorkdirError(
          f"workdir {workdir} {what} at step {reached} (seed {int(seed)}); "
          f"train.num_steps={n} is fewer: its checkpoints, metrics and results are of step "
          f"{reached}, not {n}. Keep train.num_steps >= {reached} (train.stop_at_step "
          f"stops a run early and resumably), or use another --workdir")


def _finished_read_only(config, workdir, allow):
  """The summary of a finished run in a workdir that cannot be locked (read-only), after
  the same checks as under the lock; None if it is not finished there."""
  if check_workdir_config(config, workdir, allow):  # an allowed change: not this run's result
    return None
  summary = _already_finished(config, workdir, read_only=True)
  if summary is not None:
    _report_finished(summary, workdir, note=" (read-only workdir: reported without locking it)")
  return summary


def _train_and_evaluate_processes(config, workdir, allow):
  """`train_and_evaluate` run by every process of a multi-process job (el_jax.infra.distributed).

  Every process builds the same setup, trains on its own rows of each global batch (the
  `data` mesh spans the devices of all processes) and takes part in orbax's checkpoint saves
  and restores. Process 0 alone owns the workdir: it takes the lock (one lock for the job,
  so the processes never fight over it), checks and records config.json, reads and writes
  final.json, metrics.jsonl, summary.json and the plots. What it decides from those files
  (a refusal, a finished seed, a resume) reaches the others through `distributed.from_main`,
  so they never read a file it is rewriting. The workdir must be a folder every process
  sees (one machine, or a shared file system).
  """
  # Refused rather than left to fail inside JAX: these put host or one-device values into
  # the step, which several processes would need to build as global arrays (not done).
  for bad, why in ((setup_lib.flatness_every(config), "flatness.every (set it to 0; measure "
                    "flatness of the saved checkpoints in one process)"),
                   (tasks.get_task_class(config.task).single_process_reason(config),) * 2,
                   (config.train.get("init_from", ""), "train.init_from"),
                   (config.model.get("pretrained", ""), "model.pretrained")):
    if bad:
      raise ValueError(f"{why} is not supported with {jax.process_count()} processes; run it "
                       f"in one process (python -m el_jax.main)")
  main = distributed.is_main()
  lock = wd.Lock(workdir)
  created = []

  def claim():  # process 0: the same checks and lock as a single-process run
    if os.path.exists(workdir):
      check_workdir_config(config, workdir, allow)
      check_steps(config, workdir)
    else:
      created.append(workdir)
    lock.acquire()

  try:
    distributed.from_main(claim)
    return _train_and_evaluate(config, workdir, allow)
  finally:
    lock.release()  # held by process 0 only
    if main and created and os.path.isdir(workdir) and not os.listdir(workdir):
      os.rmdir(workdir)


def _already_finished(config, workdir, read_only=False):
  """The summary of `workdir` if every seed of `config` finished there, else None.

  A damaged summary.json is set aside with a warning (it is rebuilt from the
  seeds' final.json files; `read_only`: left alone); a damaged final.json is left to
  `train_seed`.
  """
  finals = []
  for seed in config.seeds:
    # A seed trained on another platform or device kind is refused, not reported as this one's.
    train.check_ran_on(int(seed), os.path.join(workdir, f"seed_{int(seed)}"))
    path = os.path.join(workdir, f"seed_{int(seed)}", "final.json")
    try:
      final = wd.read_json(path) if os.path.exists(path) else None
    except wd.WorkdirError:
      return None
    if final is None or final.get("step") != config.train.num_steps:
      return None
    finals.append(final)
  path = os.path.join(workdir, "summary.json")
  if not os.path.exists(path):
    return None
  try:
    summary = wd.read_json(path, what="the summary of the finished seeds")
  except wd.WorkdirError as e:
    if read_only:
      return None
    print(f"warning: {e}; kept it as {wd.set_aside(path)}, rebuilding it from the seeds' "
          f"final.json", file=sys.stderr)
    return None
  if summary.get("seeds") != [int(s) for s in config.seeds] or summary.get("per_seed") != finals:
    return None
  return summary


def _report_finished(summary, workdir, note=""):
  print(f"{workdir}: every seed {tuple(summary['seeds'])} already finished; nothing to "
        f"train{note}", file=sys.stderr)
  table = summary_table(summary)
  if table:
    print(table, file=sys.stderr)
  print(f"results: {os.path.join(workdir, 'summary.json')}", file=sys.stderr)


def _train_and_evaluate(config, workdir, allow):
  # under the lock: authoritative (several processes: process 0 checks, the others follow)
  def checks():
    changes = check_workdir_config(config, workdir, allow)
    check_steps(config, workdir)
    return changes
  changes = distributed.from_main(checks)
  progress.set_enabled(config.get("progress", True))
  plots = progress.plots_enabled()  # (a bad EL_JAX_PLOTS stops the run before it trains)
  summary = None if changes else distributed.from_main(lambda: _already_finished(config, workdir))
  if summary is not None:
    _report_finished(summary, workdir)
    return summary
  with timeline.part("setup"):
    setup = setup_lib.Setup(config, validated=True)
    trainer = setup_lib.Trainer(setup)
    writer = metrics_writer(config, workdir)
  try:
    return _train_and_summarize(config, workdir, setup, trainer, writer, changes, plots)
  finally:
    writer.close()


def metrics_writer(config, workdir):
  """The MetricsWriter of a run in `workdir`: process 0's, with the TensorBoard events of its
  rows under `<workdir>/tb` unless `train.tensorboard` is False; the other processes' writes
  nothing (el_jax.infra.distributed)."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not distributed.is_main():
    return metrics_lib.NoMetrics(path)
  root = os.path.join(workdir, tensorboard.TB_DIR)
  if config.train.get("tensorboard", True):
    return metrics_lib.MetricsWriter(path, tensorboard.RunEvents(root))
  if os.path.isdir(root):
    print(f"train.tensorboard=False: the TensorBoard events in {root} are no longer updated "
          f"(metrics.jsonl is)", file=sys.stderr)
  return metrics_lib.MetricsWriter(path)


def _train_and_summarize(config, workdir, setup, trainer, writer, changes, plots):
  writer.repair()
  history = distributed.from_main(
      lambda: config_lib.record_config(config, workdir, changes, _resume_points(config, workdir)))
  if changes:
    shown = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in changes.items())
    print(f"continuing {workdir} with a changed config ({shown}); recorded in config.json",
          file=sys.stderr)
  flat_hook = train.make_flatness_hook(trainer) if setup_lib.flatness_every(config) else None
  if config.train.get("vmap_seeds", False):  # all seeds as one program (el_jax.run.seeds)
    finals = seeds_lib.train_seeds(trainer, workdir, writer)
    if finals is None:
      return None
  else:
    finals = []
    for seed in config.seeds:
      final = train.train_seed(trainer, int(seed), workdir, writer, flat_hook)
      if final is None:
        return None
      finals.append(final)
  return _finish(config, setup, trainer, workdir, writer, finals, history, plots)


def _finish(config, setup, trainer, workdir, writer, finals, history, plots):
  """Writes summary.json (process 0) and the plots of a run whose seeds all finished
  (`finals`, in the order of config.seeds); returns the summary."""
  with timeline.part("write"):
    return _write_summary(config, setup, trainer, workdir, writer, finals, history, plots)


def _write_summary(config, setup, trainer, workdir, writer, finals, history, plots):
  summary = {
      "task": config.task,
      "groups": list(setup.task.groups),
      "loss": config.loss.to_dict(),
      "seeds": [int(s) for s in config.seeds],
      "num_params": decoder.num_params(trainer.abstract_state["params"]),  # shapes only
      "ran_on": provenance.ran_on(),  # where this process trained (el_jax.infra.provenance)
      **setup.task.summary_fields(),
      **({config_lib.CHANGES_KEY: history} if history else {}),
      "per_seed": finals,
      "aggregate": stats.aggregate(finals),
  }
  summary_path = os.path.join(workdir, "summary.json")
  if not distributed.is_main():  # process 0 writes the summary and plots
    return summary
  wd.write_json(summary_path, summary)
  if plots:
    rows = writer.rows()
    setup.task.write_plots(rows, workdir)
    if setup_lib.flatness_every(config):
      flatness.plot_flatness([r for r in rows if r.get("kind") == "flatness"],
                             os.path.join(workdir, "flatness.png"))
  table = summary_table(summary)
  if table:
    print(table, file=sys.stderr)
  print(f"results: {summary_path}", file=sys.stderr)
  return summary


def train_arms(configs, workdirs):
  """Trains several runs (`configs`, each in its workdir) as one stacked program
  (el_jax.run.seeds, "Stacked runs"); returns their summaries, in order (None for every run
  if `train.stop_at_step` stopped them early).

  Each run is the job of `train_and_evaluate` but for the loop: its workdir locked, a
  workdir of another config refused, a finished run reported without training, its
  config.json, metrics.jsonl, checkpoints, final.json, summary.json and plots as a run
  trained alone writes them. What the runs may differ in is `seeds.check_arms`'s (a
  one-line ValueError naming the field otherwise); `--allow_config_change` is not offered.
  """
  configs, workdirs = list(configs), [os.path.expanduser(w) for w in workdirs]
  if len(configs) != len(workdirs):
    raise ValueError(f"train_arms: {len(configs)} configs but {len(workdirs)} workdirs")
  if len(set(workdirs)) != len(workdirs):
    raise ValueError(f"train_arms: the runs must have distinct workdirs, got {workdirs}")
  seeds_lib.check_arms(configs, workdirs)
  for config in configs:
    setup_lib.validate_config(config)
  if jax.process_count() > 1:
    raise ValueError(f"stacked runs are not supported with {jax.process_count()} processes; "
                     f"train them one after the other")
  created = [w for w in workdirs if not os.path.exists(w)]
  for config, workdir in zip(configs, workdirs):  # fail fast, before taking any lock
    if workdir not in created:
      check_workdir_config(config, workdir)
      check_steps(config, workdir)
  try:
    with contextlib.ExitStack() as locks:
      for workdir in workdirs:
        lock = wd.Lock(workdir)
        lock.acquire()
        locks.callback(lock.release)
      return _train_arms(configs, workdirs)
  except BaseException:
    # Runs refused before they wrote anything leave no empty workdir behind.
    for w in created:
      if os.path.isdir(w) and not os.listdir(w):
        os.rmdir(w)
    raise


def _train_arms(configs, workdirs):
  summaries, todo = [None] * len(configs), []
  for i, (config, workdir) in enumerate(zip(configs, workdirs)):  # under the locks
    check_workdir_config(config, workdir)
    check_steps(config, workdir)
    summaries[i] = _already_finished(config, workdir)
    if summaries[i] is not None:
      _report_finished(summaries[i], workdir)
    else:
      todo.append(i)
  if not todo:
    return summaries
  progress.set_enabled(configs[todo[0]].get("progress", True))
  plots = progress.plots_enabled()
  arms, histories = [], []
  try:
    with timeline.part("setup"):
      setup = setup_lib.Setup(configs[todo[0]], validated=True)
      trainer = setup_lib.Trainer(setup)
      slots = sum(len(configs[i].seeds) for i in todo)
      setup_lib.check_memory(setup, trainer.abstract_state, setup.mesh.devices.flat[0],
                             setup.mesh.devices.size, stacked=slots)
      for i in todo:
        writer = metrics_writer(configs[i], workdirs[i])
        arms.append(seeds_lib.Arm(setup if i == todo[0] else setup.with_config(configs[i]),
                                  workdirs[i], writer))
        writer.repair()
        histories.append(config_lib.record_config(configs[i], workdirs[i]))
    finals = seeds_lib.train_arms(trainer, arms)
    if finals is None:
      return [None] * len(configs)
    for i, arm, history, f in zip(todo, arms, histories, finals):
      summaries[i] = _finish(configs[i], arm.setup, trainer, arm.workdir, arm.writer, f,
                             history, plots)
    return summaries
  finally:
    for arm in arms:
      arm.writer.close()


def run(config, workdir, allow_config_change=()):
  """Trains `config` in `workdir` with whatever its task is registered with (`el_jax.core.tasks`).

  `allow_config_change`: config fields that may differ from those the workdir
  was trained with (generic-loop tasks only; see `train_and_evaluate`).
  """
  workdir = os.path.expanduser(workdir)
  target = tasks.get(config.get("task", "<absent>"))
  if tasks.is_task_class(target):
    return train_and_evaluate(config, workdir, allow_config_change=allow_config_change)
  if allow_config_change:
    raise ValueError(f"--allow_config_change is not supported by config.task={config.task!r} "
                     f"(it has a trainer of its own; start a new --workdir instead)")
  return target(config, workdir)


def summary_table(summary, digits=3):
  """The per-split x group table of a summary: one row per split, one column per
  `<metric>_<group>` (or per metric, for a task without groups; mean (min, max) over
  seeds when there are several)."""
  agg = summary.get("aggregate", {})
  groups = (*summary.get("groups", ()), "all")
  cols, plain = [], []
  for key in agg:
    split, _, metric = key.partition("_")
    if split == SPLITS[0]:
      (cols if metric.rsplit("_", 1)[-1] in groups else plain).append(metric)
  # A task without group-wise metrics (e.g. mlm): its metrics, less the counts.
  cols = cols or [m for m in plain if m != "n" and not m.startswith("n_")]
  if not cols:
    return ""
  several = len(summary.get("seeds", ())) > 1
  cell = (lambda s: stats.format_mean_range(s, digits)) if several else (lambda s: f"{s['mean']:.{digits}f}")
  rows = [["split", *cols]]
  for split in SPLITS:
    if any(f"{split}_{c}" in agg for c in cols):
      rows.append([split, *(cell(agg[f"{split}_{c}"]) if f"{split}_{c}" in agg else "-"
                            for c in cols)])
  widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
  lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
  note = f"mean (min, max) over {len(summary['seeds'])} seeds" if several else \
      f"seed {summary['seeds'][0]}" if summary.get("seeds") else ""
  return "\n".join(lines + ([f"({note})"] if note else []))
