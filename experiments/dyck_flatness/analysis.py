"""What the seed-002 page shows of the Dyck experiment: the setting, the constructions (the
count solution; each random-feature width's loss, Tr(H) over its draws, mean downstream error,
the worst draw's sample need and the Hutchinson check), the training arms' mean / min / max over
seeds at each measured step, and the sample need of each solution: the smallest n from which
the mean downstream error stays below 1% (`stays_below`), against the n where the count
solution first reaches it. NumPy only; run.py writes its summaries with these functions."""
import numpy as np

FILE = "dyck_flatness.json"
THRESHOLD = 0.01  # the downstream error the sample need is measured at


def stays_below(curve, thr=THRESHOLD):
  """The smallest n from which the mean error stays at or below `thr` at every larger n
  measured (None if the largest n is above it); `curve` {n (str or int): {"mean": ...}}."""
  out = None
  for n, v in sorted(((int(n), v) for n, v in curve.items()), reverse=True):
    if v["mean"] > thr:
      break
    out = n
  return out


def first_below(curve, thr=THRESHOLD):
  """The smallest n whose mean error is at or below `thr` (None if none)."""
  return next((n for n, v in sorted((int(n), v) for n, v in curve.items())
               if v["mean"] <= thr), None)


def spread(values):
  """{mean, min, max} of a list of numbers."""
  return {"mean": float(np.mean(values)), "min": float(np.min(values)),
          "max": float(np.max(values))}


def summary(runs):
  """Mean, min and max over seeds at each measured step of a training arm's runs."""
  rows = []
  for i, pt in enumerate(runs[0]["points"]):
    row = {"step": pt["step"]}
    for k in ("loss", "trace", "lambda_max", "ratio", "active_per_input"):
      row[k] = spread([r["points"][i][k] for r in runs])
    for n in pt["downstream"]:
      row[f"downstream_{n}"] = spread([r["points"][i]["downstream"][n] for r in runs])
    rows.append(row)
  return rows


def analyze(src, config):
  d = src.load(FILE)
  count = next(c for c in d["constructions"] if c["name"] == "count")
  rf = [c for c in d["constructions"] if c["name"] != "count"]
  sizes = list(count["downstream"])
  constructions = {"count": {
      "width": count["width"], "loss": count["loss"], "trace": count["trace"],
      "downstream": {n: count["downstream"][n]["mean"] for n in sizes},
      "stays_below": stays_below(count["downstream"])}}
  for c in rf:
    constructions[c["name"]] = {
        "width": c["width"], "draws": len(c["seeds"]),
        "loss_max": max(s["loss"] for s in c["seeds"]),
        "trace": spread([s["trace"] for s in c["seeds"]]),
        "downstream": {n: float(np.mean([s["downstream"][n]["mean"] for s in c["seeds"]]))
                       for n in sizes},
        "stays_below_worst": max(stays_below(s["downstream"]) for s in c["seeds"]),
        "hutchinson": [[s["trace_hutchinson"], s["trace_hutchinson_stderr"]]
                       for s in c["seeds"] if "trace_hutchinson" in s]}
  rf_need = [stays_below(s["downstream"]) for c in rf for s in c["seeds"]]
  first = first_below(count["downstream"])
  samples = {
      "count_stays": constructions["count"]["stays_below"], "count_first": first,
      "rf_stays_min": min(rf_need), "rf_stays_max": max(rf_need), "rf_draws": len(rf_need),
      "rf_widths": len(rf), "ds_draws": d["args"]["ds_draws"],
      # the sizes after the count solution first reaches the threshold where it is above again
      "count_above": [{"n": int(n), "error": count["downstream"][n]["mean"]} for n in sizes
                      if first is not None and int(n) > first
                      and count["downstream"][n]["mean"] > THRESHOLD]}
  training = {}
  for arm, t in d["training"].items():
    rows = summary(t["runs"])
    training[arm] = {"label_noise": t["label_noise"], "last_step": str(rows[-1]["step"]),
                     "at": {str(r["step"]): r for r in rows}}
  rf_32 = [constructions[c["name"]]["downstream"]["32"] for c in rf] if "32" in sizes else []
  return {"command": d["command"], "length": d["args"]["length"],
          "setting": d["setting"], "trace_lower_bound": d["trace_lower_bound"],
          "args": {k: d["args"][k] for k in ("width", "lr", "batch_size", "steps", "seeds",
                                             "label_noise")},
          "constructions": constructions, "training": training, "samples": samples,
          "rf_downstream_32": spread(rf_32) if rf_32 else None,
          "ran_on": src.ran_on([FILE])}
