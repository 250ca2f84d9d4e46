"""What the host does per training step: the epoch's permutation is built
once and reused by its steps, and a step's metrics are copied to the host only when logged,
checkpointed or last, so the device can run ahead of Python."""
import types

import numpy as np
import pytest

from el_jax.run import train
from el_jax.core.tasks import base


def test_epoch_permutation_is_built_once_per_epoch():
  base._epoch_order.cache_clear()
  a = base.epoch_order(1000, seed=7, epoch=2)
  # the same (read-only) array for every step of the epoch, equal to a fresh draw
  assert base.epoch_order(1000, seed=7, epoch=2) is a
  assert not a.flags.writeable
  with pytest.raises(ValueError):
    a[0] = 1
  assert np.array_equal(a, np.random.default_rng([7, 2, 2]).permutation(1000))
  info = base._epoch_order.cache_info()
  assert (info.hits, info.misses) == (1, 1)
  # a step's indices come from it: 10 steps of one epoch build one permutation
  base._epoch_order.cache_clear()
  idx = [base.step_indices(1000, 100, 0, 3, s) for s in range(10)]
  assert base._epoch_order.cache_info().misses == 1
  assert np.array_equal(np.sort(np.concatenate(idx)), np.arange(1000))
  base.step_indices(1000, 100, 0, 3, 10)  # the next epoch
  assert base._epoch_order.cache_info().misses == 2


@pytest.mark.parametrize("start,stop,log_every,ckpt_every", [(0, 23, 5, 10), (4, 9, 2, 100),
                                                             (0, 3, 100, 100), (0, 7, 3, 0)])
def test_metrics_are_fetched_only_on_logged_checkpointed_or_last_steps(start, stop, log_every,
                                                                       ckpt_every):
  tcfg = types.SimpleNamespace(log_every=log_every, checkpoint_every=ckpt_every, eval_every=0,
                               num_steps=stop)
  checked, saved, dispatched = [], [], []

  def step(state, batch):
    dispatched.append(batch)
    return state + 1, {"step": state + 1}

  def check(pending, bar, t0):
    done, m = pending
    assert m["step"] == done  # the metrics of that step, not of a later one
    # fetched after the next step was dispatched, or right before a save / at the end
    assert (len(dispatched) == done + 1 - start or done == stop
            or (ckpt_every and done % ckpt_every == 0))
    checked.append(done)

  final = train.run_steps(start, start, stop, tcfg, batch=lambda i: i, step=step, check=check,
                          save=lambda done, s: saved.append(done), evaluate=None, desc="t")
  assert final == stop
  saves = [d for d in range(start + 1, stop + 1)
           if ckpt_every and (d % ckpt_every == 0 or d == stop)]  # 0: no checkpoints
  want = sorted({d for d in range(start + 1, stop + 1)
                 if d == 1 or d % log_every == 0 or d == stop} | set(saves))
  assert checked == want
  assert saved == saves
  assert set(saved) <= set(checked)  # never a checkpoint of an unchecked state
