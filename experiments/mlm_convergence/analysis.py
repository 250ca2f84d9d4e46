"""What the seed-002 page shows of the convergence runs: per language (`<language>.json`,
those present; the paper-size ones under `paper/`) each run's distance from the exact optimum
(the valid gap, mean (min, max) over its seeds, the KL, train and test gaps, the optimum, the
unigram model's gap, whether it is within `config.converged_within`), and on the PCFG the crude
power law through the first two runs (the same model trained 1x and 4x the steps) for each
definition of the gap: the steps and hours it needs to reach `converged_within`. The paper's
Table 1 gap is from el_jax.report.papers. The standard library only (no JAX); `plot` draws
each language's curves."""
import math
import os

from el_jax.report import papers

LANGUAGES = ("pcfg", "lm")
# The gap definitions the power law is taken through: (headline key, name on the page).
GAPS = (("valid_gap", "valid gap"), ("train_gap", "train gap"), ("test_gap", "test gap"),
        ("valid_kl", "valid KL"))


def analyze(src, config):
  target = float(config.converged_within)
  out = {"converged_within": target,
         "paper_gap": (papers.value("s002.t1.adamw.loss") - papers.value("s002.t1.lookup.loss"))}
  for sub in ("", "paper"):
    found = {lang: language(src, os.path.join(sub, f"{lang}.json"), target)
             for lang in LANGUAGES if src.exists(os.path.join(sub, f"{lang}.json"))}
    if sub:
      if found:
        out[sub] = found
    else:
      out.update(found)
  return out


def headline(row, target):
  """A run's distance from the optimum: its aggregate's means (the valid gap's min / max over
  seeds too), sentences seen, epochs, parameters, the unigram model's valid gap."""
  cfg, agg = row["config"], row["aggregate"]
  seen = cfg["train"]["num_steps"] * cfg["train"]["batch_size"]
  gap = agg["valid_gap"]
  return {"label": row["label"], "seeds": row["seeds"], "num_params": row.get("num_params"),
          "steps": cfg["train"]["num_steps"], "batch_size": cfg["train"]["batch_size"],
          "num_train": cfg["data"]["num_train"], "sentences_seen": seen,
          "epochs": seen / cfg["data"]["num_train"],
          "several_seeds": len(row["seeds"]) > 1, "valid_gap": gap["mean"],
          "valid_gap_range": {k: gap[k] for k in ("mean", "min", "max")},
          "per_seed_valid_gap": row["per_seed"]["valid_gap"],
          "valid_kl": agg["valid_kl"]["mean"], "train_gap": agg["train_gap"]["mean"],
          "test_gap": agg["test_gap"]["mean"], "optimal_loss": agg["test_true_entropy"]["mean"],
          "valid_mlm_loss": agg["valid_mlm_loss"]["mean"],
          "unigram_valid_gap": (row.get("unigram") or {}).get("valid_gap"),
          "converged": bool(gap["mean"] <= target), "seconds": row["seconds"]}


def extrapolate(rows, target):
  """A crude power law through the first two runs (the same model and data, the second trained
  more steps, each with its whole schedule), for each gap definition of `GAPS`: the exponent
  (gap ~ steps ** exponent), the steps at which it reaches `target` and the hours at the
  longer run's wall time per step (this machine, its load included); the factor by which 4x
  the steps multiplied the valid gap. None unless the valid gap fell between the two runs."""
  if len(rows) < 2:
    return None
  a, b = rows[:2]
  sa, sb = a["steps"], b["steps"]
  if not (0 < b["valid_gap"] < a["valid_gap"]) or sb <= sa:
    return None
  out = []
  for key, name in GAPS:
    ga, gb = a[key], b[key]
    exponent = math.log(gb / ga) / math.log(sb / sa)
    steps = sb * (target / gb) ** (1 / exponent) if gb > target else sb
    out.append({"key": key, "name": name, "gaps": [ga, gb], "exponent": exponent,
                "steps": steps, "hours": steps * b["seconds"] / sb / 3600})
  hours = [g["hours"] for g in out]
  return {"runs": [a["label"], b["label"]], "seeds": b["seeds"], "steps": [sa, sb],
          "valid_gap": [a["valid_gap"], b["valid_gap"]], "target": target,
          "factor_per_4x_steps": (b["valid_gap"] / a["valid_gap"]) ** (math.log(4)
                                                                       / math.log(sb / sa)),
          "gaps": out, "hours_min": min(hours), "hours_max": max(hours)}


def language(src, rel, target):
  doc = src.load(rel)
  rows = [headline(r, target) for r in doc["rows"]]
  first = doc["rows"][0].get("language") or {}
  return {"rows": {r["label"]: r for r in rows},
          "top_k": first.get("top_k"), "top_k_coverage": first.get("top_k_coverage"),
          "extrapolation": extrapolate(rows, target) if doc["language"] == "pcfg" else None,
          "ran_on": src.ran_on([rel])}


def plot(analysis, src, config):
  """`<language>.png` beside each language's rows: the valid (and train, dotted) gap over the
  steps, log scale, with the `converged_within` line."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  for sub in ("", "paper"):
    for lang in LANGUAGES:
      rel = os.path.join(sub, f"{lang}.json")
      if not src.exists(rel):
        continue
      doc = src.load(rel)
      fig, ax = plt.subplots(figsize=(6, 3.6))
      for row in doc["rows"]:
        pts = row["curve"].get("valid_gap", [])
        n = len(row["seeds"])
        if pts:
          ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                  label=f"{row['label']} (valid" + (f", mean of {n} seeds)" if n > 1 else ")"))
        pts = row["curve"].get("train_gap", [])
        if pts:
          ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=":", alpha=0.7,
                  label=f"{row['label']} (train)")
      target = analysis["converged_within"]
      ax.axhline(target, color="k", lw=0.8, ls="--", label=f"{target} nats")
      ax.set_yscale("log")
      ax.set_xlabel("step")
      ax.set_ylabel("MLM loss - exact optimum (nats)")
      ax.set_title(f"{lang}: distance from the exact optimum", fontsize=10)
      ax.grid(alpha=0.3)
      ax.legend(fontsize=7)
      fig.tight_layout()
      fig.savefig(src.path(os.path.join(sub, f"{lang}.png")), dpi=110)
      plt.close(fig)

