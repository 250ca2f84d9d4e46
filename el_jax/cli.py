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


def _config_keys(cfg, prefix=""):
  keys = []
  for k, v in cfg.items():
    name = f"{prefix}{k}"
    if hasattr(v, "items"):
      keys.extend(_config_keys(v, name + "."))
    else:
      keys.append(name)
  return keys


def parse(argv, *, extra_flags=None, require_workdir=True):
  """Parses argv -> (config, workdir). `extra_flags(fv)` may define more flags.

  Returns (config, workdir, fv) when extra_flags is given.
  """
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
    raise _usage(str(e), fv) from None
  except OSError as e:  # config file missing or failed to import
    raise UsageError(f"error: could not load --config: {str(e).strip().splitlines()[-1].strip()}") from None
  except (KeyError, AttributeError, ValueError, TypeError) as e:
    raise _usage(f"bad --config override: {e}", fv) from None
  if config is None:
    raise UsageError("--config is required, e.g. --config=configs/copy_task.py:cpu")
  if require_workdir and not fv.workdir:
    raise UsageError("--workdir is required (metrics, checkpoints and plots go there)")
  if extra_flags is not None:
    return config, fv.workdir, fv
  return config, fv.workdir


def _usage(msg, fv):
  msg = msg.strip().splitlines()[0] if msg.strip() else msg
  hint = ""
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
