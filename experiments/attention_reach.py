r"""Seed 002, issue 34: where a pre-trained encoder's masked position looks, block by block.

  python experiments/attention_reach.py \
      --workdir=runs/mlm_flatness/hmm_sharp_adamw_pretrain_init0.1 --step=6000 --seeds=0,1,2 \
      --out=results/attention_reach/hmm_sharp_init0.1.json

On the sharp HMM (`experiments/mlm_flatness.py --hmm=sharp`) a masked word is predicted far
better from its two neighbours than from its block's word frequencies (the context is worth
0.6 nats), so an encoder that has left the block plateau should attend from the masked
position to positions i - 1 and i + 1; one on the plateau predicts from the sentence's words
as a bag and needs no position. For every model seed (--seeds) of a finished MLM workdir of
the transformer encoder, and for its own random initialisation, on the validation sentences
with their fixed evaluation masks (the masked inputs the valid MLM loss is measured on), this
reads each block's attention weights (`decoder.attention_probs`) at the masked query and
reports per block and head:

  neighbour_mass   mean over sentences of the weight on keys i - 1 and i + 1 (those in the
                   sentence)
  by_offset        mean weight on the key at offset d = -3..3 from the masked position (d = 0:
                   the masked position itself), over the sentences where that key exists
  uniform          what a uniform head gives: the mean of (neighbours present) / (length)

and per block the head with the most neighbour mass (`summary`: its mass per seed), beside
each trained model's evaluation at that step (`eval`: valid MLM loss, gap, KL). Writes
--out (JSON; the committed files are under `results/attention_reach/`) and prints a line per
model. Wall time at CPU size: about 5 s per model seed (2000 sentences, the `cpu` encoder).
The page: docs/results/seed002_flatness.md.
"""
import argparse
import os
import sys
import time

import jax
import numpy as np

from el_jax.infra import checkpoint
from el_jax.run import cli
from el_jax.run import mlm_measure
from el_jax.infra import provenance
from el_jax.infra import workdir as wd
from el_jax.core.models import decoder
from el_jax.run.setup import Setup, Trainer

OFFSETS = tuple(range(-3, 4))


# decoder.attention_probs compiled once per architecture (its graphdef is static): every
# model seed and random init of a workdir reuses it.
_attention_probs = jax.jit(decoder.attention_probs, static_argnums=0)


def reach(graphdef, params, inputs_NxT, segment_ids_NxT, lengths_N, mask_pos_N, batch=500):
  """Per block: {"neighbour_mass": [H], "by_offset": {d: [H]}, "uniform": float} of the
  attention weights at each row's masked query (module docstring)."""
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


def summarize(models):
  """{kind: per block {"best_head_neighbour_mass": [per seed, the largest over the heads],
  "uniform"}}: what the page quotes."""
  return {kind: [{"best_head_neighbour_mass": [max(blocks[k]["neighbour_mass"])
                                               for blocks in per_seed.values()],
                  "uniform": next(iter(per_seed.values()))[k]["uniform"]}
                 for k in range(len(next(iter(per_seed.values()))))]
          for kind, per_seed in models.items()}


def summary_line(blocks):
  """'block k: head h x.xx (uniform u.uu)' of each block's head with the most neighbour mass."""
  parts = []
  for k, b in enumerate(blocks):
    h = int(np.argmax(b["neighbour_mass"]))
    parts.append(f"block {k + 1}: head {h} {b['neighbour_mass'][h]:.2f} (uniform "
                 f"{b['uniform']:.2f})")
  return "; ".join(parts)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--workdir", required=True, help="a finished MLM pre-training workdir")
  ap.add_argument("--step", type=int, required=True, help="the checkpoint step to read")
  ap.add_argument("--seeds", default="0,1,2", help="model seeds of the workdir")
  ap.add_argument("--sentences", type=int, default=2000, help="validation sentences read")
  ap.add_argument("--out", required=True, help="the JSON file to write")
  args = ap.parse_args(argv)
  seeds = cli.seed_list(args.seeds)
  if args.sentences < 1:
    raise ValueError(f"--sentences={args.sentences} must be >= 1")
  cfg = mlm_measure.encoder_run_config(args.workdir, "attention weights")
  t0 = time.time()
  setup = Setup(cfg)
  trainer = Trainer(setup)
  corpus = setup.task.corpus
  v = corpus.valid.subset(np.arange(min(args.sentences, len(corpus.valid))))
  data = (v.masked_inputs(corpus.mask_id), v.segment_ids, v.lengths, v.mask_pos)
  models, evals = {}, {}
  for seed in seeds:
    evals[str(seed)] = mlm_measure.eval_row(args.workdir, seed, args.step)
    for kind, params in (
        ("trained", checkpoint.restore_params(trainer, args.workdir, seed, args.step)),
        ("random_init", decoder.init(setup.model_cfg, seed)[1])):
      blocks = models.setdefault(kind, {})[str(seed)] = reach(trainer.graphdef, params, *data)
      print(f"seed {seed} {kind:11s} " + summary_line(blocks), flush=True)
  doc = {"workdir": args.workdir, "step": args.step, "seeds": list(seeds),
         "sentences": len(v), "offsets": list(OFFSETS), "models": models,
         "summary": summarize(models), "eval": evals,
         "model": cfg.model.to_dict(), "data": cfg.data.to_dict(),
         "command": "python experiments/attention_reach.py " + " ".join(
             sys.argv[1:] if argv is None else argv),
         "ran_on": provenance.ran_on(), "wall_s": round(time.time() - t0, 1)}
  os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
  wd.write_json(args.out, doc, default=float)
  print(f"wrote {args.out}")
  return doc


if __name__ == "__main__":
  cli.script(main)
