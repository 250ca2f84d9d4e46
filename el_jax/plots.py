"""Matplotlib figures of training runs (PNG, Agg backend): loss per metric group, accuracy, summaries."""
import collections

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

_GROUP_COLORS = {"easy": "tab:blue", "hard": "tab:red", "rest": "tab:blue", "decision": "tab:red"}
_OTHER_COLORS = ("tab:green", "tab:purple", "tab:orange", "tab:brown")


def _color(group, groups):
  return _GROUP_COLORS.get(group) or _OTHER_COLORS[list(groups).index(group) % len(_OTHER_COLORS)]


def _by_seed(rows, kind):
  out = collections.defaultdict(list)
  for r in rows:
    if r.get("kind") == kind:
      out[r["seed"]].append(r)
  return {s: sorted(v, key=lambda r: r["step"]) for s, v in sorted(out.items())}


def seed_band(rows, key):
  """(steps, mean, min, max) over seeds of `key` at each step of `rows`; None if absent."""
  by_step = collections.defaultdict(list)
  for r in rows:
    if key in r:
      by_step[r["step"]].append(r[key])
  if not by_step:
    return None
  steps = sorted(by_step)
  v = [np.array(by_step[s]) for s in steps]
  return steps, [x.mean() for x in v], [x.min() for x in v], [x.max() for x in v]


def plot_loss_groups(rows_by_run, path, key="loss", groups=("easy", "hard"), group_names=None):
  """Training loss per metric group over steps, one panel per run (paper Figs. 2, 4).

  rows_by_run: {run label: metrics rows}. Thin lines are seeds. `groups` are
  the task's metric groups (`Task.groups`); `group_names` relabels them in the
  legend (e.g. the path-star decision token).
  """
  group_names = {**{g: g for g in groups}, **(group_names or {})}
  n = len(rows_by_run)
  fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.4), squeeze=False)
  for ax, (label, rows) in zip(axes[0], rows_by_run.items()):
    seeds = _by_seed(rows, "train")
    values = []
    for seed, rs in seeds.items():
      for g in groups:
        pts = [(r["step"], max(r[f"{key}_{g}"], 1e-8)) for r in rs if r.get(f"{key}_{g}") is not None]
        if not pts:
          continue
        values.extend(v for _, v in pts)
        ax.plot(*zip(*pts), color=_color(g, groups),
                alpha=0.7, lw=1, label=group_names[g] if seed == min(seeds) else None)
    # E-losses plateau far from 0 (their minimum is not 0): log scale only for wide ranges.
    if values and max(values) / min(values) > 20:
      ax.set_yscale("log")
    ax.set_title(label)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel(f"training {key} (scored tokens)")
  axes[0][0].legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_accuracy(rows, path, groups=("easy", "hard")):
  """EM and CL accuracy over steps per split x group (mean over seeds, band = min..max)."""
  evals = [r for r in rows if r.get("kind") == "eval"]
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
  for ax, metric in zip(axes, ("em", "cl")):
    for split, ls in (("train", "--"), ("valid", ":"), ("test", "-")):
      for g in groups:
        band = seed_band(evals, f"{split}_{metric}_{g}")
        if band is None:
          continue
        steps, mean, lo, hi = band
        ax.plot(steps, mean, ls, color=_color(g, groups), label=f"{split} {g}")
        ax.fill_between(steps, lo, hi, color=_color(g, groups), alpha=0.12)
    ax.set_title(metric.upper() + " accuracy")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_summary(summaries, path):
  """Bar chart: final EM / CL per split x group for each run (mean, min..max over seeds)."""
  cats = [(s, g) for s in ("train", "valid", "test") for g in ("easy", "hard")
          if f"{s}_em_{g}" in next(iter(summaries.values()))["aggregate"]]
  fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
  width = 0.8 / max(len(summaries), 1)
  for ax, metric in zip(axes, ("em", "cl")):
    for i, (label, summ) in enumerate(summaries.items()):
      agg = summ["aggregate"]
      mean = np.array([agg[f"{s}_{metric}_{g}"]["mean"] for s, g in cats])
      lo = mean - np.array([agg[f"{s}_{metric}_{g}"]["min"] for s, g in cats])
      hi = np.array([agg[f"{s}_{metric}_{g}"]["max"] for s, g in cats]) - mean
      x = np.arange(len(cats)) + (i - (len(summaries) - 1) / 2) * width
      ax.bar(x, mean, width, yerr=[lo, hi], capsize=3, label=label)
    ax.set_xticks(np.arange(len(cats)), [f"{s}\n{g}" for s, g in cats])
    ax.set_title(f"final {metric.upper()} accuracy (bars: mean; whiskers: min..max over seeds)",
                 fontsize=9)
    ax.set_ylim(0, 1.05)
    ax.axhline(1 / 26, color="gray", lw=0.8, ls=":")
    ax.grid(alpha=0.3, axis="y")
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_path_accuracy(rows, path_len, path):
  """Path-star: test accuracy of each output token over steps, greedy and teacher forced.

  Mean over seeds (band = min..max). The Clever-Hans pattern: teacher-forced
  accuracy of the tokens after the decision token is 1 while the decision
  token sits near 1/d.
  """
  evals = [r for r in rows if r.get("kind") == "eval"]
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
  colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, path_len))
  for ax, mode in zip(axes, ("greedy", "tf")):
    keys = [(f"test_{mode}_pos{j}", f"token {j}", colors[j]) for j in range(path_len)]
    if mode == "greedy":
      keys.append(("test_em_all", "whole path (EM)", "tab:red"))
    for key, label, color in keys:
      band = seed_band(evals, key)
      if band is None:
        continue
      steps, mean, lo, hi = band
      ax.plot(steps, mean, color=color, label=label, lw=2 if key == "test_em_all" else 1.2,
              marker="o" if len(steps) < 4 else None)  # train.eval_every=0: one point
      ax.fill_between(steps, lo, hi, color=color, alpha=0.12)
    ax.set_title("test, greedy decoding" if mode == "greedy" else "test, teacher forced")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
  axes[0].set_ylabel("accuracy")
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


# ----------------------------------------------------------------------------
# The two figures every grid draws (el_jax.grid rows)


def bars_with_seeds(rows, metrics, path, title=None, ylabel="accuracy", paper=None, chance=None,
                    metric_names=None, ax=None):
  """Bars of each row's mean of each metric, with a dot per seed (grid rows, `el_jax.grid`).

  One group of bars per metric, one bar per row (its label in the legend). `paper`:
  {(row label, metric): the paper's value} drawn as black crosses; `chance`: a dotted line.
  `ax`: draw into these axes (one panel of a larger figure; nothing is saved, `path` unused).
  """
  metric_names = {**{m: m.replace("_", " ") for m in metrics}, **(metric_names or {})}
  fig = None
  if ax is None:
    fig, ax = plt.subplots(figsize=(max(5.0, 1 + len(metrics) * (0.5 + 0.35 * len(rows))), 3.8))
  width = 0.8 / max(len(rows), 1)
  colors = plt.get_cmap("tab10")
  for i, row in enumerate(rows):
    x = np.arange(len(metrics)) + (i - (len(rows) - 1) / 2) * width
    means = [row["aggregate"][m]["mean"] if m in row["aggregate"] else np.nan for m in metrics]
    ax.bar(x, means, width, color=colors(i % 10), alpha=0.75, label=row["label"])
    for xj, m in zip(x, metrics):
      vals = [v for v in row["per_seed"].get(m, []) if v is not None]
      jitter = np.linspace(-0.25, 0.25, len(vals)) * width if len(vals) > 1 else [0.0] * len(vals)
      ax.scatter(xj + np.asarray(jitter), vals, s=10, color="k", zorder=3, lw=0)
      if paper and (row["label"], m) in paper:
        ax.scatter([xj], [paper[(row["label"], m)]], marker="x", s=40, color="k", zorder=4,
                   label="paper" if i == 0 and m == metrics[0] else None)
  if chance is not None:
    ax.axhline(chance, color="gray", lw=0.8, ls=":")
  ax.set_xticks(np.arange(len(metrics)), [metric_names[m] for m in metrics])
  ax.set_ylabel(ylabel + " (bars: mean; dots: seeds)")
  if title:
    ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3, axis="y")
  ax.legend(fontsize=8)
  if fig is not None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def metric_over_steps(rows_by_label, key, path, kind="eval", ylabel=None, title=None,
                      log=False, ax=None):
  """`key` over training steps, one line per run (mean over seeds) with a min..max band.

  rows_by_label: {run label: metrics.jsonl rows}; `kind`: the rows' kind ("eval", "train",
  "flatness"). `ax`: draw into these axes (one panel of a larger figure; nothing is saved,
  `path` unused).
  """
  fig = None
  if ax is None:
    fig, ax = plt.subplots(figsize=(6, 3.6))
  colors = plt.get_cmap("tab10")
  for i, (label, rows) in enumerate(rows_by_label.items()):
    band = seed_band([r for r in rows if r.get("kind") == kind], key)
    if band is None:
      continue
    steps, mean, lo, hi = band
    ax.plot(steps, mean, color=colors(i % 10), label=label, marker="o" if len(steps) < 4 else None)
    ax.fill_between(steps, lo, hi, color=colors(i % 10), alpha=0.15)
  if log:
    ax.set_yscale("log")
  ax.set_xlabel("step")
  ax.set_ylabel(ylabel or key)
  if title:
    ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  if fig is not None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
