"""Matplotlib figures of training runs (PNG, Agg backend): loss per metric group, accuracy, a
metric over steps. What a result draws from its rows is in `el_jax.report.plots`."""
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
