"""The command-line surface shared by every entry point: flags, `--help`, one-line errors.

* `parse(argv)`: ml_collections' config flags (`--config=path.py:variant` plus
  `--config.a.b=value` overrides) on a private FlagValues; every parsing
  failure is one line naming the bad flag and what is allowed (`UsageError`,
  exit status 2). `--help` prints the entry point's usage and its flags.
  A config file that cannot be loaded (missing, a syntax error, an exception inside it, no
  `get_config`, one returning None or not a ConfigDict) is one line naming the file and the
  problem (`el_jax.run.config.load_config`). `~` is expanded in `--config`, `--workdir` and
  the config's string fields (paths); seed fields are checked to be in [0, 2**32).
* `guard(main)`: wraps an entry point's `main(argv)`. Expected errors (bad
  config or data, bad or damaged files, a refused workdir, OS errors on the
  workdir, a diverged run) are printed as one line `error: ...` on stderr with
  exit status 2 (1 for a diverged run) and no traceback. `--verbose` (or
  `EL_JAX_VERBOSE=1`) shows the traceback instead. An exception raised from
  inside a library (JAX, NumPy, orbax, ...) rather than by el_jax's own
  checks is a bug, not an expected error: its traceback is always shown.
  SIGINT (Ctrl-C) and SIGTERM stop the run the same way (`el_jax.infra.workdir.catch_interrupts`):
  one line "interrupted (SIGTERM); run the same command again to resume ...", the
  workdir's lock released, exit status 130 / 143. An entry point run as the program (`main()`
  from `if __name__ == "__main__"`, or `script`) then ends the process at once (`end_process`:
  no interpreter teardown, which crashed when the signal came during an XLA compile).
"""
import functools
import logging
import os
import sys
import traceback

import re

from absl import flags
from ml_collections import config_flags

from el_jax.run import config as config_lib
from el_jax.infra import quiet
from el_jax.infra import workdir as wd


class UsageError(SystemExit):
  """A command-line mistake: printed as one line, exit status 2."""

  def __init__(self, msg):
    super().__init__(2)
    self.msg = msg

  def __str__(self):
    return self.msg


def _config_keys(cfg):
  return list(config_lib.flatten(cfg.to_dict()))


HELP_FLAGS = ("--help", "-h", "--helpfull", "-help")
VERBOSE_ENV = "EL_JAX_VERBOSE"


def parse(argv, *, extra_flags=None, require_workdir=True, doc=None, return_flags=False):
  """Parses argv -> (config, workdir). `extra_flags(fv)` may define more flags.

  Returns (config, workdir, fv) when extra_flags is given or `return_flags`. A mistake is
  printed to stderr as one line and raised as `UsageError` (exit status 2).
  `--help` prints `doc` (the entry point's docstring) and the flags, then
  exits with status 0.
  """
  try:
    config, workdir, fv = _parse(argv, extra_flags=extra_flags,
                                 require_workdir=require_workdir, doc=doc)
  except UsageError as e:
    # SystemExit(2) prints nothing by itself: the message must be printed here.
    print(e.msg, file=sys.stderr)
    e.printed = True
    raise
  if extra_flags is not None or return_flags:
    return config, workdir, fv
  return config, workdir


def _file_problem(err, spec):
  """The problem of a ConfigFileError, naming the file unless `spec` (the flag) names it."""
  name = spec.partition(":")[0]
  shown = os.path.expanduser(name)
  if err.spec.partition(":")[0] in (name, shown):
    return err.problem
  return f"{err.spec}: {err.problem}"


def _define_config(fv, argv):
  """`--config` (with its `--config.<key>=<value>` overrides) on `fv`: ml_collections'
  `config_flags.DEFINE_config_file`, the config locked. `argv` is the command line that
  names the overrides; its `--config` values are the files `_checked_argv` loaded."""
  config_flags.DEFINE_config_file(
      "config", default=None, flag_values=fv, lock_config=True, sys_argv=argv,
      help_string="experiment config: path.py[:variant]; override fields with "
                  "--config.<key>=<value>")


# A `--config` flag as absl and ml_collections recognise it: `--config=<spec>`, `-config=<spec>`
# or `--config <spec>` (the value in the next argument).
_CONFIG_FLAG = re.compile(r"^--?config(=|$)")


def _checked_argv(argv):
  """`argv` with each `--config` value loaded first by `el_jax.run.config.load_config`, so
  that every problem of the file (missing, a syntax error, an exception inside it, no
  `get_config`, one returning None or not a ConfigDict) is one line naming it (UsageError),
  which ml_collections' loader does not give; the value is then replaced by the file's path
  (`~` expanded, a bare config name resolved under configs/), which ml_collections loads
  again to apply the overrides (a config file only builds a ConfigDict: a few ms).
  Returns (argv, the last `--config`'s "path.py[:variant]", or None)."""
  argv, source = list(argv), None
  i = 1
  while i < len(argv):
    m = _CONFIG_FLAG.match(argv[i])
    if m is None:
      i += 1
      continue
    at = i if m.group(1) else i + 1
    if at >= len(argv):
      break  # `--config` with no value: absl's own one-line error
    spec = argv[at][len(m.group(0)):] if at == i else argv[at]
    try:
      config_lib.load_config(spec)
    except config_lib.ConfigFileError as e:
      raise UsageError(f"error: could not load --config={spec}: {_file_problem(e, spec)}") from None
    name, sep, variant = spec.partition(":")
    source = config_lib.config_path(name) + sep + variant
    argv[at] = f"{m.group(0)}{source}" if at == i else source
    i = at + 1
  return argv, source


def _define(argv, extra_flags):
  fv = flags.FlagValues()
  _define_config(fv, argv)
  flags.DEFINE_string("workdir", None, "directory for metrics, checkpoints and plots", flag_values=fv)
  flags.DEFINE_list("allow_config_change", [], "config fields (optim.*, loss.*, "
                    "train.num_steps) that may differ from the config a workdir was trained "
                    "with: training continues from its checkpoints with the new values, "
                    "recorded in config.json", flag_values=fv)
  flags.DEFINE_boolean("verbose", False, f"show tracebacks of errors (or set {VERBOSE_ENV}=1)",
                       flag_values=fv)
  if extra_flags is not None:
    extra_flags(fv)
  return fv


def print_help(argv, extra_flags=None, doc=None, file=None):
  """Usage text: the entry point's docstring and its flags."""
  file = file or sys.stdout
  fv = _define([argv[0]], extra_flags)
  if doc:
    print(doc.strip() + "\n", file=file)
  print(f"usage: {os.path.basename(argv[0])} --config=<path.py>[:<variant>] "
        f"[--config.<key>=<value> ...] [flags]\n\nflags:", file=file)
  _print_flags(fv, file)
  print(f"\nErrors are one line on stderr (exit status 2; 1 for a diverged run); "
        f"--verbose or {VERBOSE_ENV}=1 shows the traceback.", file=file)


def _print_flags(fv, file):
  for name in sorted(fv):
    flag = fv[name]
    default = "" if flag.default in (None, "", []) else f" (default: {flag.default_as_str})"
    print(f"  --{name}: {flag.help}{default}", file=file)


def _parse(argv, *, extra_flags, require_workdir, doc):
  argv = list(argv)
  if any(a in HELP_FLAGS for a in argv[1:]):
    print_help(argv, extra_flags, doc)
    raise SystemExit(0)
  argv, source = _checked_argv(argv)
  fv = _define(argv, extra_flags)
  try:
    rest = fv(argv)
    if len(rest) > 1:
      raise UsageError(f"error: unexpected argument {rest[1]!r}; every option is a flag "
                       f"--name=value (see --help)")
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
  config_lib.set_source(config, source)
  if require_workdir and not fv.workdir:
    raise UsageError("--workdir is required (metrics, checkpoints and plots go there)")
  config_lib.expand_user(config)
  try:
    config_lib.check_seeds(config)
  except ValueError as e:
    raise UsageError(f"error: {e}") from None
  workdir = os.path.expanduser(fv.workdir) if fv.workdir else fv.workdir
  return config, workdir, fv


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
    _define_config(fv, base_argv)
    fv(base_argv)
    keys = _config_keys(fv.config)
  except (Exception, UsageError):  # the base config itself is broken: report the original error
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


# ----------------------------------------------------------------------------
# One error surface


def _raised_by(exc, prefixes):
  """True if the innermost frame of `exc`'s traceback is in a file under one of `prefixes`."""
  tb = exc.__traceback__
  if tb is None:
    return False
  while tb.tb_next is not None:
    tb = tb.tb_next
  return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(prefixes)


def _own_dirs():
  pkg = config_lib.PACKAGE_DIR + os.sep
  root = os.path.dirname(config_lib.PACKAGE_DIR)
  return (pkg, os.path.abspath(config_lib.configs_dir()) + os.sep,
          os.path.join(root, "experiments") + os.sep, os.path.join(root, "tools") + os.sep)


def is_expected(exc):
  """Whether `exc` is an expected error (printed as one line) rather than a bug.

  Expected: OS errors (files, permissions, disk), a diverged run
  (FloatingPointError), and ValueError / RuntimeError / ImportError raised by
  el_jax's own checks (el_jax/, configs/, experiments/, tools/). The same types raised
  from inside JAX, NumPy or orbax, and every other type (TypeError, KeyError,
  ...), are bugs: traceback.
  """
  if isinstance(exc, (OSError, FloatingPointError)):
    return True
  if isinstance(exc, (ValueError, RuntimeError, ImportError)):
    return _raised_by(exc, _own_dirs())
  return False


def one_line(exc):
  """The one-line message of an expected error."""
  if isinstance(exc, OSError) and exc.strerror:
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f)
    msg = f"{exc.strerror}: {where}" if where else exc.strerror
  else:
    msg = str(exc) or type(exc).__name__
  return " ".join(msg.split())


def guard(main):
  """Decorates an entry point `main(argv=None)` with the one error surface (module docstring).

  `--verbose` is removed from argv before `main` sees it (and shows tracebacks). Called
  without argv, `main` is the program (its command line is sys.argv): when it is
  interrupted, the process ends right after the message (`end_process`) instead of raising
  SystemExit. Called with argv (a test, another entry point), it raises SystemExit(130 / 143).
  """

  @functools.wraps(main)
  def wrapped(argv=None):
    program = argv is None
    argv = list(sys.argv if argv is None else argv)
    verbose = os.environ.get(VERBOSE_ENV, "") not in ("", "0")
    for flag in ("--verbose", "--verbose=true", "--verbose=True", "--verbose=1"):
      while flag in argv[1:]:
        argv.remove(flag)
        verbose = True
    with wd.catch_interrupts():  # (a second signal, from here on, is ignored)
      try:
        return _guarded(main, argv, verbose)
      except Stopped as e:
        if program:
          end_process(e.code)
        raise

  return wrapped


class Stopped(SystemExit):
  """An interrupted run, stopped cleanly (its files safe, its message printed); the exit
  status is 128 + the signal number."""


def end_process(status):
  """Ends the process now with exit `status` (os._exit), after flushing its output: for a
  program stopped by SIGINT / SIGTERM, whose files are already safe.

  Why not let Python exit normally: a signal that comes while XLA compiles leaves the
  compile running in a thread of JAX's backend. Python's interpreter teardown then destroys
  the backend (`xla::ifrt::PjRtClient`: its devices, then its thread pool, which waits for
  the compile), and the compile, finishing, reads a destroyed device: a segmentation fault
  after the "interrupted" message (exit 139 instead of 130, in about half the tries; the
  core dump shows `SingleDeviceSharding::Create` on a compile thread while the main thread
  is in `Py_FinalizeEx` -> `~PjRtClient`). The teardown has nothing of ours left to do: the
  interrupt has unwound the run (the workdir's lock released, checkpoint managers closed,
  checkpoint saves and metrics rows never cut in half: `el_jax.infra.workdir.uninterrupted`), and
  what is left in memory is output, flushed here (atexit functions are skipped: JAX's only
  drop the backend; `el_jax.infra.quiet`'s filter is closed out here)."""
  if isinstance(sys.stderr, quiet.ReportFilter):
    sys.stderr.close_out()
  logging.shutdown()  # (what Python's exit does for log handlers)
  for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
    try:
      if stream is not None:
        stream.flush()
    except (OSError, ValueError):  # closed, or a reader gone: nothing more can be written
      pass
  os._exit(status)


def _guarded(main, argv, verbose):
  """`main(argv)` with its errors sorted into one-line messages and exit statuses (`guard`)."""
  try:
    return main(argv)
  except UsageError as e:
    if not getattr(e, "printed", False):
      print(e.msg, file=sys.stderr)
    raise SystemExit(2) from None
  except SystemExit as e:
    if isinstance(e.code, str):  # SystemExit("message"): one line, usage status
      print(e.code if e.code.startswith("error") else f"error: {e.code}", file=sys.stderr)
      raise SystemExit(2) from None
    raise
  except KeyboardInterrupt as e:
    if verbose:
      traceback.print_exc()
    sig = e if isinstance(e, wd.Interrupted) else wd.Interrupted(2)  # a plain Ctrl-C
    print(f"interrupted ({sig.name}); run the same command again to resume from the last "
          f"checkpoint", file=sys.stderr)
    sys.stderr.flush()
    raise Stopped(sig.exit_status) from None
  except Exception as e:  # noqa: BLE001 -- sorted into expected errors and bugs below
    if verbose or not is_expected(e):
      raise
    print(f"error: {one_line(e)}", file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(1 if isinstance(e, FloatingPointError) else 2) from None


def seed_list(text, flag="seeds"):
  """--`flag`'s comma-separated model seeds as a list: distinct integers >= 0, or a one-line
  error that says what was wrong (the experiment scripts' --seeds)."""
  try:
    seeds = [int(x) for x in text.split(",")]
  except ValueError:
    raise ValueError(f"--{flag}={text!r} must be comma-separated integers") from None
  if len(set(seeds)) != len(seeds) or min(seeds) < 0:
    raise ValueError(f"--{flag}={seeds} must be distinct integers >= 0")
  return seeds


def script(main):
  """Runs an argparse entry point `main(argv)` (argv without the program name, as
  `ArgumentParser.parse_args` takes it) under `guard`: the experiment scripts'
  `if __name__ == "__main__": cli.script(main)`: the program, its command line sys.argv."""
  return guard(lambda argv: main(argv[1:]))()


def parse_plain_flags(fv, argv, doc=None):
  """Parses absl flags `fv` (no config) with the same surface as `parse`: `--help`
  prints `doc` and the flags; a bad flag or a stray argument is one line, exit status 2."""
  argv = list(argv)
  if any(a in HELP_FLAGS for a in argv[1:]):
    if doc:
      print(doc.strip() + "\n")
    print("flags:")
    _print_flags(fv, sys.stdout)
    raise SystemExit(0)
  try:
    rest = fv(argv)
  except flags.Error as e:
    raise UsageError(f"error: {str(e).strip().splitlines()[0]}") from None
  if len(rest) > 1:
    raise UsageError(f"error: unexpected argument {rest[1]!r}; every option is a flag "
                     f"--name=value (see --help)")
  return fv
