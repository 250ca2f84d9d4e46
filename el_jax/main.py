r"""Train one experiment: every el_jax task, from a config file.

  python -m el_jax.main --config=configs/copy_task.py:cpu \
      --config.loss.name=e1 --config.loss.e1.lam=4 --workdir=runs/x

`config.task` picks what trains it, through the one registry `el_jax.core.tasks`.
Re-running the same command resumes from the last checkpoints and skips
finished seeds. To continue a workdir with another optimizer or loss
setting (say after a diverged run), name the fields that may change:
`--allow_config_change=optim.lr,optim.warmup_steps`.

Several processes (el_jax.infra.distributed): `python -m el_jax.run.launch --num_processes=2 -- <these
flags>` on one machine; `--distributed` on every host of a TPU slice or SLURM job.
"""
import os
import signal
import sys


def _stopped_while_starting(signum, frame):
  # SIGINT / SIGTERM before `cli.guard` handles them (while JAX is imported): nothing has
  # been started or written yet, so the process ends here (an exception could be swallowed
  # by whatever Python code the signal interrupted, a garbage-collection callback say).
  sys.stderr.write(f"interrupted ({signal.Signals(signum).name}) while starting; nothing "
                   f"was started\n")
  sys.stderr.flush()
  os._exit(128 + signum)


if __name__ == "__main__":
  for _sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_sig, _stopped_while_starting)

from el_jax.run import cli  # noqa: E402 -- after the handlers above


def _flags(fv):
  from absl import flags
  flags.DEFINE_boolean("distributed", False, "call jax.distributed.initialize() with cluster "
                       "auto-detection (TPU slice, SLURM, Open MPI) before training; el_jax.run.launch "
                       "sets up its processes through the environment instead", flag_values=fv)


@cli.guard
def main(argv=None):
  config, workdir, fv = cli.parse(sys.argv if argv is None else argv, doc=__doc__,
                                  extra_flags=_flags)
  # Heavy (the task registry, models, orbax): imported after the flags are checked.
  from el_jax.infra import distributed
  from el_jax.run import job
  allow = tuple(fv.allow_config_change)
  distributed.initialize(auto=fv.distributed)  # before anything touches the devices
  cli.log_devices()
  return job.run(config, workdir, allow_config_change=allow)


if __name__ == "__main__":
  try:
    main()
  finally:
    # Finished, failed or stopped, with its message printed: a signal from now on would
    # only kill the exiting interpreter (Python's finalisation restores the default
    # handlers, not an ignored signal's), changing the exit status of a completed run.
    for _sig in (signal.SIGINT, signal.SIGTERM):
      signal.signal(_sig, signal.SIG_IGN)
