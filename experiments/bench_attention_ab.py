"""Benchmark A/B: el_jax's einsum attention against `jax.nn.dot_product_attention`
(implementation "xla") at the bench shape of docs/bench.md, in one process, interleaved
windows (9 rounds of 20 steps), for the scored-positions and the all-positions step.

  .venv/bin/python experiments/bench_attention_ab.py   # results/bench/attention_ab.log

The dot_product_attention variant replaces `decoder.Attention.attend` here only (same q/k/v,
rotary and mask); el_jax keeps the einsum, which was faster on the 2-core CPU
(docs/bench.md).
"""
import jax
import numpy as np

from el_jax import bench
from el_jax import runner as rn
from el_jax.models import decoder

orig = decoder.Attention.attend


def dpa_attend(self, q, k, v, mask):
  """The same attention through jax.nn.dot_product_attention (scale 1 / sqrt(K))."""
  return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], implementation="xla")


args = ["--config.data.seq_len=1", "--config.data.pad_len=207", "--config.data.context_len=212",
        "--config.model.num_layers=4", "--config.train.batch_strings=8"]
over = {a.split("=")[0][len("--config."):]: int(a.split("=")[1]) for a in args}
cfg = rn.get_config("copy_task", "cpu", over)
for allpos in (False, True):
  runners = {}
  decoder.Attention.attend = orig
  runners["einsum"] = bench.StepRunner(cfg, 5, score_all_positions=allpos)
  decoder.Attention.attend = dpa_attend
  runners["dpa"] = bench.StepRunner(cfg, 5, score_all_positions=allpos)
  times = {n: [] for n in runners}
  for r in range(9):
    for n in (list(runners) if r % 2 == 0 else list(runners)[::-1]):
      times[n].append(runners[n](20))
  ratio = [e / d for e, d in zip(times["einsum"], times["dpa"])]
  print(f"all_positions={allpos}: einsum {1e3*np.median(times['einsum']):.1f} ms, dpa "
        f"{1e3*np.median(times['dpa']):.1f} ms; tokens/s dpa/einsum per-round median "
        f"{np.median(ratio):.3f} ({min(ratio):.3f}..{max(ratio):.3f})", flush=True)
