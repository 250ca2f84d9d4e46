"""el_jax.infra.timeline: where a run's wall time goes. The parts nest (time goes to the
innermost), compile events move their seconds into "compile", nothing records outside a
recording; a stacked job at `test` size records every part, its parts sum to the wall time
within the stated slack, its stacked step compiles once, and its training TFLOP/s is el_jax's
FLOPs x slots x steps / the training seconds. `train.checkpoint_every=0` saves no checkpoint."""
import os
import time

import pytest

from el_jax.core import step as step_lib
from el_jax.infra import timeline
from el_jax.run import config as config_lib
from el_jax.run import job
from el_jax.run import setup as setup_lib


def test_parts_nest_and_compiles_move_into_compile():
  tl = timeline.Timeline()
  with timeline.recording(tl):
    time.sleep(0.02)  # in no part: unaccounted
    with timeline.part("train"):
      time.sleep(0.05)
      with timeline.part("eval"):
        time.sleep(0.05)
        tl.compiled(timeline.COMPILE_EVENTS[-1], 0.03, fun_name="jit(f)")
      tl.compiled("/jax/other/event", 9.0)  # not a compile: ignored
  d = tl.as_dict()
  p = d["parts_s"]
  assert p["compile"] == pytest.approx(0.03)
  assert 0.01 <= p["eval"] <= 0.05 and 0.05 <= p["train"] <= 0.09
  assert 0.02 <= d["unaccounted_s"] < 0.05
  assert d["compiles"] == 1 and d["compiled"] == {"jit(f)": 1}
  assert sum(p.values()) + d["unaccounted_s"] == pytest.approx(d["wall_s"], abs=2e-3)
  with pytest.raises(ValueError, match="timeline part 'nope' is not one of"):
    with timeline.recording(timeline.Timeline()):
      with timeline.part("nope"):
        pass


def test_nothing_records_outside_a_recording():
  assert timeline.active() is None
  with timeline.part("train", sync=object()):  # no sync, no error: nothing happens
    timeline.note(x=1)
    timeline.append("programs", {})
  with pytest.raises(RuntimeError, match="already recording"):
    with timeline.recording(timeline.Timeline()):
      with timeline.recording(timeline.Timeline()):
        pass
  assert timeline.active() is None


def _config(**over):
  return config_lib.get_config("path_star", "test", {"num_devices": 1, "progress": False,
                                                     "train.tensorboard": False, **over})


def test_a_stacked_job_records_its_timeline(tmp_path, monkeypatch):
  """Two runs (CE seeds 0, 1 and E1 seed 0) as one stacked program, no checkpoint: every part
  recorded, summing to the wall time within `timeline.SLACK`; one compile of the stacked step;
  the FLOPs the program noted are el_jax's count of one slot's step."""
  monkeypatch.setenv("EL_JAX_PLOTS", "0")
  ce = _config(**{"train.checkpoint_every": 0, "train.eval_every": 4})
  ce.seeds = (0, 1)
  e1 = _config(**{"train.checkpoint_every": 0, "train.eval_every": 4, "loss.name": "e1",
                  "loss.e1.lam": 1.0})
  e1.seeds = (0,)
  tl = timeline.Timeline()
  with timeline.recording(tl):
    out = job.train_arms([ce, e1], [str(tmp_path / "ce"), str(tmp_path / "e1")])
  assert all(s is not None for s in out)
  d = tl.as_dict()
  p = d["parts_s"]
  for part in ("setup", "compile", "train", "eval", "write"):
    assert p[part] > 0, part
  assert p["checkpoint"] < 0.05  # nothing saved, only the (empty) wait
  assert abs(d["wall_s"] - sum(p.values())) <= timeline.slack(d["wall_s"])
  assert abs(d["unaccounted_s"]) <= timeline.slack(d["wall_s"])
  assert d["compiled"]["jit(stacked)"] == 1  # one compile of the stacked step for 3 runs
  (prog,) = d["notes"]["programs"]
  assert (prog["slots"], prog["steps"]) == (3, 8)
  # el_jax's own count: XLA's cost analysis of one slot's step, as el_jax.tools.plan counts it
  setup = setup_lib.Setup(e1)
  trainer = setup_lib.Trainer(setup)
  state, batch = trainer.init(0), trainer.put_batch(setup.batch(0, 0))
  flops, _ = step_lib.step_flops(trainer.step, state, batch)
  assert prog["flops_per_slot_step"] == pytest.approx(flops, rel=0.05)
  for run in ("ce", "e1"):
    assert not os.listdir(tmp_path / run / "seed_0" / "checkpoints")


def test_checkpoint_every_zero_saves_none_and_refuses_stop_at_step(tmp_path):
  cfg = _config(**{"train.checkpoint_every": 0})
  summary = job.train_and_evaluate(cfg, str(tmp_path / "run"))
  assert summary["per_seed"][0]["step"] == 8
  assert not os.listdir(tmp_path / "run" / "seed_0" / "checkpoints")
  with pytest.raises(ValueError, match=r"train.checkpoint_every=0 saves none"):
    setup_lib.validate_config(_config(**{"train.checkpoint_every": 0, "train.stop_at_step": 4}))
  with pytest.raises(ValueError, match=r"train.checkpoint_every=-1 must be an integer >= 0 "
                                       r"\(0 = no checkpoints\)"):
    setup_lib.validate_config(_config(**{"train.checkpoint_every": -1}))
