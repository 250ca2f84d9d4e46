r"""Command-line entry point for every el_jax experiment.

  python -m el_jax.main --config=configs/copy_task.py:cpu \
      --config.loss.name=e1 --config.loss.lam=4 --workdir=runs/x

`config.task` picks what trains it, through the one registry `el_jax.tasks`.
"""
import sys


def main(argv=None):
  from el_jax import cli
  from el_jax import tasks
  config, workdir = cli.parse(sys.argv if argv is None else argv)
  cli.log_devices()
  return tasks.run(config, workdir)


if __name__ == "__main__":
  main()
