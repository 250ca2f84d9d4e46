r"""Seed 002, issue 34: where along a pre-trained encoder the downstream probe loses the task.

  python experiments/probe_layers.py --language=hmm --workdir=runs/mlm_flatness/hmm_adamw \
      --step=3000 --probe_train=4000 --probe_valid=1000 --probe_test=2000
  python experiments/probe_layers.py --language=pcfg --workdir=runs/mlm_flatness/pcfg_adamw \
      --step=3000 --probe_train=4000 --probe_valid=1000 --probe_test=2000

The workdirs are the AdamW pre-training runs that `experiments/mlm_flatness.py --figure=training`
leaves under its --runs (the commands on docs/results/seed002_flatness.md); any finished MLM
workdir of the transformer encoder will do. For every model seed (--seeds), the linear probe
(`mlm_measure.Measurer.probe_features`: 5 probe seeds, the learning rate and feature
normalisation chosen on valid per model, the epoch on valid) reads, at every position, the
residual stream after 0, 1, ..., L blocks (0: the embeddings; `probe.encode(layer=k)`, no
LayerNorm) and the final features (after the last LayerNorm: what the figures probe), of the
trained model and of its own random initialisation, with the features' numerical rank
(`probe.feature_rank`). Per layer, trained against random init (`mlm_measure.vs_random_init`,
as the figures' sanity rows): over the model seeds, paired (sign flip, floor 0.25 for 3 seeds).

Writes <out>/<language>.json (default `results/probe_layers/`); the page:
docs/results/seed002_flatness.md (its layer-by-layer section). Wall time at CPU size: 3-4 min
per language with 4000 probe training examples, 3 seeds, two learning rates (the committed
runs); about 10 times that with the figures' 10,000 and both normalisations.
"""
import argparse
import os
import sys
import time

from el_jax.run import cli
from el_jax.run import mlm_measure
from el_jax.core import probe
from el_jax.infra import provenance
from el_jax.infra import workdir as wd

KEEP = ("test_acc", "test_acc_mean", "test_acc_std", "valid_acc_mean", "chosen", "feature_rank",
        "num_features")


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


def compare(layers, tasks):
  """Per layer: {task: the trained models' probe against their own random inits}
  (`mlm_measure.vs_random_init`: over the model seeds, paired; one seed over its probe seeds)."""
  return {k: mlm_measure.vs_random_init(
      {s: {"probe": r} for s, r in layer["trained"].items()},
      {t: {"random_init": {s: r[t] for s, r in layer["random_init"].items()}} for t in tasks})
      for k, layer in layers.items()}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--language", choices=("hmm", "pcfg"), required=True)
  ap.add_argument("--workdir", required=True, help="a finished MLM pre-training workdir")
  ap.add_argument("--step", type=int, required=True, help="the checkpoint step to probe")
  ap.add_argument("--tasks", default=None, help="downstream tasks (default HMM 10, PCFG C)")
  ap.add_argument("--seeds", default="0,1,2", help="model seeds of the workdir")
  ap.add_argument("--probe_train", type=int, default=10000)
  ap.add_argument("--probe_valid", type=int, default=2000)
  ap.add_argument("--probe_test", type=int, default=4000)
  ap.add_argument("--probe_epochs", type=int, default=30)
  ap.add_argument("--probe_lrs", default="0.001,0.01")
  ap.add_argument("--probe_normalizations", default="standardize")
  ap.add_argument("--probe_cache", default="", help="folder of probe results (see mlm_flatness)")
  ap.add_argument("--out", default=os.path.join("results", "probe_layers"))
  args = ap.parse_args(argv)
  seeds = cli.seed_list(args.seeds)
  mlm_measure.check_probe_flags(args.probe_lrs, args.probe_normalizations)  # before training
  cfg = mlm_measure.encoder_run_config(args.workdir, "per-layer states")
  tasks = args.tasks or {"hmm": "10", "pcfg": "C"}[args.language]
  settings = mlm_measure.Settings(
      tasks=tasks, probe_train=args.probe_train, probe_valid=args.probe_valid,
      probe_test=args.probe_test, probe_epochs=args.probe_epochs, probe_lrs=args.probe_lrs,
      probe_normalizations=args.probe_normalizations, probe_cache=args.probe_cache,
      flat_inputs=1, flat_reps=1)
  t0 = time.time()
  m = mlm_measure.Measurer(cfg, settings, args.language)
  names = layer_names(int(cfg.model.num_layers))
  layers = {k: {"trained": {}, "random_init": {}} for k in names}
  for seed in seeds:
    trained, init = m.params(args.workdir, args.step, seed), m.random_init_params(seed)
    for k in names:
      for kind, params in (("trained", trained), ("random_init", init)):
        r = layers[k][kind][str(seed)] = measure(m, params, k)
        print(f"seed {seed} layer {k:>5s} {kind:11s} " + ", ".join(
            f"task {t} {100 * v['test_acc_mean']:.2f}% (rank {v['feature_rank']})"
            for t, v in r.items()), flush=True)
  doc = {"language": args.language, "workdir": args.workdir, "step": args.step,
         "seeds": list(seeds), "tasks": tasks.split(","), "num_layers": int(cfg.model.num_layers),
         "layers": layers, "comparison": compare(layers, tasks.split(",")),
         "settings": vars(settings), "model": cfg.model.to_dict(),
         "command": "python experiments/probe_layers.py " + " ".join(
             sys.argv[1:] if argv is None else argv),
         "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, f"{args.language}.json")
  wd.write_json(path, doc, default=float)
  print(f"wrote {path}")
  return doc


if __name__ == "__main__":
  cli.script(main)
