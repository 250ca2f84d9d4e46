"""What the seed-003 page shows of the separability sweep: the table of fractions by |S_j| and
d / m (None where a cell was not run), and for each |S_j| (a string key) the smallest d / m from
which every draw is separable, at it and at every larger ratio swept."""


def separable_from(cells):
  """The smallest d / m from which every draw is separable at every larger ratio swept
  (`cells`: {d / m: fraction separable}); None if the largest ratio is not all separable."""
  out = None
  for q in sorted(cells, reverse=True):
    if cells[q] < 1.0:
      break
    out = q
  return out


def analyze(src, config):
  d = src.load("separability.json")
  rows = d["rows"]
  supports = sorted({r["support"] for r in rows})
  ratios = sorted({r["d_over_m"] for r in rows})
  cell = {(r["support"], r["d_over_m"]): r for r in rows}
  table = []
  for s in supports:
    cells = [{"separable": cell[s, q]["separable"], "compatible": cell[s, q]["compatible"]}
             if (s, q) in cell else None for q in ratios]
    table.append({"support": s, "cells": cells})
  return {"m": d["m"], "V": d["V"], "trials": d["trials"], "ratios": ratios, "table": table,
          "ran_on": src.ran_on(["separability.json"]),
          "separable_from": {str(s): separable_from({q: cell[s, q]["separable"] for q in ratios
                                                     if (s, q) in cell}) for s in supports}}


def plot(analysis, src, config):
  """separability.png: the fractions compatible and separable against d / m, a line per
  |S_j|."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  d = src.load("separability.json")
  rows = d["rows"]
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
  for s in sorted({r["support"] for r in rows}):
    rs = [r for r in rows if r["support"] == s]
    x = [r["d_over_m"] for r in rs]
    axes[0].plot(x, [r["compatible"] for r in rs], "o-", label=f"|S_j|={s}")
    axes[1].plot(x, [r["separable"] for r in rs], "o-", label=f"|S_j|={s}")
  for ax, t in zip(axes, ("NTP_H-compatible", "NTP-separable")):
    ax.axvline(1.0, color="0.6", ls=":")
    ax.set_xlabel("d / m")
    ax.set_title(f"{t} (m={d['m']}, V={d['V']}, {d['trials']} draws)", fontsize=9)
  axes[0].set_ylabel("fraction of instances")
  axes[1].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(src.path("separability.png"), dpi=90)
  plt.close(fig)
