"""What the seed-002 page shows of the layer-by-layer probe: per file of results/probe_layers/
(one language each), per layer and task the trained models' probe against their own random
inits (`stats.vs_random_init`: paired over the model seeds, a sign flip) and the features'
numerical ranks, in the page's units (% and means over the models). NumPy only, no JAX."""
from el_jax.report import stats

ANALYSIS = "analysis.json"


def layer_name(layer):
  return ("final (after the last LayerNorm)" if layer == "final" else
          "0 (embeddings)" if layer == "0" else f"after block {layer}")


def compare(d):
  """Per layer: {task: the trained models' probe against their own random inits}."""
  return {k: stats.vs_random_init(
      {s: {"probe": r} for s, r in layer["trained"].items()},
      {t: {"random_init": {s: r[t] for s, r in layer["random_init"].items()}}
       for t in d["tasks"]})
      for k, layer in d["layers"].items()}


def summary(d, ran_on):
  comps = compare(d)
  rows, layers = [], {}
  for layer, r in d["layers"].items():
    layers[layer] = {}
    for t in d["tasks"]:
      c = comps[layer][t]
      ranks = {kind: [v[t]["feature_rank"] for v in r[kind].values()]
               for kind in ("trained", "random_init")}
      floor = stats.p_floor("paired", c["n"]) if "n" in c else stats.p_floor(
          "unpaired", c["n_a"], c["n_b"])
      x = {**c, "at_floor": stats.at_floor(c["p_value"], floor),
           "mean_a_pct": 100 * c["mean_a"], "mean_b_pct": 100 * c["mean_b"],
           "diff_pct": 100 * c["diff"], "n_keys": len(c["keys"]),
           "rank": {kind: {"mean": sum(v) / len(v), "min": min(v), "max": max(v)}
                    for kind, v in ranks.items()},
           "width": next(iter(r["trained"].values()))[t]["num_features"]}
      layers[layer][t] = x
      rows.append({"layer": layer, "name": layer_name(layer), "task": t, **x})
  return {"language": d["language"], "seeds": d["seeds"], "tasks": d["tasks"],
          "step": d["step"], "settings": d["settings"], "layers": layers, "rows": rows,
          "ran_on": ran_on}


def analyze(src, config):
  files = {}
  for rel in src.files(""):
    if rel == ANALYSIS:
      continue
    d = src.load(rel)
    if isinstance(d, dict) and "layers" in d:
      files[rel[:-len(".json")]] = summary(d, src.ran_on([rel]))
  return {"files": files}
