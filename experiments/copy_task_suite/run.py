"""The suite's grids (`config.stages`): Table 3's ablations, Figure 1's context lengths and
widths, each a grid of `configs/copy_task.py` runs written to `<results_dir>/<stage>.json`
(the grid's schema; a row also holds `data_coverage`, and Table 3's rows the paper's number)
with each run against its CE run (`analysis.comparisons`, one Holm family per stage).

Runs train in `<runs_dir>/<stage>/` and are read back when finished, here, from another
stage or from `config.reuse_from` (the demo's run folders); a JSON row is reused only for the
same config and seeds. The CE, warmup-only and E1 + warmup runs of Table 3 train first: the
demo and Figure 1's k = 1 rows are the same trainings.
"""
import os

from el_jax.core.data import copy_task
from el_jax.core.tasks import copy_task as copy_tasks
from el_jax.report import papers
from el_jax.run import grid as grid_lib
from el_jax.run import runner

from experiments.copy_task_suite import analysis

CONFIG = "copy_task"
COMMAND = "python -m el_jax.experiment --config=experiments/copy_task_suite/config.py"
STRING = 55  # tokens per string at cpu size (L_p + 2 L_c + 3)
WARM = 750  # warmup steps (half the run), as in the demo
CE = {"loss.name": "ce"}
E1W = {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": WARM}

# Table 3: the paper's ablations (its numbers: el_jax.report.papers, "s000.t3.<label>"), then
# the two ends it is read against and lam 2 with warmup (not in the paper's table).
TABLE3 = [
    ("E1, no warmup, lam=2", {"loss.name": "e1", "loss.e1.lam": 2.0}),
    ("E1, no warmup, lam=4", {"loss.name": "e1", "loss.e1.lam": 4.0}),
    ("E1 + warmup, lam=4", {"loss.name": "e1", "loss.e1.lam": 4.0, "optim.warmup_steps": WARM}),
    ("E1 + warmup, lam=1, V=500", {"loss.name": "e1", "loss.e1.lam": 1.0,
                                   "optim.warmup_steps": WARM, "data.num_letters": 500,
                                   "data.num_train": 800}),
    ("E1 + warmup, lam=8", {"loss.name": "e1", "loss.e1.lam": 8.0, "optim.warmup_steps": WARM}),
    ("Only warmup (CE)", {"loss.name": "ce", "optim.warmup_steps": WARM}),
    ("CE (no warmup)", CE),
    ("E1 + warmup, lam=1", E1W),
    ("E1 + warmup, lam=2", {"loss.name": "e1", "loss.e1.lam": 2.0, "optim.warmup_steps": WARM}),
]

# config.size: the configs/copy_task.py variant of each stage, overrides added to every run,
# the default seeds of each stage and how the cpu-size overrides scale (value * num / den, at
# least 1).
SIZES = {
    "cpu": {"variants": {"table3": "cpu", "fig1_context": "cpu", "fig1_width": "cpu"},
            "base": {}, "scale": {},
            "seeds": {"table3": range(2, 12), "fig1_context": range(2, 12),
                      "fig1_width": range(2, 5)}},
    "test": {"variants": {"table3": "test", "fig1_context": "test", "fig1_width": "test"},
             "base": {"data.context_len": 11},
             "scale": {"data.context_len": (11, STRING), "model.embed_dim": (1, 8),
                       "optim.warmup_steps": (8, 1500), "train.num_steps": (8, 1500)},
             "seeds": {"table3": (0, 1), "fig1_context": (0, 1), "fig1_width": (0, 1)}},
    "paper": {"variants": {"table3": "paper", "fig1_context": "paper_lc1",
                           "fig1_width": "paper_lc1"},
              "base": {},
              "scale": {"model.embed_dim": (8, 1), "optim.warmup_steps": (20_000, 1500)},
              "seeds": {"table3": None, "fig1_context": None, "fig1_width": None}},
}


def at_size(overrides, size="cpu"):
  """cpu-size overrides at `size` (`SIZES[size]["scale"]`)."""
  if size not in SIZES:
    raise ValueError(f"unknown config.size {size!r}; valid sizes: {', '.join(SIZES)}")
  return grid_lib.scale_overrides(overrides, SIZES[size]["scale"])


def runs(stage, size="cpu"):
  """[(label, overrides, extra row fields)] of a stage at `size`."""
  if stage == "table3":
    out = [(label, lo, {"paper": paper_value(label)}) for label, lo in TABLE3]
  elif stage == "fig1_context":
    out = [(f"{name} k={k}", {**lo, "data.context_len": STRING * k}, {})
           for k in (1, 2, 4, 8) for name, lo in (("CE", CE), ("E1+warmup", E1W))]
  elif stage == "fig1_width":
    out = [(f"{name} k={k} d={at_size({'model.embed_dim': d}, size)['model.embed_dim']}",
            {**lo, "data.context_len": STRING * k, "model.embed_dim": d}, {})
           for name, lo in (("CE", CE), ("E1+warmup", E1W)) for d in (256, 512) for k in (1, 8)]
  else:
    raise ValueError(f"unknown stage {stage!r} in config.stages; valid stages: table3, "
                     f"fig1_context, fig1_width")
  return [(label, {**SIZES[size]["base"], **at_size(lo, size)}, extra)
          for label, lo, extra in out]


def paper_value(label):
  """The paper's Table 3 number of a run (easy-test CL at L_c = 5), None if it has none."""
  key = f"s000.t3.{label}"
  return papers.value(key) if key in papers.PAPER else None


def data_coverage(overrides, variant="cpu"):
  """What a run's training set covers of its easy test strings (from the data alone).

  test_easy_seen_in_train  share of the easy test strings that also occur in the
                           training set. With L_c = 1 an easy string is fixed by its one
                           letter, so this is the share of easy test letters seen in
                           training: what a letter-by-letter lookup table, rather than
                           copying, can get right.
  train_num_easy           number of easy training strings
  """
  cfg = grid_lib.make_config(CONFIG, variant, overrides, [0])
  train_set, test_set = copy_task.make_datasets(copy_tasks.task_spec(cfg), cfg.data.num_train,
                                                cfg.data.num_test, cfg.data.data_seed)
  seen = copy_task.seen_in_train(train_set, test_set)[test_set.easy]
  return {"test_easy_seen_in_train": float(seen.mean()),
          "train_num_easy": int(train_set.easy.sum())}


STAGES = ("table3", "fig1_context", "fig1_width")

# Trained first (the demo and Figure 1 read these runs back), reported in the table's order.
FIRST = ("CE (no warmup)", "Only warmup (CE)", "E1 + warmup, lam=1")


def configure(run, cfg):
  """Every run: no progress bar, one evaluation at the end."""
  cfg.progress = False
  cfg.train.eval_every = 0


def make_grid(config, stage):
  """The stage's grid (only `config.labels`, if given): its runs in `<runs_dir>/<stage>/`,
  finished runs of every stage and of `config.reuse_from` read back, rows of
  `<results_dir>/<stage>.json` reused for an identical config."""
  seeds = config.seeds or SIZES[config.size]["seeds"][stage]
  variant = SIZES[config.size]["variants"][stage]
  g = grid_lib.Grid(os.path.join(config.results_dir, f"{stage}.json"),
                    runs_dir=os.path.join(config.runs_dir, stage),
                    reuse_from=runner.run_dirs(os.path.join(config.runs_dir, "*", "*"),
                                               *config.reuse_from))
  for label, lo, extra in runs(stage, config.size):
    if config.labels and label not in config.labels:
      continue
    g.add(label, CONFIG, variant, lo, seeds=seeds, data_coverage=data_coverage(lo, variant),
          **extra)
  return g


def check(config):
  """A ValueError for a stage, size or label the suite does not have, or for a partial grid
  (`config.labels`) that would overwrite the committed JSON."""
  for stage in config.stages:
    runs(stage, config.size)
  known = [label for stage in STAGES for label, _, _ in runs(stage, config.size)]
  unknown = [l for l in config.labels if l not in known]
  if unknown:
    raise ValueError(f"unknown runs {unknown} in config.labels; the runs: {known}")
  if config.labels and os.path.normpath(config.results_dir) == os.path.join(
      "results", "copy_task_suite"):
    raise ValueError("config.labels writes JSON with only those runs: give another "
                     "config.results_dir (not the committed results/copy_task_suite)")


def run_stage(config, stage):
  """Trains (or reuses) a stage's runs, compares each with its CE run and writes
  `<results_dir>/<stage>.json`; returns its content."""
  g = make_grid(config, stage)
  for label in sorted(g.runs, key=lambda l: l not in FIRST):
    g.run([label], configure=configure)
    r = g.rows[label]
    m = r["aggregate"]
    print(f"{label:32s} test easy CL {m['test_cl_easy']['mean']:.3f}  test hard EM "
          f"{m['test_em_hard']['mean']:.3f} ({m['test_em_hard']['min']:.3f}, "
          f"{m['test_em_hard']['max']:.3f})  train hard EM {m['train_em_hard']['mean']:.3f}"
          f"  (easy test strings seen in training "
          f"{r['data_coverage']['test_easy_seen_in_train']:.3f}; {r['seconds']:.0f} s)",
          flush=True)
  rows = [g.rows[l] for l in g.runs]
  comps = [{"metric": analysis.METRIC, **c} for c in analysis.comparisons(stage, rows)]
  g.comparisons[analysis.METRIC] = comps
  print(grid_lib.format_comparisons(comps))
  command = f"{COMMAND}:{stage if config.size == 'cpu' else config.size}"
  return g.write(stage=stage, size=config.size, variant=SIZES[config.size]["variants"][stage],
                 command=command)


def run(config):
  """Every stage of `config.stages`; returns {stage: its JSON's content}."""
  check(config)
  os.makedirs(config.results_dir, exist_ok=True)
  return {stage: run_stage(config, stage) for stage in config.stages}
