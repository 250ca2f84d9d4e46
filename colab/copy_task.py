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
# Colab / a fresh VM: el_jax is not installed there. Clone the repository (the
# configs/ folder is not part of the pip package) and install it with its
# dependencies. In a checkout (and in the tests) `import el_jax` works and
# this cell does nothing.
# NOTE: https://github.com/el-jax/el_jax is a placeholder URL: replace it by
# the repository's real location.
import os
import subprocess
import sys

try:
  import el_jax  # noqa: F401
except ImportError:
  REPO_URL = "https://github.com/el-jax/el_jax"  # placeholder, see above
  if not os.path.isdir("el_jax_repo"):
    subprocess.run(["git", "clone", "--depth=1", REPO_URL, "el_jax_repo"], check=True)
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "el_jax_repo"], check=True)
  os.chdir("el_jax_repo")
  sys.path.insert(0, os.getcwd())

import jax

print(jax.devices())

# %%
import tempfile

from IPython.display import Image, Markdown, display

from configs import copy_task as copy_config
from el_jax import plots
from el_jax import train
from el_jax.data import copy_task

VARIANT = os.environ.get("EL_JAX_NOTEBOOK_VARIANT", "cpu")
WORKDIR = os.environ.get("EL_JAX_NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="el_jax_copy_")

# The runs of the config file's sweep: CE, and E1 (lam=4) with 200 warmup steps.
# (At `test` size the 8 training steps end inside the warmup: a smoke test only.)
RUNS = []
copy_config.sweep(lambda **overrides: RUNS.append(overrides))


def run_label(overrides):
  label = overrides["loss.name"].upper()
  return label + (" + warmup" if overrides.get("optim.warmup_steps") else "")


def make_config(overrides):
  config = copy_config.get_config(VARIANT)
  for key, value in overrides.items():
    *path, name = key.split(".")
    node = config
    for p in path:
      node = node[p]
    node[name] = value
  # The most devices that split a batch's contexts evenly (e.g. 8 TPU cores).
  k = copy_task.strings_per_context(train.task_spec(config), config.data.context_len)
  contexts = config.train.batch_strings // k
  n = len(jax.devices())
  while contexts % n:
    n -= 1
  config.num_devices = n
  return config


print(f"variant {VARIANT!r}, runs {[run_label(o) for o in RUNS]}, workdir {WORKDIR}")

# %%
summaries, rows = {}, {}
for overrides in RUNS:
  label = run_label(overrides)
  workdir = os.path.join(WORKDIR, label.replace(" + ", "_").lower())
  summaries[label] = train.train_and_evaluate(make_config(overrides), workdir)
  rows[label] = train.MetricsWriter(os.path.join(workdir, "metrics.jsonl")).rows()

# %% [markdown]
# Final accuracy (mean over model seeds; min..max in brackets).

# %%
COLUMNS = [(s, m, g) for m in ("em", "cl") for s in ("train", "test") for g in ("easy", "hard")]


def cell(stats):
  if stats["min"] == stats["max"]:
    return f"{stats['mean']:.3f}"
  return f"{stats['mean']:.3f} ({stats['min']:.2f}..{stats['max']:.2f})"


table = ["| run | " + " | ".join(f"{s} {m.upper()} {g}" for s, m, g in COLUMNS) + " |",
         "|---" * (len(COLUMNS) + 1) + "|"]
for label, summary in summaries.items():
  agg = summary["aggregate"]
  table.append(f"| {label} | " + " | ".join(cell(agg[f"{s}_{m}_{g}"]) for s, m, g in COLUMNS)
               + " |")
display(Markdown("\n".join(table)))

# %% [markdown]
# Training loss of the scored tokens, easy vs hard strings (thin lines: seeds).

# %%
path = os.path.join(WORKDIR, "loss_easy_hard.png")
plots.plot_loss_groups(rows, path)
display(Image(filename=path))

# %% [markdown]
# Greedy-decoding accuracy during training, per run (dashed: train, solid: test).

# %%
for label, run_rows in rows.items():
  path = os.path.join(WORKDIR, f"accuracy_{label.replace(' + ', '_').lower()}.png")
  plots.plot_accuracy(run_rows, path)
  display(Markdown(f"**{label}**"))
  display(Image(filename=path))

# %%
path = os.path.join(WORKDIR, "summary.png")
plots.plot_summary(summaries, path)
display(Image(filename=path))
