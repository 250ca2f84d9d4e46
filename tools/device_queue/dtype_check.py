"""bf16 against float32 at `test` size, the check a session runs on the device before the queue
trains a bf16 job (and tests/test_mixed_precision.py runs on the CPU): the task's `test`
config trained in float32 and in bf16 from the same initialisation and batches (model seeds
0-2 stacked, 8 steps), and held to the stated distances:

  every logged training loss (loss, ce, loss_<g>, ce_<g>) of step t, per seed:
      |L_bf16 - L_fp32| <= t * 2^-8 * |L_fp32|
  every final evaluation metric of every split, the mean over the seeds:
      |mean_bf16 - mean_fp32| <= 2 SE_fp32 + 1 / n      (n the split's examples)

(tests/test_mixed_precision.py says why these bounds.) `python -m tools.device_queue dtype`
runs it for the tasks of the queue's bf16 jobs and writes one JSON; committed as
results/device_queue/dtype_check_<device>.json, a session on that device kind skips it.
"""
import math
import os
import tempfile
import time

import numpy as np

BF16_U = 2.0 ** -8  # bf16's unit roundoff (8 significant bits)
TRAIN_SEEDS = (0, 1, 2)


def train_both(task, root, seeds=TRAIN_SEEDS):
  """{dtype: (train rows by (seed, step), finals by seed)} of `task`'s `test` config trained
  in float32 and bf16 under `root` (the seeds stacked: el_jax.run.seeds)."""
  from el_jax.run import config as config_lib
  from el_jax.run import job
  from el_jax.run import runner
  out = {}
  for dtype in ("float32", "bfloat16"):
    cfg = config_lib.get_config(task, "test", {"model.dtype": dtype, "num_devices": 1,
                                               "seeds": tuple(seeds), "train.vmap_seeds": True})
    workdir = os.path.join(str(root), f"{task}_{dtype}")
    summary = job.train_and_evaluate(cfg, workdir)
    rows = {(r["seed"], r["step"]): r for r in runner.read_metrics(workdir)
            if r["kind"] == "train"}
    out[dtype] = rows, {f["seed"]: f for f in summary["per_seed"]}
  return out


def train_distances(rows32, rows16):
  """[(seed, step, key, bf16, fp32, bound)] of every logged training loss (module docstring)."""
  out = []
  for (seed, step), r32 in sorted(rows32.items()):
    r16 = rows16[seed, step]
    for k, v in r32.items():
      if (k in ("loss", "ce") or k.startswith(("loss_", "ce_"))) and v is not None:
        out.append((seed, step, k, r16[k], v, step * BF16_U * abs(v)))
  return out


def eval_distances(finals32, finals16, seeds=TRAIN_SEEDS):
  """[(metric, fp32 values, bf16 values, bound, difference of means)] of every final float
  metric (module docstring)."""
  f0 = finals32[seeds[0]]
  out = []
  for k, v in f0.items():
    if k in ("seed", "step", "kind") or not isinstance(v, float):
      continue
    split, group = k.split("_", 1)[0], k.rsplit("_", 1)[-1]
    n = max(f0.get(f"{split}_n_{group}", f0[f"{split}_n_all"]), 1)  # examples of the metric
    a = np.array([finals32[s][k] for s in seeds])
    b = np.array([finals16[s][k] for s in seeds])
    se = float(np.std(a, ddof=1)) / math.sqrt(len(a))
    out.append((k, list(a), list(b), 2 * se + 1 / n, float(b.mean() - a.mean())))
  return out


def check(task, root=None):
  """The check of `task` (module docstring) as a JSON-able dict: "ok", the worst ratio of
  each distance to its bound, and the number of values checked."""
  from el_jax.infra import provenance
  t0 = time.time()
  with tempfile.TemporaryDirectory(prefix=f"dtype_check_{task}_") as tmp:
    both = train_both(task, root or tmp)
  (rows32, finals32), (rows16, finals16) = both["float32"], both["bfloat16"]
  tr = train_distances(rows32, rows16)
  ev = eval_distances(finals32, finals16)
  worst_train = max((abs(b - a) / bound for _, _, _, b, a, bound in tr), default=0.0)
  worst_eval = max((abs(d) / bound for _, _, _, bound, d in ev), default=0.0)
  return {"task": task, "ok": bool(tr and ev and worst_train <= 1 and worst_eval <= 1
                                   and worst_train > 0),
          "worst_train_ratio": worst_train, "worst_eval_ratio": worst_eval,
          "train_values": len(tr), "eval_metrics": len(ev), "seeds": list(TRAIN_SEEDS),
          "seconds": round(time.time() - t0, 1), "ran_on": provenance.ran_on()}
