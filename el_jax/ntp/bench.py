r"""NTP-SVM solve time: the appendix size (target <= 0.5 s) and a scaling table.

  python -m el_jax.ntp.bench [--repeats=5] [--max_dual=3000] [--max_time=420]

Times are wall-clock seconds of `geometry.ntp_svm` (validation, dual build,
solver, polish), median over repeats; "solver_s" is the solver's share. The
scaling grid is m in {50..1000} x V in {10, 100, 1000} with d = m + 10 (so
Lemma 1 guarantees separability) and |S_j| = 6. The dual has
n = sum_j (V - |S_j|) variables and a dense n x n Hessian, and F's Gram
matrix is R x R with R = sum_j (|S_j| - 1). Sizes with n and R <= --max_dual
use Clarabel (exact, after one warm-up call); larger ones use the matrix-free
first-order solver (`method="first_order"`, FISTA on the same dual, one run,
no warm-up, stopped at relative duality gap 1e-6 or --max_time seconds). Its
rows show the iterations, the achieved gap (P - D) / P, and the min
constraint before the final rescaling W <- W / min constraint (after it, every
constraint is >= 1). The last line is a JSON summary.
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

from el_jax.ntp import data as data_lib  # noqa: E402
from el_jax.ntp import geometry  # noqa: E402
from el_jax import cli  # noqa: E402

APPENDIX = dict(m=50, d=60, V=10, s=6)


def time_svm(m, d, V, s, repeats, seed=0, method="clarabel", max_time=float("inf")):
  ds = data_lib.random_instance(m, d, V, s, seed=seed, n_samples=5000 if m <= 5000 else None)
  kw = dict(method=method, max_time=max_time)
  if method == "clarabel":
    geometry.ntp_svm(ds.H, ds.P, **kw)  # warm-up (imports, allocator)
  tot, solver = [], []
  for _ in range(repeats):
    t0 = time.perf_counter()
    r = geometry.ntp_svm(ds.H, ds.P, **kw)
    tot.append(time.perf_counter() - t0)
    solver.append(r.solve_time)
  return dict(m=m, d=d, V=V, support=s, n_dual=int(m * (V - s)), R=int(m * (s - 1)),
              separable=r.separable, method=method, total_s=statistics.median(tot),
              solver_s=statistics.median(solver), repeats=repeats, iterations=r.iterations,
              gap=r.gap, raw_min_constraint=r.raw_min_constraint,
              min_constraint=r.min_constraint, max_equality_violation=r.max_equality_violation,
              norm_w_mm=float(np.linalg.norm(r.W)), status=r.status)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--max_dual", type=int, default=3000)
  ap.add_argument("--max_time", type=float, default=420.0)
  ap.add_argument("--ms", default="50,100,200,500,1000")
  ap.add_argument("--Vs", default="10,100,1000")
  a = ap.parse_args(argv)
  app = time_svm(APPENDIX["m"], APPENDIX["d"], APPENDIX["V"], APPENDIX["s"], a.repeats)
  print(f"appendix size m=50 d=60 V=10 |S|=6: NTP-SVM {app['total_s']:.3f} s "
        f"(clarabel {app['solver_s']:.3f} s), median of {a.repeats}; target <= 0.5 s")
  print(f"{'m':>5} {'V':>5} {'d':>5} {'n_dual':>8} {'R':>5} {'method':>11} {'total_s':>9}"
        f" {'solver_s':>9} {'iters':>6} {'rel_gap':>8} {'raw_min_c':>10} {'max_eq':>8}")
  rows = []
  for m in [int(x) for x in a.ms.split(",")]:
    for V in [int(x) for x in a.Vs.split(",")]:
      s = min(6, V - 1)
      n, R = m * (V - s), m * (s - 1)
      if max(n, R) > a.max_dual:
        r = time_svm(m, m + 10, V, s, 1, method="first_order", max_time=a.max_time)
        it, gap, rmin = f"{r['iterations']:>6}", f"{r['gap']:>8.1e}", f"{r['raw_min_constraint']:>10.7f}"
      else:
        r = time_svm(m, m + 10, V, s, max(1, a.repeats // 2 if n > 1000 else a.repeats))
        it, gap, rmin = f"{'-':>6}", f"{'-':>8}", f"{'-':>10}"
      rows.append(r)
      print(f"{m:>5} {V:>5} {m + 10:>5} {n:>8} {R:>5} {r['method']:>11} {r['total_s']:>9.3f}"
            f" {r['solver_s']:>9.3f} {it} {gap} {rmin} {r['max_equality_violation']:>8.1e}",
            flush=True)
  print(json.dumps(dict(appendix_s=round(app["total_s"], 4),
                        appendix_clarabel_s=round(app["solver_s"], 4),
                        target_met=app["total_s"] <= 0.5, scaling=rows)))


if __name__ == "__main__":
  cli.script(main)
