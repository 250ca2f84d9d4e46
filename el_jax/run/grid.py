"""One way to declare, run and report a grid of training runs (the demo and `experiments/`).

  from el_jax.run import grid as grid_lib
  g = grid_lib.Grid("results/x/table.json", runs_dir="runs/x")
  g.add("ce", "copy_task", "cpu", {"loss.name": "ce"}, seeds=range(2, 12))
  g.add("e1_warmup", "copy_task", "cpu", {"loss.name": "e1", "optim.warmup_steps": 750},
        seeds=range(2, 12), paper=0.78)
  g.run()                                          # trains each run, or reads it back
  g.run(stacked=True)                              # the same, the runs as one program
  g.compare([("e1_warmup", "ce")], "test_em_hard")  # permutation p, bootstrap CI, Holm
  g.write(command="python experiments/x.py")

Each run is trained with `runner.run_or_reuse` in `<runs_dir>/<slug of its label>` (or read
back from there or from `reuse_from`); a row already in the results file with an identical
config (up to inert fields, `config.config_diff`) is reused without opening any run. Every
grid writes the same row schema:

  label        the run's name in the grid
  config_name  the config file (`configs/<config_name>.py`) and `variant` its variant
  overrides    the dotted-key overrides of the run
  seeds        model seeds, in order
  per_seed     {metric: [value of each seed, in the order of `seeds`]} (final evaluation)
  aggregate    {metric: {mean, min, max, std, n}} over the seeds (`stats.aggregate`)
  seconds      wall time of training or reading it back
  workdir      where its checkpoints and metrics.jsonl are
  config       the whole config (what a row is reused against)
  ran_on       where it trained (`el_jax.infra.provenance.ran_on`; rows of runs trained before
               el_jax recorded it have none: they ran on the CPUs of the development machines)
  stacked      only for a run trained with others as one program (`run(stacked=True)`):
               {"runs": [their labels], "seconds": the program's wall time}; `seconds` is
               then this run's share of it, in proportion to its seeds
  ...          extra fields given to `add` (the paper's number, a group, ...)

and the JSON file is {..., "rows": [row, ...], "comparisons": {family: [comparison, ...]}},
each comparison being `stats.compare(a, b)` of one metric's per-seed values with its pair
(`a`, `b`) and `p_holm`, the Holm-adjusted p-value over its family.

A config whose task has a trainer of its own (`el_jax.core.tasks`, e.g. ntp_linear: no model seeds,
no per-seed finals in its summary) joins a grid with `add(..., fit_devices=False,
summarize=f)`: `f(cfg, summary)` returns (seeds, [{metric: value} per seed], {field: value})
and gives the row its `seeds`, `per_seed`, `aggregate` (`stats.aggregate` of those finals) and
extra fields (experiments/ntp_convergence.py).

`run(stacked=True)` trains the runs that are neither in the results file nor finished in a
run folder as one compiled program (`el_jax.run.job.train_arms`, el_jax.run.seeds "Stacked
runs"): they may differ in their seeds, the optimizer's schedule and weight decay and the
loss's hyperparameters (CE with E1), nothing else; a grid mixing other fields is refused
before anything trains, with a one-line error naming the field. Each run keeps its own
workdir, and its row is the row of the run trained alone (up to float rounding), with
`stacked` added.
"""
import dataclasses
import os
import sys
import time

from el_jax.run import config as config_lib
from el_jax.run import job
from el_jax.run import runner
from el_jax.run import seeds as seeds_lib
from el_jax.report import stats
from el_jax.infra import workdir as wd

# Fields of every row (the rest are the extras given to `Grid.add`).
ROW_FIELDS = ("label", "config_name", "variant", "overrides", "seeds", "per_seed", "aggregate",
              "seconds", "workdir", "config")


def slug(label):
  """A folder name for a run label ("E1 + warmup, lam=4" -> "E1___warmup__lam=4")."""
  return "".join(c if c.isalnum() or c in "=.-" else "_" for c in label)


def make_config(config_name, variant, overrides=None, seeds=None, fit_devices=True):
  """`configs/<config_name>.py:<variant>` with dotted-key `overrides` (and `seeds`), on as
  many local devices as split a batch evenly (`runner.fit_devices`)."""
  cfg = config_lib.get_config(config_name, variant, dict(overrides or {}))
  if seeds is not None:
    cfg.seeds = tuple(int(s) for s in seeds)
  return runner.fit_devices(cfg) if fit_devices else cfg


def sweep_label(overrides):
  """"ce", "e1_warmup", ...: the loss name, plus "_warmup" when warmup is on."""
  return overrides["loss.name"] + ("_warmup" if overrides.get("optim.warmup_steps") else "")


def sweep_runs(config_name):
  """{label: overrides}: the runs of the `sweep(add)` function of `configs/<config_name>.py`
  (each `add(**overrides)` one run, labelled by `sweep_label`)."""
  runs = {}
  config_lib.load_config_module(config_name).sweep(
      lambda **overrides: runs.setdefault(sweep_label(overrides), overrides))
  return runs


def scale_overrides(overrides, scale):
  """`overrides` with each field named in `scale` ({field: (num, den)}) multiplied by num / den
  and rounded to an integer >= 1 (an experiment's cpu-size settings at a smaller size)."""
  out = {}
  for k, v in overrides.items():
    if k in scale:
      num, den = scale[k]
      v = max(1, round(v * num / den))
    out[k] = v
  return out


@dataclasses.dataclass
class Run:
  """One run of a grid: a config (file and variant), overrides, seeds and extra row fields."""
  label: str
  config_name: str
  variant: str
  overrides: dict
  seeds: tuple | None = None
  extra: dict = dataclasses.field(default_factory=dict)
  fit_devices: bool = True
  summarize: object = None  # (cfg, summary) -> (seeds, finals, fields); see the docstring

  def config(self):
    """The run's config (`make_config`)."""
    return make_config(self.config_name, self.variant, self.overrides, self.seeds,
                       self.fit_devices)


def per_seed_columns(finals):
  """[{metric: value} per seed] -> {metric: [value per seed]} (float metrics only)."""
  keys = [k for k in finals[0] if k not in ("seed", "step", "kind")
          and isinstance(finals[0][k], (int, float)) and not isinstance(finals[0][k], bool)]
  return {k: [f.get(k) for f in finals] for k in keys}


def make_row(run, cfg, summary, seconds, workdir):
  """The row of a finished run (the schema of the module docstring; a run with `summarize`
  takes its seeds, per-seed finals and extra fields from it)."""
  seeds, finals, aggregate, fields = cfg.get("seeds"), summary.get("per_seed"), None, {}
  if run.summarize is not None:
    seeds, finals, fields = run.summarize(cfg, summary)
    aggregate = stats.aggregate(finals)
  return {"label": run.label, "config_name": run.config_name, "variant": run.variant,
          "overrides": dict(run.overrides), "seeds": [int(s) for s in seeds],
          "per_seed": per_seed_columns(finals),
          "aggregate": summary["aggregate"] if aggregate is None else aggregate,
          "seconds": round(seconds, 1), "workdir": workdir, "config": config_lib.config_dict(cfg),
          # where it trained (el_jax.infra.provenance); absent from summaries written before
          **({"ran_on": summary["ran_on"]} if summary.get("ran_on") else {}),
          **fields, **run.extra}


class Grid:
  """Named runs, run or reused, rows of one schema, comparisons with Holm, one JSON file."""

  def __init__(self, path, runs_dir, reuse_from=(), meta=None, reuse_rows=True):
    """`path`: the results JSON (with `reuse_rows`, its rows are reused when their config is
    identical); `runs_dir`: where runs train; `reuse_from`: finished run folders to read back
    (`runner.run_dirs(...)`)."""
    self.path = path
    self.runs_dir = runs_dir
    self.reuse_from = tuple(reuse_from)
    self.runs = {}
    self.rows = {}
    self.comparisons = {}
    self.meta = dict(meta or {})
    self._stored = {}
    if reuse_rows and os.path.exists(path):
      stored = wd.read_json(path, what="the rows of finished runs; move it away to recompute "
                            "them")
      if not isinstance(stored, dict) or not isinstance(stored.get("rows"), list):
        raise wd.WorkdirError(f"{path} is not a grid's results file (a JSON object with a list "
                              f"'rows'); move it away to recompute it")
      self._stored = {r.get("label"): r for r in stored["rows"]}

  def add(self, label, config_name, variant, overrides=None, seeds=None, fit_devices=True,
          summarize=None, **extra):
    """Declares a run; `extra` fields are copied into its row (`summarize`: for a task with
    a trainer of its own, see the module docstring). Returns the `Run`."""
    if label in self.runs:
      raise ValueError(f"the grid already has a run labelled {label!r}")
    run = Run(label, config_name, variant, dict(overrides or {}),
              None if seeds is None else tuple(int(s) for s in seeds), dict(extra), fit_devices,
              summarize)
    self.runs[label] = run
    return run

  def stored_row(self, run, cfg):
    """The row of `run` in the results file if its config is `cfg` (up to inert fields and
    `progress`, which the experiments set through `configure` and a declared run does not)."""
    row = self._stored.get(run.label)
    if row is None or config_lib.config_diff(config_lib.flatten(row.get("config") or {}),
                                             config_lib.flatten(config_lib.config_dict(cfg)),
                                             ignore=frozenset({"progress"})):
      return None
    return {**row, **run.extra}

  def run(self, labels=None, verbose=True, configure=None, stacked=False):
    """Trains (or reuses) the runs named in `labels` (default: all, in the order added);
    returns their rows. `configure(run, cfg)` may adjust a config before it trains (e.g.
    `cfg.progress = False`). `stacked=True`: the runs to train train as one program (see
    the module docstring)."""
    pending = []  # (label, run, cfg, workdir) of the runs without a stored row
    for label in (list(self.runs) if labels is None else list(labels)):
      if label not in self.runs:
        raise ValueError(f"unknown run {label!r}; the grid's runs: {list(self.runs)}")
      run = self.runs[label]
      cfg = run.config()
      if configure is not None:
        configure(run, cfg)
      row = self.stored_row(run, cfg)
      if row is not None:
        self.rows[label] = row
      else:
        pending.append((label, run, cfg, os.path.join(self.runs_dir, slug(label))))
    if stacked and pending:
      self._run_stacked(pending, verbose)
    for label, run, cfg, workdir in pending if not stacked else ():
      if verbose:
        seeds = f", seeds {tuple(cfg.seeds)}" if "seeds" in cfg else ""
        print(f"== {label}: {run.overrides}{seeds} -> {workdir}", file=sys.stderr, flush=True)
      t0 = time.time()
      summary = runner.run_or_reuse(cfg, workdir, verbose=verbose, reuse_from=self.reuse_from)
      if summary is None:
        raise RuntimeError(f"run {label!r} stopped before train.num_steps (train.stop_at_step);"
                           f" run the grid again without it")
      found = runner.find_finished(cfg, (workdir, *self.reuse_from))
      self.rows[label] = make_row(run, cfg, summary, time.time() - t0,
                                  found[0] if found else workdir)
    return [self.rows[label] for label in self.runs if label in self.rows]

  def _run_stacked(self, pending, verbose):
    """`run(stacked=True)` of the runs `pending`: each finished one read back, the others
    trained as one program (`job.train_arms`)."""
    seeds_lib.check_arms([cfg for _, _, cfg, _ in pending], [label for label, *_ in pending])
    todo = []
    for label, run, cfg, workdir in pending:
      t0 = time.time()
      found = runner.find_finished(cfg, (workdir, *self.reuse_from))
      if found is None:
        todo.append((label, run, cfg, workdir))
        continue
      if verbose:
        print(f"reusing finished run {found[0]}", file=sys.stderr, flush=True)
      self.rows[label] = make_row(run, cfg, found[1], time.time() - t0, found[0])
    if not todo:
      return
    labels = [label for label, *_ in todo]
    if verbose:
      for label, run, cfg, workdir in todo:
        print(f"== {label}: {run.overrides}, seeds {tuple(cfg.seeds)} -> {workdir}",
              file=sys.stderr, flush=True)
      print(f"== {', '.join(labels)}: trained as one program", file=sys.stderr, flush=True)
    t0 = time.time()
    summaries = job.train_arms([cfg for _, _, cfg, _ in todo], [w for *_, w in todo])
    seconds = time.time() - t0
    if any(s is None for s in summaries):
      raise RuntimeError(f"runs {labels} stopped before train.num_steps (train.stop_at_step); "
                         f"run the grid again without it")
    total = sum(len(cfg.seeds) for _, _, cfg, _ in todo)
    for (label, run, cfg, workdir), summary in zip(todo, summaries):
      row = make_row(run, cfg, summary, seconds * len(cfg.seeds) / total, workdir)
      row["stacked"] = {"runs": labels, "seconds": round(seconds, 1)}
      self.rows[label] = row

  def compare(self, pairs, metric, family=None):
    """Each (a, b) of `pairs`: `metric`'s per-seed values of run a (treatment) against run b
    (baseline), as one family (`el_jax.report.stats.family`: difference, permutation p, its
    floor, bootstrap interval, `p_holm` over the pairs), stored under `family` (default the
    metric). Returns the comparisons."""
    arms = []
    for a, b in pairs:
      for label in (a, b):
        if label not in self.rows:
          raise ValueError(f"compare: run {label!r} has no row (run the grid first); rows: "
                           f"{list(self.rows)}")
      va, vb = (self.rows[x]["per_seed"].get(metric) for x in (a, b))
      if va is None or vb is None:
        raise ValueError(f"compare: metric {metric!r} is not a per-seed metric of "
                         f"{a if va is None else b!r}")
      arms.append((a, va, b, vb))
    out = [{"a": c["a"], "b": c["b"], "metric": metric,
            **{k: v for k, v in c.items() if k not in ("a", "b")}}
           for c in stats.family(arms)]
    self.comparisons[family or metric] = out
    return out

  def document(self, **meta):
    """The results file's content: meta fields, the rows in the order added (a declared run
    not run this time keeps its row from the file, if its config is still the run's), and the
    comparisons."""
    rows = []
    for label, run in self.runs.items():
      row = self.rows.get(label)
      if row is None and label in self._stored:
        row = self.stored_row(run, run.config())
      if row is not None:
        rows.append(row)
    return {**self.meta, **meta, "rows": rows, "comparisons": self.comparisons}

  def write(self, **meta):
    """Writes the results JSON atomically; returns its content."""
    doc = self.document(**meta)
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    wd.write_json(self.path, doc)
    return doc


def format_comparisons(comparisons, digits=3):
  """One line per comparison: means, difference, bootstrap 95% interval, p (and Holm's)."""
  f = f"{{:.{digits}f}}"
  lines = []
  for c in comparisons:
    lines.append(
        f"{c['a'] + ' vs ' + c['b']:18s} {c['metric']}: {f.format(c['mean_a'])} vs "
        f"{f.format(c['mean_b'])}, difference {c['diff']:+.{digits}f} (bootstrap 95% "
        f"[{c['ci95'][0]:+.{digits}f}, {c['ci95'][1]:+.{digits}f}]), permutation p = "
        f"{c['p_value']:.2g} ({c['n_a']} vs {c['n_b']} seeds)")
  return "\n".join(lines)
