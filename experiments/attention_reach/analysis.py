"""What the seed-002 page shows of the attention reach: per file of results/attention_reach/
(one workdir each), per block the weight that each model's best head (the most on the masked
position's two neighbours) puts there, for the trained models and their random inits, beside
a uniform head's and each trained model's evaluation. NumPy only, no JAX."""
ANALYSIS = "analysis.json"


def best_heads(models):
  """{kind: per block {"values": [per seed, the largest neighbour mass over the heads], "min",
  "max", "uniform"}}."""
  out = {}
  for kind, per_seed in models.items():
    blocks = list(zip(*per_seed.values()))  # per block: that block of every seed
    out[kind] = []
    for bs in blocks:
      v = [max(b["neighbour_mass"]) for b in bs]
      out[kind].append({"values": v, "min": min(v), "max": max(v), "uniform": bs[0]["uniform"]})
  return out


def analyze(src, config):
  files = {}
  for rel in src.files(""):
    if rel == ANALYSIS:
      continue
    d = src.load(rel)
    if isinstance(d, dict) and "models" in d:
      files[rel[:-len(".json")]] = {
          "workdir": d["workdir"], "step": d["step"], "seeds": d["seeds"],
          "sentences": d["sentences"], "best_head": best_heads(d["models"]), "eval": d["eval"],
          "ran_on": src.ran_on([rel])}
  return {"files": files}
