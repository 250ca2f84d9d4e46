r"""Seed 001's loss designs as baselines for the E-losses (issue 13, item 6).

  python experiments/loss_baselines.py --stage=select      # the grid on validation, seeds 0-1
  python experiments/loss_baselines.py --stage=test        # the chosen setting, seeds 2-11
  python experiments/loss_baselines.py --stage=label_copy  # the chosen setting on label copy
  python experiments/loss_baselines.py --stage=table       # results/loss_baselines/table.{json,png}
  python experiments/loss_baselines.py --stage=label_copy_grid --losses=spherical_z  # diagnostic

The question: does any loss design already in use fix the copy task's hard strings the way
E1 / E2 / E3 + warmup do? Every loss runs on the copy-task demo setting
(`configs/copy_task.py:cpu`: L_c = 1, L_p = 50, 2 x 128 GPT-NeoX, 1500 steps) with the
demo's warmup (750 steps, chosen there on validation for E1) and its own hyperparameter
chosen from a small grid (`GRID`: 3 values each, then one more value beyond each end that
the 3-value grid chose, both ends for GCE's tie) by mean exact match on the hard strings of
the **validation** split over model seeds 0 and 1 (`select`, results/loss_baselines/
select.json). `test` trains the chosen setting of each on model seeds 2-11 (the demo's
seeds; CE without warmup is the reference row, as in the demo) and compares hard-test EM with
CE without warmup and, for the losses with warmup, with CE + warmup (the loss's own effect at
the same schedule): difference of means, bootstrap 95% interval, exact two-sided permutation p
over the 10 vs 10 seeds, and that p Holm-adjusted over the family of comparisons with the
same reference. `label_copy` runs each chosen setting on `configs/label_copy.py:cpu` (KJV,
fine-tuned from the small GPT-2 of experiments/label_copy.py, 400 steps, warmup 200; model
seeds 0-4), the same comparison on hard test examples.

"reweight" is CE with seed 001's loss-based token reweighting (`loss.reduction="reweight"`);
its grid is the weighting shape. Runs are resumable and reused (runs/loss_baselines/).
"""
import argparse
import os
import sys
import time

from el_jax import cli
from el_jax import runner
from el_jax import workdir as wd

OUT = os.path.join("results", "loss_baselines")
RUNS = os.path.join("runs", "loss_baselines")
WARMUP = 750  # the demo's warmup (half of the 1500 steps)
SELECT_SEEDS = (0, 1)
TEST_SEEDS = tuple(range(2, 12))
LC_SEEDS = tuple(range(5))
LC_STEPS = 400
SELECT_METRIC = "valid_em_hard"
TEST_METRIC = "test_em_hard"

# {loss: [overrides of each grid point]}; every point also gets the warmup.
GRID = {
    "ce": [{"loss.name": "ce"}],
    "label_smoothing": [{"loss.name": "label_smoothing", "loss.eps": e} for e in (0.05, 0.1, 0.2, 0.3)],
    "z_loss": [{"loss.name": "z_loss", "loss.coef": c} for c in (1e-4, 1e-3, 1e-2, 1e-1)],
    "spherical_z": [{"loss.name": "spherical_z", "loss.a": 1.0, "loss.b": b} for b in (0.3, 1.0, 3.0, 5.0)],
    "focal": [{"loss.name": "focal", "loss.gamma": g} for g in (0.5, 1.0, 2.0)],
    "dice": [{"loss.name": "dice", "loss.alpha": a, "loss.gamma": 1.0} for a in (0.0, 1.0, 2.0, 4.0)],
    "gce": [{"loss.name": "gce", "loss.q": q} for q in (0.1, 0.3, 0.5, 0.7, 0.9)],
    "spectral_decoupling": [{"loss.name": "spectral_decoupling", "loss.lam": l}
                            for l in (1e-3, 1e-2, 1e-1, 1.0)],
    "reweight": [{"loss.name": "ce", "loss.reduction": "reweight", "loss.reweight_strategy": s}
                 for s in ("linupper", "quadratic", "extremes")],
    "e1": [{"loss.name": "e1", "loss.lam": l} for l in (0.5, 1.0, 2.0)],
    "e2": [{"loss.name": "e2", "loss.lam": l} for l in (0.5, 1.0, 2.0, 4.0)],
    "e3": [{"loss.name": "e3", "loss.b": b} for b in (0.3, 1.0, 3.0, 10.0)],
}
REFERENCE = {"loss.name": "ce"}  # CE without warmup: the demo's baseline row


def point_name(over):
  keep = {k.split(".")[-1]: v for k, v in over.items() if k != "loss.name"}
  return over.get("loss.name", "ce") + "".join(f"_{k}={v}" for k, v in keep.items())


def copy_config(over, seeds, warmup=True):
  cfg = runner.get_config("copy_task", "cpu", {**over, **({"optim.warmup_steps": WARMUP}
                                                           if warmup else {})})
  cfg.seeds = tuple(seeds)
  cfg.progress = False
  return runner.fit_devices(cfg)


def train(cfg, workdir):
  t0 = time.time()
  summ = runner.run_or_reuse(cfg, workdir)
  return summ, round(time.time() - t0, 1)


def _grid(out, name, make_config, warmup, only):
  """Trains every GRID point of the losses in `only` (all if empty) with `make_config(over)`
  on SELECT_SEEDS; one row per point in <out>/<name>.json, reused for an identical config."""
  results = runner.ResultsFile(os.path.join(out, f"{name}.json"))
  for loss, points in GRID.items():
    if only and loss not in only:
      continue
    for over in points:
      cfg = make_config(over)
      label = point_name(over)
      if results.get(label, cfg) is not None:
        continue
      summ, secs = train(cfg, os.path.join(RUNS, name, label))
      results.put({
          "label": label, "config": runner.config_dict(cfg), "loss": loss, "overrides": over,
          "warmup_steps": warmup, "seeds": list(SELECT_SEEDS), "seconds": secs,
          "per_seed": {m: [f[m] for f in summ["per_seed"]] for m in (SELECT_METRIC,)},
          SELECT_METRIC: summ["aggregate"][SELECT_METRIC]["mean"]})
  return results


def select(out, only=None):
  return _grid(out, "select", lambda over: copy_config(over, SELECT_SEEDS), WARMUP, only)


def chosen(out):
  """{loss: overrides} with the best mean validation hard EM (ties: the first grid point)."""
  rows = {r["label"]: r for r in runner.ResultsFile(os.path.join(out, "select.json")).rows}
  best = {}
  for loss, points in GRID.items():
    scored = [(rows[point_name(p)][SELECT_METRIC], -i, p) for i, p in enumerate(points)
              if point_name(p) in rows]
    if len(scored) < len(points):
      raise SystemExit(f"error: the grid of {loss!r} is not finished ({len(scored)} of "
                       f"{len(points)} points in {out}/select.json); run --stage=select")
    best[loss] = max(scored, key=lambda x: x[:2])[2]
  return best


def run_test(out, only=None):
  best = chosen(out)
  results = runner.ResultsFile(os.path.join(out, "test.json"))
  todo = [("ce_no_warmup", REFERENCE, False)] + [(k, v, True) for k, v in best.items()]
  for loss, over, warm in todo:
    if only and loss not in only:
      continue
    cfg = copy_config(over, TEST_SEEDS, warm)
    if results.get(loss, cfg) is not None:
      continue
    summ, secs = train(cfg, os.path.join(RUNS, "test", point_name(over) + ("_warmup" if warm else "")))
    results.put({**_row(loss, over, warm, summ, secs), "config": runner.config_dict(cfg)})
  return results


def _row(loss, over, warm, summ, secs):
  metrics = ("test_em_easy", "test_em_hard", "valid_em_hard")
  return {"label": loss, "overrides": over, "warmup": warm, "seeds": summ["seeds"],
          "seconds": secs,
          "per_seed": {m: [f[m] for f in summ["per_seed"]] for m in metrics},
          "aggregate": {m: summ["aggregate"][m] for m in metrics}}


def lc_config(over, seeds, warm=True):
  """configs/label_copy.py:cpu (KJV) fine-tuned from the small GPT-2 with `over`."""
  gpt2 = os.path.join("runs", "label_copy", "small_gpt2")
  if not os.path.isdir(gpt2):
    raise SystemExit(f"error: {gpt2} is missing; run `python experiments/label_copy.py "
                     f"--stage=pretrain` first")
  o = {**over, "data.corpus": "kjv", "model.pretrained": gpt2, "train.num_steps": LC_STEPS,
       "train.eval_every": 0, "train.checkpoint_every": LC_STEPS}
  if warm:
    o["optim.warmup_steps"] = LC_STEPS // 2
  cfg = runner.fit_devices(runner.get_config("label_copy", "cpu", o))
  cfg.seeds = tuple(seeds)
  cfg.progress = False
  return cfg


def run_label_copy(out, only=None):
  best = chosen(out)
  results = runner.ResultsFile(os.path.join(out, "label_copy.json"))
  todo = [("ce_no_warmup", REFERENCE, False)] + [(k, v, True) for k, v in best.items()]
  for loss, over, warm in todo:
    if only and loss not in only:
      continue
    cfg = lc_config(over, LC_SEEDS, warm)
    if results.get(loss, cfg) is not None:
      continue
    summ, secs = train(cfg, os.path.join(RUNS, "label_copy", point_name(over)
                                         + ("_warmup" if warm else "")))
    results.put({**_row(loss, over, warm, summ, secs), "config": runner.config_dict(cfg)})
  return results


def label_copy_grid(out, only=None):
  """A diagnostic, not a selection the table uses: the copy-task grid of the given losses on
  label copy's validation split (model seeds 0-1), to see whether a setting chosen at V = 29
  carries over to GPT-2's V = 50,257 (results/loss_baselines/label_copy_grid.json)."""
  if not only:
    raise SystemExit("error: --stage=label_copy_grid needs --losses (it is a diagnostic)")
  return _grid(out, "label_copy_grid", lambda over: lc_config(over, SELECT_SEEDS),
               LC_STEPS // 2, only)


def table(out):
  res = {"command": "python experiments/loss_baselines.py --stage=select|test|label_copy|"
                    "label_copy_grid|table",
         "select_metric": SELECT_METRIC, "grid": GRID, "warmup_steps": WARMUP,
         "chosen": chosen(out)}
  for part in ("test", "label_copy"):
    path = os.path.join(out, f"{part}.json")
    if not os.path.exists(path):
      continue
    rows = runner.ResultsFile(path).rows
    for key, ref_label in (("vs_ce", "ce_no_warmup"), ("vs_ce_warmup", "ce")):
      ref = next((r for r in rows if r["label"] == ref_label), None)
      if ref is None:
        continue
      # Against CE + warmup: the losses with warmup only (the loss's effect, warmup fixed).
      others = [r for r in rows if r is not ref and (key == "vs_ce" or r["warmup"])]
      for r in others:
        r[key] = runner.compare(r["per_seed"][TEST_METRIC], ref["per_seed"][TEST_METRIC])
      # Holm over the family of comparisons against the same reference.
      for r, q in zip(others, runner.holm([r[key]["p_value"] for r in others])):
        r[key]["p_holm"] = q
    res[part] = rows
    # The best of seed 001's losses (highest mean hard test EM; not E1/E2/E3) against E1.
    rows_by = {r["label"]: r for r in rows}
    base = [r for r in rows if r["label"] not in ("ce_no_warmup", "ce", "e1", "e2", "e3")]
    if base and "e1" in rows_by:
      best = max(base, key=lambda r: r["aggregate"][TEST_METRIC]["mean"])
      res[f"{part}_best_baseline_vs_e1"] = {
          "baseline": best["label"], **runner.compare(best["per_seed"][TEST_METRIC],
                                                      rows_by["e1"]["per_seed"][TEST_METRIC])}
  pre = os.path.join("runs", "label_copy", "text_lm")
  old = os.path.join(out, "table.json")
  if os.path.exists(old) and "pretraining" in wd.read_json(old):  # kept when runs/ is gone
    res["pretraining"] = wd.read_json(old)["pretraining"]
  if os.path.exists(os.path.join(pre, "summary.json")):  # the small GPT-2 the label-copy runs used
    summ = wd.read_json(os.path.join(pre, "summary.json"))
    res["pretraining"] = {
        "command": "python experiments/label_copy.py --stage=pretrain", "workdir": pre,
        "train_seconds": next((r["time_s"] for r in reversed(runner.read_metrics(pre))
                               if r.get("kind") == "train"), None),
        **{k: summ["aggregate"][k]["mean"] for k in ("valid_ce_text", "valid_ppl_text")}}
  grid = os.path.join(out, "label_copy_grid.json")
  if os.path.exists(grid):  # the diagnostic: copy-task grid points on label copy's valid split
    res["label_copy_grid"] = [{k: r[k] for k in ("label", "loss", "seeds", "per_seed",
                                                 SELECT_METRIC)}
                              for r in runner.ResultsFile(grid).rows]
  wd.write_json(os.path.join(out, "table.json"), res)
  text = table_text(res)
  print(text)
  plot(res, os.path.join(out, "table.png"))
  return res


def table_text(res):
  lines = []
  for part, title in (("test", "copy task (demo setting, seeds 2-11)"),
                      ("label_copy", "label copy (KJV, small GPT-2 fine-tuned, seeds 0-4)")):
    if part not in res:
      continue
    lines.append(f"{title}: test EM easy / hard, mean (min, max); hard EM minus CE's without "
                 f"warmup / with warmup [bootstrap 95%], permutation p (Holm over the family)")
    for r in res[part]:
      agg = r["aggregate"]
      tails = []
      for key, ref_label in (("vs_ce", "ce_no_warmup"), ("vs_ce_warmup", "ce")):
        cmp = r.get(key)
        tails.append(f"{cmp['diff']:+.3f} [{cmp['ci95'][0]:+.3f}, {cmp['ci95'][1]:+.3f}] "
                     f"p {cmp['p_value']:.2g} ({cmp['p_holm']:.2g})" if cmp else
                     f"{'reference' if r['label'] == ref_label else '-':38s}")
      lines.append(f"  {r['label']:20s} {point_name(r['overrides']):28s} "
                   f"{runner.format_mean_range(agg['test_em_easy']):22s} "
                   f"{runner.format_mean_range(agg['test_em_hard']):22s} " + " | ".join(tails))
    c = res.get(f"{part}_best_baseline_vs_e1")
    if c:
      lines.append(f"  best of seed 001's losses, {c['baseline']}, minus e1: {c['diff']:+.3f} "
                   f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] p {c['p_value']:.2g}")
  return "\n".join(lines)


def plot(res, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  parts = [p for p in ("test", "label_copy") if p in res]
  if not parts:
    return
  fig, axes = plt.subplots(1, len(parts), figsize=(6 * len(parts), 4), squeeze=False)
  for ax, part in zip(axes[0], parts):
    rows = res[part]
    for i, r in enumerate(rows):
      v = r["per_seed"][TEST_METRIC]
      ax.bar(i, np.mean(v), color="C3" if r["label"].startswith("e") and r["label"][1:].isdigit()
             else "C0", alpha=0.6)
      ax.plot([i] * len(v), v, "k.", ms=3)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["label"] for r in rows], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("hard test exact match")
    ax.set_ylim(0, 1.02)
    ax.set_title({"test": "copy task (10 seeds)", "label_copy": "label copy, KJV (5 seeds)"}[part])
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--stage", required=True,
                 choices=("select", "test", "label_copy", "label_copy_grid", "table"))
  p.add_argument("--losses", default="", help="only these losses (comma-separated GRID keys)")
  p.add_argument("--out", default=OUT)
  a = p.parse_args(argv)
  only = {s for s in a.losses.split(",") if s}
  unknown = only - set(GRID) - {"ce_no_warmup"}
  if unknown:
    raise SystemExit(f"error: unknown --losses {sorted(unknown)}; valid: {list(GRID)}")
  os.makedirs(a.out, exist_ok=True)
  {"select": select, "test": run_test, "label_copy": run_label_copy,
   "label_copy_grid": label_copy_grid}.get(
      a.stage, lambda out, only=None: table(out))(a.out, only)
  print(f"results: {a.out}", file=sys.stderr)


if __name__ == "__main__":
  cli.script(main)
