"""The grid of Table 1 (or of its controls): every run of `config.part` on every graph.

Each run trains `configs/path_star.py:<config.size>` (with `config.overrides`) in
`<runs_dir>/<size>/<slug of its label>` through `runner.run_or_reuse`; rows go to
`<results_dir>/<config.file>` in the grid's row schema (a stored row whose config is the run's is
reused). Beside the trained metrics a row holds the extras `graph`, `run`, `stage` (the part),
`paper` (Table 1's mean / min / max, from `el_jax.report.papers`), `test_file`,
`test_decision_greedy` (the greedy accuracy of the decision token on test) and `train_ce` (the
training CE of the decision token and of the other path tokens at the end, `train_ce_summary`).
The main part's JSON also holds the grid's comparisons on test EM (`comparisons.test_em_all`,
Holm over the table's six), which the analysis recomputes. Where the run folders are there,
`table1_losses.png` (training CE per token group) is drawn beside the JSON.
"""
import os
import re
import sys

import numpy as np

from el_jax.infra import metrics as metrics_lib
from el_jax.infra import plots
from el_jax.infra import workdir as wd
from el_jax.report import papers
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib

from experiments.path_star_table1 import config as config_file

GRAPHS = {"G(2,3)": (2, 3), "G(5,3)": (5, 3)}
PARTS = ("main", "controls")
SIZES = ("cpu", "paper", "test")
METRIC = "test_em_all"  # the compared metric: greedy exact match of the whole test path
# Comparisons of the main part on each graph: (run, baseline), one Holm family.
COMPARISONS = (("E1 + warmup", "CE"), ("CE + warmup", "CE"), ("E1 + warmup", "CE + warmup"))
COMMAND = "python -m el_jax.experiment --config=experiments/path_star_table1/config.py"


def runs(part):
  """[(label, overrides)] of a part. `main` is Table 1 (lam = 1, the seed paper's; 1000 warmup
  steps for E1 and for the CE control); `controls` are Bachmann & Nagarajan's variants under CE
  (not in seed 000's table): what the same model and budget learn when the target is
  reversed or the inputs are `$`."""
  if part == "main":
    return [("CE", {"loss.name": "ce"}),
            ("CE + warmup", {"loss.name": "ce", "optim.warmup_steps": 1000}),
            ("E1 + warmup", {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 1000})]
  if part == "controls":
    return [("CE, reverse target", {"loss.name": "ce", "data.variant": "reverse"}),
            ("CE, teacherless", {"loss.name": "ce", "data.variant": "teacherless"})]
  raise SystemExit(f"error: config.part={part!r}; valid: {', '.join(PARTS)}")


def paper_of(graph, run):
  """Table 1's {mean, min, max} of a run (None where the paper has no such run)."""
  key = f"s000.t1.{graph}.{run}"
  if key not in papers.PAPER:
    return None
  return dict(zip(("mean", "min", "max"),
                  (float(x) for x in re.findall(r"\d+\.\d+", papers.entry(key)[0]))))


def test_file_of(graph, size, test_dir=""):
  """The test set of a graph: the reference's shipped file ("reference"), the file in
  `test_dir`, or generated graphs ("") at test size (its 12 nodes have no reference file)."""
  d, l = GRAPHS[graph]
  if test_dir:
    return os.path.join(test_dir, f"deg_{d}_path_{l}_nodes_50_test_20000.txt")
  return "" if size == "test" else "reference"


def check(config):
  """One-line errors for a config this experiment cannot run."""
  if config.size not in SIZES:
    raise SystemExit(f"error: config.size={config.size!r}; valid: {', '.join(SIZES)}")
  runs(config.part)
  bad = [g for g in config.graphs if g not in GRAPHS]
  if bad or not config.graphs:
    raise SystemExit(f"error: config.graphs={tuple(config.graphs)}; valid: {list(GRAPHS)}")
  if not config.seeds:
    raise SystemExit("error: config.seeds is empty")
  for g in config.graphs:
    path = test_file_of(g, config.size, config.test_dir)
    if config.test_dir and not os.path.exists(path):
      raise SystemExit(f"error: reference test set {path} not found; check config.test_dir")


def make_grid(config):
  """The grid of `config.part`: every run on every graph of GRAPHS, labelled "<graph> <run>",
  written to `<results_dir>/<file>`; rows already there with the same config are reused."""
  check(config)
  extra = config_lib.parse_sets(config.overrides)
  g = grid_lib.Grid(os.path.join(config.results_dir, config.file),
                    runs_dir=os.path.join(config.runs_dir, config.size),
                    meta={"size": config.size, "stage": config.part})
  for graph, (d, l) in GRAPHS.items():
    test_file = test_file_of(graph, config.size, config.test_dir)
    for label, lo in runs(config.part):
      g.add(f"{graph} {label}", "path_star", config.size,
            {"data.degree": d, "data.path_len": l, "data.test_file": test_file, **lo, **extra},
            seeds=config.seeds, graph=graph, run=label, stage=config.part,
            paper=paper_of(graph, label), test_file=test_file)
  return g


def _quiet(run, cfg):
  cfg.progress = False


def train_ce_summary(workdir, num_steps, window=100):
  """Training CE of the decision token and of the other path tokens, mean over seeds.

  Per group: `end`, averaged over the logged steps in the last `window` steps, and
  `end_minus_500`, over the `window` steps ending 500 steps earlier (is it still falling?).
  None if the run's metrics.jsonl is gone; a window with no logged step (a run shorter than
  500 steps) is None, not NaN.
  """
  tr = [r for r in metrics_lib.read_rows(workdir) if r.get("kind") == "train"]
  if not tr:
    return None
  out = {}
  for key, group in (("ce_decision", "decision"), ("ce_rest", "rest")):
    steps, mean, _, _ = plots.seed_band(tr, key)
    steps, mean = np.asarray(steps), np.asarray(mean)
    out[group] = {}
    for name, last in (("end_minus_500", num_steps - 500), ("end", num_steps)):
      inside = (steps > last - window) & (steps <= last)
      out[group][name] = float(mean[inside].mean()) if inside.any() else None
  return out


def plot_losses(rows, out_dir):
  """table1_losses.png: training CE per token group, one panel per run, where the runs'
  metrics.jsonl are there (else nothing: the figure of the committed rows stays)."""
  train = {r["label"]: metrics_lib.read_rows(r["workdir"]) for r in rows}
  train = {k: v for k, v in train.items() if any(x.get("kind") == "train" for x in v)}
  if not train:
    print(f"not drawing {os.path.join(out_dir, 'table1_losses.png')}: no run folder has its "
          f"metrics.jsonl", file=sys.stderr)
    return None
  path = os.path.join(out_dir, "table1_losses.png")
  plots.plot_loss_groups(train, path, key="ce", groups=("decision", "rest"),
                         group_names={"rest": "other path tokens"})
  return path


def run(config):
  """Trains (or reuses) the part's runs on `config.graphs`, adds the decision-token accuracy
  and the training-CE summary to new rows, compares the main part's pairs (the grid's
  comparisons, one Holm family) and writes the JSON; returns its content. Rows of the other
  graphs are kept when their config is the one this config would train."""
  g = make_grid(config)
  selected = [label for label, r in g.runs.items() if r.extra["graph"] in config.graphs]
  for label in selected:
    g.run([label], configure=_quiet)
    row = g.rows[label]
    if "train_ce" not in row:  # trained or read back from its folder now
      summary = wd.read_json(os.path.join(row["workdir"], "summary.json"))
      dec = summary["graph"]["decision_index"]
      row["test_decision_greedy"] = row["aggregate"][f"test_greedy_pos{dec}"]
      row["train_ce"] = train_ce_summary(row["workdir"], row["config"]["train"]["num_steps"])
  for label, r in g.runs.items():  # the other graphs' stored rows, when still current
    if label not in selected:
      cfg = r.config()
      _quiet(r, cfg)
      if g.stored_row(r, cfg) is not None:
        g.run([label], verbose=False, configure=_quiet)
  if config.part == "main":
    pairs = [(f"{gn} {a}", f"{gn} {b}") for gn in GRAPHS for a, b in COMPARISONS
             if f"{gn} {a}" in g.rows and f"{gn} {b}" in g.rows]
    if pairs:
      g.compare(pairs, METRIC)
  variant = _variant_of(config)
  doc = g.write(command=f"{COMMAND}:{variant}" if variant else COMMAND)
  plot_losses(doc["rows"], os.path.dirname(g.path))
  return doc


def _variant_of(config):
  """The variant of config.py that `config` is (None if it is none of them unchanged)."""
  for v in config_file.VARIANTS:
    if config_file.get_config(v).to_dict() == config.to_dict():
      return v
  return None
