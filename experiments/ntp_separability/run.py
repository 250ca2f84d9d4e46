"""The sweep: for each |S_j| and d / m of the config, `trials` random instances tested for
NTP_H-compatibility and NTP-separability; one row per cell in `<results_dir>/separability.json`
({m, V, trials, rows, seconds}; a row: support, d, d_over_m and the fractions compatible,
separable and both). No training: every instance is solved exactly, in seconds, so the sweep
is recomputed on each run rather than resumed."""
import os
import sys
import time

from el_jax.core.ntp import data as data_lib
from el_jax.core.ntp import geometry
from el_jax.infra import workdir as wd

FILE = "separability.json"


def cell(m, d, V, support, trials):
  """The fractions of `trials` random instances (seeds 1000 support + t) that are compatible,
  separable and both."""
  comp = sep = both = 0
  for t in range(trials):
    ds = data_lib.random_instance(m, d, V, support, seed=1000 * support + t)
    c = geometry.is_entropy_compatible(ds.H, ds.P)
    p, _ = geometry.is_ntp_separable(ds.H, ds.P)
    comp, sep, both = comp + c, sep + p, both + (c and p)
  return {"compatible": comp / trials, "separable": sep / trials, "both": both / trials}


def run(config):
  t0 = time.time()
  rows = []
  for s in config.supports:
    for r in config.ratios:
      d = max(1, int(round(r * config.m)))
      rows.append({"support": int(s), "d": d, "d_over_m": d / config.m,
                   **cell(config.m, d, config.V, int(s), config.trials)})
    print(f"|S_j| = {s}: {len(config.ratios)} ratios, {time.time() - t0:.0f} s", file=sys.stderr)
  doc = {"m": config.m, "V": config.V, "trials": config.trials, "rows": rows,
         "seconds": time.time() - t0}
  os.makedirs(config.results_dir, exist_ok=True)
  wd.write_json(os.path.join(config.results_dir, FILE), doc)
  return doc
