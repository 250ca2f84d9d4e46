r"""Train one experiment: every el_jax task, from a config file.

  python -m el_jax.main --config=configs/copy_task.py:cpu \
      --config.loss.name=e1 --config.loss.lam=4 --workdir=runs/x

`config.task` picks what trains it, through the one registry `el_jax.tasks`.
Re-running the same command resumes from the last checkpoints and skips
finished seeds. To continue a workdir with another optimizer or loss
setting (say after a diverged run), name the fields that may change:
`--allow_config_change=optim.lr,optim.warmup_steps`.
"""
import sys

from el_jax import cli


@cli.guard
def main(argv=None):
  from el_jax import tasks
  config, workdir, fv = cli.parse(sys.argv if argv is None else argv, doc=__doc__,
                                  return_flags=True)
  allow = tuple(fv.allow_config_change)
  cli.log_devices()
  return tasks.run(config, workdir, allow_config_change=allow)


if __name__ == "__main__":
  main()
