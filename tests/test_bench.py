"""el_jax.tools.bench's profiler breakdown and matmul peak (the figures docs/bench.md reports)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reliability as rel
from el_jax.tools import bench
from el_jax.run import config as config_lib


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


def test_the_profile_times_the_step_by_kind():
  cfg = config_lib.get_config("copy_task", "test")
  cfg.progress = False
  r = bench.StepRunner(cfg, warmup=1)
  wall, per_op = bench.op_times(r, 3)
  ops = bench.by_kind(per_op)
  assert wall > 0 and ops.get("dot", 0) > 0 and ops.get("elementwise", 0) > 0, ops
  # op time is summed over XLA's threads: at most (threads + 1) x wall, with slack for
  # the profiler's own overhead
  assert sum(ops.values()) < 4 * wall, (wall, ops)


def test_matmul_peak_is_the_flop_rate_of_a_timed_matmul():
  peak = bench.matmul_peak(n=256, reps=2)
  assert np.isfinite(peak) and 1e8 < peak < 1e14


def test_op_times_are_the_breakdown_per_instruction():
  """`--profile_top`'s listing: every traced instruction with its kind and result shape, and
  the kinds' sums are `by_kind` of it."""
  cfg = config_lib.get_config("copy_task", "test")
  cfg.progress = False
  r = bench.StepRunner(cfg, warmup=1)
  wall, ops = bench.op_times(r, 3)
  assert wall > 0 and ops
  assert {k for k, _, _ in ops.values()} <= {"dot", "reduce", "layout", "elementwise"}
  # shapes are HLO result types without their layout, e.g. f32[8,128] or a tuple
  assert all(s == "?" or ("[" in s and "{" not in s.rsplit("]", 1)[-1]) for _, s, _ in ops.values())
  total = bench.by_kind(ops)
  assert abs(sum(total.values()) - sum(t for _, _, t in ops.values())) < 1e-9
  dots = [t for k, _, t in ops.values() if k == "dot"]
  assert dots and abs(total["dot"] - sum(dots)) < 1e-9


def test_op_shapes_drop_the_layout():
  text = ("ENTRY %main {\n  %p = f32[8,4]{1,0} parameter(0)\n"
          "  ROOT %t = f32[4,8]{0,1} transpose(%p), dimensions={1,0}\n}\n")
  assert bench._op_shapes(text) == {"p": "f32[8,4]", "t": "f32[4,8]"}


def _one_fusion(body):
  """An HLO module whose entry is one multi-output fusion (a tuple result) of `body`, whose
  instructions end in %r and %e."""
  return ("%fused (p0: f32[8,4]) -> (f32[8], f32[8,4]) {\n  %p0 = f32[8,4]{1,0} parameter(0)\n"
          + body + "  ROOT %t = (f32[8]{0}, f32[8,4]{1,0}) tuple(%r, %e)\n}\n\n"
          "ENTRY %main (p: f32[8,4]) -> (f32[8], f32[8,4]) {\n"
          "  %p = f32[8,4]{1,0} parameter(0)\n"
          "  ROOT %fusion.3 = (f32[8]{0}, f32[8,4]{1,0}) fusion(%p), kind=kLoop, calls=%fused\n}\n")


def test_a_multi_output_fusion_is_profiled():
  """An instruction whose result is a tuple (a multi-output fusion) has a kind and a shape,
  not only the one-type ones."""
  text = _one_fusion("  %e = f32[8,4]{1,0} exponential(%p0)\n  %z = f32[] constant(0)\n"
                     "  %r = f32[8]{0} reduce(%e, %z), dimensions={1}, to_apply=%add\n")
  assert bench._op_kinds(text)["fusion.3"] == "reduce"
  assert bench._op_shapes(text)["fusion.3"] == "(f32[8], f32[8,4])"
  # copies with a tuple root: still layout
  copies = _one_fusion("  %e = f32[8,4]{1,0} copy(%p0)\n  %r = f32[8,4]{1,0} copy(%e)\n")
  assert bench._op_kinds(copies)["fusion.3"] == "layout", copies


def test_profile_top_without_profile_is_one_line(capsys, monkeypatch):
  monkeypatch.chdir(rel.ROOT)
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    bench.main(["el_jax.tools.bench", "--config=configs/copy_task.py:test", "--profile_top=5"])
  assert e.value.code not in (0, None)
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1] == "error: --profile_top=5 lists the ops of --profile's trace: add --profile", err
