"""The small GPT-2's pretraining, then the grid of fine-tuning runs: every (text, start, loss).

Each run is `configs/label_copy.py:<config.size>` with its text, start (`model.pretrained` the
exported small GPT-2, or `config.gpt2`, or a random init) and loss, labelled
<text>_<start>_<loss> and trained (or read back) in `<runs_dir>/<label>`; the results file is
never taken as a result (`reuse_rows=False`: a row is the run folder's). table.json holds the
grid's rows (extras `text`, `start`, `loss`, `train_seconds_per_seed`), the grid's comparisons
of E1 + warmup against CE per (text, start) on `test_em_all` and `test_em_hard` (which the
seed-001 page reads; the analysis recomputes them), `pretraining` (the small GPT-2's config,
data and validation numbers), `fine_tuning` and the paper's Table 2 (`paper_table2`, from
`el_jax.report.papers`). table.png is drawn by the analysis.
"""
import os

from el_jax.infra import metrics as metrics_lib
from el_jax.report import papers
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import runner

TEXTS = ("kjv", "shakespeare")
STARTS = ("pretrained", "scratch")
LOSSES = {"ce": {"loss.name": "ce"},
          "e1_warmup": {"loss.name": "e1", "loss.e1.lam": 1.0}}  # + warmup
COMPARED = ("test_em_all", "test_em_hard")  # one Holm family each
COMMAND = "python -m el_jax.experiment --config=experiments/label_copy/config.py"


def check(config):
  """One-line errors for a config this experiment cannot run."""
  for name, got, valid in (("texts", config.texts, TEXTS), ("starts", config.starts, STARTS)):
    if not got or set(got) - set(valid):
      raise SystemExit(f"error: config.{name}={tuple(got)}; valid: {', '.join(valid)}")
  if not config.seeds:
    raise SystemExit("error: config.seeds is empty")
  if config.steps and config.steps < 2:
    raise SystemExit(f"error: config.steps={config.steps} must be >= 2 (or 0: the config's)")
  if "pretrained" in config.starts and not config.gpt2 and not config.pretrain_variant:
    raise SystemExit("error: a pretrained start needs config.gpt2 (a Hugging Face GPT-2 folder) "
                     "or config.pretrain_variant (a configs/text_lm.py variant to pretrain one)")
  if config.gpt2 and not os.path.isdir(os.path.expanduser(config.gpt2)):
    raise SystemExit(f"error: config.gpt2={config.gpt2!r} is not a folder")


def gpt2_dir(config):
  """The checkpoint the pretrained runs fine-tune from."""
  return os.path.expanduser(config.gpt2) or os.path.join(config.runs_dir, "small_gpt2")


def pretrain_config(config):
  return config_lib.get_config("text_lm", config.pretrain_variant,
                               config_lib.parse_sets(config.pretrain_overrides))


def pretrain(config):
  """Trains (or reads back) the small GPT-2 and exports it to `<runs_dir>/small_gpt2`;
  returns its summary."""
  return runner.pretrain_and_export(pretrain_config(config),
                                    os.path.join(config.runs_dir, "text_lm"), gpt2_dir(config))


def run_overrides(text, start, loss, steps, warmup, checkpoint):
  """The overrides of run <text>_<start>_<loss>."""
  over = {"data.corpus": text, **({"train.num_steps": steps} if steps else {}),
          "train.eval_every": 0, **({"train.checkpoint_every": steps} if steps else {}),
          **LOSSES[loss]}
  if loss != "ce":
    over["optim.warmup_steps"] = warmup
  if start == "pretrained":
    over["model.pretrained"] = checkpoint
  return over


def make_grid(config):
  """The grid: every (text, start, loss) of the config, trained in `<runs_dir>/<label>` (or
  read back from there), written to `<results_dir>/table.json`."""
  check(config)
  g = grid_lib.Grid(os.path.join(config.results_dir, "table.json"), runs_dir=config.runs_dir,
                    reuse_rows=False)
  for text in config.texts:
    for start in config.starts:
      for loss in LOSSES:
        g.add(f"{text}_{start}_{loss}", "label_copy", config.size,
              run_overrides(text, start, loss, config.steps, config.e1_warmup_steps,
                            gpt2_dir(config)),
              seeds=config.seeds, text=text, start=start, loss=loss)
  return g


def train_seconds(workdir):
  """{seed: wall seconds of its training loop} from the last train row of metrics.jsonl."""
  out = {}
  for r in metrics_lib.read_rows(workdir):
    if r.get("kind") == "train":
      out[str(r["seed"])] = r["time_s"]
  return out


def compare(g):
  """E1 + warmup against CE per (text, start), on each metric of COMPARED (the grid's
  comparisons, a Holm family each)."""
  pairs = [(f"{t}_{s}_e1_warmup", f"{t}_{s}_ce") for t in TEXTS for s in STARTS
           if f"{t}_{s}_e1_warmup" in g.rows and f"{t}_{s}_ce" in g.rows]
  return {m: g.compare(pairs, m) for m in COMPARED} if pairs else {}


def paper_table2():
  return {t: {loss: papers.value(f"s000.t2.{t}.{loss}") for loss in LOSSES} for t in TEXTS}


def run(config):
  """Pretrains (where a pretrained run is asked for), trains the grid's runs (those of
  `config.only`, default all), compares and writes table.json; returns its content (None
  when only some runs were asked for, or only the pretraining)."""
  g = make_grid(config)
  only = set(config.only)
  if only - set(g.runs):
    raise SystemExit(f"error: config.only: unknown runs {sorted(only - set(g.runs))}; valid: "
                     f"{list(g.runs)}")
  labels = [label for label in g.runs if not only or label in only]
  wants_pre = any(g.runs[label].extra["start"] == "pretrained" for label in labels)
  pre = None
  if (wants_pre or config.pretrain_only) and not config.gpt2:
    pre = pretrain(config)
  if config.pretrain_only:
    return None
  for row in g.run(labels):
    row["train_seconds_per_seed"] = train_seconds(row["workdir"])
  if only:
    return None
  compare(g)
  pretraining = None
  if pre is not None:
    agg = pre["aggregate"]
    pre_dir = os.path.join(config.runs_dir, "text_lm")
    over = config_lib.parse_sets(config.pretrain_overrides)
    pretraining = {"config": f"configs/text_lm.py:{config.pretrain_variant}",
                   **({"overrides": over} if over else {}), "workdir": pre_dir,
                   "checkpoint": gpt2_dir(config), **pre.get("text_lm", {}),
                   "train_seconds": train_seconds(pre_dir).get("0"),
                   **{k: agg[k]["mean"] for k in ("valid_ce_text", "valid_ppl_text",
                                                  "valid_acc_text", "test_ce_text")}}
  steps = config.steps or config_lib.get_config("label_copy", config.size).train.num_steps
  return g.write(
      command=COMMAND, pretraining=pretraining,
      fine_tuning={"config": f"configs/label_copy.py:{config.size}", "steps": steps,
                   "seeds": list(config.seeds),
                   "e1": {"lam": 1.0, "warmup_steps": config.e1_warmup_steps}},
      paper_table2=paper_table2())
