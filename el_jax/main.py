r"""Command-line entry point for every el_jax experiment.

  python -m el_jax.main --config=configs/copy_task.py:cpu \
      --config.loss.name=e1 --config.loss.lam=4 --workdir=runs/x

`config.task` picks the experiment; each task module exposes
`train_and_evaluate(config, workdir)`.
"""
import importlib
import sys

# task name -> "module:function"; imported lazily so one task's deps never
# slow down another's start-up.
TASKS = {
    "copy_task": "el_jax.train:train_and_evaluate",
    "ntp_linear": "el_jax.ntp.train:train_and_evaluate",
    "path_star": "el_jax.train:train_and_evaluate",
}


def get_task(name):
  if name not in TASKS:
    raise ValueError(f"unknown config.task {name!r}; valid tasks: {sorted(TASKS)}")
  module, fn = TASKS[name].split(":")
  return getattr(importlib.import_module(module), fn)


def main(argv=None):
  from el_jax import cli
  config, workdir = cli.parse(sys.argv if argv is None else argv)
  cli.log_devices()
  return get_task(config.task)(config, workdir)


if __name__ == "__main__":
  main()
