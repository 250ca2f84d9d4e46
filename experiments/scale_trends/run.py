"""Each task's design (points along its axis, candidates per method, tuning and test seeds),
its tuning grid, the validation choice and its test grid.

Per task and point: every candidate of every method trains on the tuning seeds
(`<results_dir>/<task>_tune.json`); each method's candidate with the highest mean validation
metric is chosen (`el_jax.report.stats.select`, the first listed on a tie); the chosen settings
train on the test seeds (`<task>.json`: the rows, `selection` with every candidate's score, and
the grid's comparisons on the test metric, `primary` E1 + warmup vs CE and `secondary` the two
controls, each Holm over its tests; the analysis recomputes them). Points go one at a time:
tune, choose, test, write. A label-copy point pretrains its small GPT-2(s) first, only when one
of its runs has to train. Finished runs are read back, rows of an identical config reused, a
killed run resumes from its checkpoints.
"""
import dataclasses
import itertools
import os

from el_jax.report import stats
from el_jax.run import grid as grid_lib
from el_jax.run import runner

from experiments.scale_trends import config as config_file
from experiments.scale_trends.config import METHODS, PREREGISTERED, TASKS

COMMAND = "python -m el_jax.experiment --config=experiments/scale_trends/config.py"


@dataclasses.dataclass
class Design:
  """One task's scale trend: points along an axis, candidates per method, seeds, metrics."""
  config: str
  variant: str
  axis: str                 # the x axis, in words
  points: list              # [(name, x value, overrides)]
  candidates: dict          # {method: [overrides]}: the same number for the warmup methods
  tune_seeds: tuple
  test_seeds: dict          # {point name: seeds}
  select_metric: str        # validation metric (higher is better)
  test_metric: str
  base: dict = dataclasses.field(default_factory=dict)       # overrides of every run
  tune_extra: dict = dataclasses.field(default_factory=dict)  # overrides of tuning runs only
  chance: float | None = None
  paper: str = ""
  prepare: object = None    # prepare(point name): run before a point's first run (pretraining)
  # Every test run made after PREREGISTERED was fixed: its trend test is not post hoc.
  fixed_before_test_runs: bool = False
  # What pairs seed s across the arms beyond its data (label_copy_models: the pretrained model
  # every arm's seed s fine-tunes): the analysis then adds the paired test.
  paired_unit: str | None = None


# Path-star's graph, and the paper's figure for it, shared by the size and budget trends.
G23 = {"data.degree": 2, "data.path_len": 3}
PATH_STAR_PAPER = ("seed 000 Table 1, G(2,3), GPT-Mini (6 x 384 is the reference repository's "
                   "size): CE 0.289 (0.123, 0.472), E1 + warmup 0.655 (0.486, 0.976) goal-node "
                   "accuracy")


def _lr_warmup(lrs, warmups, lam=1.0, ce_lrs=None):
  """Candidates: CE at each of `ce_lrs` (default `lrs`); CE + warmup and E1 (lam) + warmup
  at each lr x warmup."""
  grid = list(itertools.product(lrs, warmups))
  return {
      "ce": [{"loss.name": "ce", "optim.lr": lr} for lr in (ce_lrs or lrs)],
      "ce_warmup": [{"loss.name": "ce", "optim.lr": lr, "optim.warmup_steps": w}
                    for lr, w in grid],
      "e1_warmup": [{"loss.name": "e1", "loss.e1.lam": lam, "optim.lr": lr,
                     "optim.warmup_steps": w} for lr, w in grid],
  }


def design(task, size="cpu", runs_dir="runs/scale_trends"):
  """The `Design` of `task` at `size` ("cpu": the committed results; "test": seconds); a
  task that pretrains (label copy) keeps its checkpoints under `runs_dir`."""
  if size not in ("cpu", "test"):
    raise SystemExit(f"error: config.size={size!r}; valid: cpu, test")
  if task == "copy_task":
    if size == "cpu":
      # CE has no warmup to tune: as many learning rates as the warmup arms' lr x warmup
      # candidates, the two of theirs and one factor ~3 beyond each end.
      string, ks, lrs, warmups = 55, (1, 2, 4), (3e-4, 1e-3), (300, 750)
      ce_lrs = (1e-4, 3e-4, 1e-3, 3e-3)
      tune_seeds, test_seeds = (0, 1), (7, 8, 9, 10, 11)
    else:
      string, ks, lrs, warmups = 11, (1, 2), (3e-3, 1e-2), (4,)
      ce_lrs, tune_seeds, test_seeds = None, (0,), (1, 2)
    return Design(
        config="copy_task", variant=size, axis="context length (tokens; strings per context k)",
        points=[(f"k={k}", string * k, {"data.context_len": string * k}) for k in ks],
        candidates=_lr_warmup(lrs, warmups, ce_lrs=ce_lrs), tune_seeds=tune_seeds,
        test_seeds={f"k={k}": test_seeds for k in ks}, select_metric="valid_em_hard",
        test_metric="test_em_hard", chance=1 / 26, fixed_before_test_runs=size == "cpu",
        paper="seed 000 Fig. 1a: CE's hard-test accuracy falls as the context grows (width "
              "1024, 4 layers); Sec. 4: E2 + warmup perfect on hard test strings at L_c = 5, "
              "L_p = 2000")
  if task == "path_star":
    if size == "cpu":
      shapes = ((2, 128, 4), (3, 192, 4), (4, 256, 4))
      lrs, warmup = (3e-4, 1e-3), 1000
      tune_seeds = (0,)
      # New test seeds, fixed with the prediction in CHANGELOG.md before any ran (the first
      # run's seeds 1-5 / 1-3 / 1-3 were tested before PREREGISTERED).
      test_seeds = {p: (11, 12, 13, 14, 15) for p in ("2x128", "3x192", "4x256")}
      base = {**G23, "data.test_file": "reference"}
      tune_extra = {"data.num_test": 2000}
    else:
      shapes = ((1, 16, 2), (2, 16, 2))
      lrs, warmup = (3e-3, 1e-2), 4
      tune_seeds = (0,)
      test_seeds = {"1x16": (1, 2), "2x16": (1, 2)}
      base, tune_extra = dict(G23), {}
    return Design(
        config="path_star", variant=size, axis="model size (layers x width; GPT-mini is 6 x 384)",
        points=[(f"{l}x{d}", l * d * d, {"model.num_layers": l, "model.embed_dim": d,
                                           "model.num_heads": h}) for l, d, h in shapes],
        candidates=_lr_warmup(lrs, (warmup,)), tune_seeds=tune_seeds, test_seeds=test_seeds,
        select_metric="valid_em_all", test_metric="test_em_all", base=base,
        tune_extra=tune_extra, chance=0.5, fixed_before_test_runs=size == "cpu",
        paper=PATH_STAR_PAPER)
  if task == "path_star_budget":
    # The axis the Table 1 section finds binding: graphs seen, at the 2 x 128 shape (the
    # cheapest of the size trend). New test seeds, fixed with PREREGISTERED before any ran.
    if size == "cpu":
      steps, batch, (l, d_model, h) = (2500, 10_000, 40_000), 32, (2, 128, 4)
      lrs, warmup, tune_seeds, test_seeds = (3e-4, 1e-3), 1000, (0,), (6, 7, 8, 9, 10)
      base, tune_extra = {**G23, "data.test_file": "reference"}, {"data.num_test": 2000}
    else:
      steps, batch, (l, d_model, h) = (8, 16), 16, (1, 16, 2)
      lrs, warmup, tune_seeds, test_seeds = (3e-3, 1e-2), 4, (0,), (1, 2)
      base, tune_extra = dict(G23), {}
    base = {**base, "model.num_layers": l, "model.embed_dim": d_model, "model.num_heads": h,
            "train.batch_size": batch}
    return Design(
        config="path_star", variant=size,
        axis=f"training budget (optimizer steps of {batch} graphs; graphs seen), "
             f"{l} x {d_model}",
        points=[(f"steps={n}", n * batch, {"train.num_steps": n}) for n in steps],
        candidates=_lr_warmup(lrs, (warmup,)), tune_seeds=tune_seeds,
        test_seeds={f"steps={n}": test_seeds for n in steps}, select_metric="valid_em_all",
        test_metric="test_em_all", base=base, tune_extra=tune_extra, chance=0.5,
        fixed_before_test_runs=size == "cpu",
        paper=PATH_STAR_PAPER + "; the reference repository's README command trains 100k "
              "steps of batch 256")
  if task in ("label_copy", "label_copy_models"):
    return _label_copy_design(task, size, runs_dir)
  raise SystemExit(f"error: unknown task {task!r}; valid: {', '.join(TASKS)}")


def _label_copy_design(task, size, runs_dir):
  """label_copy: one small GPT-2 pretrained per point, CE at the warmup arms' two learning
  rates. label_copy_models: the test unit is a pretrained model: every seed s fine-tunes its
  own small GPT-2, pretrained with seed s (`model.pretrained` ".../seed_{seed}"): the choice on
  model 0, the test on models 1-5; CE at as many learning rates as the warmup arms' lr x warmup
  candidates (equal budgets). Fixed with its prediction before any test run."""
  models = task == "label_copy_models"
  ce_lrs = None
  if size == "cpu":
    pre_steps, lrs, warmups, steps = (200, 800, 3200), (3e-4, 1e-3), (100, 200), 400
    tune_seeds, test_seeds = ((0,), (1, 2, 3, 4, 5)) if models else ((0, 1), (2, 3, 4, 5, 6))
    if models:
      ce_lrs = (1e-4, 3e-4, 1e-3, 3e-3)
    pre_variant, pre_over = "cpu", {}
  else:
    pre_steps, lrs, warmups, steps = (2, 6), (3e-3, 1e-2), (4,), 8
    tune_seeds, test_seeds = (0,), (1, 2)
    pre_variant, pre_over = "test", {"model.num_layers": 2, "data.context_len": 48}
  pre_dir = os.path.join(runs_dir, task, "pretrain")

  def pre_config(n, seed=None):
    over = {**pre_over, "train.num_steps": n}
    return grid_lib.make_config("text_lm", pre_variant,
                                over if seed is None else {**over, "seeds": (seed,)})

  def prepare(pname, seeds=None):
    """Pretrains the point's model (label_copy_models: one per tuning and test seed, or
    those of `seeds`) and exports it where the point's runs read it."""
    n = int(pname.split("=")[1])
    if not models:
      runner.pretrain_and_export(pre_config(n), os.path.join(pre_dir, f"text_lm_{n}"),
                                 os.path.join(pre_dir, f"small_gpt2_{n}"))
      return
    for seed in (tune_seeds + test_seeds) if seeds is None else seeds:
      runner.pretrain_and_export(pre_config(n, seed),
                                 os.path.join(pre_dir, f"text_lm_{n}", f"seed_{seed}"),
                                 os.path.join(pre_dir, f"small_gpt2_{n}", f"seed_{seed}"))

  def tokens(n):
    c = pre_config(n)
    return n * c.train.batch_size * c.data.context_len

  def checkpoint(n):
    return os.path.join(pre_dir, f"small_gpt2_{n}", *(("seed_{seed}",) if models else ()))

  return Design(
      config="label_copy", variant=size,
      axis="pretraining of the small GPT-2 (optimizer steps; tokens seen)",
      points=[(f"pretrain={n}", tokens(n), {"model.pretrained": checkpoint(n)})
              for n in pre_steps],
      candidates=_lr_warmup(lrs, warmups, ce_lrs=ce_lrs), tune_seeds=tune_seeds,
      test_seeds={f"pretrain={n}": test_seeds for n in pre_steps},
      select_metric="valid_em_hard", test_metric="test_em_hard",
      base={"data.corpus": "kjv", "train.num_steps": steps, "train.eval_every": 0,
            "train.checkpoint_every": steps},
      paper="seed 000 Table 2, KJV, a pretrained GPT-2 (size not stated) fine-tuned: CE "
            "0.863, E1 + warmup 0.981 (accuracy)", prepare=prepare,
      fixed_before_test_runs=models and size == "cpu",
      paired_unit="pretrained model" if models else None)


def cand_name(overrides):
  """"lr=0.001 warmup=750" (the fields a candidate sets besides the loss)."""
  parts = []
  for k, v in overrides.items():
    if k == "optim.lr":
      parts.append(f"lr={v:g}")
    elif k == "optim.warmup_steps":
      parts.append(f"warmup={v}")
  return " ".join(parts)


def _quiet(run, cfg):
  cfg.progress = False


def tune_grid(d, out, runs_dir, task):
  g = grid_lib.Grid(os.path.join(out, f"{task}_tune.json"),
                    runs_dir=os.path.join(runs_dir, task, "tune"))
  for pname, x, po in d.points:
    for method, cands in d.candidates.items():
      for co in cands:
        g.add(f"{pname} {method} {cand_name(co)}", d.config, d.variant,
              {**d.base, **po, **co, **d.tune_extra}, seeds=d.tune_seeds, point=pname, x=x,
              method=method, candidate=cand_name(co))
  return g


def select(d, tune_rows):
  """{point: {method: {"chosen": candidate name, "overrides", "scores": {name: mean}}}}: each
  method's candidate chosen on the mean validation metric of its tuning row
  (`stats.select`: the highest, the first listed on a tie)."""
  by_label = {r["label"]: r for r in tune_rows}
  out = {}
  for pname, _, _ in d.points:
    out[pname] = {}
    for method, cands in d.candidates.items():
      scores = {}
      for co in cands:
        row = by_label.get(f"{pname} {method} {cand_name(co)}")
        if row is None:
          raise SystemExit(f"error: tuning run '{pname} {method} {cand_name(co)}' has no row")
        scores[cand_name(co)] = row["aggregate"][d.select_metric]["mean"]
      chosen = stats.select(scores)
      out[pname][method] = {"chosen": chosen,
                            "overrides": dict(next(c for c in cands if cand_name(c) == chosen)),
                            "scores": scores}
  return out


def add_test_runs(g, d, point, chosen):
  """Adds to grid `g` the test runs of `point`: each method at its chosen setting."""
  pname, x, po = point
  for method in METHODS:
    g.add(f"{pname} {method}", d.config, d.variant,
          {**d.base, **po, **chosen[method]["overrides"]}, seeds=d.test_seeds[pname],
          point=pname, x=x, method=method, candidate=chosen[method]["chosen"])


def _finished(g, label):
  """Whether run `label` of `g` can be read back (a stored row of its config or a finished
  run folder) without training."""
  run = g.runs[label]
  cfg = run.config()
  _quiet(run, cfg)
  return (g.stored_row(run, cfg) is not None or runner.find_finished(
      cfg, (os.path.join(g.runs_dir, grid_lib.slug(label)), *g.reuse_from)) is not None)


def _run_all(g, what, labels, train=True):
  """Trains or reads back `labels` (train=False: reads back the finished ones only); returns
  whether all have rows."""
  for label in labels:
    if not train and not _finished(g, label):
      continue
    g.run([label], configure=_quiet)
    g.write()  # progress is kept after each run
  return all(label in g.rows for label in labels)


def run_task(task, config):
  """Tunes, chooses, tests and compares (`config.tune_only`: only the tuning runs) the scale
  points of `task` (`config.points`: only those named); writes the JSON and returns its
  content."""
  d = design(task, config.size, config.runs_dir)
  if config.points:
    names = [p[0] for p in d.points]
    unknown = [p for p in config.points if p not in names]
    if unknown:
      raise SystemExit(f"error: unknown points {unknown}; the {task} points at {config.size} "
                       f"size: {names}")
    d.points = [p for p in d.points if p[0] in config.points]
  out, runs_dir, train = config.results_dir, config.runs_dir, config.train
  meta = {"task": task, "size": config.size, "axis": d.axis,
          "command": f"{COMMAND}:{task}" if config.size == "cpu" else COMMAND,
          "select_metric": d.select_metric, "test_metric": d.test_metric,
          "tune_seeds": list(d.tune_seeds), "test_seeds": {k: list(v) for k, v in
                                                           d.test_seeds.items()},
          "candidates": {m: [cand_name(c) for c in cs] for m, cs in d.candidates.items()},
          "chance": d.chance, "paper": d.paper,
          "fixed_before_test_runs": d.fixed_before_test_runs, "paired_unit": d.paired_unit,
          "preregistered": PREREGISTERED}
  tg = tune_grid(d, out, runs_dir, task)
  tg.meta.update(meta, stage="tune")
  g = grid_lib.Grid(os.path.join(out, f"{task}.json"),
                    runs_dir=os.path.join(runs_dir, task, "test"))
  g.meta.update(meta, stage="test", selection={})
  doc = g.document()
  for point in d.points:  # one point at a time: tune, choose, test, compare, write
    pname = point[0]
    tune_labels = [l for l, r in tg.runs.items() if r.extra["point"] == pname]
    # Pretraining (label copy) only where a run of the point has to train: a point whose
    # rows are all stored (the committed JSON) or finished needs no checkpoint.
    prepared = d.prepare is None or not train
    if not prepared and not all(_finished(tg, l) for l in tune_labels):
      d.prepare(pname)
      prepared = True
    if not _run_all(tg, "tune", tune_labels, train):
      break  # this point's tuning has not finished (train=False)
    if config.tune_only:
      continue
    chosen = select(dataclasses.replace(d, points=[point]), list(tg.rows.values()))
    add_test_runs(g, d, point, chosen[pname])
    test_labels = [f"{pname} {m}" for m in METHODS]
    if not prepared and not all(_finished(g, l) for l in test_labels):
      d.prepare(pname)
    if not _run_all(g, "test", test_labels, train):
      break
    # The JSON's selection and comparisons cover the points whose test runs finished.
    g.meta["selection"].update(chosen)
    done = [p for p in d.points if p[0] in g.meta["selection"]]
    for family, pairs in config_file.FAMILIES:
      g.compare([(f"{p} {a}", f"{p} {b}") for p, _, _ in done for a, b in pairs],
                d.test_metric, family=family)
    doc = g.write()
  tune_doc = tg.write()
  return tune_doc if config.tune_only else doc


def run(config):
  """Every task of `config.tasks`, in order; returns {task: its JSON's content}."""
  bad = [t for t in config.tasks if t not in TASKS]
  if bad or not config.tasks:
    raise SystemExit(f"error: config.tasks={tuple(config.tasks)}; valid: {', '.join(TASKS)}")
  return {task: run_task(task, config) for task in config.tasks}
