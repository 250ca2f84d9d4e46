"""Adversarial pretraining (seed 002, Table 1): the closed-form ridge head, the sign of the
adversarial gradient, the hook into the generic train step, and its config checks."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from el_jax.core import adversarial
from el_jax.core.data import downstream
from el_jax.run import job
from el_jax.core.models import decoder
from el_jax.core import probe
from el_jax.run import runner
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib


def _config(cache_dir, **overrides):
  # One layer: the tests compile the train step several times.
  c = config_lib.get_config("pcfg_mlm", "test", {"model.num_layers": 1, **overrides})
  c.data.cache_dir = str(cache_dir)
  return c


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return tmp_path_factory.mktemp("adv_cache")


@pytest.fixture(scope="module")
def setup(cache):
  return setup_lib.Setup(_config(cache, num_devices=1, **{"adversarial.enabled": True}))


@pytest.fixture(scope="module")
def model(setup):
  """(graphdef, params, downstream data dict) of the test encoder at init."""
  graphdef, params = decoder.init(setup.model_cfg, 0)
  ds = adversarial.downstream_data(setup.config, setup.task.language, setup.task.context_len)
  data = {"tokens": jnp.asarray(ds.train.tokens), "segment_ids": jnp.asarray(ds.train.segment_ids),
          "onehot": jnp.asarray(np.eye(ds.num_classes, dtype=np.float32)[ds.train.labels])}
  return graphdef, params, data


# ----------------------------------------------------------------------------
# The closed-form head against NumPy


def _np_ridge(x, y, ridge):
  x, y = x.astype(np.float64), y.astype(np.float64)
  return np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ y)


@pytest.mark.parametrize("n,f", [(12, 40), (40, 12)])  # dual form, primal form
@pytest.mark.parametrize("ridge", [0.3, 5.0])
def test_ridge_head_is_the_direct_solve(n, f, ridge):
  rng = np.random.default_rng(n + f)
  x = rng.normal(size=(n, f)).astype(np.float32)
  y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, n)]
  got = np.asarray(adversarial.ridge_head(jnp.asarray(x), jnp.asarray(y), ridge))
  np.testing.assert_allclose(got, _np_ridge(x, y, ridge), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("n,f", [(12, 40), (40, 12)])
def test_ridge_head_without_ridge_is_least_squares(n, f):
  """ridge = 0: ordinary least squares (n > f) or the minimum-norm interpolant (n < f),
  which is what np.linalg.lstsq returns in both cases."""
  rng = np.random.default_rng(7)
  x = rng.normal(size=(n, f)).astype(np.float32)
  y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]
  got = np.asarray(adversarial.ridge_head(jnp.asarray(x), jnp.asarray(y), 0.0))
  want = np.linalg.lstsq(x.astype(np.float64), y.astype(np.float64), rcond=None)[0]
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_head_losses_are_the_squared_errors_of_the_fitted_head():
  rng = np.random.default_rng(1)
  x1, x2 = rng.normal(size=(10, 30)), rng.normal(size=(6, 30))
  y1 = np.eye(5)[rng.integers(0, 5, 10)]
  y2 = np.eye(5)[rng.integers(0, 5, 6)]
  w = _np_ridge(x1, y1, 2.0)
  want_d2 = np.mean(np.sum((x2 @ w - y2) ** 2, axis=1))
  want_d1 = np.mean(np.sum((x1 @ w - y1) ** 2, axis=1))
  got = adversarial.head_losses(*(jnp.asarray(a, jnp.float32) for a in (x1, y1, x2, y2)), 2.0)
  np.testing.assert_allclose([float(g) for g in got], [want_d2, want_d1], rtol=1e-4)


def test_subsets_are_disjoint_and_in_range():
  for s in range(20):
    i1, i2 = adversarial.draw_subsets(jax.random.key(s), 50, 30, 20)
    i1, i2 = np.asarray(i1), np.asarray(i2)
    assert i1.shape == (30,) and i2.shape == (20,)
    assert len(set(i1) | set(i2)) == 50  # disjoint, together all of range(50)
    assert i1.min() >= 0 and max(i1.max(), i2.max()) < 50


def test_features_are_the_probes(model):
  graphdef, params, data = model
  tok, seg = np.asarray(data["tokens"][:16]), np.asarray(data["segment_ids"][:16])
  got = np.asarray(jax.jit(adversarial.features, static_argnums=0)(graphdef, params, tok, seg))
  np.testing.assert_allclose(got, probe.encode(graphdef, params, tok, seg), rtol=1e-5, atol=1e-6)


def test_trainer_set_is_the_probes_training_split(setup):
  """The adversary's training set is the train split a probe of other valid / test sizes uses."""
  a = setup.config.adversarial
  mine = adversarial.downstream_data(setup.config, setup.task.language, setup.task.context_len)
  probe_ds = downstream.pcfg_task(setup.task.language, a.task, num_train=a.num_train,
                                  num_valid=40, num_test=30, seed=a.data_seed,
                                  seq_len=setup.task.context_len, cache=False)
  np.testing.assert_array_equal(mine.train.tokens, probe_ds.train.tokens)
  np.testing.assert_array_equal(mine.train.labels, probe_ds.train.labels)
  assert mine.num_classes == 9  # task A of the shared grammar


# ----------------------------------------------------------------------------
# The sign of the adversarial gradient and the hook


@pytest.fixture(scope="module")
def term_grad(model):
  """Jitted (value, aux), grad of the adversarial term in the params, for given subsets and
  weight (one compilation for the tests below)."""
  graphdef, _, data = model

  def term(p, idx1, idx2, weight):
    return adversarial.adversarial_term(graphdef, p, data, idx1, idx2, weight=weight, ridge=10.0)
  return jax.jit(jax.value_and_grad(term, has_aux=True))


def test_descending_the_adversarial_term_raises_the_d2_loss(model, term_grad):
  _, params, data = model
  weight = 0.5
  idx1, idx2 = adversarial.draw_subsets(jax.random.key(0), data["tokens"].shape[0], 8, 8)
  (value, aux), g = term_grad(params, idx1, idx2, weight)
  before = float(aux["adv_d2_loss"])
  assert float(value) == pytest.approx(-weight * before, rel=1e-6)
  g2 = float(optax.tree.norm(g)) ** 2
  for sign in (1.0, -1.0):  # a step down the term (sign 1) raises D2; up the term lowers it
    eps = 1e-3 * before / g2 * weight
    moved = jax.tree.map(lambda p, d: p - sign * eps * d, params, g)
    after = float(term_grad(moved, idx1, idx2, weight)[0][1]["adv_d2_loss"])
    predicted = sign * eps * g2 / weight  # first order: d(D2) = -(1/weight) dot(grad term, step)
    assert np.sign(after - before) == sign, (before, after)
    assert 0.5 < (after - before) / predicted < 1.5, (after - before, predicted)


def test_step_adds_the_adversarial_gradient_to_the_mlm_gradient(setup, model, term_grad):
  """With plain SGD the adversarial step moves the params by -lr (g_mlm + g_adv), g_adv
  computed on its own and g_mlm the step's move at weight 0."""
  graphdef, params, data = model
  lr = 0.1
  tx = optax.sgd(lr)
  state = {"params": params, "opt_state": tx.init(params), "step": jnp.asarray(3, jnp.int32)}
  batch = setup.batch(0, 3)
  groups = setup.task.groups
  key = jax.random.key(0)
  kw = dict(data=data, key=key, d1_size=8, d2_size=8, ridge=10.0)
  adv = jax.jit(lambda s, b, w: adversarial.adversarial_train_step(
      graphdef, setup.loss_fn, tx, groups, s, b, weight=w, **kw))
  base, base_m = adv(state, batch, 0.0)
  assert float(base_m["adv_grad_norm"]) == 0.0 and float(base_m["grad_norm"]) > 0

  weight = 2.0
  new, m = adv(state, batch, weight)
  assert float(m["loss"]) == pytest.approx(float(base_m["loss"]), rel=1e-6)  # the MLM loss
  idx1, idx2 = adversarial.draw_subsets(jax.random.fold_in(key, 3), data["tokens"].shape[0], 8, 8)
  g_adv = term_grad(params, idx1, idx2, weight)[1]
  g_mlm = jax.tree.map(lambda p, q: (p - q) / lr, params, base["params"])
  want = jax.tree.map(lambda p, a, b: p - lr * (a + b), params, g_mlm, g_adv)
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(new["params"])):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)
  assert float(m["adv_grad_norm"]) == pytest.approx(float(optax.tree.norm(g_adv)), rel=1e-4)
  assert float(m["adv_objective"]) == pytest.approx(
      float(m["loss"]) - weight * float(m["adv_d2_loss"]), rel=1e-5)
  assert int(new["step"]) == 4


def test_adversarial_training_runs_end_to_end(cache, tmp_path):
  cfg = _config(cache, num_devices=1, **{
      "adversarial.enabled": True, "adversarial.weight": 0.5, "train.num_steps": 10,
      "train.eval_every": 0, "train.checkpoint_every": 10, "train.log_every": 5})
  summary = job.train_and_evaluate(cfg, str(tmp_path / "run"))
  with open(tmp_path / "run" / "metrics.jsonl") as f:
    rows = [json.loads(line) for line in f]
  trains = [r for r in rows if r["kind"] == "train"]
  assert trains and trains[-1]["step"] == cfg.train.num_steps
  for r in trains:
    assert np.isfinite(r["adv_d2_loss"]) and r["adv_d2_loss"] > 0
    assert r["adv_objective"] == pytest.approx(r["loss"] - 0.5 * r["adv_d2_loss"], rel=1e-5)
  assert summary["per_seed"][0]["step"] == cfg.train.num_steps
  with open(tmp_path / "run" / "config.json") as f:
    assert json.load(f)["adversarial"]["enabled"] is True
  # The runner reads the finished run back instead of training it again.
  assert runner.finished_summary(cfg, str(tmp_path / "run")) == summary


def test_the_hmm_term_uses_the_probes_task_k_and_trains(cache, tmp_path):
  """On the HMM the adversary's training set is hmm_task(int(task))'s train split, the one the
  Measurer's probe of that task trains on, and a run trains end to end."""
  c = config_lib.get_config("hmm_mlm", "test", {
      "model.num_layers": 1, "num_devices": 1, "adversarial.enabled": True,
      "adversarial.task": "6", "adversarial.weight": 0.5, "train.num_steps": 4,
      "train.eval_every": 0, "train.checkpoint_every": 4, "train.log_every": 2})
  c.data.cache_dir = str(cache)
  s = setup_lib.Setup(c)
  a = c.adversarial
  mine = adversarial.downstream_data(c, s.task.language, s.task.context_len)
  probe_ds = downstream.hmm_task(s.task.language, 6, num_train=a.num_train, num_valid=40,
                                 num_test=30, seed=a.data_seed, length=c.data.length,
                                 cache=False)
  np.testing.assert_array_equal(mine.train.tokens, probe_ds.train.tokens)
  np.testing.assert_array_equal(mine.train.labels, probe_ds.train.labels)
  assert mine.name == probe_ds.name
  assert mine.num_classes == c.data.num_states
  job.train_and_evaluate(c, str(tmp_path / "run"))
  with open(tmp_path / "run" / "metrics.jsonl") as f:
    trains = [json.loads(line) for line in f if '"train"' in line]
  assert trains and all(np.isfinite(r["adv_d2_loss"]) and r["adv_d2_loss"] > 0 for r in trains)


# ----------------------------------------------------------------------------
# Config errors


ERRORS = {
    "negative_ridge": ({"adversarial.ridge": -1.0}, ["adversarial.ridge=-1.0", "> 0"]),
    "zero_ridge": ({"adversarial.ridge": 0.0}, ["adversarial.ridge=0.0", "> 0"]),
    "negative_weight": ({"adversarial.weight": -0.1}, ["adversarial.weight=-0.1", ">= 0"]),
    "too_many": ({"adversarial.d1_size": 40, "adversarial.d2_size": 30},
                 ["40 + 30 = 70", "adversarial.num_train=64"]),
    "task": ({"adversarial.task": "C"}, ["adversarial.task='C'", "('A', 'B')"]),
    "d1": ({"adversarial.d1_size": 0}, ["adversarial.d1_size=0", ">= 1"]),
    "hmm_task": ({"adversarial.enabled": True, "data.language": "hmm"},
                 ["adversarial.task='A'", "data.language='hmm'", "'1'..'16'"]),
    "language": ({"adversarial.enabled": True, "data.language": "lm"},
                 ["'pcfg' or 'hmm'", "'lm'"]),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_config_errors_name_the_field(case, tmp_path):
  overrides, fragments = ERRORS[case]
  with pytest.raises(ValueError) as e:
    setup_lib.validate_config(_config(tmp_path, **overrides))
  for frag in fragments:
    assert frag in str(e.value), str(e.value)


def test_a_disabled_hmm_block_does_not_bind_data_length(tmp_path):
  """Plain HMM pre-training with sentences shorter than the block's task (task-10 needs 10
  tokens) is not refused for a term that does not run; enabling it is, naming what is allowed."""
  c = config_lib.get_config("hmm_mlm", "test", {"data.length": 8, "data.max_len_tokens": 8})
  c.data.cache_dir = str(tmp_path)
  adversarial.validate_config(c)
  c.adversarial.enabled = True
  with pytest.raises(ValueError, match=r"adversarial.task='10'; allowed for data.language='hmm': "
                                       r"'1'..'8'"):
    adversarial.validate_config(c)


def test_enabled_must_be_a_bool(tmp_path):
  cfg = _config(tmp_path)
  del cfg.adversarial["enabled"]  # ml_collections refuses a non-bool for the bool field
  cfg.adversarial.enabled = 1
  with pytest.raises(ValueError, match=r"adversarial.enabled=1 must be True or False"):
    setup_lib.validate_config(cfg)


def test_a_config_without_the_block_is_plain_pretraining(tmp_path):
  cfg = _config(tmp_path)
  del cfg["adversarial"]
  setup_lib.validate_config(cfg)
  assert not adversarial.enabled(cfg)
  assert adversarial.enabled(_config(tmp_path, **{"adversarial.enabled": True}))
