"""`train_and_evaluate` for `config.task == "ntp_linear"` (see configs/ntp_linear.py).

Builds the instance, checks NTP_H-compatibility and NTP-separability, solves
for W* and W_mm, trains W with each configured optimizer and writes:

  workdir/metrics.jsonl  one object per logged iteration and optimizer;
  workdir/summary.json   instance facts, solver outputs, final metrics;
  workdir/*.png          Fig. 1 (if d = 2), optimizer comparison, reg. path.
"""
import json
import os
import time

import numpy as np

from el_jax.ntp import data as data_lib
from el_jax.ntp import dynamics
from el_jax.ntp import geometry
from el_jax.ntp import plots


def parse_floats(s):
  """"1,3,10" -> [1.0, 3.0, 10.0] ("" -> [])."""
  return [float(x) for x in str(s).split(",") if x.strip()]


def build_data(config):
  """The NTP instance a config describes (kind: fig1, random or text)."""
  dc = config.data
  if dc.kind == "fig1":
    return data_lib.fig1_instance(seed=config.seed)
  if dc.kind == "random":
    return data_lib.random_instance(dc.m, dc.d, dc.V, dc.support_size, seed=config.seed,
                                    n_samples=dc.n_samples or None)
  if dc.kind == "text":
    from el_jax.ntp import text
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


def train_and_evaluate(config, workdir):
  """Runs the config; returns the summary dict (also written to summary.json)."""
  os.makedirs(workdir, exist_ok=True)
  ds = build_data(config)
  info, svm = describe(ds)
  summary = dict(config=config.to_dict(), instance=info, runs={})
  if not (info["compatible"] and info["separable"]):
    # Nothing to track: W* or W_mm does not exist. Still report why.
    print(f"instance not compatible/separable: {info}")
  else:
    prob = dynamics.targets(ds, svm)
    hists = {}
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
      for name in [s.strip() for s in config.optimizers.split(",") if s.strip()]:
        lr = float(config.lr[name])
        t0 = time.perf_counter()
        W, h = dynamics.train(prob, name, lr=lr, steps=config.steps, log_every=config.log_every,
                              x64=config.x64)
        dt = time.perf_counter() - t0
        hists[f"{name} lr={lr:g}"] = h
        for i in range(len(h["step"])):
          f.write(json.dumps({"optimizer": name, "lr": lr, "step": int(h["step"][i]),
                              **{k: float(h[k][i]) for k in dynamics.METRICS}}) + "\n")
        summary["runs"][name] = dict(lr=lr, steps=config.steps, time_s=dt,
                                     **{k: float(h[k][-1]) for k in dynamics.METRICS})
        if name == "gd" and ds.d == 2:
          plots.fig1(ds.H, ds.P, W, h, os.path.join(workdir, "fig1.png"))
    plots.compare(hists, os.path.join(workdir, "convergence.png"),
                  f"m={ds.m}, d={ds.d}, V={ds.V}, H={info['entropy']:.4f}")
    Bs = parse_floats(config.path_bounds)
    if Bs:
      _, ms = dynamics.regularization_path(prob, np.asarray(Bs), steps=config.path_steps,
                                           x64=config.x64)
      summary["reg_path"] = dict(B=Bs, **{k: ms[k].tolist() for k in dynamics.METRICS})
      plots.reg_path(np.asarray(Bs), ms, os.path.join(workdir, "reg_path.png"))
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  for name, r in summary["runs"].items():
    print(f"{name}: CE-H={r['gap']:.3g} ||W||={r['norm']:.3g} cos(W,W_mm)={r['cos_mm']:.4f} "
          f"cos(W-W*,W_mm)={r['cos_diff']:.4f} ||P_F W - W*||={r['dist_f']:.3g}")
  return summary
