"""The layer-by-layer probe: for each language of the config, its AdamW pre-training run
(trained under `runs` if it is not there, as experiments/mlm_flatness trains it), and for every
model seed the probe of every layer of the trained model and of its own random init, written to
`results_dir`/<language>.json (`analysis.py` compares them)."""
import os
import time

from el_jax.core import probe
from el_jax.infra import provenance
from el_jax.infra import workdir as wd
from el_jax.run import grid as grid_lib
from el_jax.run import mlm_measure

COMMAND = "python -m el_jax.experiment --config=experiments/probe_layers/config.py"
KEEP = ("test_acc", "test_acc_mean", "test_acc_std", "valid_acc_mean", "chosen", "feature_rank",
        "num_features")
LANGUAGES = ("hmm", "pcfg")


def layer_names(num_layers):
  """0..L (the residual stream after that many blocks) and "final" (after the last LayerNorm)."""
  return [str(k) for k in range(num_layers + 1)] + ["final"]


def measure(m, params, layer):
  """{task: probe result} on the features of `layer` ("final" or a block count)."""
  g = m.trainer.graphdef
  k = None if layer == "final" else int(layer)
  out = {}
  for name, ds in m.tasks.items():
    r = m.probe_features(ds, lambda sp: probe.encode(g, params, sp.tokens, sp.segment_ids,
                                                     layer=k))
    out[name] = {f: r[f] for f in KEEP}
  return out


def pretraining(config, language):
  """The AdamW pre-training run of `language` (its grid row: trained or read back)."""
  g = grid_lib.Grid(os.path.join(config.results_dir, f"{language}.json"), runs_dir=config.runs,
                    reuse_rows=False)
  g.add(f"{language}_adamw", f"{language}_mlm", config.size, {}, seeds=tuple(config.seeds),
        phase="adamw")
  (row,) = g.run()
  return row


def probe_language(config, language):
  seeds = [int(s) for s in config.seeds]
  tasks = config.tasks or {"hmm": "10", "pcfg": "C"}[language]
  row = pretraining(config, language)
  workdir = row["workdir"]
  step = int(config.step or row["config"]["train"]["num_steps"])
  cfg = mlm_measure.encoder_run_config(workdir, "per-layer states")
  settings = mlm_measure.Settings(
      tasks=tasks, probe_train=config.probe_train, probe_valid=config.probe_valid,
      probe_test=config.probe_test, probe_epochs=config.probe_epochs,
      probe_lrs=config.probe_lrs, probe_normalizations=config.probe_normalizations,
      probe_cache=config.probe_cache, flat_inputs=1, flat_reps=1)
  t0 = time.time()
  m = mlm_measure.Measurer(cfg, settings, language)
  names = layer_names(int(cfg.model.num_layers))
  layers = {k: {"trained": {}, "random_init": {}} for k in names}
  for seed in seeds:
    trained, init = m.params(workdir, step, seed), m.random_init_params(seed)
    for k in names:
      for kind, params in (("trained", trained), ("random_init", init)):
        r = layers[k][kind][str(seed)] = measure(m, params, k)
        print(f"seed {seed} layer {k:>5s} {kind:11s} " + ", ".join(
            f"task {t} {100 * v['test_acc_mean']:.2f}% (rank {v['feature_rank']})"
            for t, v in r.items()), flush=True)
  return {"language": language, "workdir": workdir, "step": step, "seeds": seeds,
          "tasks": tasks.split(","), "num_layers": int(cfg.model.num_layers), "layers": layers,
          "settings": vars(settings), "model": cfg.model.to_dict(), "rows": [row],
          "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}


def run(config):
  bad = [x for x in config.languages if x not in LANGUAGES]
  if bad:
    raise ValueError(f"config.languages={tuple(config.languages)}: {bad} unknown; allowed: "
                     f"{', '.join(LANGUAGES)}")
  mlm_measure.check_probe_flags(config.probe_lrs, config.probe_normalizations)
  out = {}
  for language in config.languages:
    doc = probe_language(config, language)
    doc["command"] = COMMAND
    os.makedirs(config.results_dir, exist_ok=True)
    path = os.path.join(config.results_dir, f"{language}.json")
    wd.write_json(path, doc, default=float)
    print(f"wrote {path}")
    out[language] = doc
  return out
