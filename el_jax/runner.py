"""The experiment runner shared by `el_jax.demo`, every script in `experiments/` and the tests.

  from el_jax import runner
  cfg = runner.get_config("copy_task", "cpu", {"loss.name": "e1", "seeds": (2, 3)})
  summary = runner.run_or_reuse(cfg, "runs/e1")

What it does, once for everyone:

* **Configs.** `get_config(name, variant, overrides)` loads `configs/<name>.py`
  (or a path to any config file) and applies dotted-key overrides. The
  config folder is `$EL_JAX_CONFIGS` if set, else the `configs/` folder of
  the checkout el_jax is installed from (`pip install -e .`, which
  `make demo` / `make test` do). Nothing is put on `sys.path`.
* **Run or reuse.** `run_or_reuse(config, workdir, reuse_from=...)` returns
  the summary of a finished workdir that trained exactly this (seeds, data,
  model, loss, optimizer, steps: only logging / evaluation cadence may differ)
  and trains otherwise (`el_jax.train.train_and_evaluate`: resumes from
  checkpoints, refuses a workdir of another config).
  `ResultsFile` keeps one JSON row per labelled run and reuses a row only when
  its stored config is identical.
* **Metrics.** `read_metrics(workdir)` reads `metrics.jsonl` (the one reader).
* **Statistics over seeds.** `aggregate` (mean / min / max / std), and
  `compare(a, b)`: the difference of means with a two-sided permutation-test
  p-value (exact over all splits when there are at most 200,000 of them) and a
  bootstrap 95% interval, for headline comparisons.
"""
import ast
import importlib.util
import itertools
import json
import math
import os
import sys

import numpy as np

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------
# Configs


def configs_dir():
  """The folder holding the `configs/<name>.py` files (see the module docstring)."""
  env = os.environ.get("EL_JAX_CONFIGS")
  if env:
    return env
  return os.path.join(os.path.dirname(PACKAGE_DIR), "configs")


def config_path(name):
  """`name` ("copy_task") or a path ("configs/copy_task.py") -> the file's path."""
  if name.endswith(".py") or os.sep in name:
    path = name
  else:
    path = os.path.join(configs_dir(), f"{name}.py")
  if not os.path.isfile(path):
    have = sorted(f[:-3] for f in os.listdir(configs_dir())
                  if f.endswith(".py") and not f.startswith("_")) if os.path.isdir(configs_dir()) else []
    raise ValueError(f"config {name!r} not found at {path}; configs in {configs_dir()}: {have} "
                     f"(set EL_JAX_CONFIGS to another folder, or pass a path)")
  return path


def load_config_module(name):
  """The config file `name` as a module (it is not imported into `sys.modules`)."""
  path = config_path(name)
  mod_name = "el_jax_config_" + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(mod_name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def get_config(name, variant=None, overrides=None):
  """`configs/<name>.py`'s `get_config(variant)` with dotted-key `overrides` applied."""
  cfg = load_config_module(name).get_config(variant)
  return apply_overrides(cfg, overrides or {})


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
      raise ValueError(f"unknown config key {key!r}") from None
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


def fit_devices(config):
  """Sets `config.num_devices` to the most local devices that split a train batch evenly."""
  import jax
  from el_jax import tasks
  task_cls = tasks.get_task_class(config.task)
  rows = task_cls.rows_per_step(config)
  n = jax.device_count()
  while rows % n:  # e.g. 8 TPU cores and 4 contexts per batch -> 4 devices
    n -= 1
  config.num_devices = n
  return config


# ----------------------------------------------------------------------------
# Runs


def read_metrics(workdir):
  """The rows of `<workdir>/metrics.jsonl` ([] if there is none; a torn last line,
  from a killed run, is left out with a warning)."""
  from el_jax import train
  return train.MetricsWriter(os.path.join(workdir, "metrics.jsonl")).rows()


def inert_keys(flat):
  """Dotted keys of a flattened config that cannot change what is trained or evaluated:
  the hyperparameters of losses other than `loss.name` (configs carry every loss's, so that
  sweeps can switch by name), the reweighting fields while `loss.reduction` is the plain
  mean, `optim.decay_frac` unless the schedule is "wsd", a disabled `adversarial`
  block, the default `data.pipeline="memory"`, `data.max_sentences=0` and
  `train.cpu_dots="xla"`. A field added to the configs later is inert in the old runs' configs too, so
  their workdirs and result rows stay comparable."""
  from el_jax import losses
  out = set()
  name = flat.get("loss.name")
  fn = losses.LOSSES.get(name) if name is not None else None
  if fn is not None:
    used = {"loss.name", "loss.reduction"} | {f"loss.{h}" for h in losses._hparam_names(fn)}
    if flat.get("loss.reduction", "mean") not in ("mean", "<absent>"):
      used |= {k for k in flat if k.startswith("loss.reweight")}
    out |= {k for k in flat if k.startswith("loss.") and k not in used}
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
  return out


def config_diff(a, b, ignore=frozenset()):
  """Sorted dotted keys whose values differ between flattened configs `a` and `b`
  (a key missing on one side counts as "<absent>"), leaving out those in `ignore` and
  those inert in both (`inert_keys`: a key absent on one side is inert there)."""
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


def same_training(a, b):
  """Whether flattened configs `a` and `b` train and evaluate the same thing: equal up to
  the loop's logging / cadence / device fields (`el_jax.train.RESUMABLE_FIELDS`), except
  the seeds, which must be the same."""
  from el_jax import train
  return not config_diff(a, b, train.RESUMABLE_FIELDS - {"seeds"})


def finished_summary(config, workdir):
  """The summary of `workdir` if it finished training `config` (same seeds, same training;
  logging / evaluation cadence may differ), else None. A workdir continued with
  `--allow_config_change` is not the same training as a fresh run of its final config."""
  from el_jax import workdir as wd
  sp, cp = os.path.join(workdir, "summary.json"), os.path.join(workdir, "config.json")
  if not (os.path.exists(sp) and os.path.exists(cp)):
    return None
  try:
    old = wd.read_json(cp)
    summary = wd.read_json(sp)
  except (OSError, ValueError) as e:
    print(f"warning: not reusing {workdir}: {e}", file=sys.stderr)
    return None
  if old.get(wd.CHANGES_KEY) or not same_training(flatten(old), flatten(config_dict(config))):
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
  folders in `reuse_from`, finished the same training; else trained in `workdir`."""
  from el_jax import train
  found = find_finished(config, (workdir, *reuse_from))
  if found is not None:
    if verbose:
      print(f"reusing finished run {found[0]}", file=sys.stderr, flush=True)
    return found[1]
  return train.train_and_evaluate(config, workdir)


def run_dirs(*patterns):
  """Finished-run folders matching glob patterns (for `run_or_reuse(reuse_from=...)`)."""
  import glob
  return sorted({os.path.dirname(p) for pat in patterns
                 for p in glob.glob(os.path.join(pat, "summary.json"))})


class ResultsFile:
  """One JSON list of result rows, each with a `label` and the `config` it was trained with.

  `get(label, config)` returns the stored row only if its config is identical
  (so a changed setting or seed list is never reported under an old row);
  `put(row)` replaces the row of that label and writes the file.
  """

  def __init__(self, path):
    self.path = path
    self.rows = []
    if os.path.exists(path):
      from el_jax import workdir as wd
      self.rows = wd.read_json(path, what="the rows of finished runs; move it away to "
                               "recompute them")

  def get(self, label, config):
    want = flatten(config_dict(config))
    for r in self.rows:  # equal up to inert fields (a row written before a field existed)
      if r.get("label") == label and not config_diff(flatten(r.get("config", {})), want):
        return r
    return None

  def put(self, row):
    """Replace the row of `row["label"]`, re-reading the file under a lock first, so that
    two processes filling the same file (different labels) keep each other's rows."""
    import fcntl
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    with open(self.path + ".lock", "w") as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      if os.path.exists(self.path):
        self.rows = ResultsFile(self.path).rows
      self.rows = [r for r in self.rows if r.get("label") != row["label"]] + [row]
      self.write()

  def write(self):
    from el_jax import workdir as wd
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    wd.write_json(self.path, self.rows)


# ----------------------------------------------------------------------------
# Statistics over seeds


def aggregate(per_seed):
  """{metric: {mean, min, max, std, n}} over a list of per-seed dicts (float metrics only).

  `std` is the sample standard deviation (ddof=1; 0 for one seed). Metrics
  that are None / NaN for some seed are aggregated over the others.
  """
  keys = [k for k in per_seed[0] if k not in ("seed", "step") and isinstance(per_seed[0][k], float)]
  out = {}
  for k in keys:
    v = np.array([f[k] for f in per_seed if f.get(k) is not None], dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
      continue
    out[k] = {"mean": float(v.mean()), "min": float(v.min()), "max": float(v.max()),
              "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "n": int(v.size)}
  return out


def permutation_test(a, b, max_exact=200_000, num_samples=100_000, seed=0):
  """Two-sided permutation test of mean(a) = mean(b); returns the p-value.

  Exact (every split of the pooled values into groups of len(a) and len(b))
  when there are at most `max_exact` splits, else `num_samples` random splits
  (fixed `seed`; the observed split is counted, so p > 0). A split counts as
  extreme when |mean difference| >= the observed one (with a 1e-12 tolerance).
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.size < 1 or b.size < 1:
    raise ValueError(f"permutation_test needs values in both groups (got {a.size}, {b.size})")
  pooled = np.concatenate([a, b])
  n, total = a.size, pooled.sum()
  obs = abs(a.mean() - b.mean())
  m = b.size
  count_splits = math.comb(n + m, n)
  if count_splits <= max_exact:
    idx = np.array(list(itertools.combinations(range(n + m), n)), dtype=np.int64)
    sa = pooled[idx].sum(axis=1)
    diffs = np.abs(sa / n - (total - sa) / m)
    return float(np.mean(diffs >= obs - 1e-12))
  rng = np.random.default_rng(seed)
  perm = np.argsort(rng.random((num_samples, n + m)), axis=1)[:, :n]
  sa = pooled[perm].sum(axis=1)
  diffs = np.abs(sa / n - (total - sa) / m)
  return float((np.sum(diffs >= obs - 1e-12) + 1) / (num_samples + 1))


def bootstrap_ci(a, b, level=0.95, num_samples=20_000, seed=0):
  """Percentile bootstrap interval of mean(a) - mean(b), resampling each group's seeds."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  rng = np.random.default_rng(seed)
  da = a[rng.integers(0, a.size, (num_samples, a.size))].mean(axis=1)
  db = b[rng.integers(0, b.size, (num_samples, b.size))].mean(axis=1)
  lo, hi = np.quantile(da - db, [(1 - level) / 2, (1 + level) / 2])
  return float(lo), float(hi)


def compare(a, b):
  """Headline comparison of per-seed values a (treatment) vs b (baseline).

  Returns {mean_a, mean_b, diff, p_value (two-sided permutation test),
  ci95 (bootstrap interval of the difference), n_a, n_b}.
  """
  a, b = [float(x) for x in a], [float(x) for x in b]
  return {"mean_a": float(np.mean(a)), "mean_b": float(np.mean(b)),
          "diff": float(np.mean(a) - np.mean(b)), "p_value": permutation_test(a, b),
          "ci95": list(bootstrap_ci(a, b)), "n_a": len(a), "n_b": len(b)}


def holm(p_values):
  """Holm-Bonferroni adjusted p-values of a family of tests, in the input order: the
  i-th smallest p becomes max over j <= i of min(1, (m - j + 1) p_(j)) (j from 1). Reject
  at level alpha where the adjusted p <= alpha: the family-wise error rate stays <= alpha."""
  p = np.asarray([float(x) for x in p_values], dtype=np.float64)
  if p.size == 0:
    return []
  if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
    raise ValueError(f"p-values must lie in [0, 1]; got {p.tolist()}")
  order = np.argsort(p, kind="stable")
  m = p.size
  scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
  out = np.empty(m)
  out[order] = np.maximum.accumulate(scaled)
  return out.tolist()


def summary_table(summary, digits=3):
  """The per-split x group table of a summary: one row per split, one column per
  `<metric>_<group>` (or per metric, for a task without groups; mean (min, max) over
  seeds when there are several)."""
  from el_jax.tasks import SPLITS
  agg = summary.get("aggregate", {})
  groups = (*summary.get("groups", ()), "all")
  cols, plain = [], []
  for key in agg:
    split, _, metric = key.partition("_")
    if split == SPLITS[0]:
      (cols if metric.rsplit("_", 1)[-1] in groups else plain).append(metric)
  # A task without group-wise metrics (e.g. mlm): its metrics, less the counts.
  cols = cols or [m for m in plain if m != "n" and not m.startswith("n_")]
  if not cols:
    return ""
  several = len(summary.get("seeds", ())) > 1
  cell = (lambda s: format_mean_range(s, digits)) if several else (lambda s: f"{s['mean']:.{digits}f}")
  rows = [["split", *cols]]
  for split in SPLITS:
    if any(f"{split}_{c}" in agg for c in cols):
      rows.append([split, *(cell(agg[f"{split}_{c}"]) if f"{split}_{c}" in agg else "-"
                            for c in cols)])
  widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
  lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
  note = f"mean (min, max) over {len(summary['seeds'])} seeds" if several else \
      f"seed {summary['seeds'][0]}" if summary.get("seeds") else ""
  return "\n".join(lines + ([f"({note})"] if note else []))


def format_mean_range(stats, digits=3):
  """"0.473 (0.360, 0.576)" from {mean, min, max}."""
  f = f"{{:.{digits}f}}"
  return f"{f.format(stats['mean'])} ({f.format(stats['min'])}, {f.format(stats['max'])})"
