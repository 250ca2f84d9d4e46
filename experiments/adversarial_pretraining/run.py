"""The runs and measurements of Tables 1-2 (config.py names the fields).

One `el_jax.run.grid.Grid` on configs/<language>_mlm.py:<size> (with the HMM's data and
`pretrain`'s overrides as experiments/mlm_flatness names them; each run in
`<runs_dir>/<label>`, finished runs reused):

* the normal AdamW run (model seeds `normal_seeds`), and
* the adversarial run of each weight of `weights` (model seeds `seeds`): the same recipe with
  `adversarial.enabled` (MLM loss minus weight x the squared loss, on D2, of a ridge head
  fitted on D1, both drawn from task `adversarial.task`'s training set). The weight is chosen
  on the valid split by a pilot: from the largest down, each weight's first `pilot_steps` steps
  are trained (every seed; `train.stop_at_step`, resumable) until one's valid MLM loss there
  (mean over the seeds) is within `pilot_tol` nats of the normal run's at the same step; that
  one is trained to the end (the smallest if none is; flagged in the JSON).

Then, on the final checkpoint of every model seed of `seeds`, for both arms, and on each normal
run's saved checkpoint whose valid loss is closest to its seed's adversarial model's
(`adamw_matched`: the comparison at equal pre-training loss):

* the pre-training losses (the eval rows of metrics.jsonl);
* linear probes on each task (`mlm_measure.Measurer.probe_features`: 5 probe seeds, the
  epoch, learning rate and normalisation chosen on valid per model);
* Tr(H) by App. B.1 (labels sampled from the model; std over `flat_reps` repetitions) and by
  Hutchinson probes of the exact Hessian;
* the adversary's own objective: the ridge head's mean D2 squared loss over `d2_draws` draws
  of (D1, D2) from the training set;

and the lookup table's probe (the exact conditionals as features; its MLM loss is the
optimum), and the sanity rows (majority class, Bayes, each seed's random init).

Writes `<results_dir>/<table>`: `models` (per arm, {model seed: measurements}),
`lookup_table`, `sanity`, `pilot`, the adversary's and the measurements' settings, the grid's
`rows` of the two trained runs, `experiment_config` (this config). The comparisons and means
are the analysis's (`analysis.py`), the figure its `plot`.
"""
import dataclasses
import os
import time
import types

import numpy as np

from el_jax.core import adversarial
from el_jax.core import probe
from el_jax.infra import checkpoint
from el_jax.infra import metrics as metrics_lib
from el_jax.infra import provenance
from el_jax.infra import workdir as wd
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import mlm_measure
from el_jax.run import runner

from experiments.adversarial_pretraining import analysis as analysis_lib

COMMAND = "python -m el_jax.experiment --config=experiments/adversarial_pretraining/config.py"
EVAL_KEYS = ("valid_mlm_loss", "valid_gap", "valid_kl", "valid_true_entropy", "test_mlm_loss",
             "test_gap", "test_kl", "train_mlm_loss")
# Per size, the overrides of both arms: `test` evaluates only at its last step, so twice as
# many steps leave room for a pilot.
SIZE_OVERRIDES = {"paper": {}, "cpu": {}, "test": {"train.num_steps": 60}}
TASKS = {"pcfg": "A,B", "hmm": "10,6"}  # the default probe tasks (the paper's of each language)
DEFAULT_TASK = {"pcfg": "A", "hmm": "10"}  # the language configs' adversarial.task
ARMS = ("adamw", "adamw_matched", "adversarial")
MEASURE_SIZES = ("probe_valid", "probe_test", "probe_epochs", "flat_inputs", "flat_reps",
                 "fisher_samples", "hutchinson_probes")


def settings(config):
  """The config checked (one line per mistake, before any training) and completed: seeds and
  weights as sorted lists, the tasks, `extra` (the parsed `pretrain`)."""
  s = types.SimpleNamespace(**config.to_dict())
  if s.size not in SIZE_OVERRIDES:
    raise ValueError(f"config.size={s.size!r}; valid: {', '.join(SIZE_OVERRIDES)}")
  if s.language not in TASKS:
    raise ValueError(f"config.language={s.language!r}; valid: {', '.join(TASKS)}")
  if s.hmm not in mlm_measure.HMMS:
    raise ValueError(f"config.hmm={s.hmm!r}; valid: {', '.join(sorted(mlm_measure.HMMS))}")
  if s.table not in analysis_lib.TABLES.values():
    raise ValueError(f"config.table={s.table!r}: the analysis reads "
                     f"{', '.join(analysis_lib.TABLES.values())}")
  s.seeds = [int(x) for x in s.seeds]
  s.normal_seeds = [int(x) for x in s.normal_seeds] or list(s.seeds)
  if not s.seeds or len(set(s.seeds)) != len(s.seeds) or min(s.seeds) < 0:
    raise ValueError(f"config.seeds={tuple(s.seeds)} must be distinct integers >= 0")
  if not set(s.seeds) <= set(s.normal_seeds):
    raise ValueError(f"config.normal_seeds={tuple(s.normal_seeds)} must contain every seed of "
                     f"config.seeds={tuple(s.seeds)} (the pairs)")
  s.extra = mlm_measure.parse_pretrain(s.pretrain)
  s.tasks = s.tasks or TASKS[s.language]
  s.adv_task = s.adv_task or DEFAULT_TASK[s.language]
  if s.adv_task not in s.tasks.split(","):
    raise ValueError(f"config.adv_task={s.adv_task!r} must be one of config.tasks={s.tasks!r} "
                     f"(its probe is the comparison)")
  try:
    probe.parse_grid(s.probe_lrs, "0", s.probe_normalizations)
  except ValueError as e:
    raise ValueError(f"config.probe_lrs={s.probe_lrs!r} / config.probe_normalizations="
                     f"{s.probe_normalizations!r}: {e}") from None
  s.weights = sorted({float(w) for w in s.weights})
  if not s.weights or min(s.weights) < 0:
    raise ValueError(f"config.weights={tuple(s.weights)} must be numbers >= 0")
  return s


def prefix(s):
  """The run labels' prefix (`mlm_measure.run_prefix`: the names of experiments/mlm_flatness's
  runs, so that a finished normal run there is reused)."""
  return mlm_measure.run_prefix(s.language, s.hmm)


def normal_label(s):
  """"pcfg_adamw" for the committed PCFG table; with `pretrain` the label mlm_flatness gives
  the same pre-training run."""
  return f"{prefix(s)}_adamw{mlm_measure.pretrain_suffix(s.extra)}"


def adversarial_label(s, weight):
  return f"{prefix(s)}_adversarial_w{weight:g}{mlm_measure.pretrain_suffix(s.extra)}"


def make_grid(s, path):
  """The normal run and the adversarial run of each weight, in `<runs_dir>/<label>`; the pilot
  decides which adversarial run trains to the end."""
  g = grid_lib.Grid(path, runs_dir=s.runs_dir, reuse_rows=False)
  config_name = f"{s.language}_mlm"
  base = {**SIZE_OVERRIDES[s.size], **mlm_measure.hmm_overrides(s.language, s.hmm), **s.extra}
  g.add(normal_label(s), config_name, s.size, base, seeds=s.normal_seeds, model="adamw")
  adv = {"adversarial.enabled": True}
  if s.adv_task != DEFAULT_TASK[s.language]:
    adv["adversarial.task"] = s.adv_task
  if s.probe_train:
    adv["adversarial.num_train"] = s.probe_train
  for w in s.weights:
    g.add(adversarial_label(s, w), config_name, s.size,
          {**base, **adv, "adversarial.weight": float(w)}, seeds=s.seeds, model="adversarial")
  return g


def eval_row(workdir, step, seed):
  return mlm_measure.eval_row(workdir, seed, step, EVAL_KEYS)


def mean_valid_loss(workdir, step, seeds):
  """The valid MLM loss at `step`, averaged over the model seeds."""
  return float(np.mean([eval_row(workdir, step, x)["valid_mlm_loss"] for x in seeds]))


# ----------------------------------------------------------------------------
# Training: normal run, pilot, chosen adversarial run


def pilot(s, g, normal_dir):
  """{weight: valid loss at `pilot_steps` (mean over the model seeds) and its difference to
  the normal run's}; the choice. A trial trains the first `pilot_steps` of every seed of that
  weight's grid run, in its folder (`train.stop_at_step`: resumable; `Grid.run` trains only
  whole runs)."""
  start = mean_valid_loss(normal_dir, s.pilot_steps, s.seeds)
  trials = {}
  for w in sorted(s.weights, reverse=True):  # the largest first: stop at the first within tol
    label = adversarial_label(s, w)
    cfg = g.runs[label].config()
    d = os.path.join(g.runs_dir, grid_lib.slug(label))
    if runner.finished_summary(cfg, d) is None:
      cfg.train.stop_at_step = s.pilot_steps  # the first steps of the full run (resumable)
      for seed in s.seeds:  # a sequential run stops after the first seed it stops
        cfg.seeds = (seed,)
        runner.run_or_reuse(cfg, d)
    loss = mean_valid_loss(d, s.pilot_steps, s.seeds)
    trials[f"{w:g}"] = {"weight": w, "valid_mlm_loss": loss, "minus_normal": loss - start,
                        "within_tol": bool(loss - start <= s.pilot_tol)}
    print(f"pilot weight {w:g}: valid MLM loss {loss:.4f} at step {s.pilot_steps} "
          f"({loss - start:+.4f} vs normal)", flush=True)
    if trials[f"{w:g}"]["within_tol"]:
      break
  ok = [t["weight"] for t in trials.values() if t["within_tol"]]
  chosen = max(ok) if ok else min(s.weights)
  return {"steps": s.pilot_steps, "tol": s.pilot_tol, "normal_valid_mlm_loss": start,
          "trials": trials, "chosen_weight": chosen, "none_within_tol": not ok,
          "seeds": list(s.seeds),
          "rule": "the largest weight whose valid MLM loss after `steps` steps (mean over the "
                  "model seeds) is within `tol` nats of the normal run's at that step (the "
                  "smallest if none is); weights are tried from the largest down, smaller ones "
                  "are not run once one passes"}


def adversary_curve(workdir, num_steps, seed):
  """Mean adv_d2_loss / loss of model seed `seed`'s train rows in the first and last tenth of
  training."""
  rows = [r for r in metrics_lib.read_rows(workdir)
          if r.get("kind") == "train" and r.get("seed") == seed]
  out = {}
  for name, lo, hi in (("first_tenth", 0, num_steps / 10), ("last_tenth", 0.9 * num_steps,
                                                             num_steps)):
    sel = [r for r in rows if lo < r["step"] <= hi]
    out[name] = {k: float(np.mean([r[k] for r in sel])) for k in
                 ("adv_d2_loss", "adv_d1_loss", "loss", "adv_grad_norm", "grad_norm")
                 if sel and k in sel[0]}
  return out


def train_time_s(workdir):
  """Seconds spent in training steps (metrics `time_s`, summed over resumed segments)."""
  total, last = 0.0, 0.0
  for r in metrics_lib.read_rows(workdir):
    if r.get("kind") != "train":
      continue
    if r["time_s"] < last:  # a resume restarts the clock
      total += last
    last = r["time_s"]
  return round(total + last, 1)


# ----------------------------------------------------------------------------
# Measurements


def d2_diagnostic(x, labels, num_classes, acfg, draws):
  """Mean and std over `draws` (D1, D2) draws of the ridge head's D2 and D1 squared losses
  on features `x` of the training set (the adversary's objective, measured)."""
  import jax
  import jax.numpy as jnp
  y = np.eye(num_classes, dtype=np.float32)[labels]
  fn = jax.jit(lambda a, b, c, d: adversarial.head_losses(a, b, c, d, float(acfg.ridge)))
  d2, d1 = [], []
  for r in range(draws):
    i1, i2 = adversarial.draw_subsets(jax.random.key(10_000 + r), x.shape[0],
                                      int(acfg.d1_size), int(acfg.d2_size))
    i1, i2 = np.asarray(i1), np.asarray(i2)
    a, b = fn(jnp.asarray(x[i1]), jnp.asarray(y[i1]), jnp.asarray(x[i2]), jnp.asarray(y[i2]))
    d2.append(float(a))
    d1.append(float(b))
  return {"d2_loss_mean": float(np.mean(d2)), "d2_loss_std": float(np.std(d2, ddof=1)),
          "d1_loss_mean": float(np.mean(d1)), "draws": draws}


def probe_all(m, feats_fn):
  """{task: probe result} for the downstream tasks of `m` (an `mlm_measure.Measurer`) with
  features from `feats_fn` (`Measurer.probe_features`: the probe's learning rate and
  normalisation chosen on valid per model from `probe_lrs` / `probe_normalizations`)."""
  out = {}
  for name, ds in m.tasks.items():
    r = out[name] = m.probe_features(ds, feats_fn)
    print(f"  probe task {name}: test acc {100 * r['test_acc_mean']:.2f} "
          f"({100 * r['test_acc_std']:.2f}), chosen {r['chosen']}", flush=True)
  return out


def measure(s, normal_cfg, adv_cfg, normal_dir, chosen_dir):
  """(models, lookup table, measurement settings, sanity rows) of the trained runs."""
  from el_jax.core.data import downstream
  a = adv_cfg.adversarial
  settings_ = mlm_measure.Settings(
      tasks=s.tasks, probe_train=int(a.num_train), probe_data_seed=int(a.data_seed),
      chunk=s.chunk, probe_lrs=s.probe_lrs, probe_normalizations=s.probe_normalizations,
      probe_cache=s.probe_cache, **{k: getattr(s, k) for k in MEASURE_SIZES})
  m = mlm_measure.Measurer(normal_cfg, settings_, s.language)
  # The probe of the adversary's task trains on the set the adversary drew D1 / D2 from.
  own = m.tasks[a.task].train
  check = adversarial.downstream_data(adv_cfg, m.task.language, m.task.context_len).train
  if not (np.array_equal(own.tokens, check.tokens) and np.array_equal(own.labels, check.labels)):
    raise RuntimeError("the probe's training set is not the adversary's")
  graphdef = m.trainer.graphdef
  steps = normal_cfg.train.num_steps

  def measure_model(label, d, step, seed):
    t0 = time.time()
    print(f"measuring {label} (model seed {seed}, {d}, step {step})", flush=True)
    params = m.params(d, step, seed)
    row = {"run": d, "seed": seed, "step": step, **eval_row(d, step, seed)}
    task, feats = m.tasks[a.task], {}

    def encode(ds):  # keeps the adversary task's training features for its diagnostic
      feats[id(ds)] = x = probe.encode(graphdef, params, ds.tokens, ds.segment_ids)
      return x
    row["probe"] = probe_all(m, encode)
    row["adversary_objective"] = d2_diagnostic(feats[id(task.train)], task.train.labels,
                                               task.num_classes, a, s.d2_draws)
    row.update(m.flatness(params, step))
    print(f"  Tr(H) B.1 {row['trace_b1']:.3f} +- {row['trace_b1_std']:.3f}, Hutchinson "
          f"{row['trace_hutchinson']:.3f} +- {row['trace_hutchinson_stderr']:.3f}; D2 loss "
          f"{row['adversary_objective']['d2_loss_mean']:.4f} ({time.time() - t0:.0f} s)",
          flush=True)
    return row

  models = {name: {"seeds": {}} for name in ARMS}
  for seed in s.seeds:
    k = str(seed)
    models["adamw"]["seeds"][k] = measure_model("adamw", normal_dir, steps, seed)
    adv = models["adversarial"]["seeds"][k] = measure_model("adversarial", chosen_dir, steps,
                                                            seed)
    # The normal run's saved checkpoint (same seed) whose valid loss is closest to the
    # adversarial model's: a comparison at (nearly) equal pre-training loss.
    target = adv["valid_mlm_loss"]
    saved = [(abs(eval_row(normal_dir, x, seed)["valid_mlm_loss"] - target), x)
             for x in checkpoint.checkpoint_steps(normal_dir, seed)
             if x % normal_cfg.train.eval_every == 0]
    matched = min(saved)[1] if saved else steps
    models["adamw_matched"]["seeds"][k] = (
        models["adamw"]["seeds"][k] if matched == steps else
        measure_model("adamw_matched", normal_dir, matched, seed))
  print("measuring the lookup table", flush=True)
  lang = m.task.language
  valid_opt = models["adamw"]["seeds"][str(s.seeds[0])]["valid_true_entropy"]
  lookup = {"valid_mlm_loss": valid_opt, "valid_gap": 0.0,
            "note": "the exact conditionals: its MLM loss is the optimum (valid true entropy)"}
  lookup["probe"] = probe_all(
      m, lambda ds: downstream.lookup_table_features(lang, ds.tokens, ds.lengths))
  # Sanity rows: majority class, Bayes (PCFG: 1, the label is the inside algorithm's argmax),
  # and the probe on the random init of every model seed (the lookup table is above).
  print("measuring the sanity rows (majority, Bayes, random init)", flush=True)
  sanity = m.sanity(tuple(s.seeds), lookup=False)
  return models, lookup, settings_, sanity


def run(config):
  """Trains (or reuses) both arms, measures them and writes `<results_dir>/<table>`; returns
  its content."""
  s = settings(config)
  t0 = time.time()
  path = os.path.join(s.results_dir, s.table)
  g = make_grid(s, path)
  normal = normal_label(s)
  normal_cfg = g.runs[normal].config()
  allowed = ("A", "B", "C") if s.language == "pcfg" else adversarial.tasks_of(normal_cfg.data)
  if not set(s.tasks.split(",")) <= set(allowed):
    raise ValueError(f"config.tasks={s.tasks!r}: the {s.language} tasks are "
                     f"{', '.join(allowed)}")
  every, n = normal_cfg.train.eval_every, normal_cfg.train.num_steps
  if not s.pilot_steps:
    s.pilot_steps = every * max(1, -(-n // (6 * every)))
  if s.pilot_steps % every or not 0 < s.pilot_steps < n:
    raise ValueError(f"config.pilot_steps={s.pilot_steps} must be a multiple of "
                     f"train.eval_every={every} below train.num_steps={n}")
  normal_dir = g.run([normal])[0]["workdir"]
  t_normal = time.time() - t0
  pil = pilot(s, g, normal_dir)
  chosen = adversarial_label(s, pil["chosen_weight"])
  g.run([chosen])
  adv_cfg, chosen_dir = g.runs[chosen].config(), g.rows[chosen]["workdir"]
  t_train = time.time() - t0
  models, lookup, measured, sanity = measure(s, normal_cfg, adv_cfg, normal_dir, chosen_dir)
  for name, d in (("adversarial", chosen_dir), ("adamw", normal_dir)):
    for seed in s.seeds:
      models[name]["seeds"][str(seed)]["training"] = adversary_curve(d, n, seed)
  result = {
      "size": s.size, "seeds": list(s.seeds), "normal_seeds": list(s.normal_seeds),
      "language": s.language, "hmm": s.hmm if s.language == "hmm" else None,
      "pretrain": s.extra, "tasks": s.tasks.split(","),
      "models": models, "lookup_table": lookup, "sanity": sanity, "pilot": pil,
      "adversarial": adv_cfg.adversarial.to_dict(),
      "config_adamw": g.rows[normal]["config"],
      "config_adversarial": g.rows[chosen]["config"],
      "measurement": dataclasses.asdict(measured),
      "command": COMMAND, "experiment_config": config_lib.config_dict(config),
      "ran_on": provenance.ran_on(),  # where the measurements ran
      "wall_s": {"total": round(time.time() - t0, 1), "training": round(t_train, 1),
                 "normal_run_or_reuse": round(t_normal, 1)},
      "train_time_s": {d: train_time_s(os.path.join(s.runs_dir, d)) for d in sorted(
          grid_lib.slug(label) for label in g.runs)
          if os.path.exists(os.path.join(s.runs_dir, d, "metrics.jsonl"))},
      "note": ("Trained runs are reused when finished (then wall_s.training counts only the "
               "rest; train_time_s is each run's own training time, summed over its seeds). " + (
                   "The pre-training losses are on this grammar's one-mask MLM, whose optimum "
                   "is ~4.19 nats, not the paper's 3.196 (README)." if s.language == "pcfg"
                   else "The paper's Table 1 is on its PCFG; this is its protocol on the HMM.")),
  }
  # The grid's rows of the normal and the chosen adversarial run (el_jax.run.grid).
  result["rows"] = g.document()["rows"]
  os.makedirs(os.path.dirname(path), exist_ok=True)
  wd.write_json(path, result, default=float)
  print(f"wrote {path}", flush=True)
  return result
