"""What the speed page shows of the benchmark's runs: one row per CPU kind measured (the last
run of a kind; the best el_jax side against the faster PyTorch side, scored positions and equal
work, against the issue's targets), and per run its setting, every side's step time, MFU and
per-round tokens/s ratios against each PyTorch side, the targets, the ratios and step times the
prose cites, and (for the A/B runs) every el_jax side against the default step of the same
positions."""
import os
import re

# The four original sides first, as the earliest runs named them; any other side is named from
# its settings (`side_label`).
SIDES = {"el_jax": "scored positions, `cpu_dots=xla` (default)",
         "el_jax_eigen": "scored positions, `cpu_dots=eigen`",
         "el_jax_all_positions": "all positions (equal work), `xla`",
         "el_jax_eigen_all_positions": "all positions, `eigen`"}
TARGET_NAMES = ("scored positions vs best torch", "all positions (equal work) vs best torch")


def side_label(side):
  """An el_jax side in words: positions, `train.cpu_dots`, attention blocks, CPU devices, and
  the host malloc (`_glibc_malloc`: glibc's defaults, as before el_jax.infra.hostmem; files
  from before it recorded no malloc and ran with glibc's)."""
  if side in SIDES:
    return SIDES[side]
  rest = side[len("el_jax"):]
  allpos = rest.endswith("_all_positions")
  rest = rest[:-len("_all_positions")] if allpos else rest
  glibc = rest.endswith("_glibc_malloc")
  rest = rest[:-len("_glibc_malloc")] if glibc else rest
  dev = re.search(r"_(\d+)dev$", rest)
  rest = rest[:dev.start()] if dev else rest
  blocks = re.search(r"_blocks(\d+)$", rest)
  rest = rest[:blocks.start()] if blocks else rest
  dots = rest.lstrip("_") or "xla"
  return (f"{'all positions (equal work)' if allpos else 'scored positions'}, `cpu_dots={dots}`"
          + (f", `attention_blocks={blocks.group(1)}`" if blocks else "")
          + (f", {dev.group(1)} CPU devices" if dev else "")
          + (", glibc's malloc (as before)" if glibc else ""))


def cpu_kind(d):
  """(key, label) of the CPU a run was on: its `ran_on` CPU model (and family / model where
  recorded) with its vector width, or "not recorded" with the machine fields the file has
  (each such file its own kind)."""
  ro = d.get("ran_on")
  if ro and ro.get("cpu"):
    flags = ro.get("cpu_flags", [])
    wide = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    extra = [x for x in ("avx512_bf16", "avx512_vnni", "amx_bf16") if x in flags]
    ident = ro.get("cpu_id", "")
    return ((ro["cpu"], tuple(sorted(flags)), ident),
            f"{ro['cpu']}" + (f" ({ident})" if ident else "") + f", {wide}"
            + (f" (+{', '.join(extra)})" if extra else "") + f", {d.get('cpu_count', '?')} cores")
  return (None, id(d)), (f"not recorded ({d.get('machine', '?')}, {d.get('cpu_count', '?')} "
                         f"cores; matmul peak {d['matmul_peak_flops'] / 1e9:.0f} GFLOP/s)")


def _stem(rel):
  return os.path.splitext(os.path.basename(rel))[0]


def ab_rows(d, reference="el_jax"):
  """Every el_jax side against `reference` of the same positions: its tokens/s over the
  reference's (per-round median and the rounds' range) and its step time."""
  out = []
  for key, x in d["ratio_tokens_per_s"].items():
    a, b = key.split("/")
    if a not in (reference, f"{reference}_all_positions") or b.startswith("torch"):
      continue
    if a.endswith("_all_positions") != b.endswith("_all_positions"):
      continue
    out.append({"side": b, "against": a, "ratio": 1 / x["median"], "lo": 1 / x["max"],
                "hi": 1 / x["min"], "step_ms": d["results"][b]["step_ms_median"]})
  return out


def run_summary(src, rel, ab=False):
  d = src.load(rel)
  res, ratio = d["results"], d["ratio_tokens_per_s"]
  torches = [k for k in res if k.startswith("torch")]
  sides = [k for k in res if k.startswith("el_jax")]
  sides = [k for k in SIDES if k in res] + [k for k in sides if k not in SIDES]
  workers = d["workers"]
  torch_version = next((w["torch"] for n, w in workers.items() if n.startswith("torch")), None)
  return {
      "file": os.path.basename(rel), "command": d["command"],
      "load_before": (d.get("loadavg_before_setup") or [None])[0],
      "load_start": d["loadavg_start"][0], "load_end": d["loadavg_end"][0],
      "rounds": d["rounds"], "steps_per_window": d["steps_per_window"],
      "peak_gflops": d["matmul_peak_flops"] / 1e9, "jax": workers["el_jax"]["jax"],
      "torch": workers.get("torch_eager", {}).get("torch", torch_version),
      "num_params": workers["el_jax"]["num_params"], "shape": d["shape"],
      "torches": [{"name": t, "step_ms": res[t]["step_ms_median"], "mfu": res[t]["mfu"]}
                  for t in torches],
      "sides": [{"name": s, "label": side_label(s), "step_ms": res[s]["step_ms_median"],
                 "mfu": res[s]["mfu"], "vs_torch": [ratio[f"{s}/{t}"] for t in torches]}
                for s in sides],
      "target": d["targets"],
      "has_default": any("default_ratio" in t for t in d["targets"].values()),
      "ratio": {k: x["median"] for k, x in ratio.items()},
      "step_ms": {k: x["step_ms_median"] for k, x in res.items()},
      "gflop": {k: x["flops_per_step"] / 1e9 for k, x in res.items()},
      "ab": ab_rows(d) if ab else None,
      "ran_on": src.ran_on([rel]),
  }


def cpu_kinds(src, rels):
  """One row per CPU kind, in the order first seen, from the last of its files."""
  rows = {}
  for rel in rels:
    d = src.load(rel)
    key, label = cpu_kind(d)
    rows[key] = (label, rel, d)
  out = []
  for label, rel, d in rows.values():
    t = d["targets"]
    torch = next(iter(t.values()))["torch"] if t else None
    out.append({
        "label": label, "file": os.path.basename(rel), "rounds": d["rounds"],
        "steps_per_window": d["steps_per_window"],
        "load_before": (d.get("loadavg_before_setup") or [None])[0],
        "load_start": d["loadavg_start"][0], "load_end": d["loadavg_end"][0],
        "peak_gflops": d["matmul_peak_flops"] / 1e9, "torch": torch,
        "torch_ms": d["results"][torch]["step_ms_median"] if torch else None,
        "torch_mfu": d["results"][torch]["mfu"] if torch else None,
        "targets": [t.get(name) for name in TARGET_NAMES]})
  return out


def jax_lines(src, rels):
  """The same benchmark under each line of JAX, in one session on one CPU (`rels` in the order
  run): per file its JAX, load and targets; per side (el_jax's and PyTorch's) the step time
  under each file and the later files' step time over the first's. PyTorch runs the same
  program in every file: its ratio is how far the machine itself moved between the runs."""
  docs = [src.load(rel) for rel in rels]
  if not docs:
    return None
  kinds = {cpu_kind(d)[0] for d in docs}
  if len(kinds) != 1:
    raise ValueError(f"{', '.join(rels)}: the lines of JAX must be timed on one CPU kind; "
                     f"these ran on {len(kinds)}")
  first = docs[0]["results"]
  sides = [k for k in first if all(k in d["results"] for d in docs)]

  def moved(names):  # [min, max] of the later runs' step time over the first's
    x = [d["results"][k]["step_ms_median"] / first[k]["step_ms_median"]
         for d in docs[1:] for k in names]
    return [min(x), max(x)] if x else None

  return {
      "cpu": cpu_kind(docs[0])[1],
      "runs": [{"file": os.path.basename(rel), "jax": d["workers"]["el_jax"]["jax"],
                "command": d["command"],
                "load_before": (d.get("loadavg_before_setup") or [None])[0],
                "load_start": d["loadavg_start"][0], "load_end": d["loadavg_end"][0],
                "targets": [d["targets"].get(name) for name in TARGET_NAMES]}
               for rel, d in zip(rels, docs)],
      "sides": [{"name": k, "label": side_label(k) if k.startswith("el_jax") else k,
                 "step_ms": [d["results"][k]["step_ms_median"] for d in docs],
                 "vs_first": [d["results"][k]["step_ms_median"] / first[k]["step_ms_median"]
                              for d in docs[1:]]}
                for k in sides],
      "el_jax_moved": moved([k for k in sides if k.startswith("el_jax")]),
      "torch_moved": moved([k for k in sides if k.startswith("torch")]),
      "ran_on": src.ran_on(list(rels)),
  }


def analyze(src, config):
  return {
      "runs": {_stem(rel): run_summary(src, rel, ab=rel in config.ab_files)
               for rel in config.files},
      "cpu_kinds": cpu_kinds(src, config.cpu_kinds),
      "cpu_kinds_ran_on": src.ran_on(list(config.cpu_kinds)),
      "jax_lines": jax_lines(src, list(config.jax_line_files)),
  }
