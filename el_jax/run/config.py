"""Config files and config comparison.

  from el_jax.run import config as config_lib
  cfg = config_lib.get_config("copy_task", "cpu", {"loss.name": "e1", "seeds": (2, 3)})

* `get_config(name, variant, overrides)` loads `configs/<name>.py` (or a path to any
  config file, `~` expanded) and applies dotted-key overrides; `load_config("path.py:variant")`
  is what `--config=` loads (el_jax.run.cli). Every problem of a config file (missing, syntax
  error, an import or an exception inside it, no `get_config`, one returning None or not
  a ConfigDict) is a `ConfigFileError` naming the file and the problem in one line. The
  config folder is `$EL_JAX_CONFIGS` if set, else the `configs/` folder of the checkout
  el_jax is installed from (`pip install -e .`, which `make demo` / `make test` do).
  Nothing is put on `sys.path`.
* `check_seeds(cfg)`: every seed field (`seeds`, `seed`, `*_seed`) an integer in [0, 2**32).
* `flatten`, `config_dict`, `config_diff` and `inert_keys`: which fields of two configs
  differ in a way that changes what is trained (a loss's hyperparameters are inert unless
  that loss is the one used, and so on).
"""
import ast
import datetime
import importlib.util
import json
import os

import ml_collections
import numpy as np

from el_jax.core import losses
from el_jax.infra import workdir as wd

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # el_jax/
CHANGES_KEY = "config_changes"  # config.json: the history of allowed changes (not a config field)

# Fields that `--allow_config_change` may name: optimizer, loss and the number of steps.
# They change how training continues from a checkpoint but not the shapes in it,
# the data or the model. Anything else is refused even when named.
CHANGEABLE_PREFIXES = ("optim.", "loss.")
CHANGEABLE_FIELDS = frozenset({"train.num_steps"})


def configs_dir():
  """The folder holding the `configs/<name>.py` files (see the module docstring)."""
  env = os.environ.get("EL_JAX_CONFIGS")
  if env:
    return env
  return os.path.join(os.path.dirname(PACKAGE_DIR), "configs")


class ConfigFileError(ValueError):
  """A config file that cannot be loaded: `spec` ("path.py[:variant]") and the `problem`."""

  def __init__(self, spec, problem):
    super().__init__(f"could not load config {spec}: {problem}")
    self.spec, self.problem = spec, problem


def config_path(name):
  """`name` ("copy_task") or a path ("configs/copy_task.py", "~/c.py") -> the file's path."""
  name = os.path.expanduser(name)
  given_path = name.endswith(".py") or os.sep in name
  if given_path:
    path = name
  else:
    path = os.path.join(configs_dir(), f"{name}.py")
  if not os.path.isfile(path):
    if given_path:
      raise ConfigFileError(path, "is a folder, not a config file" if os.path.isdir(path)
                            else "no such file")
    folder = configs_dir()
    have = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py")
                  and not f.startswith("_")) if os.path.isdir(folder) else []
    raise ConfigFileError(path, f"no such file; configs in {folder}: {have} (set "
                                f"EL_JAX_CONFIGS to another folder, or pass a path)")
  return path


def _line_in(exc, path):
  """The line of `path` where `exc` was raised (its innermost frame in that file), or None."""
  tb, line = exc.__traceback__, None
  path = os.path.abspath(path)
  while tb is not None:
    if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
      line = tb.tb_lineno
    tb = tb.tb_next
  return line


def _raised(exc, path):
  """"KeyError: 'x' (line 12)": an exception raised while running the config file (a
  ValueError, the config's own check such as an unknown variant, without the line)."""
  msg = " ".join(str(exc).split()) or "(no message)"
  if isinstance(exc, KeyError) and len(exc.args) == 1:
    msg = repr(exc.args[0])
  line = None if type(exc) is ValueError else _line_in(exc, path)
  return f"{type(exc).__name__}: {msg}" + (f" (line {line})" if line else "")


def load_config_module(name):
  """The config file `name` as a module (it is not imported into `sys.modules`).

  A missing file, a syntax error or an error while importing it is a ConfigFileError
  naming the file and the problem."""
  path = config_path(name)
  mod_name = "el_jax_config_" + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(mod_name, path)
  if spec is None or spec.loader is None:
    raise ConfigFileError(path, "not a Python file")
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    text = f": {e.text.strip()}" if e.text and e.text.strip() else ""
    raise ConfigFileError(path, f"syntax error at line {e.lineno}: {e.msg}{text}") from None
  except Exception as e:  # noqa: BLE001 -- whatever the file raises, named in one line
    raise ConfigFileError(path, f"importing it raised {_raised(e, path)}") from None
  if not callable(getattr(module, "get_config", None)):
    raise ConfigFileError(path, "it defines no get_config(variant) function returning an "
                                "ml_collections.ConfigDict")
  return module


def call_get_config(module, path, variant=None):
  """`module.get_config(variant)` (`get_config()` when `variant` is None), checked to be an
  ml_collections.ConfigDict; anything else, or an exception, is a ConfigFileError."""
  spec = path if variant is None else f"{path}:{variant}"
  call = "get_config()" if variant is None else f"get_config({variant!r})"
  try:
    cfg = module.get_config() if variant is None else module.get_config(variant)
  except Exception as e:  # noqa: BLE001 -- a config's own error (unknown variant) or a bug in it
    raise ConfigFileError(spec, f"{call} raised {_raised(e, path)}") from None
  if cfg is None:
    raise ConfigFileError(spec, f"{call} returned None (a missing return statement?); it must "
                                f"return an ml_collections.ConfigDict")
  if not isinstance(cfg, ml_collections.ConfigDict):
    raise ConfigFileError(spec, f"{call} returned a {type(cfg).__name__}, not an "
                                f"ml_collections.ConfigDict (wrap it: "
                                f"ml_collections.ConfigDict({{...}}))")
  return set_source(cfg, spec)


def load_config(spec):
  """"path.py[:variant]" (what `--config=` takes) -> the ConfigDict of that file and variant.
  Every problem is a ConfigFileError naming the file (see `load_config_module`)."""
  name, sep, variant = spec.partition(":")
  path = config_path(name)
  return call_get_config(load_config_module(path), path, variant if sep else None)


def get_config(name, variant=None, overrides=None):
  """`configs/<name>.py`'s `get_config(variant)` with dotted-key `overrides` applied; `~` in
  its string fields expanded (`expand_user`). Problems of the file are ConfigFileErrors."""
  path = config_path(name)
  cfg = call_get_config(load_config_module(path), path, variant)
  return expand_user(apply_overrides(cfg, overrides or {}))


# Where each config came from (id -> (config, "path:variant")), to name the file in errors.
_SOURCES = {}


def set_source(cfg, spec):
  """Records "path.py:variant" (`spec`) as where `cfg` came from (`source`); returns `cfg`."""
  if spec is not None:
    _SOURCES[id(cfg)] = (cfg, spec)
  return cfg


def source(cfg):
  """"path.py:variant" of a config loaded by `load_config` / `get_config`, else None."""
  entry = _SOURCES.get(id(cfg))
  return entry[1] if entry is not None and entry[0] is cfg else None


def expand_user(cfg):
  """Expands a leading `~` in every string field of `cfg` (paths: data files, init_from,
  pretrained checkpoints), in place; returns `cfg`."""
  for key, val in flatten(cfg.to_dict()).items():
    if isinstance(val, str) and (val == "~" or val.startswith("~/")):
      node = cfg
      *path, leaf = key.split(".")
      for p in path:
        node = node[p]
      node[leaf] = os.path.expanduser(val)
  return cfg


SEED_RANGE = (0, 2**32)  # what NumPy and JAX take as a seed


def seed_fields(flat):
  """The dotted keys of a flattened config that hold seeds: `seeds`, `seed` and `*_seed`."""
  return [k for k in flat if k.rsplit(".", 1)[-1] in ("seeds", "seed")
          or k.rsplit(".", 1)[-1].endswith("_seed")]


def check_seeds(cfg):
  """A ValueError naming the first seed field of `cfg` (`seed_fields`) that is not an integer
  in [0, 2**32), which NumPy and JAX would otherwise reject from deep inside."""
  lo, hi = SEED_RANGE
  flat = flatten(cfg.to_dict())
  for key in seed_fields(flat):
    vals = flat[key]
    many = isinstance(vals, (tuple, list))
    for v in (vals if many else (vals,)):
      if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        if many:
          raise ValueError(f"config.{key}={tuple(vals)!r} must be integers, e.g. (0, 1, 2)")
        raise ValueError(f"{key}={v!r} must be an integer in [0, 2**32)")
      if not lo <= v < hi:
        if many:
          raise ValueError(f"config.{key}={tuple(vals)!r} has {v}; seeds must be integers in "
                           f"[0, 2**32) (NumPy and JAX take no other)")
        raise ValueError(f"{key}={v} must be an integer in [0, 2**32) (a seed; NumPy and JAX "
                         f"take no other)")


def apply_overrides(cfg, overrides):
  """Sets `cfg[a][b] = v` for every `"a.b": v`; an unknown key is a ValueError naming it."""
  for key, val in overrides.items():
    node = cfg
    *path, leaf = key.split(".")
    try:
      for p in path:
        node = node[p]
      if leaf not in node:
        raise KeyError(leaf)
    except (KeyError, TypeError):
      hint = losses.moved_field_hint(key[len("loss."):]) if key.startswith("loss.") else ""
      raise ValueError(f"unknown config key {key!r}" + (f": {hint}" if hint else "")) from None
    node[leaf] = val
  return cfg


def parse_sets(items):
  """["a.b=3", "c=x"] (the experiment scripts' --set flags) -> {"a.b": 3, "c": "x"}."""
  extra = {}
  for kv in items:
    k, sep, v = kv.partition("=")
    if not sep or not k:
      raise SystemExit(f"error: --set {kv!r} is not key=value")
    try:
      extra[k] = ast.literal_eval(v)
    except (ValueError, SyntaxError):
      extra[k] = v
  return extra


def flatten(d, prefix=""):
  """{"a": {"b": 1}} -> {"a.b": 1} (for config comparison)."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def config_dict(config):
  """The config as plain JSON data (what config.json stores)."""
  return json.loads(config.to_json_best_effort())


def upgrade(flat):
  """A flattened config in today's layout. Configs written before each loss's
  hyperparameters moved under that loss (config.json of old workdirs, result rows) had
  them flat and shared (`loss.lam` for E1, E2 and spectral decoupling): each becomes the
  field of every loss that takes it (`loss.e1.lam`, `loss.e2.lam`, ...), and
  `loss.reweight_strategy` / `loss.reweight_r` become `loss.reweight.strategy` / `.r`;
  so an old config and today's compare equal when they train the same thing."""
  if not any(f"loss.{f}" in flat for f in losses.LEGACY_FIELDS):
    return flat
  out = {k: v for k, v in flat.items()
         if not (k.startswith("loss.") and k[len("loss."):] in losses.LEGACY_FIELDS)}
  for f in losses.LEGACY_FIELDS:
    if f"loss.{f}" not in flat:
      continue
    if f.startswith("reweight_"):
      out[f"loss.reweight.{f[len('reweight_'):]}"] = flat[f"loss.{f}"]
    for name, fn in losses.LOSSES.items():
      if f in losses._hparam_names(fn):
        out[f"loss.{name}.{f}"] = flat[f"loss.{f}"]
  return out


def upgrade_overrides(overrides, loss_name):
  """Dotted-key overrides in today's layout (see `upgrade`): an old flat loss field goes
  under `loss_name` (the run's loss) if that loss takes it, and is dropped if it does not
  (it was inert there); `loss.reweight_*` go under `loss.reweight`."""
  out = {}
  for k, v in overrides.items():
    f = k[len("loss."):] if k.startswith("loss.") else None
    if f not in losses.LEGACY_FIELDS:
      out[k] = v
    elif f.startswith("reweight_"):
      out[f"loss.reweight.{f[len('reweight_'):]}"] = v
    elif f in losses._hparam_names(losses.LOSSES[loss_name]):
      out[f"loss.{loss_name}.{f}"] = v
  return out


def inert_keys(flat):
  """Dotted keys of a flattened config (today's layout: `upgrade`) that cannot change what
  is trained or evaluated: the blocks of losses other than `loss.name` (configs carry every
  loss's, so that sweeps can switch by name), the `loss.reweight` block while
  `loss.reduction` is the plain mean, `optim.decay_frac` unless the schedule is "wsd", a
  disabled `adversarial` block, the default `data.pipeline="memory"`,
  `data.max_sentences=0`, `train.cpu_dots="xla"`, `train.attention_blocks=1` and the HMM's
  default (Uniform) draw, `data.trans_concentration` / `data.emit_concentration` = 0, and
  the default initialisation `model.init_std` = 0.02, and whether TensorBoard events are
  written (`train.tensorboard`, ntp_linear's `tensorboard`: any value). A field
  added to the configs later is
  inert in the old runs' configs too, so their workdirs and result rows stay comparable."""
  out = set()
  name = flat.get("loss.name")
  if name in losses.LOSSES:
    mine = f"loss.{name}."
    out |= {k for k in flat if k.startswith("loss.") and k.count(".") >= 2
            and not k.startswith(mine)
            and not (k.startswith("loss.reweight.")
                     and flat.get("loss.reduction", "mean") not in ("mean", "<absent>"))}
    if flat.get("loss.reduction", "mean") == "mean":
      out.add("loss.reduction")
  if flat.get("optim.decay") != "wsd":
    out.add("optim.decay_frac")
  if flat.get("adversarial.enabled", False) in (False, "<absent>"):
    out |= {k for k in flat if k.startswith("adversarial.")}
  if flat.get("data.pipeline", "memory") in ("memory", "<absent>"):  # the default data path
    out.add("data.pipeline")
  if flat.get("data.max_sentences", 0) in (0, "<absent>"):  # text_lm: every sentence
    out.add("data.max_sentences")
  if flat.get("train.cpu_dots", "xla") in ("xla", "<absent>"):  # XLA's own CPU matmuls
    out.add("train.cpu_dots")
  if flat.get("train.attention_blocks", 1) in (1, "<absent>"):  # one attention einsum
    out.add("train.attention_blocks")
  for k in ("data.trans_concentration", "data.emit_concentration"):  # the HMM's default draw
    if flat.get(k, 0.0) in (0, 0.0, "<absent>"):
      out.add(k)
  if flat.get("model.init_std", 0.02) in (0.02, "<absent>"):  # GPT-2's initialisation
    out.add("model.init_std")
  out |= {"train.tensorboard", "tensorboard"}  # TensorBoard events: logging only
  return out


def config_diff(a, b, ignore=frozenset()):
  """Sorted dotted keys whose values differ between flattened configs `a` and `b`
  (a key missing on one side counts as "<absent>"), leaving out those in `ignore` and
  those inert in both (`inert_keys`: a key absent on one side is inert there). Either
  side may be in the layout of before the loss blocks (`upgrade`)."""
  a, b = upgrade(a), upgrade(b)
  inert_a, inert_b = inert_keys(a), inert_keys(b)

  def inert(k, flat, keys):
    return k in keys or (k not in flat and _absent_is_inert(k, flat))
  return sorted(k for k in set(a) | set(b)
                if k not in ignore and a.get(k, "<absent>") != b.get(k, "<absent>")
                and not (inert(k, a, inert_a) and inert(k, b, inert_b)))


def _absent_is_inert(key, flat):
  """A key missing from `flat` (a config written before the field existed) is inert if the
  field would be inert with any value there."""
  probe = dict(flat)
  probe[key] = "<absent>"
  return key in inert_keys(probe)


# ----------------------------------------------------------------------------
# Which config a workdir belongs to


def _flat(d):
  return flatten({k: v for k, v in d.items() if k != CHANGES_KEY})


def stored_config(workdir):
  """The config.json of `workdir` as a dict (None if there is none)."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return None
  return wd.read_json(path, what="the config this workdir was trained with; move the workdir "
                   "away or restore the file")


def parse_allowed(spec):
  """"optim.lr,optim.warmup_steps" (or a list) -> a tuple of keys, each checked to be changeable."""
  keys = [k.strip() for k in (spec.split(",") if isinstance(spec, str) else spec or ())]
  keys = tuple(k for k in keys if k)
  bad = [k for k in keys if not (k.startswith(CHANGEABLE_PREFIXES) or k in CHANGEABLE_FIELDS)]
  if bad:
    raise wd.WorkdirError(
        f"--allow_config_change cannot allow {', '.join(bad)}: only optimizer and loss fields "
        f"(optim.*, loss.*) and train.num_steps may change on a trained workdir (the "
        f"checkpoints hold the model and data of the old config)")
  return keys


def describe_diff(old, new, keys, limit=6):
  """"a.b: 1 -> 2, c: 'x' -> '<absent>' (and N more)" for the first `limit` of `keys`."""
  shown = ", ".join(f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
                    for k in keys[:limit])
  return shown + (f" (and {len(keys) - limit} more)" if len(keys) > limit else "")


def check_config(config, workdir, resumable=frozenset(), allow=()):
  """Refuses a workdir trained with another config; returns the allowed changes.

  Fields in `resumable` may differ freely (they do not change what is
  computed); fields in `allow` (see `parse_allowed`) may differ and are
  returned as {key: [old, new]} so that the caller records them; any other
  difference is a wd.WorkdirError listing it.
  """
  old_d = stored_config(workdir)
  if old_d is None:
    return {}
  old, new = upgrade(_flat(old_d)), flatten(config_dict(config))
  diff = config_diff(old, new, frozenset(resumable))
  refused = [k for k in diff if k not in allow]
  if refused:
    changeable = [k for k in refused if k.startswith(CHANGEABLE_PREFIXES) or k in CHANGEABLE_FIELDS]
    hint = (f", or continue it with the new value by adding --allow_config_change="
            f"{','.join(changeable)}" if changeable and len(changeable) == len(refused) else "")
    raise wd.WorkdirError(
        f"workdir {workdir} was trained with a different config "
        f"({describe_diff(old, new, refused)}); its "
        f"checkpoints and finished seeds do not belong to this config. Use another --workdir, "
        f"move this one away to start afresh{hint}")
  return {k: [old.get(k), new.get(k)] for k in diff}


def record_config(config, workdir, changes=None, resume_steps=None):
  """Writes config.json (atomically), keeping and extending its history of allowed changes."""
  old = stored_config(workdir) or {}
  history = list(old.get(CHANGES_KEY, []))
  if changes:
    history.append({"changes": changes, "resume_steps": resume_steps or {},
                    "time": datetime.datetime.now().isoformat(timespec="seconds")})
  out = config_dict(config)
  if history:
    out[CHANGES_KEY] = history
  wd.write_json(os.path.join(workdir, "config.json"), out)
  return history
