"""What the seed-000 page shows of cross_machine.json: the committed grid files and the
machines their rows record, the pairs of rows of one config and seed that differ, how many
agree bit for bit, and the runs made here against the committed rows."""


def _pair(p):
  return {"a": p["a"], "b": p["b"], "seeds": p["seeds"], "max_abs_diff": p["max_abs_diff"],
          "at": p["at"], "values_compared": p["values_compared"],
          "values_identical": p["values_identical"]}


def analyze(src, config):
  d = src.load("cross_machine.json")
  pairs = d["pairs"]  # largest difference first
  demo_ce_warmup = [p for p in pairs if p["a"]["file"] == "demo/summary.json"
                    and p["a"]["label"] == "ce_warmup"]
  reruns = []
  for r in d["reruns"]:
    ro = r["ran_on"] or {}
    reruns.append({"workdir": r["workdir"], "seeds": r["seeds"], "cpu": ro.get("cpu", "?"),
                   "avx512": "avx512f" in ro.get("cpu_flags", []),
                   "matches": [{k: m[k] for k in ("file", "label", "reproduced", "max_abs_diff")}
                               for m in r["matches"]]})
  return {
      "files": [{"file": name, **x} for name, x in d["files"].items()],
      "min_diff": config.min_diff,
      "differing": [_pair(p) for p in pairs if p["max_abs_diff"] >= config.min_diff],
      "n_pairs": len(pairs),
      "n_identical": sum(p["max_abs_diff"] == 0 for p in pairs),
      "largest": pairs[0]["max_abs_diff"] if pairs else None,
      "demo_ce_warmup_largest": demo_ce_warmup[0]["max_abs_diff"] if demo_ce_warmup else None,
      "reruns": reruns,
      "ran_on": src.ran_on(["cross_machine.json"]),
  }
