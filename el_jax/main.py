r"""Train one experiment: every el_jax task, from a config file.

  python -m el_jax.main --config=configs/copy_task.py:cpu \
      --config.loss.name=e1 --config.loss.lam=4 --workdir=runs/x

`config.task` picks what trains it, through the one registry `el_jax.tasks`.
Re-running the same command resumes from the last checkpoints and skips
finished seeds. To continue a workdir with another optimizer or loss
setting (say after a diverged run), name the fields that may change:
`--allow_config_change=optim.lr,optim.warmup_steps`.

Several processes (el_jax.distributed): `python -m el_jax.launch --num_processes=2 -- <these
flags>` on one machine; `--distributed` on every host of a TPU slice or SLURM job.
"""
import sys

from el_jax import cli


def _flags(fv):
  from absl import flags
  flags.DEFINE_boolean("distributed", False, "call jax.distributed.initialize() with cluster "
                       "auto-detection (TPU slice, SLURM, Open MPI) before training; el_jax.launch "
                       "sets up its processes through the environment instead", flag_values=fv)


@cli.guard
def main(argv=None):
  from el_jax import distributed
  from el_jax import tasks
  config, workdir, fv = cli.parse(sys.argv if argv is None else argv, doc=__doc__,
                                  extra_flags=_flags)
  allow = tuple(fv.allow_config_change)
  distributed.initialize(auto=fv.distributed)  # before anything touches the devices
  cli.log_devices()
  return tasks.run(config, workdir, allow_config_change=allow)


if __name__ == "__main__":
  main()
