"""`model.dtype="bfloat16"`: every matmul in bf16, float32 weights, residual stream, logits and loss.

Checked against the float32 model of the same parameters: the jaxpr of the forward pass and of
the train step has no float32 dot (every `dot_general` takes bf16 operands), the parameters and
optimizer state stay float32, the logits and loss are float32, and the logits and one train
step's metrics agree with float32 within what bf16's 8-bit mantissa allows (stated below,
measured at about a third of each bound on this CPU).
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from el_jax.run import config as config_lib
from el_jax.core.models import decoder
from el_jax.run import setup as setup_lib

LOGITS_RTOL = 2e-2   # ||bf16 - fp32|| / ||fp32|| of the logits (measured 2.9e-3 .. 3.2e-3)
METRIC_RTOL = 2e-2   # first-step loss, grad norm and param norm (measured <= 2.5e-3)


def _dots(jaxpr):
  """Every dot_general equation of a (closed) jaxpr, nested calls and loops included."""
  out = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      out.append(eqn)
    for p in eqn.params.values():
      subs = p if isinstance(p, (list, tuple)) else [p]
      for sub in subs:
        if hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
          out += _dots(sub.jaxpr)
        elif hasattr(sub, "eqns"):
          out += _dots(sub)
  return out


@pytest.mark.parametrize("preset", ["gpt_neox", "gpt2", "encoder"])
def test_forward_matmuls_are_bf16_and_close_to_float32(preset):
  c32 = decoder.preset(preset, vocab_size=40, num_layers=2, num_heads=2, embed_dim=32,
                       mlp_dim=64, max_len=16)
  c16 = dataclasses.replace(c32, dtype="bfloat16")
  g32, p = decoder.init(c32, 0)
  g16, p16 = decoder.init(c16, 0)
  for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(p16)):  # same float32 parameters
    assert a.dtype == b.dtype == jnp.float32
    np.testing.assert_array_equal(a, b)
  tok = jax.random.randint(jax.random.key(1), (3, 16), 0, 40)
  dots = _dots(jax.make_jaxpr(lambda q: decoder.apply(g16, q, tok))(p).jaxpr)
  # per block: qkv, q k^T, probs v, out, fc_in, fc_out; plus the unembedding
  assert len(dots) == 6 * c16.num_layers + 1
  assert all(v.aval.dtype == jnp.bfloat16 for e in dots for v in e.invars)
  dots32 = _dots(jax.make_jaxpr(lambda q: decoder.apply(g32, q, tok))(p).jaxpr)
  assert all(v.aval.dtype == jnp.float32 for e in dots32 for v in e.invars)
  l32, l16 = decoder.apply(g32, p, tok), decoder.apply(g16, p, tok)
  assert l16.dtype == jnp.float32
  rel = float(jnp.linalg.norm(l16 - l32) / jnp.linalg.norm(l32))
  assert 0 < rel < LOGITS_RTOL, rel  # bf16 really ran (rel > 0), and stays close


def test_train_step_in_bf16_keeps_float32_state_and_tracks_float32():
  out = {}
  for dtype in ("float32", "bfloat16"):
    cfg = config_lib.get_config("copy_task", "test", {"model.dtype": dtype, "num_devices": 1})
    setup = setup_lib.Setup(cfg)
    trainer = setup_lib.Trainer(setup)
    state = trainer.init(0)
    batch = trainer.put_batch(setup.batch(0, 0))
    if dtype == "bfloat16":
      step_dots = _dots(jax.make_jaxpr(trainer.pure_step)(state, batch).jaxpr)
      assert step_dots and all(v.aval.dtype == jnp.bfloat16 for e in step_dots for v in e.invars)
    state, m = trainer.step(state, batch)
    for leaf in jax.tree.leaves(state["params"]) + jax.tree.leaves(state["opt_state"]):
      assert leaf.dtype in (jnp.float32, jnp.int32), leaf.dtype
    out[dtype] = {k: float(v) for k, v in jax.device_get(m).items()}
    assert m["loss"].dtype == jnp.float32
  for k in ("loss", "grad_norm", "param_norm", "ce"):
    assert out["bfloat16"][k] == pytest.approx(out["float32"][k], rel=METRIC_RTOL), k
  assert out["bfloat16"]["grad_norm"] != out["float32"]["grad_norm"]
