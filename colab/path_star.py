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
# # Clever Hans on path-star graphs: CE against E1 + warmup on G(2,3)
#
# **The task** (Bachmann & Nagarajan 2024, "The pitfalls of next-token prediction"). A
# path-star graph G(d, l) has a source node with d arms of l - 1 nodes each. The model
# reads the shuffled edge list, then the source and a goal (the last node of one arm), and
# must write the path from the source to the goal: l nodes. Here G(2, 3) over node ids
# 0..49: the path is (source, decision, goal), where the *decision* token, the first node
# after the source, is the goal's parent.
#
# **Their claim.** Trained with teacher forcing, a transformer learns a "Clever Hans" cheat:
# given the true previous node, every later path token is the one edge leaving it, so those
# tokens are learnt at once, and the source and goal are copies of the input. That leaves
# the decision token, the only one that needs planning (find the goal's parent in the edge
# list), without a useful signal: it stays at chance, loss log d, accuracy 1/d.
#
# **Seed paper 000's claim** (section 5.1, Table 1): the E1 loss (CE plus lam log(1 + the
# mean squared margin), which keeps the easy tokens from running ahead) with learning-rate
# warmup learns the decision token more evenly with the rest. Greedy test accuracy, mean
# (min, max) over 5 seeds, GPT-mini (6 layers x 384): G(2,3) CE 0.289 (0.123, 0.472), E1 +
# warmup 0.655 (0.486, 0.976); G(5,3) CE 0.001 (0.000, 0.005), E1 + warmup 0.117 (0.094, 0.139).
#
# **What to look for.**
# 1. The per-token training losses (cross-entropy of the decision token and of the other
#    path tokens): under CE the other tokens fall towards 0 while the decision token stays
#    near log d = log 2 = 0.69 nats; under E1 + warmup the two groups should move together.
# 2. The test accuracy per output token: token 0 (the source) and token 2 (the goal) near 1,
#    token 1 (the decision) at 1/d = 0.5 unless the model learnt to plan; the whole-path
#    exact match (EM) follows the decision token.
# 3. The final table: test EM of CE and of E1 + warmup, the paper's numbers beside them.
#
# Size: `VARIANT = "cpu"` (`configs/path_star.py:cpu`: 2 layers x 128, 50,000 training
# graphs, batch 32, 2,500 steps; about 2 minutes per seed and loss on 2 CPU cores) or
# `"test"` (seconds; what `tests/test_notebooks.py` runs; a smoke test, its 8 steps end
# inside E1's warmup). The environment variable `EL_JAX_NOTEBOOK_VARIANT` overrides it.
# `"paper"` (GPT-mini, 200,000 graphs, 100,000 steps per run) needs an accelerator runtime.
# The whole table (G(2,3) and G(5,3), the CE + warmup control, 5 seeds, permutation tests) is
# `experiments/path_star_table1/`.

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

from el_jax.infra import metrics as metrics_lib
from el_jax.infra import plots
from el_jax.infra import tensorboard
from el_jax.run import runner
from el_jax.report import stats
from el_jax.run import config as config_lib

VARIANT = os.environ.get("EL_JAX_NOTEBOOK_VARIANT", "cpu")
WORKDIR = os.environ.get("EL_JAX_NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="el_jax_path_star_")
# Model seeds: the paper and results/path_star_table1/ use 0-4; two keep the `cpu` variant
# under 10 minutes on 2 CPU cores. None: the variant's own (test: 0; cpu, paper: 0-4).
SEEDS = (0, 1) if VARIANT == "cpu" else None

# G(2,3) over 50 nodes, tested on the reference implementation's own 20,000 test graphs
# (shipped with el_jax: data.test_file="reference"; the `test` variant reads the first 40).
GRAPH = {"data.degree": 2, "data.path_len": 3, "data.num_nodes": 50,
         "data.test_file": "reference"}
# experiments/path_star_table1/'s runs "CE" (the config's warmup: the reference's 100
# steps) and "E1 + warmup" (lam 1, 1000 warmup steps): label -> (workdir name, overrides).
RUNS = {"CE": ("ce", {"loss.name": "ce"}),
        "E1 + warmup": ("e1_warmup", {"loss.name": "e1", "loss.e1.lam": 1.0,
                                      "optim.warmup_steps": 1000})}
PAPER = {"CE": (0.289, 0.123, 0.472), "E1 + warmup": (0.655, 0.486, 0.976)}  # Table 1, G(2,3)

configs = {label: config_lib.get_config("path_star", VARIANT,
                                    {**GRAPH, **overrides, "progress": True,
                                     **({"seeds": SEEDS} if SEEDS else {})})
           for label, (_, overrides) in RUNS.items()}
c = configs["CE"]
print(jax.devices())
print(f"variant {VARIANT!r}: G({c.data.degree},{c.data.path_len}) over {c.data.num_nodes} "
      f"nodes, model {c.model.num_layers} x {c.model.embed_dim}, {c.train.num_steps} steps "
      f"of {c.train.batch_size} graphs, seeds {tuple(c.seeds)}, workdir {WORKDIR}")

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
# Train both runs (each seed on the same fixed training graphs; a finished run is read back
# from its workdir instead of trained again).

# %%
summaries = {label: runner.run_or_reuse(configs[label], os.path.join(WORKDIR, name))
             for label, (name, _) in RUNS.items()}
rows = {label: metrics_lib.read_rows(os.path.join(WORKDIR, name))
        for label, (name, _) in RUNS.items()}

# %% [markdown]
# ## Per-token training losses
#
# Training cross-entropy of the decision token and of the other path tokens (the path-star
# task's metric groups `decision` and `rest`; thin lines: seeds). For E1 this is the CE
# part of its loss, so the two runs are on the same scale; chance is log d = 0.69 nats.

# %%
path = os.path.join(WORKDIR, "loss_groups.png")
plots.plot_loss_groups(rows, path, key="ce", groups=("decision", "rest"),
                       group_names={"decision": "decision token", "rest": "other path tokens"})
display(Image(filename=path))

# %% [markdown]
# ## Test accuracy per output token
#
# Left: greedy decoding (and the whole-path EM); right: teacher forced (the true earlier
# tokens given). Mean over seeds, band = min..max. The `cpu` variant evaluates once, at the
# end (`train.eval_every=0`: greedy decoding of the 20,000 test graphs is a large part of a
# short run), so each token is one point there.

# %%
for label, (name, _) in RUNS.items():
  path = os.path.join(WORKDIR, f"accuracy_{name}.png")
  plots.plot_path_accuracy(rows[label], configs[label].data.path_len, path)
  display(Markdown(f"**{label}**"))
  display(Image(filename=path))

# %% [markdown]
# ## Final table
#
# Greedy accuracy at the end of training, mean (min, max) over seeds: the whole path (EM,
# the paper's accuracy), the decision token, and every other path token; the paper's test
# accuracy beside the test row.

# %%
print(f"{'run':<12} {'split':<6} {'EM (whole path)':<22} {'decision token':<22} "
      f"{'other tokens':<22} paper (test)")
for label, summary in summaries.items():
  agg = summary["aggregate"]
  for split in ("test", "valid", "train"):
    cells = [stats.format_mean_range(agg[f"{split}_{m}"])
             for m in ("em_all", "em_decision", "em_rest")]
    paper = "%.3f (%.3f, %.3f)" % PAPER[label] if split == "test" else ""
    print(f"{label:<12} {split:<6} {cells[0]:<22} {cells[1]:<22} {cells[2]:<22} {paper}".rstrip())
for label, summary in summaries.items():
  per_seed = ", ".join(f"{s['test_em_all']:.4f}" for s in summary["per_seed"])
  print(f"{label}: test EM per seed {summary['seeds']}: {per_seed}")
print(f"chance on the decision token: 1/d = {1 / c.data.degree:.3f}")

# %% [markdown]
# ## What came out at CPU size
#
# **At CPU size every run sits at 1/d: the paper's result does not come out.** The committed
# CPU run of Table 1 (`experiments/path_star_table1/config.py:cpu`, seeds 0-4,
# `results/path_star_table1/table1.json`; README, "Path-star graphs: Table 1") gives test EM,
# mean (min, max):
#
# | graph | CE | CE + 1000 warmup | E1 + warmup | paper: CE | paper: E1 + warmup |
# |---|---|---|---|---|---|
# | G(2,3) | 0.498 (0.496, 0.500) | 0.498 (0.497, 0.500) | 0.498 (0.496, 0.499) | 0.289 | 0.655 |
# | G(5,3) | 0.198 (0.192, 0.203) | 0.198 (0.190, 0.202) | 0.202 (0.199, 0.205) | 0.001 | 0.117 |
#
# No comparison is significant (permutation test over the 5 seeds: all p >= 0.14). On
# G(2,3) the per-seed test EM of seeds 0 and 1 (this notebook's `cpu` default) was 0.49915
# and 0.49705 under CE, 0.49645 and 0.49695 under E1 + warmup (on that machine; another CPU
# rounds differently). Every run gets the source and the goal right on every test graph and
# the decision right half the time, and its greedy decision is a child of the source on
# 99.8% (CE) and 100% (E1) of the test graphs: the model guesses between the two arms.
#
# The training losses show the paper's mechanism but not its payoff: over the last 100
# steps, under CE the other path tokens' CE is 0.002 nats and the decision token's 1.01
# (above log 2: overconfident on the graphs it gets wrong); under E1 + warmup both groups
# stay together near 3.3 nats (E1 keeps every margin small; the argmax of the later tokens
# is still right). So E1 does equalise learning across the tokens here, but equal learning
# does not find the goal's parent within this budget, and four times as many steps (10,000,
# `results/path_star_table1/long/`) do not change it: test EM 0.501 (CE), 0.500 (E1). The
# paper's numbers are for GPT-mini on 200,000 graphs (`VARIANT = "paper"`), which was not
# run in this repository (no accelerator).
