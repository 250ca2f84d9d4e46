"""el_jax.bench's profiler breakdown and matmul peak (the figures docs/bench.md reports)."""
import jax
import jax.numpy as jnp
import numpy as np

from el_jax import bench
from el_jax import runner


def test_op_kinds_sorts_compiled_ops_by_what_they_compute():
  def f(a, b):
    return jnp.tanh(a @ b).sum(axis=1), jnp.exp(a) * 2.0, a.T.copy()
  a = jnp.ones((64, 32), jnp.float32)
  b = jnp.ones((32, 48), jnp.float32)
  kinds = bench._op_kinds(jax.jit(f).lower(a, b).compile().as_text())
  found = set(kinds.values())
  assert "dot" in found and "elementwise" in found, kinds
  # every kind is one of the four the bench reports
  assert found <= {"dot", "reduce", "layout", "elementwise"}, kinds


def test_op_breakdown_times_the_step_by_kind():
  cfg = runner.get_config("copy_task", "test")
  cfg.progress = False
  r = bench.StepRunner(cfg, warmup=1)
  wall, ops = bench.op_breakdown(r, 3)
  assert wall > 0 and ops.get("dot", 0) > 0 and ops.get("elementwise", 0) > 0, ops
  # op time is summed over XLA's threads: at most (threads + 1) x wall, with slack for
  # the profiler's own overhead
  assert sum(ops.values()) < 4 * wall, (wall, ops)


def test_matmul_peak_is_the_flop_rate_of_a_timed_matmul():
  peak = bench.matmul_peak(n=256, reps=2)
  assert np.isfinite(peak) and 1e8 < peak < 1e14
