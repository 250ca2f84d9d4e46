# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Implicit bias of next-token prediction in linear models (Fig. 1 demo)
#
# m = 3 contexts with 2-d embeddings, V = 5 words, |S_j| = 3. We check that
# the instance is NTP_H-compatible and NTP-separable, solve the NTP-SVM for
# W_mm, compute the log-odds solution W* in the data subspace F, and watch
# gradient descent: CE -> H, ||W_k|| -> inf, W_k / ||W_k|| -> W_mm / ||W_mm||
# and P_F(W_k) -> W*.

# %%
EL_JAX_REPO = ""  # <- set this to your el_jax repository URL (git clone URL), e.g. https://github.com/<you>/el_jax.git
# Installs el_jax where it is not importable (Colab, a fresh VM): clones EL_JAX_REPO
# (the environment variable EL_JAX_REPO, if set, wins) into ./el_jax_repo and installs it
# editable. Where el_jax is importable (a checkout after `make venv`, the tests) it does
# nothing. The same cell opens every notebook in colab/ (tests/test_notebooks.py checks it).
import importlib
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("el_jax") is None:
  _repo = os.environ.get("EL_JAX_REPO") or EL_JAX_REPO
  if not _repo:
    raise RuntimeError(
        "el_jax is not installed: set EL_JAX_REPO in the first code cell of this notebook to "
        "the git URL of your el_jax repository (e.g. https://github.com/<you>/el_jax.git) "
        "and run that cell again")
  if not os.path.isdir("el_jax_repo"):
    subprocess.run(["git", "clone", "-q", _repo, "el_jax_repo"], check=True)
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "el_jax_repo"], check=True)
  # An editable install is a .pth file, read at start-up only: put the checkout on sys.path
  # so that this kernel imports el_jax (and finds its configs/ folder) without a restart.
  sys.path.insert(0, os.path.abspath("el_jax_repo"))
  importlib.invalidate_caches()

# %% tags=["parameters"]
# fig1: the paper's setting; the tests run "test" (fewer iterations).
VARIANT = os.environ.get("EL_JAX_NOTEBOOK_VARIANT", "fig1")

# %%
import matplotlib.pyplot as plt
import numpy as np

from el_jax.core.ntp import dynamics, geometry, plots
from el_jax.run import ntp_train as train
from el_jax.run import config as config_lib

config = config_lib.get_config("ntp_linear", VARIANT)
ds = train.build_data(config)
info, svm = train.describe(ds)
print({k: info[k] for k in ("m", "d", "V", "entropy", "compatible", "separable",
                            "dim_F", "norm_W_mm", "margin", "norm_W_star")})

# %% [markdown]
# W_mm satisfies every margin constraint with equality on its active set and
# is orthogonal to F; W* solves every log-odds equation and lies in F.

# %%
W_star = geometry.log_odds_solution(ds.H, ds.P)
proj = geometry.projector(ds.H, ds.P)
print("min margin constraint of W_mm:", svm.min_constraint)
print("||P_F(W_mm)||:", np.linalg.norm(proj.onto_f(svm.W)))
print("||P_F(W*) - W*||:", np.linalg.norm(proj.onto_f(W_star) - W_star))

# %% [markdown]
# Gradient descent from W = 0 (the whole run is one `lax.scan`).

# %%
prob = dynamics.targets(ds, svm)
W, hist = dynamics.train(prob, "gd", lr=config.lr.gd, steps=config.steps,
                         log_every=config.log_every)
for k in dynamics.METRICS:
  print(f"{k:>9}: {hist[k][-1]:.4g}")

# %%
fig = plt.figure(figsize=(13, 3.4))
gs = fig.add_gridspec(1, 5, width_ratios=[1.3, 1, 1, 1, 1])
plots.plot_geometry(fig.add_subplot(gs[0]), ds.H, ds.P, W, "h_j and w_v (GD, final)")
plots.plot_convergence([fig.add_subplot(gs[i]) for i in range(1, 5)], [hist], ["GD"])
fig.tight_layout()
plt.show()
