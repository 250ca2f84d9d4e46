r"""Seed 000's copy-task figures at CPU size: Figure 1 (context length, width) and Table 3 (ablations).

  python experiments/copy_task_suite.py --stage=table3        # 10 seeds
  python experiments/copy_task_suite.py --stage=fig1_context  # 10 seeds
  python experiments/copy_task_suite.py --stage=fig1_width    # 3 seeds
  python experiments/copy_task_suite.py --stage=plot          # figures from the JSON

Every run is `configs/copy_task.py:cpu` (L_c=1, L_p=50, 2-layer GPT-NeoX,
8 strings per step, 1500 steps) with the overrides listed in the JSON, on
model seeds 2-11 (the paper's count of 10; the width sweep on 2-4). The
paper's numbers are for 4-layer, 1024-wide models. Results go to
`<out>/<stage>.json` (one row per run: overrides, seeds, mean / min / max /
std of EM and CL per split x group, per-seed hard EM on valid and test,
seconds, and, against the CE row of the same context / width, the
difference of mean hard-test EM with a two-sided permutation-test p-value
and a bootstrap interval) and `<out>/<stage>.png`; the per-run metrics and
checkpoints to `runs/copy_task_suite/` (resumable: a finished run is read
back, not retrained; a JSON row is reused only for the same config and seeds).

* fig1_context: strings packed per context k in {1, 2, 4, 8} (context 55 k),
  strings per batch fixed at 8, for CE and for E1 (lam 1) + 750 warmup steps.
  Paper Fig. 1a: hard-test accuracy falls as k grows (CE; train and easy test
  stay perfect).
* fig1_width: embedding width in {128, 256, 512} at k in {1, 8} (CE, and E1 +
  warmup for contrast). Paper Fig. 1b: hard-test accuracy drops slightly and
  its spread grows with width; the worst runs reach 1/26.
* table3: the paper's ablations. The paper reports CL accuracy on the easy
  test strings of the L_c=5 task; at this size easy strings are always solved,
  so the table also gives hard-test EM, the metric that separates the runs here.
"""
import argparse
import json
import os
import time

from el_jax import runner
from el_jax.data import copy_task
from el_jax.demo import make_config
from el_jax.tasks import copy_task as copy_tasks
from el_jax import cli

CE = {"loss.name": "ce"}
E1W = {"loss.name": "e1", "loss.lam": 1.0, "optim.warmup_steps": 750}
WARM = 750  # warmup steps (half the run), as in the demo

# Paper Table 3 (CL accuracy on easy test strings, L_c=5 task, 10 seeds).
TABLE3 = [
    ("E1, no warmup, lam=2", {"loss.name": "e1", "loss.lam": 2.0}, 0.08),
    ("E1, no warmup, lam=4", {"loss.name": "e1", "loss.lam": 4.0}, 0.593),
    ("E1 + warmup, lam=4", {"loss.name": "e1", "loss.lam": 4.0, "optim.warmup_steps": WARM}, 0.780),
    ("E1 + warmup, lam=1, V=500", {"loss.name": "e1", "loss.lam": 1.0, "optim.warmup_steps": WARM,
                                   "data.num_letters": 500, "data.num_train": 800}, 1.00),
    ("E1 + warmup, lam=8", {"loss.name": "e1", "loss.lam": 8.0, "optim.warmup_steps": WARM}, 0.693),
    ("Only warmup (CE)", {"loss.name": "ce", "optim.warmup_steps": WARM}, 0.246),
    # Not in the paper's table: the two ends it is read against.
    ("CE (no warmup)", CE, None),
    ("E1 + warmup, lam=1", E1W, None),
    ("E1 + warmup, lam=2", {"loss.name": "e1", "loss.lam": 2.0, "optim.warmup_steps": WARM}, None),
]


def runs(stage):
  """[(label, overrides, paper value or None)] of a stage."""
  if stage == "table3":
    return TABLE3
  if stage == "fig1_context":
    return [(f"{name} k={k}", {**lo, "data.context_len": 55 * k}, None)
            for k in (1, 2, 4, 8) for name, lo in (("CE", CE), ("E1+warmup", E1W))]
  if stage == "fig1_width":
    return [(f"{name} k={k} d={d}", {**lo, "data.context_len": 55 * k, "model.embed_dim": d}, None)
            for name, lo in (("CE", CE), ("E1+warmup", E1W)) for d in (256, 512) for k in (1, 8)]
  raise ValueError(f"unknown stage {stage!r}; valid: table3, fig1_context, fig1_width, plot")


def slug(label):
  return "".join(c if c.isalnum() or c in "=." else "_" for c in label)


def data_coverage(overrides):
  """What a run's training set covers of its easy test strings (from the data alone).

  test_easy_seen_in_train  share of the easy test strings that also occur in the
                           training set. With L_c = 1 an easy string is fixed by its one
                           letter, so this is the share of easy test letters seen in
                           training: what a letter-by-letter lookup table, rather than
                           copying, can get right.
  train_num_easy           number of easy training strings
  """
  cfg = make_config("cpu", overrides, [0])
  train_set, test_set = copy_task.make_datasets(copy_tasks.task_spec(cfg), cfg.data.num_train,
                                                cfg.data.num_test, cfg.data.data_seed)
  seen = copy_task.seen_in_train(train_set, test_set)[test_set.easy]
  return {"test_easy_seen_in_train": float(seen.mean()),
          "train_num_easy": int(train_set.easy.sum())}


def baseline_of(stage, label):
  """The label of the CE row a run is compared with (same context / width), or None."""
  if stage == "table3":
    return None if label == "CE (no warmup)" else "CE (no warmup)"
  if label.startswith("CE "):
    return None
  return "CE " + label.split(" ", 1)[1]


# Trained first (the demo and Figure 1 read these runs back), reported in the table's order.
FIRST = ("CE (no warmup)", "Only warmup (CE)", "E1 + warmup, lam=1")


def run_stage(stage, out, seeds):
  results = runner.ResultsFile(os.path.join(out, f"{stage}.json"))
  order = runs(stage)
  for label, lo, paper in sorted(order, key=lambda r: r[0] not in FIRST):
    cfg = make_config("cpu", {**lo, "train.eval_every": 0}, seeds)
    cfg.progress = False
    if results.get(label, cfg) is not None:
      continue  # measured with this config and these seeds
    t0 = time.time()
    # The same training in another stage or in the demo (e.g. CE at k = 1) is read back.
    summ = runner.run_or_reuse(cfg, os.path.join("runs", "copy_task_suite", stage, slug(label)),
                               reuse_from=runner.run_dirs("runs/copy_task_suite/*/*",
                                                          "results/demo/*"))
    agg = summ["aggregate"]
    row = {"label": label, "overrides": lo, "paper": paper, "seeds": list(cfg.seeds),
           "seconds": round(time.time() - t0, 1),
           "metrics": {k: v for k, v in agg.items() if k.split("_")[1] in ("em", "cl")},
           "per_seed_test_em_hard": [f["test_em_hard"] for f in summ["per_seed"]],
           "per_seed_valid_em_hard": [f["valid_em_hard"] for f in summ["per_seed"]],
           "data_coverage": data_coverage(lo), "config": runner.config_dict(cfg)}
    results.put(row)
    m = row["metrics"]
    print(f"{label:32s} test easy CL {m['test_cl_easy']['mean']:.3f}  test hard EM "
          f"{m['test_em_hard']['mean']:.3f} ({m['test_em_hard']['min']:.3f}, "
          f"{m['test_em_hard']['max']:.3f})  train hard EM {m['train_em_hard']['mean']:.3f}"
          f"  (easy test strings seen in training "
          f"{row['data_coverage']['test_easy_seen_in_train']:.3f}; "
          f"{row['seconds']:.0f} s)", flush=True)
  rank = {label: i for i, (label, _, _) in enumerate(order)}
  results.rows.sort(key=lambda r: rank.get(r["label"], len(rank)))
  add_comparisons(stage, results)
  return results.rows


def add_comparisons(stage, results):
  """Each row with a CE baseline gets `vs_ce`: runner.compare of per-seed hard-test EM."""
  by = {r["label"]: r for r in results.rows}
  for label, r in by.items():
    base = baseline_of(stage, label)
    if base in by:
      r["vs_ce"] = {"baseline": base, **runner.compare(r["per_seed_test_em_hard"],
                                                       by[base]["per_seed_test_em_hard"])}
  results.write()


def plot(out):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  paths = []
  ctx = os.path.join(out, "fig1_context.json")
  wid = os.path.join(out, "fig1_width.json")
  if os.path.exists(ctx):
    rows = json.load(open(ctx))
    widths = {128: rows}
    if os.path.exists(wid):
      for r in json.load(open(wid)):
        widths.setdefault(r["overrides"]["model.embed_dim"], []).append(r)
    # Top row: hard test strings (the figure's metric). Bottom row: hard *training*
    # strings, so a run that did not fit its training set (the paper's premise) shows.
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.6), sharex=True, sharey=True)
    for col, name in enumerate(("CE", "E1+warmup")):
      for row, key in enumerate(("test_em_hard", "train_em_hard")):
        ax = axes[row, col]
        for d, rs in sorted(widths.items()):
          pts = sorted((r["overrides"]["data.context_len"], r["metrics"][key])
                       for r in rs if r["label"].startswith(name + " "))
          if not pts:
            continue
          x = [p[0] for p in pts]
          mean = [p[1]["mean"] for p in pts]
          lo = [p[1]["mean"] - p[1]["min"] for p in pts]
          hi = [p[1]["max"] - p[1]["mean"] for p in pts]
          ax.errorbar(x, mean, yerr=[lo, hi], marker="o", capsize=3, label=f"embed {d}")
        ax.axhline(1 / 26, color="gray", ls=":", lw=1, label="chance (1/26)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{name}: hard {key.split('_')[0]} strings", fontsize=10)
        ax.grid(alpha=0.3)
      axes[1, col].set_xlabel("context length (tokens; 55 per string)")
    axes[0, 0].set_ylabel("test EM (mean, min-max over seeds)")
    axes[1, 0].set_ylabel("train EM (mean, min-max)")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Copy task L_c=1, L_p=50, cpu size (2 layers, 1500 steps); easy test EM is "
                 ">= 0.95 for every seed", fontsize=10)
    fig.tight_layout()
    p = os.path.join(out, "fig1.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    paths.append(p)
  t3 = os.path.join(out, "table3.json")
  if os.path.exists(t3):
    rows = json.load(open(t3))
    fig, ax = plt.subplots(figsize=(8, 4.6))
    y = range(len(rows))
    for key, col, off in (("test_cl_easy", "tab:blue", -0.2), ("test_em_hard", "tab:red", 0.2)):
      m = [r["metrics"][key] for r in rows]
      ax.errorbar([v["mean"] for v in m], [i + off for i in y],
                  xerr=[[v["mean"] - v["min"] for v in m], [v["max"] - v["mean"] for v in m]],
                  fmt="o", color=col, capsize=3, label=key.replace("_", " "))
    ax.scatter([r["paper"] for r in rows if r["paper"] is not None],
               [i for i, r in enumerate(rows) if r["paper"] is not None], marker="x", color="k",
               label="paper (easy-test CL, L_c=5)")
    ax.set_yticks(list(y), [r["label"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("accuracy")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    ax.set_title("Table 3 ablations, copy task at cpu size")
    fig.tight_layout()
    p = os.path.join(out, "table3.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    paths.append(p)
  return paths


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--stage", required=True,
                  choices=("table3", "fig1_context", "fig1_width", "plot"))
  ap.add_argument("--out", default="results/copy_task_suite")
  ap.add_argument("--seeds", default=None, help="comma-separated model seeds (default: "
                  "2-11 for table3 and fig1_context, 2-4 for fig1_width)")
  args = ap.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  if args.stage != "plot":
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds
             else [2, 3, 4] if args.stage == "fig1_width" else list(range(2, 12)))
    run_stage(args.stage, args.out, seeds)
  for p in plot(args.out):
    print("wrote", p)


if __name__ == "__main__":
  cli.script(main)
