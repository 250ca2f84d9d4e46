r"""The pairs of committed rows with the same config and a shared seed (`run(config)`).

Every grid row under results/ (a row with `config`, `seeds` and `per_seed`; the tools'
analysis.json files are not rows) is matched with every row of another file whose config is
the same field for field (on the fields both record: files written by older code lack fields
added later, and `seeds`, `progress`, `num_devices`, the evaluation / logging / checkpoint
intervals and the TensorBoard switch, which do not change what is trained, are not compared)
and that shares a seed. For
each pair cross_machine.json gives the largest per-seed difference over the metrics both
record, where it is, the fields only one of the two records, and each file's last commit
(`git log`, when run in a checkout). `config.rerun` adds workdirs of `python -m el_jax.main`
runs trained on this machine (their config.json, summary.json and `ran_on`, the CPU model
included) matched the same way, so a third machine's numbers can say which committed file it
reproduces. No JAX: it reads JSON.
"""
import glob
import itertools
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMAND = "python -m el_jax.experiment --config=tools/cross_machine/config.py:cpu"
# Fields that do not change what is trained or evaluated.
IGNORED = ("seeds", "progress", "num_devices", "train.eval_every", "train.log_every",
           "train.checkpoint_every", "train.stop_at_step", "train.tensorboard", "tensorboard")
# Fields added to the config after some committed rows were written, with the value every run
# before had (el_jax/run/config.py's defaults): a row that lacks one matches a row that records
# this value, and no other.
DEFAULTS = {"loss.reduction": "mean", "train.cpu_dots": "xla", "data.pipeline": "memory",
            "train.vmap_seeds": False, "train.vmap_seeds_impl": "auto", "optim.decay_frac": 0.1,
            "train.attention_blocks": 1, "data.max_sentences": 0, "model.init_std": 0.02,
            "data.trans_concentration": 0.0, "data.emit_concentration": 0.0}


def flatten(d, prefix=""):
  """el_jax.run.config.flatten without importing el_jax.run.config (which imports JAX; this reads JSON)."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _loss_fields_apply(key, cfg):
  """A `loss.<name>.<field>` only matters for the loss that trains (`loss.name`)."""
  parts = key.split(".")
  return not (parts[0] == "loss" and len(parts) == 3 and parts[1] != cfg.get("loss.name"))


def comparable(cfg):
  return {k: v for k, v in cfg.items() if k not in IGNORED and _loss_fields_apply(k, cfg)}


def same_config(a, b):
  """(same, fields only one records): equal on every field both record, which must include
  the task, the data, the model, the optimizer, the loss and the number of steps; a field
  only one records must hold its DEFAULTS value (the value before the field existed)."""
  shared = set(a) & set(b)
  needed = ("task", "loss.name", "optim.lr", "train.num_steps")
  if not all(k in shared for k in needed):
    return False, []
  for k in ("data.", "model.", "optim."):
    if not any(s.startswith(k) for s in shared):
      return False, []
  one_sided = sorted(set(a) ^ set(b))
  same = (all(a[k] == b[k] for k in shared)
          and all(k in DEFAULTS and (a if k in a else b)[k] == DEFAULTS[k] for k in one_sided))
  return same, one_sided


def grid_rows(root):
  rows = []
  for path in sorted(glob.glob(os.path.join(root, "results", "**", "*.json"), recursive=True)):
    rel = os.path.relpath(path, os.path.join(root, "results")).replace(os.sep, "/")
    if rel.startswith("cross_machine/") or os.path.basename(rel) == "analysis.json":
      continue
    try:
      with open(path) as f:
        doc = json.load(f)
    except ValueError:
      continue
    rs = doc.get("rows") if isinstance(doc, dict) else doc
    if not isinstance(rs, list):
      continue
    for r in rs:
      if (isinstance(r, dict) and isinstance(r.get("config"), dict)
          and isinstance(r.get("per_seed"), dict) and r.get("seeds")):
        rows.append({"file": rel, "label": r["label"], "cfg": comparable(flatten(r["config"])),
                     "seeds": list(r["seeds"]), "per_seed": r["per_seed"],
                     "ran_on": r.get("ran_on")})
  return rows


def _metrics(a, b):
  return [m for m in a["per_seed"] if m in b["per_seed"] and "_n_" not in m
          and m.split("_")[0] in ("train", "valid", "test")]


def compare_rows(a, b):
  """The largest per-seed difference of two rows over their shared seeds and metrics."""
  seeds = [s for s in a["seeds"] if s in b["seeds"]]
  worst, where, identical = 0.0, None, 0
  total = 0
  for m in _metrics(a, b):
    for s in seeds:
      va, vb = a["per_seed"][m][a["seeds"].index(s)], b["per_seed"][m][b["seeds"].index(s)]
      if va is None or vb is None:
        continue
      total += 1
      identical += va == vb
      if abs(va - vb) > worst:
        worst, where = abs(va - vb), {"metric": m, "seed": s, "a": va, "b": vb}
  return {"seeds": seeds, "max_abs_diff": worst, "at": where, "values_compared": total,
          "values_identical": identical}


def pairs(rows):
  out = []
  for a, b in itertools.combinations(rows, 2):
    if a["file"] == b["file"] or not set(a["seeds"]) & set(b["seeds"]):
      continue
    same, one_sided = same_config(a["cfg"], b["cfg"])
    if not same:
      continue
    out.append({"a": {"file": a["file"], "label": a["label"]},
                "b": {"file": b["file"], "label": b["label"]},
                "fields_only_one_records": one_sided, **compare_rows(a, b)})
  return out


def reruns(rows, workdirs):
  """Each workdir's final per-seed numbers against every committed row of its config."""
  out = []
  for w in workdirs:
    with open(os.path.join(w, "config.json")) as f:
      cfg = comparable(flatten(json.load(f)))
    with open(os.path.join(w, "summary.json")) as f:
      summary = json.load(f)
    per_seed = {}
    seeds = [p["seed"] for p in summary["per_seed"]]
    for p in summary["per_seed"]:
      for k, v in p.items():
        if isinstance(v, float):
          per_seed.setdefault(k, []).append(v)
    here = {"file": "(this machine)", "label": os.path.basename(os.path.normpath(w)),
            "cfg": cfg, "seeds": seeds, "per_seed": per_seed}
    matches = []
    for r in rows:
      same, _ = same_config(cfg, r["cfg"])
      if same and set(seeds) & set(r["seeds"]):
        c = compare_rows(here, r)
        matches.append({"file": r["file"], "label": r["label"], **c,
                        "reproduced": c["values_identical"] == c["values_compared"]})
    out.append({"workdir": here["label"], "seeds": seeds, "ran_on": summary.get("ran_on"),
                "test_em_hard": per_seed.get("test_em_hard"), "matches": matches})
  return out


def last_commit(root, rel):
  try:
    out = subprocess.run(["git", "log", "-1", "--format=%h %ad", "--date=short", "--",
                          os.path.join("results", rel)], cwd=root, capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip() or None
  except (OSError, subprocess.SubprocessError):
    return None


def run(config, root=ROOT):
  """Writes `<config.results_dir>/cross_machine.json` from the rows under `<root>/results/`
  (and the workdirs of `config.rerun`); returns its content."""
  rerun = [w for w in config.rerun.split(",") if w]
  for w in rerun:
    for name in ("config.json", "summary.json"):
      if not os.path.isfile(os.path.join(w, name)):
        raise ValueError(f"config.rerun: {w} has no {name} (a finished el_jax.main workdir)")
  rows = grid_rows(root)
  ps = pairs(rows)
  files = sorted({r["file"] for r in rows})
  info = {}
  for f in files:
    rs = [r for r in rows if r["file"] == f]
    cpus = sorted({(r["ran_on"] or {}).get("cpu") or (r["ran_on"] or {}).get("device_kind")
                   for r in rs if r["ran_on"]})
    info[f] = {"rows": len(rs), "rows_with_ran_on": sum(bool(r["ran_on"]) for r in rs),
               "machines": cpus, "last_commit": last_commit(root, f)}
  doc = {"command": COMMAND + (f" --config.rerun={','.join(rerun)}" if rerun else ""),
         "ignored_fields": list(IGNORED), "files": info,
         "pairs": sorted(ps, key=lambda p: -p["max_abs_diff"]),
         "reruns": reruns(rows, rerun)}
  os.makedirs(config.results_dir, exist_ok=True)
  path = os.path.join(config.results_dir, "cross_machine.json")
  with open(path, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
  for p in doc["pairs"]:
    print(f"{p['max_abs_diff']:.4f}  {p['a']['file']}:{p['a']['label']}  vs  "
          f"{p['b']['file']}:{p['b']['label']}  seeds {p['seeds']}")
  print(f"wrote {path}")
  return doc
