r"""NTP-SVM solve time: the appendix size (target <= 0.5 s) and a scaling table.

  python -m el_jax.ntp.bench [--repeats=5] [--max_dual=3000]

Times are wall-clock seconds of `geometry.ntp_svm` (validation, dual build,
Clarabel, polish) after one warm-up call, median over repeats; "clarabel" is
the solver's share. The scaling grid is m in {50..1000} x V in {10, 100,
1000} with d = m + 10 (so Lemma 1 guarantees separability) and |S_j| = 6.
The dual has n = sum_j (V - |S_j|) variables and a dense n x n Hessian, and
F's Gram matrix is R x R with R = sum_j (|S_j| - 1); sizes with n or R above
--max_dual are listed as skipped with their n (an exact interior-point solve
there needs a structured first-order method instead; not implemented). The
last line is a JSON summary.
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

from el_jax.ntp import data as data_lib  # noqa: E402
from el_jax.ntp import geometry  # noqa: E402

APPENDIX = dict(m=50, d=60, V=10, s=6)


def time_svm(m, d, V, s, repeats, seed=0):
  ds = data_lib.random_instance(m, d, V, s, seed=seed, n_samples=5000 if m <= 5000 else None)
  geometry.ntp_svm(ds.H, ds.P)  # warm-up (imports, allocator)
  tot, solver = [], []
  for _ in range(repeats):
    t0 = time.perf_counter()
    r = geometry.ntp_svm(ds.H, ds.P)
    tot.append(time.perf_counter() - t0)
    solver.append(r.solve_time)
  return dict(m=m, d=d, V=V, support=s, n_dual=int(m * (V - s)), separable=r.separable,
              total_s=statistics.median(tot), clarabel_s=statistics.median(solver),
              repeats=repeats)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--max_dual", type=int, default=3000)
  ap.add_argument("--ms", default="50,100,200,500,1000")
  ap.add_argument("--Vs", default="10,100,1000")
  a = ap.parse_args(argv)
  app = time_svm(APPENDIX["m"], APPENDIX["d"], APPENDIX["V"], APPENDIX["s"], a.repeats)
  print(f"appendix size m=50 d=60 V=10 |S|=6: NTP-SVM {app['total_s']:.3f} s "
        f"(clarabel {app['clarabel_s']:.3f} s), median of {a.repeats}; target <= 0.5 s")
  print(f"{'m':>5} {'V':>5} {'d':>5} {'n_dual':>8} {'total_s':>9} {'clarabel_s':>10}")
  rows = []
  for m in [int(x) for x in a.ms.split(",")]:
    for V in [int(x) for x in a.Vs.split(",")]:
      s = min(6, V - 1)
      n, R = m * (V - s), m * (s - 1)
      if max(n, R) > a.max_dual:
        rows.append(dict(m=m, V=V, d=m + 10, n_dual=n, R=R, skipped=True))
        print(f"{m:>5} {V:>5} {m + 10:>5} {n:>8}   skipped (n = {n} or R = {R} > --max_dual;"
              f" dense dual ~{8 * n * n / 2**30:.1f} GiB)")
        continue
      r = time_svm(m, m + 10, V, s, max(1, a.repeats // 2 if n > 1000 else a.repeats))
      rows.append(r)
      print(f"{m:>5} {V:>5} {m + 10:>5} {n:>8} {r['total_s']:>9.3f} {r['clarabel_s']:>10.3f}")
  print(json.dumps(dict(appendix_s=round(app["total_s"], 4),
                        appendix_clarabel_s=round(app["clarabel_s"], 4),
                        target_met=app["total_s"] <= 0.5, scaling=rows)))


if __name__ == "__main__":
  main()
