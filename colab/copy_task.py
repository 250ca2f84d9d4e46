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

# %%
import tempfile

import jax
from IPython.display import Image, Markdown, display

import el_jax
from el_jax.infra import metrics as metrics_lib
from el_jax.infra import plots
from el_jax.infra import tensorboard

# The experiment folders are in the checkout el_jax is installed from (experiments/demo/).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(el_jax.__file__))))
from experiments.demo import config as demo_config  # noqa: E402
from experiments.demo import run as demo  # noqa: E402

VARIANT = os.environ.get("EL_JAX_NOTEBOOK_VARIANT", "cpu")
WORKDIR = os.environ.get("EL_JAX_NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="el_jax_copy_")
print(jax.devices())

# The runs of the config file's sweep(): CE, CE + warmup and E1 + warmup (what `make demo` runs;
# the E1 setting was chosen on the validation split by experiments/copy_task_cpu_sweep/).
# (At `test` size the 8 training steps end inside the warmup: a smoke test only.)
config = demo_config.get_config(VARIANT)
config.results_dir = WORKDIR
print(f"variant {VARIANT!r}, runs {list(demo.demo_runs())}, workdir {WORKDIR}")

# %% [markdown]
# ## The curves in TensorBoard
#
# Every run also writes the rows of its metrics.jsonl as TensorBoard events
# (`<run>/tb/seed_<s>/`, a tag per kind and key: `train/loss`, `eval/test_em_hard`). On
# Colab and in Jupyter this cell shows TensorBoard here, before training starts: it reloads
# its data every 30 s, so the curves grow while the next cell trains.
# (`EL_JAX_NOTEBOOK_TENSORBOARD=0` skips it, as the tests do: no server where none can be
# reached.)

# %%
if tensorboard.notebook_should_show(WORKDIR):
  print(f"TensorBoard on {WORKDIR} (it reloads every 30 s):")
  # %load_ext tensorboard
  # %tensorboard --logdir $WORKDIR

# %%
out = demo.run(config)

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
for row in out["rows"]:
  label = row["label"]
  run_rows = metrics_lib.read_rows(row["workdir"])
  path = os.path.join(WORKDIR, f"accuracy_{label}.png")
  plots.plot_accuracy(run_rows, path)
  display(Markdown(f"**{label}**"))
  display(Image(filename=path))

# %% [markdown]
# Final EM per split x group (bars: mean over seeds; dots: the seeds).

# %%
display(Image(filename=os.path.join(WORKDIR, "summary.png")))
