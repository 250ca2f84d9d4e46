"""The sweep's grids (`config.stages`), then the choice written to selection.json.

Each stage trains CE, CE + warmup and E1 + warmup settings (`STAGE_LOSSES`) at its points
(`points`) on `configs/copy_task.py:<size variant>` with `config.seeds`, one run per point x
loss, labelled "<point> <loss>"; `<results_dir>/<stage>.json` holds a row per run (the grid's
schema plus `point` and `loss`). Runs train in `<runs_dir>/<stage>/` (finished runs are read
back, also from the older layout `<stage>/<point>/<loss>/`; a JSON row is reused only for an
identical config). The sweep makes no comparisons: with two seeds a permutation test cannot
reach p < 1/3, and the choice is made on validation means alone (`analysis.selection`).
"""
import itertools
import os

from el_jax.infra import workdir as wd
from el_jax.report import sources
from el_jax.run import grid as grid_lib
from el_jax.run import runner

from experiments.copy_task_cpu_sweep import analysis

CONFIG = "copy_task"
COMMAND = "python -m el_jax.experiment --config=experiments/copy_task_cpu_sweep/config.py"

LOSSES = {
    "ce": {"loss.name": "ce"},
    "ce_warmup": {"loss.name": "ce", "optim.warmup_steps": 300},
    "e1_lam0.5_warmup": {"loss.name": "e1", "loss.e1.lam": 0.5, "optim.warmup_steps": 300},
    "e1_lam1_warmup": {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 300},
    "e1_lam4_warmup": {"loss.name": "e1", "loss.e1.lam": 4.0, "optim.warmup_steps": 300},
}
LOSSES2 = {
    "ce_lr3e-4": {"loss.name": "ce", "optim.lr": 3e-4},
    "e1_lam1_warmup750": {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 750},
    "e1_lam2_warmup": {"loss.name": "e1", "loss.e1.lam": 2.0, "optim.warmup_steps": 300},
    "e1_lam1_warmup_lr3e-4": {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 300,
                              "optim.lr": 3e-4},
}
# The same tuning budget: CE's settings at one string per context, so that CE gets as many
# candidates as E1 (6: these 3, "ce" and "ce_warmup" of the scan and "ce_lr3e-4" of scan2),
# along the same axes (warmup length, learning rate).
LOSSES3 = {
    "ce_warmup750": {"loss.name": "ce", "optim.warmup_steps": 750},
    "ce_warmup_lr3e-4": {"loss.name": "ce", "optim.warmup_steps": 300, "optim.lr": 3e-4},
    "ce_warmup750_lr3e-4": {"loss.name": "ce", "optim.warmup_steps": 750, "optim.lr": 3e-4},
}
STAGE_LOSSES = {"scan": LOSSES, "scan2": LOSSES2, "scan3": LOSSES3}

# config.size: the configs/copy_task.py variant and how the cpu-size overrides scale (value *
# num / den, at least 1; the labels name the scaled values).
SIZES = {
    "cpu": {"variant": "cpu", "scale": {}},
    "test": {"variant": "test",
             "scale": {"data.context_len": (11, 55), "model.embed_dim": (1, 8),
                       "optim.warmup_steps": (8, 1500), "train.num_steps": (8, 1500)}},
    "paper": {"variant": "paper_lc1",
              "scale": {"model.embed_dim": (8, 1), "model.num_layers": (2, 1),
                        "optim.warmup_steps": (20_000, 1500), "train.num_steps": (20_000, 1500)}},
}


def at_size(overrides, size="cpu"):
  """cpu-size overrides at `size` (`SIZES[size]["scale"]`)."""
  if size not in SIZES:
    raise ValueError(f"unknown config.size {size!r}; valid sizes: {', '.join(SIZES)}")
  return grid_lib.scale_overrides(overrides, SIZES[size]["scale"])


def points(stage, size="cpu"):
  """The stage's points: cpu-size overrides of the setting, at `size`."""
  if stage == "scan":
    for k, width, layers in itertools.product((1, 4), (128,), (2,)):
      yield at_size({"data.context_len": 55 * k, "model.embed_dim": width,
                     "model.num_layers": layers, "train.num_steps": 1500}, size)
  elif stage in ("scan2", "scan3"):  # at one string per context: warmup length, lam 2, lr
    yield at_size({"data.context_len": 55, "train.num_steps": 1500}, size)
  else:
    raise ValueError(f"unknown stage {stage!r} in config.stages; valid stages: "
                     f"{', '.join(STAGE_LOSSES)}")


def name_of(point):
  return "_".join(f"{k.split('.')[-1]}={v}" for k, v in point.items())


def configure(run, cfg):
  cfg.progress = False


def make_grid(config, stage):
  """The stage's grid: one run per point x loss (the losses of `config.losses` only, if
  given), labelled "<point> <loss>". Finished runs of `<runs_dir>/<stage>/` (also those of the
  older layout `<point>/<loss>/`) are read back."""
  runs_dir = os.path.join(config.runs_dir, stage)
  g = grid_lib.Grid(os.path.join(config.results_dir, f"{stage}.json"), runs_dir=runs_dir,
                    reuse_from=runner.run_dirs(os.path.join(runs_dir, "*", "*")))
  for point in points(stage, config.size):
    pname = name_of(point)
    for loss, lo in STAGE_LOSSES[stage].items():
      if config.losses and loss not in config.losses:
        continue
      g.add(f"{pname} {loss}", CONFIG, SIZES[config.size]["variant"],
            {**point, **at_size(lo, config.size)}, seeds=config.seeds, fit_devices=False,
            point=pname, loss=loss)
  return g


def check(config):
  """A ValueError for a stage, size or loss the sweep does not have, or for a partial grid
  (`config.losses`) that would overwrite the committed JSON."""
  for stage in config.stages:
    list(points(stage, config.size))
  known = {l for stage in config.stages for l in STAGE_LOSSES[stage]}
  unknown = [l for l in config.losses if l not in known]
  if unknown:
    raise ValueError(f"unknown losses {unknown} in config.losses; the stages' losses: "
                     f"{sorted(known)}")
  if config.losses and os.path.normpath(config.results_dir) == os.path.join(
      "results", "copy_task_cpu_sweep"):
    raise ValueError("config.losses writes JSON with only those runs: give another "
                     "config.results_dir (not the committed results/copy_task_cpu_sweep)")


def run_stage(config, stage):
  """Trains (or reuses) a stage's runs and writes `<results_dir>/<stage>.json`; returns it."""
  g = make_grid(config, stage)
  for label in g.runs:
    g.run([label], configure=configure)
    r = g.rows[label]
    m = r["aggregate"]
    print(f"{r['point']:50s} {r['loss']:22s} train_hard_em={m['train_em_hard']['mean']:.3f} "
          f"valid_hard_em={m['valid_em_hard']['mean']:.3f} "
          f"test_hard_em={m['test_em_hard']['mean']:.3f} ({r['seconds']:.0f}s)", flush=True)
  return g.write(stage=stage, size=config.size, variant=SIZES[config.size]["variant"],
                 command=f"{COMMAND}:{stage if config.size == 'cpu' else config.size}")


def run(config):
  """Every stage of `config.stages`, then the choice (`analysis.selection` of the stages'
  rows) written to `<results_dir>/selection.json`; returns the choice."""
  check(config)
  os.makedirs(config.results_dir, exist_ok=True)
  for stage in config.stages:
    run_stage(config, stage)
  src = sources.Sources(os.path.abspath(config.results_dir))
  sel = analysis.selection(analysis.stage_rows(src), config.select_context)
  wd.write_json(os.path.join(config.results_dir, "selection.json"), sel)
  for name, v in sorted(sel["candidates"].items(), key=lambda kv: -kv[1]):
    print(f"{name:24s} {analysis.METRIC} = {v:.3f}")
  print(f"chosen: {sel['chosen_run']} {sel['chosen_overrides']}")
  if "ce_chosen_run" in sel:
    print(f"CE, {sel['budget']['ce']} candidates: chosen {sel['ce_chosen_run']} "
          f"{sel['ce_chosen_overrides']}")
  return sel
