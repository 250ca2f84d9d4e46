"""Plots of the paper's Fig. 1 (geometry + four convergence panels) and the optimizer comparison.

Functions take NumPy arrays and histories from `dynamics.train`, draw on
matplotlib axes and save PNGs at modest dpi (the files are committed).
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DPI = 90
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def plot_geometry(ax, H, P, W, title="context and word embeddings"):
  """d = 2: context embeddings h_j (thick arrows) and word embeddings w_v (rows of W).

  Words are labelled with the contexts they follow, so one can see each w_v
  point towards the h_j of its supports and away from the others.
  """
  if H.shape[1] != 2:
    raise ValueError(f"the geometry panel needs d = 2; got d = {H.shape[1]}")
  S = P > 0
  hs = np.abs(H).max()
  ws = np.abs(W).max() + 1e-300
  for j, h in enumerate(H):
    ax.annotate("", xy=h / hs, xytext=(0, 0),
                arrowprops=dict(arrowstyle="-|>", lw=2.5, color=COLORS[j % len(COLORS)]))
    ax.text(*(1.08 * h / hs), f"h{j}", color=COLORS[j % len(COLORS)], fontsize=10)
  for v, w in enumerate(W):
    ctx = np.flatnonzero(S[:, v])
    ax.annotate("", xy=w / ws, xytext=(0, 0),
                arrowprops=dict(arrowstyle="->", lw=1.2, ls="--", color="0.3"))
    ax.text(*(1.05 * w / ws), f"w{v}:" + ",".join(map(str, ctx)), fontsize=8, color="0.2")
  ax.set_xlim(-1.3, 1.3)
  ax.set_ylim(-1.3, 1.3)
  ax.set_aspect("equal")
  ax.axhline(0, color="0.85", lw=0.5)
  ax.axvline(0, color="0.85", lw=0.5)
  ax.set_title(title, fontsize=9)


def plot_convergence(axes, hists, labels=None):
  """Four panels: CE - H, ||W_k||, 1 - cos with W_mm (W_k and W_k - W*), ||P_F(W_k) - W*||."""
  labels = labels or [None] * len(hists)
  for i, (h, lab) in enumerate(zip(hists, labels)):
    c = COLORS[i % len(COLORS)]
    k = np.maximum(h["step"], 1)
    axes[0].loglog(k, h["gap"], color=c, label=lab)
    axes[1].plot(k, h["norm"], color=c, label=lab)
    axes[2].loglog(k, np.maximum(1 - h["cos_mm"], 1e-16), color=c, label=lab)
    axes[2].loglog(k, np.maximum(1 - h["cos_diff"], 1e-16), color=c, ls="--")
    axes[3].loglog(k, np.maximum(h["dist_f"], 1e-16), color=c, label=lab)
  titles = ("CE(W_k) - H", "||W_k||", "1 - cos(W_k, W_mm)  (dashed: W_k - W*)",
            "||P_F(W_k) - W*||")
  for ax, t in zip(axes, titles):
    ax.set_title(t, fontsize=9)
    ax.set_xlabel("iteration", fontsize=8)
    ax.tick_params(labelsize=7)
  if any(labels):
    axes[0].legend(fontsize=8)


def fig1(H, P, W, hist, path):
  """The paper's Fig. 1: geometry (left) and the four convergence panels (right)."""
  fig = plt.figure(figsize=(13, 3.4))
  gs = fig.add_gridspec(1, 5, width_ratios=[1.3, 1, 1, 1, 1])
  plot_geometry(fig.add_subplot(gs[0]), H, P, W, "h_j and w_v (GD, final)")
  plot_convergence([fig.add_subplot(gs[i]) for i in range(1, 5)], [hist], ["GD"])
  fig.tight_layout()
  fig.savefig(path, dpi=DPI)
  plt.close(fig)


def compare(hists, path, title=None):
  """Appendix figure: the four convergence panels, one line per optimizer."""
  fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
  plot_convergence(axes, list(hists.values()), list(hists.keys()))
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=DPI)
  plt.close(fig)


def reg_path(Bs, ms, path):
  """Regularisation path: CE - H and alignment of W_B with W_mm against the bound B."""
  fig, axes = plt.subplots(1, 3, figsize=(10, 3))
  axes[0].loglog(Bs, ms["gap"], "o-")
  axes[0].set_title("CE(W_B) - H", fontsize=9)
  axes[1].semilogx(Bs, ms["cos_mm"], "o-", label="W_B")
  axes[1].semilogx(Bs, ms["cos_diff"], "s--", label="W_B - W*")
  axes[1].set_title("cos with W_mm", fontsize=9)
  axes[1].legend(fontsize=8)
  axes[2].loglog(Bs, ms["dist_f"], "o-")
  axes[2].set_title("||P_F(W_B) - W*||", fontsize=9)
  for ax in axes:
    ax.set_xlabel("B", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=DPI)
  plt.close(fig)
