r"""Fraction of random NTP instances that are NTP_H-compatible and NTP-separable vs d/m.

  .venv/bin/python experiments/ntp_separability.py  [--out=results/ntp --trials=20]

The paper's Lemma 1 says d > m (full-rank H) suffices for both; this sweep
shows where the transition actually happens for random Gaussian H and random
supports, and how it depends on |S_j|. Writes separability.json and .png.
"""
import argparse
import json
import os
import time

from tqdm import tqdm

from el_jax.ntp import data as data_lib
from el_jax.ntp import geometry
from el_jax import cli
from el_jax import workdir as wd


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="results/ntp")
  ap.add_argument("--m", type=int, default=20)
  ap.add_argument("--V", type=int, default=10)
  ap.add_argument("--supports", default="1,3,6")
  ap.add_argument("--ratios", default="0.1,0.25,0.4,0.5,0.6,0.75,0.9,1.0,1.05,1.25,1.5,2.0")
  ap.add_argument("--trials", type=int, default=20)
  a = ap.parse_args(argv)
  os.makedirs(a.out, exist_ok=True)
  ratios = [float(r) for r in a.ratios.split(",")]
  rows = []
  t0 = time.time()
  for s in [int(x) for x in a.supports.split(",")]:
    for r in tqdm(ratios, desc=f"|S|={s}"):
      d = max(1, int(round(r * a.m)))
      comp = sep = both = 0
      for t in range(a.trials):
        ds = data_lib.random_instance(a.m, d, a.V, s, seed=1000 * s + t)
        c = geometry.is_entropy_compatible(ds.H, ds.P)
        p, _ = geometry.is_ntp_separable(ds.H, ds.P)
        comp, sep, both = comp + c, sep + p, both + (c and p)
      rows.append(dict(support=s, d=d, d_over_m=d / a.m, compatible=comp / a.trials,
                       separable=sep / a.trials, both=both / a.trials))
  out = dict(m=a.m, V=a.V, trials=a.trials, rows=rows, seconds=time.time() - t0)
  wd.write_json(os.path.join(a.out, "separability.json"), out)

  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
  for s in sorted({r["support"] for r in rows}):
    rs = [r for r in rows if r["support"] == s]
    x = [r["d_over_m"] for r in rs]
    axes[0].plot(x, [r["compatible"] for r in rs], "o-", label=f"|S_j|={s}")
    axes[1].plot(x, [r["separable"] for r in rs], "o-", label=f"|S_j|={s}")
  for ax, t in zip(axes, ("NTP_H-compatible", "NTP-separable")):
    ax.axvline(1.0, color="0.6", ls=":")
    ax.set_xlabel("d / m")
    ax.set_title(f"{t} (m={a.m}, V={a.V}, {a.trials} draws)", fontsize=9)
  axes[0].set_ylabel("fraction of instances")
  axes[1].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(os.path.join(a.out, "separability.png"), dpi=90)
  for r in rows:
    print(json.dumps(r))


if __name__ == "__main__":
  cli.script(main)
