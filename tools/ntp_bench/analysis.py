"""What the speed page shows of the NTP-SVM bench's JSON line: the appendix instance's solve
time against the target, and per point of the scaling grid the method, its seconds and
iterations, and the earlier first-order solver's seconds and the speed-up over it."""


def analyze(src, config):
  d = src.load(config.log)
  scaling = []
  for r in d["scaling"]:
    old = r.get("old")
    scaling.append({"m": r["m"], "V": r["V"], "d": r["d"], "n_dual": r["n_dual"],
                    "method": r["method"], "total_s": r["total_s"],
                    "iterations": r["iterations"] or None,
                    "old_total_s": old["total_s"] if old else None,
                    "old_speedup": old["speedup"] if old else None})
  return {"appendix_s": d["appendix_s"], "appendix_clarabel_s": d["appendix_clarabel_s"],
          "target_s": config.target_s, "met": d["appendix_s"] <= config.target_s,
          "scaling": scaling, "ran_on": src.ran_on([config.log])}
