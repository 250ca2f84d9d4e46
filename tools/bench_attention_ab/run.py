"""`run(config)`: times the train step with el_jax's einsum attention and with
`jax.nn.dot_product_attention` (the same q / k / v, rotary and mask; it replaces
`decoder.Attention.attend` here only) in interleaved windows, for scored positions and for all
positions, and writes one line per kind of step to `<results_dir>/<config.log>`."""
import os

import jax
import numpy as np

from el_jax.core.models import decoder
from el_jax.run import config as config_lib
from el_jax.tools import bench


def dpa_attend(self, q, k, v, mask):
  """The same attention through jax.nn.dot_product_attention (scale 1 / sqrt(K))."""
  return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], implementation="xla")


def _overrides(config):
  out = {}
  for item in (x for x in config.shape.split(",") if x):
    key, _, value = item.partition("=")
    try:
      out[key] = int(value)
    except ValueError:
      raise ValueError(f"config.shape: {item!r} is not key=<integer>") from None
  return out


def run(config):
  if min(config.rounds, config.steps, config.warmup) < 1:
    raise ValueError("config.rounds, config.steps and config.warmup must be >= 1")
  name, _, variant = config.config.partition(":")
  cfg = config_lib.get_config(name, variant, _overrides(config))
  orig = decoder.Attention.attend
  lines = []
  try:
    for allpos in (False, True):
      runners = {}
      decoder.Attention.attend = orig
      runners["einsum"] = bench.StepRunner(cfg, config.warmup, score_all_positions=allpos)
      decoder.Attention.attend = dpa_attend
      runners["dpa"] = bench.StepRunner(cfg, config.warmup, score_all_positions=allpos)
      times = {n: [] for n in runners}
      for r in range(config.rounds):
        for n in (list(runners) if r % 2 == 0 else list(runners)[::-1]):
          times[n].append(runners[n](config.steps))
      ratio = [e / d for e, d in zip(times["einsum"], times["dpa"])]
      lines.append(f"all_positions={allpos}: einsum {1e3*np.median(times['einsum']):.1f} ms, dpa "
                   f"{1e3*np.median(times['dpa']):.1f} ms; tokens/s dpa/einsum per-round median "
                   f"{np.median(ratio):.3f} ({min(ratio):.3f}..{max(ratio):.3f})")
      print(lines[-1], flush=True)
  finally:
    decoder.Attention.attend = orig
  os.makedirs(config.results_dir, exist_ok=True)
  with open(os.path.join(config.results_dir, config.log), "w") as f:
    f.write("\n".join(lines) + "\n")
  return lines
