"""What the speed page shows of two_steps.json: per paper variant whether it ran, its size,
the seconds to build its data and trainer, and the two steps' seconds, losses and gradient
norms; `ran` is False when no variant was run."""

FILE = "two_steps.json"


def analyze(src, config):
  if not src.exists(FILE):
    return {"ran": False, "file": src.name(FILE)}
  d = src.load(FILE)
  runs = []
  for label, r in d["runs"].items():
    row = {"label": label, "status": r["status"], "stepped": len(r.get("steps", ())) >= 2}
    if row["stepped"]:
      s1, s2 = r["steps"][0], r["steps"][1]
      row.update(params_m=r["params"] / 1e6, rows_per_step=r["rows_per_step"],
                 context_len=r["context_len"], data_s=r["data_s"], trainer_s=r["trainer_s"],
                 seconds=[s1["seconds"], s2["seconds"]], loss=[s1["loss"], s2["loss"]],
                 grad_norm=[s1["grad_norm"], s2["grad_norm"]])
    runs.append(row)
  return {"ran": True, "file": src.name(FILE), "runs": runs, "machine": d["machine"],
          "rows": d["rows"], "ran_on": src.ran_on([FILE])}
