"""Flatness measurements inside a training loop, and their plot over steps.

The train loop calls `measure_during_training` every `config.flatness.every`
steps on a fixed list of batches and appends the returned dict to
metrics.jsonl. Pass the same `loss_fn` / `logits_fn` objects every time (define
them once, outside the loop): they are static arguments of the jitted
estimators, and a fresh closure per call would recompile each time.
"""
import math

import jax
import numpy as np

import el_jax.core.flatness.fisher as fisher_lib
import el_jax.core.flatness.spectrum as lanczos_lib
import el_jax.core.flatness.trace as trace_lib

KEYS = ("hessian_trace", "fisher_trace", "top_eigenvalue")


def measure_during_training(flat_cfg, *, loss_fn, logits_fn, params, batches, key):
  """Hessian trace, Fisher trace and top eigenvalue of the loss over `batches`.

  Args:
    flat_cfg: ConfigDict with `method` ("hutchinson"|"hutch++"|"exact"),
      `num_probes`, `num_batches`, `fisher_samples` and `lanczos_steps`
      (0 skips the top eigenvalue), optionally `fisher_probe` ("labels" |
      "rademacher", see `fisher_trace_over_batches`); `every` is read by the caller.
    loss_fn: `loss_fn(params, batch) -> scalar`, deterministic (no dropout).
    logits_fn: `logits_fn(params, batch) -> (logits [..., V], mask [...])`.
    params: parameter pytree.
    batches: list of same-structure batch pytrees (numpy arrays).
    key: PRNG key.

  Returns:
    dict of floats: hessian_trace, hessian_trace_stderr, fisher_trace,
    fisher_trace_stderr, top_eigenvalue (if lanczos_steps > 0),
    flatness_num_examples and flatness_num_positions.
  """
  nb = int(flat_cfg.num_batches) or None
  k_h, k_f, k_l = jax.random.split(key, 3)
  tr = trace_lib.hessian_trace_over_batches(
      loss_fn, params, batches, key=k_h, num_probes=int(flat_cfg.num_probes),
      method=flat_cfg.method, num_batches=nb)
  fi = fisher_lib.fisher_trace_over_batches(
      logits_fn, params, batches, key=k_f, num_samples=int(flat_cfg.fisher_samples),
      probe=flat_cfg.get("fisher_probe", "labels"), num_batches=nb)
  out = {
      "hessian_trace": tr.estimate,
      "hessian_trace_stderr": tr.stderr,
      "fisher_trace": fi.estimate,
      "fisher_trace_stderr": fi.stderr,
      "flatness_num_examples": tr.num_examples,
      "flatness_num_positions": fi.num_positions,
  }
  steps = int(flat_cfg.get("lanczos_steps", 0))
  if steps > 0:
    top = lanczos_lib.top_eigenvalues_over_batches(
        loss_fn, params, batches, key=k_l, k=1, num_steps=steps, num_batches=nb,
        validate=False)
    out["top_eigenvalue"] = float(top[0])
  return out


def plot_flatness(metrics_rows, path, *, title=None):
  """PNG of Hessian trace, Fisher trace and top eigenvalue over steps.

  Args:
    metrics_rows: dicts with "step" (e.g. the lines of metrics.jsonl); rows
      without flatness keys are skipped. "loss"/"train_loss" is drawn too if present.
    path: output PNG path.
    title: optional figure title.

  Returns:
    `path`.
  """
  import matplotlib.pyplot as plt
  rows = [r for r in metrics_rows if "hessian_trace" in r]
  if not rows:
    raise ValueError("no rows with 'hessian_trace' to plot")
  step = np.array([r["step"] for r in rows])
  keys = [k for k in KEYS if any(k in r for r in rows)]
  fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4), squeeze=False)
  for ax, k in zip(axes[0], keys):
    y = np.array([r.get(k, math.nan) for r in rows], float)
    se = np.array([r.get(k + "_stderr", 0.0) for r in rows], float)
    ax.errorbar(step, y, yerr=np.nan_to_num(se), marker="o", ms=3, capsize=2)
    ax.set_xlabel("step")
    ax.set_title(k.replace("_", " "))
    if np.all(y[np.isfinite(y)] > 0):
      ax.set_yscale("log")
  loss_key = next((k for k in ("train_loss", "loss") if any(k in r for r in metrics_rows)), None)
  if loss_key:
    lrows = [r for r in metrics_rows if loss_key in r]
    twin = axes[0][0].twinx()
    twin.plot([r["step"] for r in lrows], [r[loss_key] for r in lrows], color="gray", lw=0.8)
    twin.set_ylabel(loss_key, color="gray")
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path
