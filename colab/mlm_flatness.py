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
# # Same pre-training loss, different transfer: MLM on a PCFG, flatness and probes
#
# Seed paper 002: among masked-language models with the same pre-training loss,
# the flatter ones (smaller trace of the Hessian, Tr(H)) transfer better, and
# SGD keeps moving towards flatter solutions after the loss has converged.
# This notebook
#
# 1. samples the paper's PCFG (`el_jax/core/data/resources/pcfg/rule_deep_mlm.txt`) and
#    computes the exact masked-LM conditionals (inside-outside), hence the
#    optimal MLM loss;
# 2. pre-trains a small bidirectional encoder with one masked token per
#    sentence (`configs/pcfg_mlm.py`) and compares its loss with that optimum;
# 3. measures Tr(H) of the pre-training loss with the paper's estimator
#    (appendix B.1: labels sampled from the model) and with Hutchinson probes;
# 4. trains a linear probe on the frozen representations for the paper's
#    downstream task C (the nonterminal over the first two words).
#
# Size: `VARIANT = "cpu"` (minutes on a CPU) or `"test"` (seconds; what
# `tests/test_notebooks.py` runs); the environment variable
# `EL_JAX_NOTEBOOK_VARIANT` overrides it. The whole experiment (Figures 1 / 3,
# 2 and 5) is `experiments/mlm_flatness/`.

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
import numpy as np
from IPython.display import Image, display

from el_jax.infra import checkpoint
from el_jax.infra import tensorboard
from el_jax.core import flatness, probe
from el_jax.run import runner
from el_jax.core import step as step_lib
from el_jax.core.data import downstream, mlm_data
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

VARIANT = os.environ.get("EL_JAX_NOTEBOOK_VARIANT", "cpu")
WORKDIR = os.environ.get("EL_JAX_NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="mlm_")
config = config_lib.get_config("pcfg_mlm", VARIANT, {"seeds": (0,), "progress": True})
print(jax.devices())
print(f"variant {VARIANT!r}: encoder {config.model.num_layers} x {config.model.embed_dim}, "
      f"{config.train.num_steps} steps, workdir {WORKDIR}")

# %% [markdown]
# ## 1. The language and its optimal MLM loss
#
# The corpus (train / valid / test sentences, the exact conditionals of the
# evaluation splits and their fixed masked positions) is built once and cached.

# %%
corpus = mlm_data.build(config.data)
lang = mlm_data.language(config.data)
test = corpus.test
p = test.cond_at_mask
entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), -1)
print(f"{lang.vocab_size} words, sentences of {test.lengths.min()}..{test.lengths.max()} "
      f"words; optimal one-token MLM loss on the test masks: {entropy.mean():.4f} nats "
      f"(+- {entropy.std(ddof=1) / np.sqrt(len(entropy)):.4f})")

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

# %% [markdown]
# ## 2. Pre-training (resumes from its checkpoints if run again)

# %%
summary = runner.run_or_reuse(config, WORKDIR)
agg = summary["aggregate"]
print(f"valid MLM loss {agg['valid_mlm_loss']['mean']:.4f}, gap to the optimum "
      f"{agg['valid_gap']['mean']:.4f}, KL {agg['valid_kl']['mean']:.4f} "
      f"(unigram model: gap {summary['unigram']['valid_gap']:.4f})")
display(Image(os.path.join(WORKDIR, "valid_gap.png")))

# %% [markdown]
# ## 3. Tr(H) of the pre-training loss
#
# The paper's estimator (B.1): near a minimum Tr(H) ~ E_x E_{y ~ p_model} ||grad log
# p(y|x)||^2, with labels drawn from the model (not the data). Standard deviation
# over repetitions on disjoint validation sentences.

# %%
setup = setup_lib.Setup(config)
trainer = setup_lib.Trainer(setup)
params = checkpoint.restore_params(trainer, WORKDIR, 0)
loss_fn, logits_fn = step_lib.ce_objectives(trainer.graphdef)
n = min(64, len(corpus.valid) // 3)
batches = [corpus.valid.subset(np.arange(r * n, (r + 1) * n)).masked_batch(corpus.mask_id)
           for r in range(3)]
b1 = [flatness.fisher_trace(logits_fn, params, b, key=jax.random.key(r), num_samples=50).estimate
      for r, b in enumerate(batches)]
hutch = flatness.hessian_trace_over_batches(loss_fn, params, batches, key=jax.random.key(9),
                                            num_probes=8)
print(f"Tr(H), B.1 estimator: {np.mean(b1):.3f} +- {np.std(b1, ddof=1):.3f}; "
      f"Hutchinson: {hutch.estimate:.3f} +- {hutch.stderr:.3f}")

# %% [markdown]
# ## 4. Linear probe on task C (the nonterminal over the first two words)

# %%
sizes = (2000, 500, 1000) if VARIANT != "test" else (200, 50, 100)
ds = downstream.pcfg_task(lang, "C", *sizes, seed=0, seq_len=corpus.max_len)
feats = {s: probe.encode(trainer.graphdef, params, ds.split(s).tokens, ds.split(s).segment_ids)
         for s in ("train", "valid", "test")}
res = probe.linear_probe(feats["train"], ds.train.labels, feats["valid"], ds.valid.labels,
                         feats["test"], ds.test.labels, ds.num_classes,
                         epochs=100 if VARIANT != "test" else 5)
print(f"task C probe test accuracy {100 * res['test_acc_mean']:.1f} +- "
      f"{100 * res['test_acc_std']:.1f} % over {len(res['test_acc'])} probe seeds "
      f"({ds.num_classes} classes)")
