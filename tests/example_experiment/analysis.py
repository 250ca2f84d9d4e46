"""The alignment of each draw, and its spread (NumPy only)."""
import numpy as np


def analyze(src, config):
  rows = src.load("grid.json")["rows"]
  cos = {r["label"]: r["per_seed"]["cos_mm"][0] for r in rows}
  return {"cos_mm": cos, "spread": float(np.ptp(list(cos.values()))),
          "ran_on": src.ran_on(["grid.json"])}
