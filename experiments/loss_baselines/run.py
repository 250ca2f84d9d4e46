"""The stages of `config.stages`, each one `el_jax.run.grid.Grid` written to one results file of
the grid schema (`{meta, "rows": [...], "comparisons": {}}`, rows in `GRID` order; the
comparisons are the analysis's):

  select           every GRID point on the copy task with the warmup, `select_seeds`:
                   select.json (each row names its `loss` and grid `point`)
  test             the chosen setting of each loss (`analysis.choices` of select.json: the
                   validation selection) and CE without warmup, `test_seeds`: test.json
  label_copy       the same settings on configs/label_copy.py (from `lc_pretrained`),
                   `lc_seeds`: label_copy.json
  label_copy_grid  a diagnostic: the grid of `losses` on label copy's validation split:
                   label_copy_grid.json
  table            table.json: the choices, the grid, the warmup and the small GPT-2's
                   pretraining (read from `pretrain_dir`, kept from the file when runs/ is gone)

A row whose config is unchanged is reused from its file and a finished run is read back from
`runs_dir` (the chosen settings also from `<runs_dir>/<stage>/*`, run folders trained outside
the grid); processes filling one file with different `losses` keep each other's rows (the file
is re-read under a lock before it is written).
"""
import fcntl
import os
import sys

from el_jax.infra import metrics as metrics_lib
from el_jax.infra import workdir as wd
from el_jax.run import grid as grid_lib
from el_jax.run import runner

from experiments.loss_baselines import analysis
from experiments.loss_baselines.config import (GRID, REFERENCE, SELECT_METRIC, STAGES,
                                               TEST_METRIC, point_name)

COMMAND = "python -m el_jax.experiment --config=experiments/loss_baselines/config.py"
PRETRAIN_COMMAND = "python -m el_jax.experiment --config=experiments/label_copy/config.py:pretrain"


class StageError(ValueError):
  """A stage that cannot run yet (its inputs are not finished): the message says which."""


def copy_overrides(point, config, warmup=True):
  """Overrides of configs/copy_task.py:<config.variant> for a grid point (+ the warmup)."""
  return {**point, **({"optim.warmup_steps": config.warmup} if warmup else {})}


def lc_overrides(point, config, warmup=True):
  """Overrides of configs/label_copy.py:<config.lc_variant> (KJV, fine-tuned from
  `lc_pretrained`) for a grid point, with warmup over half the steps."""
  o = {**point, "data.corpus": "kjv", "model.pretrained": config.lc_pretrained,
       "train.num_steps": config.lc_steps, "train.eval_every": 0,
       "train.checkpoint_every": config.lc_steps}
  if warmup:
    o["optim.warmup_steps"] = config.lc_steps // 2
  return o


def _quiet(run, cfg):
  cfg.progress = False


def _stored_note(path):
  """The `note` of an existing results file (a conversion's), kept when it is rewritten."""
  if os.path.exists(path):
    doc = wd.read_json(path)
    if isinstance(doc, dict) and "note" in doc:
      return {"note": doc["note"]}
  return {}


def _path(config, name):
  return os.path.join(config.results_dir, f"{name}.json")


def point_grid(config, name, config_name, variant, make_overrides, seeds, meta):
  """The grid of every `GRID` point, labelled by `point_name`, with `make_overrides(point)`,
  on `seeds`: <results_dir>/<name>.json (each row also names its `loss` and grid `point`)."""
  path = _path(config, name)
  g = grid_lib.Grid(path, runs_dir=os.path.join(config.runs_dir, name),
                    meta={"command": COMMAND, "stage": name, "metric": SELECT_METRIC, **meta,
                          **_stored_note(path)})
  for loss, points in GRID.items():
    for p in points:
      g.add(point_name(p), config_name, variant, make_overrides(p), seeds=seeds, loss=loss,
            point=p)
  return g


def select_grid(config):
  """Stage `select`: every grid point on the copy task with the warmup."""
  return point_grid(config, "select", "copy_task", config.variant,
                    lambda p: copy_overrides(p, config), config.select_seeds,
                    {"warmup_steps": config.warmup})


def label_copy_point_grid(config):
  """Stage `label_copy_grid`: every grid point on label copy (a diagnostic)."""
  return point_grid(config, "label_copy_grid", "label_copy", config.lc_variant,
                    lambda p: lc_overrides(p, config), config.select_seeds,
                    {"warmup_steps": config.lc_steps // 2})


def chosen_grid(config, part, best):
  """The grid of the chosen settings `best` ({loss: point}) and CE without warmup, on the
  copy task (`part` "test") or label copy ("label_copy"): <results_dir>/<part>.json."""
  path = _path(config, part)
  if part == "test":
    config_name, variant, seeds, make = "copy_task", config.variant, config.test_seeds, \
        copy_overrides
    warmup = config.warmup
  else:
    config_name, variant, seeds, make = "label_copy", config.lc_variant, config.lc_seeds, \
        lc_overrides
    warmup = config.lc_steps // 2
  g = grid_lib.Grid(path, runs_dir=os.path.join(config.runs_dir, "chosen", part),
                    reuse_from=runner.run_dirs(os.path.join(config.runs_dir, part, "*")),
                    meta={"command": COMMAND, "stage": part, "metric": TEST_METRIC,
                          "warmup_steps": warmup, **_stored_note(path)})
  g.add("ce_no_warmup", config_name, variant, make(REFERENCE, config, False), seeds=seeds,
        point=REFERENCE, warmup=False)
  for loss, p in best.items():
    g.add(loss, config_name, variant, make(p, config, True), seeds=seeds, point=p, warmup=True)
  return g


def _configured(run):
  cfg = run.config()
  _quiet(run, cfg)
  return cfg


def run_grid(g, labels, before_training=None):
  """Trains (or reuses) the runs `labels` of `g`, then writes its file with the rows of every
  other declared run that the file holds with an unchanged config, re-read under a lock (so
  that processes filling one file with different `losses` keep each other's rows).
  `before_training()` runs first if some run has neither a reusable row nor a finished run
  folder."""
  if before_training is not None:
    for k in labels:
      run, cfg = g.runs[k], _configured(g.runs[k])
      dirs = (os.path.join(g.runs_dir, grid_lib.slug(k)), *g.reuse_from)
      if g.stored_row(run, cfg) is None and runner.find_finished(cfg, dirs) is None:
        before_training()
        break
  g.run(labels, configure=_quiet)
  os.makedirs(os.path.dirname(g.path) or ".", exist_ok=True)
  with open(g.path + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    stored = grid_lib.Grid(g.path, runs_dir=g.runs_dir)  # the file as it is now
    for label, run in g.runs.items():
      if label not in g.rows:
        row = stored.stored_row(run, _configured(run))
        if row is not None:
          g.rows[label] = row
    return g.write()


def _labels(g, only):
  return [k for k, r in g.runs.items()
          if not only or k in only or r.extra.get("loss") in only]


def chosen(config, losses=None):
  """{loss: point}: the validation selection (`analysis.choices`) of select.json for `losses`
  (default every loss of GRID); a StageError names a loss whose grid is not finished."""
  path = _path(config, "select")
  rows = wd.read_json(path)["rows"] if os.path.exists(path) else []
  got = analysis.choices(rows)
  for loss in (GRID if losses is None else losses):
    if loss not in got:
      n = sum(r["loss"] == loss for r in rows)
      raise StageError(f"the grid of {loss!r} is not finished ({n} of {len(GRID[loss])} points "
                       f"in {path}); run the stage select")
  return {k: got[k]["point"] for k in GRID if losses is None or k in losses}


def finished_choices(config, only):
  """The choices of the losses in `only` (all if empty; each must be finished) and of every
  other loss whose grid is finished (their stored rows are kept)."""
  rows = []
  path = _path(config, "select")
  if os.path.exists(path):
    rows = wd.read_json(path)["rows"]
  best = chosen(config, set(only) & set(GRID) if only else None)
  best.update({k: c["point"] for k, c in analysis.choices(rows).items() if k not in best})
  return {k: best[k] for k in GRID if k in best}


def _need_gpt2(config):
  def check():
    if config.lc_pretrained and not os.path.isdir(config.lc_pretrained):
      raise StageError(f"{config.lc_pretrained} is missing: pretrain the small GPT-2 first "
                       f"(python -m el_jax.experiment --config=experiments/label_copy/"
                       f"config.py:pretrain)")
  return check


def table(config):
  """table.json: the choices of every finished grid, the grid, the warmup and the small GPT-2's
  pretraining."""
  path = _path(config, "table")
  select = _path(config, "select")
  rows = wd.read_json(select)["rows"] if os.path.exists(select) else []
  res = {"command": COMMAND, "select_metric": SELECT_METRIC, "test_metric": TEST_METRIC,
         "grid": GRID, "warmup_steps": config.warmup,
         "chosen": {k: c["point"] for k, c in analysis.choices(rows).items()},
         "files": {"select": "select.json", "test": "test.json (rows)",
                   "label_copy": "label_copy.json (rows)",
                   "label_copy_grid": "label_copy_grid.json (a diagnostic)"}}
  old = wd.read_json(path) if os.path.exists(path) else None
  if old and "pretraining" in old:  # kept when runs/ is gone
    res["pretraining"] = old["pretraining"]
  pre = config.pretrain_dir
  if pre and os.path.exists(os.path.join(pre, "summary.json")):  # the small GPT-2 label copy used
    summ = wd.read_json(os.path.join(pre, "summary.json"))
    res["pretraining"] = {
        "command": PRETRAIN_COMMAND, "workdir": pre,
        "train_seconds": next((r["time_s"] for r in reversed(metrics_lib.read_rows(pre))
                               if r.get("kind") == "train"), None),
        **{k: summ["aggregate"][k]["mean"] for k in ("valid_ce_text", "valid_ppl_text")}}
  wd.write_json(path, res)
  return res


def run(config):
  unknown = [s for s in config.stages if s not in STAGES]
  if unknown:
    raise StageError(f"unknown stages {unknown}; valid: {list(STAGES)}")
  # `--config.losses=focal,e1` arrives as ("focal,e1",): names split on commas
  only = {x.strip() for s in config.losses for x in s.split(",") if x.strip()}
  bad = only - set(GRID) - {"ce_no_warmup"}
  if bad:
    raise StageError(f"unknown losses {sorted(bad)}; valid: {list(GRID)}")
  os.makedirs(config.results_dir, exist_ok=True)
  out = {}
  for stage in config.stages:
    if stage == "select":
      g = select_grid(config)
      out[stage] = run_grid(g, _labels(g, only))
    elif stage in ("test", "label_copy"):
      g = chosen_grid(config, stage, finished_choices(config, only))
      out[stage] = run_grid(g, _labels(g, only),
                            _need_gpt2(config) if stage == "label_copy" else None)
    elif stage == "label_copy_grid":
      if not only:
        raise StageError("the stage label_copy_grid needs config.losses (it is a diagnostic)")
      g = label_copy_point_grid(config)
      out[stage] = run_grid(g, _labels(g, only), _need_gpt2(config))
    else:
      out[stage] = table(config)
    print(f"{stage}: {config.results_dir}", file=sys.stderr)
  return out
