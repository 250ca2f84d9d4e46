r"""NTP-SVM solve time: the appendix size (target <= 0.5 s) and a scaling table.

  python -m el_jax.tools.ntp_bench [--repeats=5] [--max_dual=3000] [--max_time=1800]
                             [--old=all|largest|none] [--ms=50,...] [--Vs=10,...]

Times are wall-clock seconds of `geometry.ntp_svm` (validation, dual build,
solver, polish), median over repeats. The scaling grid is m in {50..1000} x
V in {10, 100, 1000} with d = m + 10 (so Lemma 1 guarantees separability) and
|S_j| = 6. The dual has n = sum_j (V - |S_j|) variables and a dense n x n
Hessian, and F's Gram matrix is R x R with R = sum_j (|S_j| - 1). Sizes with n
and R <= --max_dual use Clarabel (exact, after one warm-up call). Larger ones
use the first-order solvers, one run each on the same instance, no warm-up,
stopped at relative duality gap 1e-6 or --max_time seconds:
`method="first_order"` (FISTA on the dual in the coefficients of W = Y^T H,
the default) and, with --old, `method="first_order_lam"` (the earlier FISTA in
the multipliers, whose iterations grow with V) right after it, so that their
ratio is measured under the same machine load. Each row shows per solver the
total seconds, the solver's share ("solve_s": setup and iterations, without
the final active-set polish), iterations and the certified gap (P - D) / P of
the solver's last iterate; for the new solver also the min constraint before
the final rescaling W <- W / min constraint (after it, every constraint is
>= 1), the max equality violation, and whether the exact active-set polish
replaced W ("pol": only when R + active constraints <= --max_dual). "speedup"
is old / new total seconds and "dW" is ||W_new - W_old|| / ||W_old||. The last
line is a JSON summary.
"""
import os

# One BLAS thread: the machine is shared, and oversubscribed BLAS threads made
# the same solve 5-10x slower in our measurements.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
  os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from el_jax.core.ntp import data as data_lib  # noqa: E402
from el_jax.core.ntp import geometry  # noqa: E402
from el_jax.run import cli  # noqa: E402
from el_jax.infra import provenance  # noqa: E402

APPENDIX = dict(m=50, d=60, V=10, s=6)
# --old choices: compare with the earlier first-order solver at every
# first-order size, only at the largest one of the grid, or nowhere.
OLD_CHOICES = ("all", "largest", "none")


def instance(m, d, V, s, seed=0):
  return data_lib.random_instance(m, d, V, s, seed=seed, n_samples=5000 if m <= 5000 else None)


def time_svm(ds, s, repeats, method="clarabel", max_time=float("inf")):
  """(row dict, W) of `repeats` solves of instance `ds` (support size s) with `method`."""
  m, d, V = ds.m, ds.d, ds.V
  kw = dict(method=method, max_time=max_time)
  if method == "clarabel":
    geometry.ntp_svm(ds.H, ds.P, **kw)  # warm-up (imports, allocator)
  tot, solver = [], []
  for _ in range(repeats):
    t0 = time.perf_counter()
    r = geometry.ntp_svm(ds.H, ds.P, **kw)
    tot.append(time.perf_counter() - t0)
    solver.append(r.solve_time)
  row = dict(m=m, d=d, V=V, support=s, n_dual=int(m * (V - s)), R=int(m * (s - 1)),
             separable=r.separable, method=method, total_s=statistics.median(tot),
             solver_s=statistics.median(solver), repeats=repeats, iterations=r.iterations,
             gap=r.gap, solver_gap=r.solver_gap, raw_min_constraint=r.raw_min_constraint,
             min_constraint=r.min_constraint, max_equality_violation=r.max_equality_violation,
             norm_w_mm=float(np.linalg.norm(r.W)), status=r.status, polished=r.polished)
  return row, r.W


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--max_dual", type=int, default=3000)
  ap.add_argument("--max_time", type=float, default=1800.0)
  ap.add_argument("--old", choices=OLD_CHOICES, default="all",
                  help="where to also time the earlier first-order solver (first_order_lam)")
  ap.add_argument("--ms", default="50,100,200,500,1000")
  ap.add_argument("--Vs", default="10,100,1000")
  a = ap.parse_args(argv)
  ms = [int(x) for x in a.ms.split(",")]
  Vs = [int(x) for x in a.Vs.split(",")]
  app, _ = time_svm(instance(APPENDIX["m"], APPENDIX["d"], APPENDIX["V"], APPENDIX["s"]),
                    APPENDIX["s"], a.repeats)
  print(f"appendix size m=50 d=60 V=10 |S|=6: NTP-SVM {app['total_s']:.3f} s "
        f"(clarabel {app['solver_s']:.3f} s), median of {a.repeats}; target <= 0.5 s")
  print(f"{'m':>5} {'V':>5} {'d':>5} {'n_dual':>7} {'R':>5} {'method':>11} {'total_s':>8}"
        f" {'solve_s':>8} {'iters':>5} {'rel_gap':>7} {'raw_min_c':>9} {'max_eq':>7} {'pol':>3} |"
        f" {'old_s':>7} {'solve_s':>7} {'iters':>5} {'rel_gap':>7} {'speedup':>7} {'dW':>7}")
  rows = []
  f = lambda x, w, spec: f"{x:>{w}{spec}}" if x is not None else f"{'-':>{w}}"
  for m in ms:
    for V in Vs:
      s = min(6, V - 1)
      n, R = m * (V - s), m * (s - 1)
      ds = instance(m, m + 10, V, s)
      old = None
      if max(n, R) > a.max_dual:
        r, W = time_svm(ds, s, 1, method="first_order", max_time=a.max_time)
        if a.old == "all" or (a.old == "largest" and (m, V) == (max(ms), max(Vs))):
          old, W_old = time_svm(ds, s, 1, method="first_order_lam", max_time=a.max_time)
          old["dW"] = float(np.linalg.norm(W - W_old) / np.linalg.norm(W_old))
          old["speedup"] = old["total_s"] / r["total_s"]
          r["old"] = old
      else:
        r, _ = time_svm(ds, s, max(1, a.repeats // 2 if n > 1000 else a.repeats))
      rows.append(r)
      fo = r["method"] == "first_order"
      print(f"{m:>5} {V:>5} {m + 10:>5} {n:>7} {R:>5} {r['method']:>11} {r['total_s']:>8.3f}"
            f" {r['solver_s']:>8.3f} {f(r['iterations'] if fo else None, 5, 'd')}"
            f" {f(r['solver_gap'] if fo else None, 7, '.1e')}"
            f" {f(r['raw_min_constraint'] if fo else None, 9, '.7f')}"
            f" {r['max_equality_violation']:>7.1e} {'yes' if r['polished'] else 'no':>3} |"
            f" {f(old and old['total_s'], 7, '.2f')} {f(old and old['solver_s'], 7, '.2f')}"
            f" {f(old and old['iterations'], 5, 'd')} {f(old and old['solver_gap'], 7, '.1e')}"
            f" {f(old and old['speedup'], 7, '.1f')} {f(old and old['dW'], 7, '.1e')}", flush=True)
  print(json.dumps(dict(appendix_s=round(app["total_s"], 4),
                        appendix_clarabel_s=round(app["solver_s"], 4),
                        target_met=app["total_s"] <= 0.5, scaling=rows,
                        ran_on=provenance.ran_on())))


if __name__ == "__main__":
  cli.script(main)
