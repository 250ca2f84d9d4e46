"""The runs (config.py names the fields): one `el_jax.run.grid.Grid` per language of
`config.languages`, the runs of `design(language, config.size)`.

* pcfg, cpu: Figures 1 / 3 of experiments/mlm_flatness start from `configs/pcfg_mlm.py:cpu`
  (128 x 4, batch 64, 3000 steps, 100k sentences). Here the same recipe trained longer and the
  next model size of the paper's Table 3, on ten times as many training sentences (1M, so that
  no run repeats a sentence more than once or twice): 128 x 4 for 3000 and for 12,000 steps
  (each with its whole warmup + cosine schedule) and 192 x 5 (3 heads, MLP 768) for 6000
  steps, one seed each (the question is how far a model is from the floor, not a comparison),
  evaluated every 1000 steps.
* lm, cpu: `configs/lm_mlm.py:cpu` (the small GPT-2 of experiments/label_copy.py, pretrained
  here if it is not there, restricted to its 200 most frequent tokens, sentences of 24 tokens;
  Table 3's 128 x 4 encoder, 3000 steps) over model seeds 0, 1, 2. The paper's downstream
  tasks for this language (QNLI, SST-2) need GLUE (`el_jax.core.data.lm_language` reads them
  through TFDS when prepared).
* paper: one run of each language's paper variant; test: seconds.

Runs train in `<runs_dir>/<language>/<label>` (finished runs and rows of an identical config
are reused, a killed run resumes); each row gets its curve (`curve`: the eval rows' seed means,
copied from metrics.jsonl so that the committed file keeps them), `num_params`, the unigram
model's gaps and the language's facts from its summary. Writes
`<results_dir>/<subdir>/<language>.json`; the table, the power law and the figures are the
analysis's.
"""
import os

from el_jax.infra import metrics as metrics_lib
from el_jax.infra import plots
from el_jax.infra import workdir as wd
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import runner

COMMAND = "python -m el_jax.experiment --config=experiments/mlm_convergence/config.py"
LANGUAGES = ("pcfg", "lm")
SIZES = ("cpu", "paper", "test")
CURVE_KEYS = ("valid_gap", "valid_kl", "train_gap", "valid_mlm_loss", "valid_true_entropy")
NOTE = ("gap = valid MLM loss - mean entropy of the exact conditional at the fixed masked "
        "positions (nats); one masked position per sentence; curves are means over the run's "
        "seeds at each evaluation step")


def design(language, size, generator=""):
  """(config name, variant, [(label, overrides, seeds)]) of one language at one size."""
  if language not in LANGUAGES:
    raise ValueError(f"unknown language {language!r}; valid: {LANGUAGES}")
  if size not in SIZES:
    raise ValueError(f"unknown size {size!r}; valid: {SIZES}")
  if language == "pcfg":
    if size == "cpu":
      data = {"data.num_train": 1_000_000, "train.eval_every": 1000,
              "train.checkpoint_every": 1000}
      return "pcfg_mlm", "cpu", [
          ("128x4 3000 steps", {**data, "train.num_steps": 3000}, (0,)),
          ("128x4 12000 steps", {**data, "train.num_steps": 12_000}, (0,)),
          ("192x5 6000 steps", {**data, "train.num_steps": 6000, "model.embed_dim": 192,
                                "model.num_heads": 3, "model.num_layers": 5,
                                "model.mlp_dim": 768}, (0,))]
    if size == "paper":
      return "pcfg_mlm", "paper", [("1024x16 30000 steps", {}, (0,))]
    data = {"data.num_train": 2048, "train.eval_every": 8, "train.checkpoint_every": 8}
    return "pcfg_mlm", "test", [
        ("32x2 8 steps", {**data, "train.num_steps": 8}, (0,)),
        ("32x2 32 steps", {**data, "train.num_steps": 32}, (0,)),
        ("48x2 16 steps", {**data, "train.num_steps": 16, "model.embed_dim": 48,
                           "model.mlp_dim": 96}, (0,))]
  if size == "cpu":
    return "lm_mlm", "cpu", [("128x4 3000 steps", {}, (0, 1, 2))]
  if size == "paper":
    if not generator:
      raise ValueError("the lm language at paper size samples from a GPT-2 checkpoint: give "
                       "--config.generator=/path/to/gpt2 (configs/lm_mlm.py, paper)")
    return "lm_mlm", "paper", [("768x12 30000 steps", {"data.generator": generator}, (0,))]
  return "lm_mlm", "test", [("32x2 30 steps", {}, (0, 1))]


def curve(workdir, seeds):
  """{key: [[step, mean over seeds], ...]} of the eval rows of a run's metrics.jsonl (only the
  steps every seed evaluated)."""
  rows = [r for r in metrics_lib.read_rows(workdir)
          if r.get("kind") == "eval" and int(r["seed"]) in seeds]
  seeds_at = {}
  for r in rows:
    seeds_at.setdefault(r["step"], set()).add(int(r["seed"]))
  rows = [r for r in rows if seeds_at[r["step"]] >= set(seeds)]
  out = {}
  for k in CURVE_KEYS:
    band = plots.seed_band(rows, k)  # (steps, mean, min, max) over the seeds
    if band is not None:
      out[k] = [[int(s), float(m)] for s, m in zip(band[0], band[1])]
  return out


def prepare_generator():
  """The small GPT-2 that configs/lm_mlm.py:cpu samples from (experiments/label_copy.py's
  pretraining, the same folders: trained once, then read back)."""
  export = config_lib.load_config_module("lm_mlm").SMALL_GPT2
  runner.pretrain_and_export(config_lib.get_config("text_lm", "cpu", {}),
                             os.path.join(os.path.dirname(export), "text_lm"), export)


def run_language(config, language):
  """Trains (or reuses) one language's runs; writes and returns its grid document."""
  config_name, variant, runs = design(language, config.size, config.generator)
  if language == "lm" and config.size == "cpu":
    prepare_generator()
  out = os.path.join(config.results_dir, config.subdir)
  g = grid_lib.Grid(os.path.join(out, f"{language}.json"),
                    runs_dir=os.path.join(config.runs_dir, language))
  for label, overrides, seeds in runs:
    g.add(label, config_name, variant, overrides, seeds=seeds)
  quiet = config.size == "test"
  g.run(configure=lambda run, cfg: setattr(cfg, "progress", False) if quiet else None)
  for row in g.rows.values():
    if "curve" not in row:  # trained or read back now: copy its curve and model facts
      row["curve"] = curve(row["workdir"], row["seeds"])
      summary = wd.read_json(os.path.join(row["workdir"], "summary.json"))
      row["num_params"] = summary.get("num_params")
      row["unigram"] = summary.get("unigram")
      row["language"] = summary.get("language")
  return g.write(command=COMMAND, language=language, size=config.size, note=NOTE)


def run(config):
  """Every language of the config, in order (checked before any training); {language: its
  grid document}."""
  for language in config.languages:
    design(language, config.size, config.generator)
  return {language: run_language(config, language) for language in config.languages}
