"""Figures of results (PNG, Agg backend) drawn from grid rows (`el_jax.run.grid`)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def bars_with_seeds(rows, metrics, path, title=None, ylabel="accuracy", paper=None, chance=None,
                    metric_names=None, ax=None):
  """Bars of each row's mean of each metric, with a dot per seed (grid rows, `el_jax.run.grid`).

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
