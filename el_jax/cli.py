"""Flag parsing shared by `el_jax.main`, `el_jax.bench` and the experiment scripts.

Uses ml_collections' config flags (`--config=path.py:variant` plus
`--config.a.b=value` overrides) on a private FlagValues, and turns every
parsing failure into one `SystemExit` line naming the bad flag and what is
allowed, instead of a traceback.
"""
import sys

from absl import flags
from ml_collections import config_flags


class UsageError(SystemExit):
  """A command-line mistake: printed as one line, exit status 2."""

  def __init__(self, msg):
    super().__init__(2)
    self.msg = msg

  def __str__(self):
    return self.msg


def _config_keys(cfg):
  from el_jax import runner
  return list(runner.flatten(cfg.to_dict()))


def parse(argv, *, extra_flags=None, require_workdir=True):
  """Parses argv -> (config, workdir). `extra_flags(fv)` may define more flags.

  Returns (config, workdir, fv) when extra_flags is given. A mistake is
  printed to stderr as one line and raised as `UsageError` (exit status 2).
  """
  try:
    return _parse(argv, extra_flags=extra_flags, require_workdir=require_workdir)
  except UsageError as e:
    # SystemExit(2) prints nothing by itself: the message must be printed here.
    print(e.msg, file=sys.stderr)
    raise


def _parse(argv, *, extra_flags, require_workdir):
  argv = list(argv)
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "experiment config: path.py[:variant]",
                                  flag_values=fv, sys_argv=argv)
  flags.DEFINE_string("workdir", None, "directory for metrics, checkpoints and plots", flag_values=fv)
  if extra_flags is not None:
    extra_flags(fv)
  try:
    fv(argv)
    config = fv.config
    if config is not None:
      list(config.keys())  # a config that failed to load raises here
  except flags.Error as e:
    msg = str(e)
    if "Traceback (most recent call last)" in msg:  # get_config raised: keep its error line
      flag = msg.split(": Error whilst parsing", 1)[0].removeprefix("flag ")
      raise UsageError(f"error: could not load {flag}: {_last_line(msg)}") from None
    raise _usage(msg, fv) from None
  except OSError as e:  # config file missing or failed to import
    raise UsageError(f"error: could not load --config: {_last_line(str(e))}") from None
  except (KeyError, AttributeError, ValueError, TypeError) as e:
    raise _override_error(e, argv) from None
  if config is None:
    raise UsageError("--config is required, e.g. --config=configs/copy_task.py:cpu")
  if require_workdir and not fv.workdir:
    raise UsageError("--workdir is required (metrics, checkpoints and plots go there)")
  if extra_flags is not None:
    return config, fv.workdir, fv
  return config, fv.workdir


def _last_line(msg):
  lines = [line.strip() for line in msg.strip().splitlines() if line.strip()]
  return lines[-1] if lines else msg


def _override_error(e, argv):
  """Names the `--config.<key>` overrides that are not fields of the config."""
  config_args = [a for a in argv[1:] if a.startswith("--config=")]
  keys = []
  try:
    fv = flags.FlagValues()
    base_argv = argv[:1] + config_args
    config_flags.DEFINE_config_file("config", None, "", flag_values=fv, sys_argv=base_argv)
    fv(base_argv)
    keys = _config_keys(fv.config)
  except Exception:  # the base config itself is broken: report the original error
    pass
  given = [a[len("--config."):].split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
  unknown = [k for k in given
             if keys and k not in keys and not any(x.startswith(k + ".") for x in keys)]
  if unknown:
    return UsageError(f"error: unknown config key {', '.join(map(repr, unknown))}; "
                      f"valid keys: {', '.join(keys)}")
  return UsageError(f"error: bad --config override: {type(e).__name__}: {e}")


def _usage(msg, fv):
  msg = msg.strip().splitlines()[0] if msg.strip() else msg
  hint = ""
  if "Unknown command line flag 'config." not in msg:  # e.g. a bad value for a known key
    return UsageError(f"error: {msg}")
  try:
    cfg = fv["config"].value
    if cfg is not None:
      hint = "; valid keys: " + ", ".join(_config_keys(cfg))
  except Exception:  # config itself failed to load
    pass
  return UsageError(f"error: {msg}{hint}")


def log_devices():
  import jax
  devs = jax.devices()
  print(f"JAX {jax.__version__}: {len(devs)} {devs[0].platform} device(s), "
        f"{jax.process_count()} process(es)", file=sys.stderr)
