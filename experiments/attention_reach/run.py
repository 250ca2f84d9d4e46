"""The attention reach: for each file of the config, its pre-training run (trained under
`runs` if it is not there, as experiments/mlm_flatness names and trains it), and for every model
seed, trained and at its random init, each block's attention weights at the masked query on the
validation sentences (`reach`), written to `results_dir`/<file>.json with each trained model's
evaluation (`analysis.py` takes each block's best head)."""
import os
import time

import jax
import numpy as np

from el_jax.core.models import decoder
from el_jax.infra import checkpoint
from el_jax.infra import provenance
from el_jax.infra import workdir as wd
from el_jax.run import grid as grid_lib
from el_jax.run import mlm_measure
from el_jax.run.setup import Setup, Trainer

COMMAND = "python -m el_jax.experiment --config=experiments/attention_reach/config.py"
OFFSETS = tuple(range(-3, 4))

# decoder.attention_probs compiled once per architecture (its graphdef is static): every
# model seed and random init of a run reuses it.
_attention_probs = jax.jit(decoder.attention_probs, static_argnums=0)


def reach(graphdef, params, inputs_NxT, segment_ids_NxT, lengths_N, mask_pos_N, batch=500):
  """Per block: {"neighbour_mass": [H] (mean over sentences of the weight on keys i - 1 and
  i + 1, those in the sentence), "by_offset": {d: [H]} (mean weight on the key at offset d =
  -3..3 from the masked position, over the sentences where it exists), "uniform" (what a
  uniform head gives: the mean of neighbours present / length)} of the attention weights at
  each row's masked query."""
  n = len(inputs_NxT)
  rows = np.arange(n)
  chunks = []  # per batch: per block the masked queries' weights [b, H, T]
  for a in range(0, n, batch):
    e = min(a + batch, n)
    probs = _attention_probs(graphdef, params, inputs_NxT[a:e], segment_ids_NxT[a:e])
    chunks.append([np.asarray(p)[np.arange(e - a), :, mask_pos_N[a:e], :] for p in probs])
  out = []
  for w_NxHxT in (np.concatenate(ws) for ws in zip(*chunks)):
    by_offset, neighbour = {}, np.zeros(w_NxHxT.shape[:2])
    for d in OFFSETS:
      key = mask_pos_N + d
      ok = (key >= 0) & (key < lengths_N)
      w = w_NxHxT[rows[ok], :, key[ok]]  # [n_ok, H]
      by_offset[str(d)] = w.mean(0).tolist()
      if abs(d) == 1:
        neighbour[ok] += w
    present = sum(((mask_pos_N + d >= 0) & (mask_pos_N + d < lengths_N)).astype(float)
                  for d in (-1, 1))
    out.append({"neighbour_mass": neighbour.mean(0).tolist(), "by_offset": by_offset,
                "uniform": float((present / lengths_N).mean())})
  return out


def pretraining(config, i, seeds):
  """The pre-training run of file `i` (its grid row: trained or read back)."""
  over = {**mlm_measure.parse_pretrain(config.pretrain[i]), **_data(config.data)}
  g = grid_lib.Grid(os.path.join(config.results_dir, f"{config.files[i]}.json"),
                    runs_dir=config.runs, reuse_rows=False)
  g.add(config.run_labels[i], config.config, config.size, over, seeds=seeds, phase="adamw")
  (row,) = g.run()
  return row


def _data(text):
  """"data.a=1,data.b=0.1" -> {"data.a": 1, "data.b": 0.1}."""
  out = {}
  for item in (x.strip() for x in text.split(",") if x.strip()):
    key, eq, value = item.partition("=")
    if not eq or not key.startswith("data."):
      raise ValueError(f"config.data: {item!r} is not data.<field>=<value>")
    for cast in (int, float, str):
      try:
        out[key] = cast(value)
        break
      except ValueError:
        continue
  return out


def reach_file(config, i):
  seeds = [int(s) for s in config.model_seeds[i].split(",")]
  row = pretraining(config, i, seeds)
  workdir, step = row["workdir"], row["config"]["train"]["num_steps"]
  cfg = mlm_measure.encoder_run_config(workdir, "attention weights")
  t0 = time.time()
  setup = Setup(cfg)
  trainer = Trainer(setup)
  corpus = setup.task.corpus
  v = corpus.valid.subset(np.arange(min(config.sentences, len(corpus.valid))))
  data = (v.masked_inputs(corpus.mask_id), v.segment_ids, v.lengths, v.mask_pos)
  models, evals = {}, {}
  for seed in seeds:
    evals[str(seed)] = mlm_measure.eval_row(workdir, seed, step)
    for kind, params in (("trained", checkpoint.restore_params(trainer, workdir, seed, step)),
                         ("random_init", decoder.init(setup.model_cfg, seed)[1])):
      blocks = models.setdefault(kind, {})[str(seed)] = reach(trainer.graphdef, params, *data)
      print(f"seed {seed} {kind:11s} " + "; ".join(
          f"block {k + 1}: {max(b['neighbour_mass']):.2f} (uniform {b['uniform']:.2f})"
          for k, b in enumerate(blocks)), flush=True)
  return {"workdir": workdir, "step": step, "seeds": seeds, "sentences": len(v),
          "offsets": list(OFFSETS), "models": models, "eval": evals,
          "model": cfg.model.to_dict(), "data": cfg.data.to_dict(), "rows": [row],
          "command": COMMAND, "ran_on": provenance.ran_on(),
          "wall_s": round(time.time() - t0, 1)}


def run(config):
  n = len(config.files)
  if not n == len(config.run_labels) == len(config.pretrain) == len(config.model_seeds):
    raise ValueError("config.files, run_labels, pretrain and model_seeds must have one entry "
                     "per file")
  if config.sentences < 1:
    raise ValueError(f"config.sentences={config.sentences} must be >= 1")
  out = {}
  for i, name in enumerate(config.files):
    doc = reach_file(config, i)
    os.makedirs(config.results_dir, exist_ok=True)
    path = os.path.join(config.results_dir, f"{name}.json")
    wd.write_json(path, doc, default=float)
    print(f"wrote {path}")
    out[name] = doc
  return out
