# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Equal learning on the padded-shifted copy task
#
# Seed paper 000: with cross-entropy (CE) a small transformer learns the *easy*
# strings (padding = Caesar-shifted copy of the sequence) first and the *hard*
# ones (random padding) late or never; the E1 loss (CE plus a penalty on the
# spread of the margins) with learning-rate warmup learns both groups more
# evenly. This notebook trains both on one fixed dataset and plots the
# training loss of each group and the exact-match (EM) and character-level
# (CL) accuracy of greedy decoding.
#
# Size: `VARIANT = "cpu"` (the `make demo` setting, a few minutes on a CPU) or
# `"test"` (seconds; what `tests/test_notebooks.py` runs). The environment
# variable `EL_JAX_NOTEBOOK_VARIANT` overrides it. On Colab, pick a TPU or GPU
# runtime for the `cpu` variant or larger (`paper_lc1`, `paper`).

# %%
# Colab / a fresh VM: only when el_jax is not importable (never in the tests):
# clone the repository (set EL_JAX_REPO to its URL) and install it editable,
# so that `el_jax.runner` finds the checkout's `configs/` folder.
import importlib
import importlib.util
import os
import site
import subprocess
import sys

if importlib.util.find_spec("el_jax") is None:
  repo = os.environ.get("EL_JAX_REPO", "https://github.com/el-jax/el_jax.git")
  subprocess.run(["git", "clone", "-q", repo, "el_jax_repo"], check=True)
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "el_jax_repo"],
                 check=True)
  # The editable install takes effect through a .pth file, which Python reads
  # at start-up only: read the site folders again so that this kernel can
  # import el_jax without a restart.
  importlib.invalidate_caches()
  for d in site.getsitepackages():
    site.addsitedir(d)

import jax

print(jax.devices())

# %%
import tempfile

from IPython.display import Image, Markdown, display

from el_jax import demo
from el_jax import plots
from el_jax import runner

VARIANT = os.environ.get("EL_JAX_NOTEBOOK_VARIANT", "cpu")
WORKDIR = os.environ.get("EL_JAX_NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="el_jax_copy_")

# The runs of the config file's sweep(): CE, CE + warmup and E1 + warmup (what `make demo` runs;
# the E1 setting was chosen on the validation split by experiments/copy_task_cpu_sweep.py).
# (At `test` size the 8 training steps end inside the warmup: a smoke test only.)
print(f"variant {VARIANT!r}, runs {list(demo.demo_runs())}, workdir {WORKDIR}")

# %%
out = demo.run(VARIANT, WORKDIR)

# %% [markdown]
# Final accuracy by greedy decoding: mean (min, max) over model seeds, per split
# (train, valid, test) and group; then each run against CE on hard test strings
# (difference of means, bootstrap interval, permutation-test p-value over seeds).

# %%
print(out["table"])

# %% [markdown]
# Training loss of the scored tokens, easy vs hard strings (thin lines: seeds).

# %%
display(Image(filename=os.path.join(WORKDIR, "loss_easy_hard.png")))

# %% [markdown]
# Greedy-decoding accuracy during training, per run (dashed: train, dotted: valid, solid: test).

# %%
for label in out["runs"]:
  run_rows = runner.read_metrics(os.path.join(WORKDIR, label))
  path = os.path.join(WORKDIR, f"accuracy_{label}.png")
  plots.plot_accuracy(run_rows, path)
  display(Markdown(f"**{label}**"))
  display(Image(filename=path))

# %% [markdown]
# Final EM / CL per split x group (bars: mean over seeds; whiskers: min..max).

# %%
display(Image(filename=os.path.join(WORKDIR, "summary.png")))
