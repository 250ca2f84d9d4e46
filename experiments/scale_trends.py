r"""Seed 000 scale trends (issue 24 item 2): where does the paper's effect appear?

  python experiments/scale_trends.py --task=copy_task             # tune, then test (resumable)
  python experiments/scale_trends.py --task=path_star
  python experiments/scale_trends.py --task=path_star_budget      # path-star: graphs seen
  python experiments/scale_trends.py --task=label_copy            # pretrains 3 small GPT-2s
  python experiments/scale_trends.py --task=label_copy_models     # 6 a point: 18 of them
  python experiments/scale_trends.py --task=path_star --stage=report  # JSON of what finished
  python experiments/scale_trends.py --task=copy_task --stage=plot  # figure from the JSON
  python experiments/scale_trends.py --task=copy_task --size=test --out=/tmp/st  # seconds

For a task where E1 + warmup's gain over cross-entropy does not show at CPU size, the paper's
comparison (CE, CE + warmup, E1 + warmup) is measured at several points along the axis that
matters most for that task, each method's setting chosen on the validation split at that
point, with the same number of candidates for CE + warmup and E1 + warmup:

* copy_task: context length. Strings packed per context k in {1, 2, 4} (context 55 k tokens;
  8 strings per step, 1500 steps, `configs/copy_task.py:cpu`). Candidates per point: CE at
  lr in {1e-4, 3e-4, 1e-3, 3e-3}; CE + warmup and E1 (lam 1) + warmup at lr in {3e-4, 1e-3} x
  warmup in {300, 750} steps (4 each: equal budgets). Chosen on mean `valid_em_hard` over
  seeds 0, 1; tested on seeds 7-11 with `test_em_hard`, with PREREGISTERED's trend test fixed
  before any of them ran (the first design, CE at {3e-4, 1e-3} and test seeds 2-6, is in the
  JSON of commit a7e2752).
* path_star: model size toward GPT-mini (6 x 384), G(2,3), 2500 steps of batch 32
  (`configs/path_star.py:cpu`): 2 x 128, 3 x 192, 4 x 256. Candidates: each method at lr in
  {3e-4, 1e-3} (warmup 1000 steps for CE + warmup and E1 + warmup, as in Table 1), chosen on
  `valid_em_all` over seed 0 (tuning runs evaluate only the first 2000 reference test graphs,
  which the choice never reads); tested on new seeds 11-15 at every point with `test_em_all`
  on the 20,000 reference test graphs, with PREREGISTERED fixed (and the prediction in
  CHANGELOG.md written) before any ran (the first test seeds, 1-5 / 1-3 / 1-3, are in the
  JSON of commit dae563d). On an AMD EPYC Zen 5 core a test seed takes about 3.5 min at
  4 x 256.
* path_star_budget: training budget at 2 x 128 (the axis the Table 1 section finds binding),
  G(2,3), 2500, 10,000 and 40,000 steps of batch 32 (1.6, 6.4 and 25.6 passes over the
  50,000 training graphs; about 1, 2.5 and 10 min a seed on the 2-core machine alone).
  Candidates and choice as for path_star; tested on new seeds 6-10 at every point, with
  PREREGISTERED fixed (and the prediction in CHANGELOG.md written) before any ran.
* label_copy: pretraining of the small GPT-2 (`configs/text_lm.py:cpu`, 16 rows x 64 tokens
  per step) for 200, 800 (the label-copy experiment's) and 3200 steps, each exported and
  fine-tuned on KJV label copy (`configs/label_copy.py:cpu`, 400 steps). Candidates: CE at lr
  in {3e-4, 1e-3}; CE + warmup and E1 + warmup at lr x warmup in {100, 200} steps. Chosen on
  `valid_em_hard` over seeds 0, 1; tested on seeds 2-6 with `test_em_hard`. The 3200-step
  point: pretraining 35 min, tuning runs about 100 s and the 5 test seeds of one method about
  250 s each on the 2-core machine alone (about 1.7x that beside another job). The test's
  seeds are fine-tuning seeds of one pretrained model per point.
* label_copy_models: the same axis and fine-tuning with the pretrained model as the test's
  unit: at each point six small GPT-2s, pretrained with seeds 0-5, and seed s of every run
  fine-tunes model s (`model.pretrained=.../small_gpt2_<n>/seed_{seed}`). Candidates: CE at lr
  in {1e-4, 3e-4, 1e-3, 3e-3} (equal budgets); the warmup arms as label_copy's. Chosen on
  `valid_em_hard` of model 0; tested on models 1-5, with PREREGISTERED fixed (and the
  prediction in CHANGELOG.md written) before any ran.

Stages: `tune` trains every candidate on the tuning seeds (`<out>/<task>_tune.json`, one
`el_jax.run.grid.Grid`); `all` (the default) also chooses per point and method on validation (`selection` in the
JSON, with each candidate's score), trains the chosen settings on the test seeds and compares
on test (`<out>/<task>.json`): per point E1 + warmup vs CE, E1 + warmup vs CE + warmup and CE +
warmup vs CE (difference of means, bootstrap 95% interval, permutation p over model seeds;
`comparisons.primary`: E1 + warmup vs CE, the paper's comparison, Holm over the points;
`comparisons.secondary`: the two controls, Holm over their tests); `report` writes the same
JSON from the runs that finished, training nothing (the points whose tuning and test runs all
finished, in order); `plot` draws `<out>/<task>.png` from the
JSON: the effect (difference of means with its interval) against the scale axis, and each
method's test accuracy per seed. Runs train in `runs/scale_trends/<task>/{tune,test}/`;
finished runs are read back, rows of an identical config reused, a killed run resumes from
its checkpoints. `--size=test` runs the same design on the `test` variants (seconds); `--points` runs only the
named scale points (give `--out`).

Results: `results/scale_trends/`, on the page
docs/results/seed000_equal_learning.md#scale-trends-where-does-the-effect-appear (generated by
`python -m el_jax.report`). Wall time at CPU size on the 2-core machine, the two tasks run side
by side: copy_task 74 min; path_star's tuning about 1.5 h on an earlier machine (a 4 x 256
tuning run 6 min), its test runs 51 min in two one-core processes on an AMD EPYC Zen 5;
label_copy_models' 200- and 800-step points 70 min in two one-core processes beside other
jobs; its 3200-step point about 2.5 h in two one-core processes on an AMD EPYC Zen 4 (six
pretrainings of 43-48 min, twelve tuning runs of about 70 s, the test 6-7 min). Command:
`python experiments/scale_trends.py --task=copy_task`.
"""
import argparse
import dataclasses
import itertools
import math
import os
import shlex

from el_jax.run import cli
from el_jax.run import grid as grid_lib
from el_jax.run import runner
from el_jax.report import stats
from el_jax.infra import workdir as wd

OUT = os.path.join("results", "scale_trends")
RUNS_DIR = os.path.join("runs", "scale_trends")
METHODS = ("ce", "ce_warmup", "e1_warmup")
METHOD_NAMES = {"ce": "CE", "ce_warmup": "CE + warmup", "e1_warmup": "E1 + warmup"}
# The comparisons at every point (treatment, baseline). The paper's comparison, E1 + warmup
# against CE, is the primary family (one test per point, Holm over the points); the two
# controls are the secondary family (Holm over their tests at every point).
PRIMARY = (("e1_warmup", "ce"),)
SECONDARY = (("e1_warmup", "ce_warmup"), ("ce_warmup", "ce"))
PAIRS = PRIMARY + SECONDARY
FAMILIES = (("primary", PRIMARY), ("secondary", SECONDARY))
# The trend test, fixed before the next runs (issue 34): the points above were run before it,
# so reading a trend off them is post hoc. One number per task: the least-squares slope of
# mean(E1 + warmup) - mean(CE) on the test metric against log2 of the scale axis, with a 95%
# percentile bootstrap interval resampling each arm's test seeds at each point
# (el_jax.report.stats.trend_slope). A trend is claimed only where the interval excludes 0 and the
# design holds: >= 3 points, >= 5 test seeds per arm and point, and every arm given the same
# number of tuning candidates. `trend_test` in the JSON says which conditions a run met.
PREREGISTERED = {"statistic": "slope of mean(e1_warmup) - mean(ce) against log2(x)",
                 "interval": "95% percentile bootstrap over each arm's test seeds per point",
                 "claim": "the interval excludes 0", "min_points": 3,
                 "min_test_seeds": 5, "equal_tuning_budgets": True}


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
  # Every test run made after PREREGISTERED was fixed (2026-11-29): its trend test is not
  # post hoc (the copy task's test seeds 7-11 with CE's four candidates).
  fixed_before_test_runs: bool = False
  # What pairs seed s across the arms beyond its data (label_copy_models: the pretrained model
  # every arm's seed s fine-tunes): the trend then adds the paired test (`paired_trend`).
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


def design(task, size="cpu", runs_dir=RUNS_DIR):
  """The `Design` of `task` at `size` ("cpu": the committed results; "test": seconds); a
  task that pretrains (label_copy) keeps its checkpoints under `runs_dir`."""
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
    cands = _lr_warmup(lrs, (warmup,))
    return Design(
        config="path_star", variant=size, axis="model size (layers x width; GPT-mini is 6 x 384)",
        points=[(f"{l}x{d}", l * d * d, {"model.num_layers": l, "model.embed_dim": d,
                                           "model.num_heads": h}) for l, d, h in shapes],
        candidates=cands, tune_seeds=tune_seeds, test_seeds=test_seeds,
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
    # label_copy_models: the test unit is a pretrained model. Every seed s fine-tunes its own
    # small GPT-2, pretrained with seed s (`model.pretrained` ".../seed_{seed}"): the choice
    # on model 0, the test on models 1-5; CE at as many learning rates as the warmup arms'
    # lr x warmup candidates (equal budgets). Fixed with its prediction before any test run.
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
  raise ValueError(f"unknown task {task!r}; valid: {TASKS}")


TASKS = ("copy_task", "path_star", "path_star_budget", "label_copy", "label_copy_models")


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
  """{point: {method: {"chosen": candidate name, "overrides", "scores": {name: mean}}}}: the
  candidate with the highest mean validation metric (the first listed on a tie)."""
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
      best = max(range(len(cands)), key=lambda i: (scores[cand_name(cands[i])], -i))
      out[pname][method] = {"chosen": cand_name(cands[best]), "overrides": dict(cands[best]),
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
    r = g.rows[label]
    m = r["aggregate"]
    print(f"{what} {label:40s} " + " ".join(
        f"{k}={m[k]['mean']:.3f}" for k in sorted(m) if k.endswith(("em_hard", "em_all"))
        and k.startswith(("valid", "test"))) + f" ({r['seconds']:.0f} s)", flush=True)
    g.write()  # progress is kept after each run
  return all(label in g.rows for label in labels)


def trend(points, comparisons):
  """Per point, each pair's comparison (from the grid's families), in point order."""
  by = {(c["a"], c["b"]): {**c, "family": fam} for fam, cs in comparisons.items() for c in cs}
  out = []
  for pname, x, _ in points:
    entry = {"point": pname, "x": x}
    for a, b in PAIRS:
      c = by.get((f"{pname} {a}", f"{pname} {b}"))
      if c is not None:
        entry[f"{a}_vs_{b}"] = {k: c[k] for k in ("diff", "ci95", "p_value", "p_holm", "family",
                                                   "n_a", "n_b", "mean_a", "mean_b")}
    out.append(entry)
  return out


def paired_trend(d, done, rows, entries):
  """Where the arms' seed s share a unit (`d.paired_unit`), adds to each point's entry of
  `entries` E1 + warmup against CE paired by seed (`stats.paired_compare`: sign flip over the
  units, its floor), Holm over the points: a secondary reading beside the fixed unpaired one."""
  if not d.paired_unit:
    return entries
  cs = [stats.paired_compare(rows[f"{p} e1_warmup"]["per_seed"][d.test_metric],
                             rows[f"{p} ce"]["per_seed"][d.test_metric]) for p, _, _ in done]
  for e, c, q in zip(entries, cs, stats.holm([c["p_value"] for c in cs])):
    e["e1_warmup_vs_ce_paired"] = {**c, "p_holm": q, "unit": d.paired_unit}
  return entries


def trend_test(d, done, rows):
  """PREREGISTERED's test on the finished points (None below 3), with the conditions met."""
  if len(done) < PREREGISTERED["min_points"]:
    return None
  a = [rows[f"{p} e1_warmup"]["per_seed"][d.test_metric] for p, _, _ in done]
  b = [rows[f"{p} ce"]["per_seed"][d.test_metric] for p, _, _ in done]
  t = stats.trend_slope([x for _, x, _ in done], a, b)
  k = math.log(2)
  budgets = {m: len(cs) for m, cs in d.candidates.items()}
  return {"design": PREREGISTERED,
          "fixed_before_test_runs": d.fixed_before_test_runs,
          "slope_per_doubling": k * t["slope"],
          "ci95_per_doubling": [k * x for x in t["ci95"]], "diffs": t["diffs"],
          "conditions": {"min_test_seeds": t["n_seeds_min"] >= PREREGISTERED["min_test_seeds"],
                         "equal_tuning_budgets": len(set(budgets.values())) == 1},
          "claimed": t["decided"] and t["n_seeds_min"] >= PREREGISTERED["min_test_seeds"]
                     and len(set(budgets.values())) == 1}


def run_task(task, size="cpu", out=OUT, runs_dir=RUNS_DIR, stage="all", command=None,
             points=None):
  """Tunes, chooses, tests and compares (`stage="tune"`: only the tuning runs) the scale
  points of `task` (`points`: only those named); writes the JSON and the figure, returns the
  JSON's content."""
  d = design(task, size, runs_dir)
  if points:
    names = [p[0] for p in d.points]
    unknown = [p for p in points if p not in names]
    if unknown:
      raise SystemExit(f"error: unknown points {unknown}; the {task} points at {size} size: "
                       f"{names}")
    d.points = [p for p in d.points if p[0] in points]
  command = command or f"python experiments/scale_trends.py --task={task}"
  meta = {"task": task, "size": size, "axis": d.axis, "command": command,
          "select_metric": d.select_metric, "test_metric": d.test_metric,
          "tune_seeds": list(d.tune_seeds), "test_seeds": {k: list(v) for k, v in
                                                           d.test_seeds.items()},
          "candidates": {m: [cand_name(c) for c in cs] for m, cs in d.candidates.items()},
          "chance": d.chance, "paper": d.paper}
  tg = tune_grid(d, out, runs_dir, task)
  tg.meta.update(meta, stage="tune")
  g = grid_lib.Grid(os.path.join(out, f"{task}.json"),
                    runs_dir=os.path.join(runs_dir, task, "test"))
  g.meta.update(meta, stage="test", selection={}, trend=[])
  train = stage != "report"
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
      break  # stage report: this point's tuning has not finished
    if stage == "tune":
      continue
    chosen = select(dataclasses.replace(d, points=[point]), list(tg.rows.values()))
    add_test_runs(g, d, point, chosen[pname])
    test_labels = [f"{pname} {m}" for m in METHODS]
    if not prepared and not all(_finished(g, l) for l in test_labels):
      d.prepare(pname)
    if not _run_all(g, "test", test_labels, train):
      break
    # The JSON's selection, comparisons and trend cover the points whose test runs finished.
    g.meta["selection"].update(chosen)
    done = [p for p in d.points if p[0] in g.meta["selection"]]
    for family, pairs in FAMILIES:
      g.compare([(f"{p} {a}", f"{p} {b}") for p, _, _ in done for a, b in pairs],
                d.test_metric, family=family)
    g.meta["trend"] = paired_trend(d, done, g.rows, trend(done, g.comparisons))
    g.meta["trend_test"] = trend_test(d, done, g.rows)
    doc = g.write()
    plot(doc, os.path.join(out, f"{task}.png"))
  tune_doc = tg.write()
  if stage == "tune":
    return tune_doc
  for e in doc["trend"]:
    c = e["e1_warmup_vs_ce"]
    print(f"{e['point']:8s} E1 + warmup - CE = {c['diff']:+.3f} [{c['ci95'][0]:+.3f}, "
          f"{c['ci95'][1]:+.3f}] p = {c['p_value']:.2g} (Holm {c['p_holm']:.2g})")
  return doc


def plot(doc, path):
  """Left: each comparison's difference of means with its 95% interval against the axis;
  right: each method's per-seed test metric per point."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  tr = doc["trend"]
  xs = list(range(len(tr)))
  names = [e["point"] for e in tr]
  ticks = [f"{e['point']}\n({e['x']:,})" for e in tr]
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
  for i, (a, b) in enumerate(PAIRS):
    key = f"{a}_vs_{b}"
    pts = [(x, e[key]) for x, e in zip(xs, tr) if key in e]
    if not pts:
      continue
    off = (i - 1) * 0.08
    ax1.errorbar([x + off for x, _ in pts], [c["diff"] for _, c in pts],
                 yerr=[[c["diff"] - c["ci95"][0] for _, c in pts],
                       [c["ci95"][1] - c["diff"] for _, c in pts]],
                 marker="o", capsize=3, label=f"{METHOD_NAMES[a]} - {METHOD_NAMES[b]}")
  ax1.axhline(0, color="gray", lw=0.8)
  ax1.set_xticks(xs, ticks)
  ax1.set_xlabel(doc["axis"])
  ax1.set_ylabel(f"difference of mean {doc['test_metric']} (95% bootstrap)")
  ax1.legend(fontsize=8)
  ax1.set_title(f"{doc['task']}: effect against scale (test seeds)")
  ax2.set_title("each method at its setting chosen on validation")
  rows = {r["label"]: r for r in doc["rows"]}
  for i, m in enumerate(METHODS):
    off = (i - 1) * 0.12
    for x, name in zip(xs, names):
      r = rows.get(f"{name} {m}")
      if r is None:
        continue
      v = r["per_seed"][doc["test_metric"]]
      ax2.scatter([x + off] * len(v), v, s=12, color=f"C{i}", alpha=0.6)
      ax2.plot([x + off - 0.04, x + off + 0.04], [sum(v) / len(v)] * 2, color=f"C{i}", lw=2,
               label=METHOD_NAMES[m] if x == 0 else None)
  if doc.get("chance") is not None:
    ax2.axhline(doc["chance"], color="gray", ls=":", lw=0.8, label="chance")
  ax2.set_xticks(xs, ticks)
  ax2.set_xlabel(doc["axis"])
  ax2.set_ylabel(f"{doc['test_metric']} per seed (bar: mean)")
  ax2.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--task", required=True, choices=TASKS)
  ap.add_argument("--stage", default="all", choices=("all", "tune", "report", "plot"))
  ap.add_argument("--size", default="cpu", choices=("cpu", "test"))
  ap.add_argument("--out", default=None, help=f"results folder (default {OUT} at cpu size)")
  ap.add_argument("--runs_dir", default=RUNS_DIR)
  ap.add_argument("--points", nargs="+", default=None, metavar="POINT",
                  help="only these scale points (e.g. k=1; the JSON then holds only them: give "
                       "--out)")
  args = ap.parse_args(argv)
  if args.points and args.out is None:
    ap.error(f"--points writes a JSON with only those points: give --out (not {OUT})")
  if args.size == "test" and args.out is None:
    ap.error("--size=test needs --out (the committed results are cpu size)")
  out = args.out or OUT
  os.makedirs(out, exist_ok=True)
  if args.stage == "plot":
    path = os.path.join(out, f"{args.task}.json")
    if not os.path.exists(path):
      raise SystemExit(f"error: {path} does not exist; run --stage=all first")
    plot(wd.read_json(path), os.path.join(out, f"{args.task}.png"))
    return
  command = shlex.join(["python", "experiments/scale_trends.py", f"--task={args.task}"]
                       + ([f"--size={args.size}"] if args.size != "cpu" else [])
                       + (["--points", *args.points] if args.points else []))
  run_task(args.task, args.size, out, args.runs_dir, args.stage, command, args.points)


if __name__ == "__main__":
  cli.script(main)
