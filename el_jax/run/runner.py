"""The experiment runner shared by `experiments/`, the entry points and the tests.

  from el_jax.run import runner
  cfg = config.get_config("copy_task", "cpu", {"loss.name": "e1", "seeds": (2, 3)})
  summary = runner.run_or_reuse(cfg, "runs/e1")

What it does, once for everyone:

* **Run or reuse.** `run_or_reuse(config, workdir, reuse_from=...)` returns
  the summary of a finished workdir that trained exactly this (seeds, data,
  model, loss, optimizer, steps: only logging / evaluation cadence may differ)
  and trains otherwise (`el_jax.run.job.train_and_evaluate`: resumes from
  checkpoints, refuses a workdir of another config).
* **Metrics.** `read_metrics(workdir)` reads `metrics.jsonl` (the one reader).
"""
import glob
import os
import sys

from el_jax.run import config as config_lib
from el_jax.run import job
from el_jax.infra import metrics as metrics_lib
from el_jax.core import tasks
from el_jax.core.models import pretrained
from el_jax.infra import provenance
from el_jax.core import step
from el_jax.infra import workdir as wd


# ----------------------------------------------------------------------------
# Devices


def fit_devices(config):
  """Sets `config.num_devices` to the most local devices that split a train batch evenly."""
  task_cls = tasks.get_task_class(config.task)
  rows = task_cls.rows_per_step(config)
  n = step.default_num_devices()
  while rows % n:  # e.g. 8 TPU cores and 4 contexts per batch -> 4 devices
    n -= 1
  config.num_devices = n
  return config


# ----------------------------------------------------------------------------
# Runs


def read_metrics(workdir):
  """The rows of `<workdir>/metrics.jsonl` ([] if there is none; a torn last line,
  from a killed run, is left out with a warning)."""
  return metrics_lib.read_rows(workdir)


def same_training(a, b):
  """Whether flattened configs `a` and `b` train and evaluate the same thing: equal up to
  the loop's logging / cadence / device fields (`el_jax.run.job.RESUMABLE_FIELDS`), except
  the seeds, which must be the same."""
  return not config_lib.config_diff(a, b, job.RESUMABLE_FIELDS - {"seeds"})


def finished_summary(config, workdir):
  """The summary of `workdir` if it finished training `config` (the same seeds in config.json
  and in summary.json; the same training; logging / evaluation cadence may differ), else
  None. A workdir continued with `--allow_config_change` is not the same training as a fresh
  run of its final config."""
  sp, cp = os.path.join(workdir, "summary.json"), os.path.join(workdir, "config.json")
  if not (os.path.exists(sp) and os.path.exists(cp)):
    return None
  try:
    old = wd.read_json(cp)
    summary = wd.read_json(sp)
  except (OSError, ValueError) as e:
    print(f"warning: not reusing {workdir}: {e}", file=sys.stderr)
    return None
  new = config_lib.config_dict(config)
  if old.get(config_lib.CHANGES_KEY) or not same_training(config_lib.flatten(old), config_lib.flatten(new)):
    return None
  # config.json is written when a run starts, summary.json when every seed has finished: a
  # run adding a seed that was stopped leaves the new seeds in one and the old in the other.
  if "seeds" in new and summary.get("seeds") != [int(s) for s in new["seeds"]]:
    return None
  here = provenance.ran_on()
  if not provenance.same_platform(summary.get("ran_on"), here):
    print(f"warning: not reusing {workdir}: it trained on "
          f"{provenance.describe(summary.get('ran_on'))}, this process runs on "
          f"{provenance.describe(here)}", file=sys.stderr)
    return None
  return summary


def find_finished(config, dirs):
  """(folder, summary) of the first of `dirs` that finished `config` (`finished_summary`), or None."""
  for d in dirs:
    summary = finished_summary(config, d)
    if summary is not None:
      return d, summary
  return None


def run_or_reuse(config, workdir, verbose=True, reuse_from=()):
  """The summary of `config` trained in `workdir`: read back if `workdir`, or one of the
  folders in `reuse_from`, finished the same training; else trained in `workdir` (by
  `job.run`: the generic loop, or the trainer of a task with its own, e.g. ntp_linear)."""
  found = find_finished(config, (workdir, *reuse_from))
  if found is not None:
    if verbose:
      print(f"reusing finished run {found[0]}", file=sys.stderr, flush=True)
    return found[1]
  return job.run(config, workdir)


def pretrain_and_export(config, workdir, export_dir, verbose=True):
  """Trains (or reads back) a `gpt2`-preset `config` in `workdir` and writes its first seed
  in the Hugging Face GPT-2 layout to `export_dir` (unless already there): the checkpoint
  that `model.pretrained` fine-tunes from (experiments/label_copy/, experiments/scale_trends/).
  Returns the run's summary."""
  summary = run_or_reuse(config, workdir, verbose=verbose)
  if not os.path.exists(os.path.join(export_dir, pretrained.WEIGHTS_NAME)):
    pretrained.export_run(config, workdir, export_dir)
    if verbose:
      print(f"wrote {export_dir}", file=sys.stderr, flush=True)
  return summary


def run_dirs(*patterns):
  """Finished-run folders matching glob patterns (for `run_or_reuse(reuse_from=...)`)."""
  return sorted({os.path.dirname(p) for pat in patterns
                 for p in glob.glob(os.path.join(pat, "summary.json"))})
