"""The `dyck` task (el_jax.core.tasks.dyck, configs/dyck.py).

The task trains through el_jax's loop what a hand-written loop trains: checked here against
the independent path `dyck_net.train_chunk` (a jitted scan that draws its minibatches inside);
experiments/dyck_flatness's test pins the experiment's numbers at a tiny size.
"""
import jax
import numpy as np
import optax
import pytest

from el_jax.infra import checkpoint
from el_jax.run import config as config_lib
from el_jax.run import job
from el_jax.infra import metrics as metrics_lib
from el_jax.run import setup as setup_lib
from el_jax.core.data import dyck
from el_jax.core.models import dyck_net as dn
import reliability as rel  # tests/reliability.py

NOISE = 0.5


def _config(**overrides):
  """configs/dyck.py:test in float64, the label-noise arm, a train row every step."""
  return config_lib.get_config("dyck", "test", {"model.dtype": "float64",
                                                "data.label_noise": NOISE,
                                                "train.log_every": 1, **overrides})


def _old_path(seed, chunks, length=4, width=4):
  """Params after each chunk of `chunks` steps and the loss of every step, by
  `dyck_net.train_chunk` (the script's loop before el_jax.run.train)."""
  data = dn.model_batch(dn.pretraining_data(dyck.Language(length)))
  p = dn.init(jax.random.key(seed), length, width, value_std=0.1)
  opt = optax.sgd(0.1)
  s, key = opt.init(p), jax.random.key(10_000 + seed)
  params, losses = [], []
  for k in chunks:
    for _ in range(k):  # one step per call: its loss is that step's minibatch loss
      p, s, key, loss = dn.train_chunk(p, s, key, data, optimizer=opt, batch_size=32,
                                       num_steps=1, label_noise=NOISE)
      losses.append(float(loss))
    params.append(p)
  return params, losses


def _params(workdir, seed, step):
  abstract = jax.eval_shape(lambda: dn.init(jax.random.key(0), 4, 4, value_std=0.1))
  here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return checkpoint.load_params_from(str(workdir), seed, abstract, here, step)[0]


def _same(a, b):
  return all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in dn.LEAVES)


def test_the_loop_trains_what_train_chunk_trains_and_resumes_to_the_same(tmp_path, monkeypatch):
  """Two seeds, 30 steps with label noise, float64: the parameters of every checkpoint are
  bit-identical to train_chunk's, and so is a run stopped at step 10 and resumed. The logged
  minibatch losses agree to the last bit or two: train_chunk gathers the batch inside its
  scan, and XLA then rounds the loss's sum (not its gradient) differently."""
  with jax.enable_x64(True):
    cfg = _config(seeds=(0, 3))
    with monkeypatch.context() as m:  # the suite's default is 0: the task's plot is checked
      rel.plots_on(m)
      summary = job.train_and_evaluate(cfg, str(tmp_path / "run"))
    assert (tmp_path / "run" / "loss.png").stat().st_size > 1000
    rows = [r for r in metrics_lib.read_rows(str(tmp_path / "run")) if r["kind"] == "train"]
    data = dn.model_batch(dn.pretraining_data(dyck.Language(4)))
    for i, seed in enumerate((0, 3)):
      old, old_losses = _old_path(seed, (10, 10, 10))
      for step, p in zip((10, 20, 30), old):
        assert _same(_params(tmp_path / "run", seed, step), p), (seed, step)
      got = [r["loss"] for r in rows if r["seed"] == seed]
      assert [r["step"] for r in rows if r["seed"] == seed] == list(range(1, 31))
      np.testing.assert_allclose(got, old_losses, rtol=1e-14)
      # The task's evaluation: the exact population loss of the final params.
      final = summary["per_seed"][i]
      assert final["train_loss"] == pytest.approx(float(dn.loss_fn(old[-1], data)), rel=1e-12)
      assert final["train_n"] == 24  # C(4, 2) sentences x 4 masked positions

    # Resumed: stopped after step 10 (train.stop_at_step), then run again to the end.
    stopped = _config(seeds=(3,), **{"train.stop_at_step": 10})
    assert job.train_and_evaluate(stopped, str(tmp_path / "resumed")) is None
    job.train_and_evaluate(_config(seeds=(3,)), str(tmp_path / "resumed"))
    assert _same(_params(tmp_path / "resumed", 3, 30), _params(tmp_path / "run", 3, 30))


def test_batches_follow_the_key_stream_from_any_step():
  """A batch of any step, asked first (a resume), equals the one reached step by step, and
  both are the draws train_chunk makes (indices and Rademacher signs from split(key, 3))."""
  from el_jax.core import tasks
  cfg = config_lib.get_config("dyck", "test", {"data.label_noise": NOISE})
  walked, fresh = (tasks.get_task_class("dyck")(cfg) for _ in range(2))
  for step in range(0, 1003):
    b = walked.batch(0, step)
  late = fresh.batch(0, 1002)
  assert np.array_equal(late["z"], b["z"]) and np.array_equal(late["y"], b["y"])
  key = jax.random.key(10_000)
  for _ in range(3):  # steps 0, 1, 2 by hand
    key, ki, kn = jax.random.split(key, 3)
  idx = np.asarray(jax.random.randint(ki, (32,), 0, 24))
  sign = np.asarray(jax.random.rademacher(kn, (32,), np.float32))
  b2 = fresh.batch(0, 2)
  assert np.array_equal(b2["z"], fresh.z[idx])
  assert np.array_equal(b2["y"], fresh.y[idx] + NOISE * sign)


@pytest.mark.parametrize("variant", ["paper", "cpu", "test"])
def test_every_variant_loads_and_validates(variant):
  cfg = config_lib.get_config("dyck", variant)
  assert cfg.task == "dyck" and cfg.loss.name == "squared" and cfg.optim.name == "sgd"
  assert cfg.optim.grad_clip == 0 and cfg.optim.momentum == 0 and cfg.num_devices == 1
  with jax.enable_x64(cfg.model.dtype == "float64"):
    setup_lib.validate_config(cfg)
  if variant != "test":
    assert cfg.train.keep_checkpoints == 0 and cfg.model.dtype == "float64"


@pytest.mark.parametrize("override,match", [
    ({"loss.name": "ce"}, r"loss.name='ce': the dyck task trains its model's own squared loss"),
    ({"model.dtype": "float64"}, r"model.dtype='float64' but JAX's 64-bit mode is off"),
    ({"model.dtype": "bfloat16"}, r"model.dtype='bfloat16' must be one of"),
    ({"data.length": 5}, r"data.length=5 must be an even integer >= 2"),
    ({"data.label_noise": -1.0}, r"data.label_noise=-1.0 must be a finite number >= 0"),
    ({"flatness.every": 5}, r"flatness.every=5: the loop's flatness hook measures a decoder"),
    ({"loss.reduction": "reweight"}, r"loss.reduction='reweight'"),
])
def test_bad_configs_are_refused_in_one_line(override, match):
  cfg = config_lib.get_config("dyck", "test", override)
  with jax.enable_x64(False), pytest.raises(ValueError, match=match):
    setup_lib.validate_config(cfg)
