"""What the seed-003 page shows of the KJV runs: the corpus, per context length the
compatibility / separability of each d swept, the GD runs (one row per context length and d),
and the range of CE - H, cos(W_k, W_mm) and ||W*|| over those runs."""


def analyze(src, config):
  d = src.load("text.json")
  by_n = d["by_n"]
  dims = [s["d"] for s in next(iter(by_n.values()))["sweep"]]
  cells = {n: {s["d"]: s for s in b["sweep"]} for n, b in by_n.items()}
  sweep = {n: [{k: c[x][k] for k in ("compatible", "separable")} for x in dims]
           for n, c in cells.items()}
  gd = [{"n": n, "m": b["m"], "entropy": b["entropy"], "mean_support": b["mean_support"],
         "min_support": b["min_support"],
         "min_d_separable_and_compatible": b["min_d_separable_and_compatible"],
         **{k: g[k] for k in ("d", "steps", "gap", "cos_mm", "norm_W_star", "norm_W_mm")}}
        for n, b in by_n.items() for g in b["gd"]]
  span = {k: [min(g[k] for g in gd), max(g[k] for g in gd)]
          for k in ("gap", "cos_mm", "norm_W_star")}
  return {**{k: d[k] for k in ("corpus", "verses", "tokens", "V", "m", "unk_rate")},
          "dims": dims, "sweep": sweep, "gd": gd, "range": span,
          "ran_on": src.ran_on(["text.json"])}


def plot(analysis, src, config):
  """text.png: compatible and separable against d per context length, and CE - H along each
  GD run."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  out = src.load("text.json")
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
  for n, r in out["by_n"].items():
    axes[0].plot([x["d"] for x in r["sweep"]], [x["separable"] and x["compatible"]
                                                for x in r["sweep"]], "o-", label=f"n={n}")
    for g in r["gd"]:
      ks = [int(k) for k in g["gap_at"]]
      axes[1].loglog(np.maximum(ks, 1), list(g["gap_at"].values()), label=f"n={n}, d={g['d']}")
  axes[0].axvline(out["m"], color="0.6", ls=":")
  axes[0].set_xlabel("d (random context embeddings)")
  axes[0].set_title(f"KJV: compatible and separable (m={out['m']}, V={out['V']})", fontsize=9)
  axes[0].legend(fontsize=8)
  axes[1].set_xlabel("GD iteration")
  axes[1].set_title("CE - H", fontsize=9)
  axes[1].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(src.path("text.png"), dpi=90)
  plt.close(fig)
