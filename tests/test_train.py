"""Copy-task training: golden step, 1 vs 8 devices, resume, failures, decoding, configs, schedules.

Every training run uses the `test` variant of configs/copy_task.py. The runs
that several tests inspect (fixtures `runs` and `one_device`) are made once
per test session, even when pytest-xdist spreads this module's tests over
several workers: they are built under a file lock in a folder the workers
share, and later tests only read them (or copy them before changing them).
"""
import fcntl
import functools
import json
import math
import os
import shutil
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from el_jax.infra import checkpoint
from el_jax.core.data import copy_task
from el_jax.tools import golden
from el_jax.run import job
from el_jax.infra import metrics as metrics_lib
from el_jax.core.models import decoder
from el_jax.core import optim
from el_jax.core import step as step_lib
from el_jax.core.tasks import copy_task as copy_tasks
from el_jax.run import train
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

import reliability  # tests/reliability.py

pytestmark = pytest.mark.xdist_group("test_train")

K = 4  # the resume point: half of the `test` variant's 8 steps

# Golden values of the first step of the `test` config, model seed 0, on one device:
# el_jax/tools/golden.py (how to regenerate them on purpose; `python -m el_jax.tools.verify` checks an
# accelerator against them too).
GOLDEN_STEP_1 = golden.STEP_1


def _config(**overrides):
  """The `test` config with dotted-key overrides, e.g. `**{"optim.lr": 1e-2}`."""
  config = config_lib.get_config("copy_task", "test", overrides)
  config.progress = False
  return config


def _shared_root(tmp_path_factory):
  """A folder shared by all xdist workers of this session (the parent of their basetemps)."""
  root = tmp_path_factory.getbasetemp()
  return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def _build_once(tmp_path_factory, name, build):
  """Runs `build(folder)` once per session, whichever worker asks first; returns the folder."""
  root = _shared_root(tmp_path_factory)
  folder = root / name
  with open(root / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
    if not (folder / "DONE").exists():
      shutil.rmtree(folder, ignore_errors=True)
      folder.mkdir()
      build(folder)
      (folder / "DONE").touch()
  return folder


def _to_host(tree):
  return jax.tree.map(np.asarray, jax.device_get(tree))


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
  """The `test` config trained with Setup / Trainer on one device: per-step metrics, final state."""
  setup = setup_lib.Setup(_config(num_devices=1))
  assert setup.mesh.devices.size == 1
  trainer = setup_lib.Trainer(setup)  # no compilation: also used to restore checkpoints

  def build(folder):
    state = trainer.init(0)
    metrics = []
    for step in range(setup.config.train.num_steps):
      state, m = trainer.step(state, trainer.put_batch(setup.batch(0, step)))
      metrics.append({k: float(v) for k, v in jax.device_get(m).items()})
    (folder / "metrics.json").write_text(json.dumps(metrics))
    np.savez(folder / "state.npz", *jax.tree.leaves(_to_host(state)))

  folder = _build_once(tmp_path_factory, "one_device", build)
  with np.load(folder / "state.npz") as z:
    leaves = [z[f"arr_{i}"] for i in range(len(z.files))]
  state = jax.tree.unflatten(jax.tree.structure(trainer.abstract_state), leaves)
  return types.SimpleNamespace(trainer=trainer, state=state,
                               metrics=json.loads((folder / "metrics.json").read_text()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """train_and_evaluate on all 8 devices: 2K steps in one go, and K steps + resume."""
  assert len(jax.devices()) == 8  # conftest.py
  assert _config().train.num_steps == 2 * K

  def build(root):
    job.train_and_evaluate(_config(), str(root / "full"))
    assert job.train_and_evaluate(_config(**{"train.stop_at_step": K}),
                                    str(root / "resumed")) is None
    shutil.copytree(root / "resumed", root / "stopped")  # a stopped run, for the failure tests
    steps = []
    batch = setup_lib.Setup.batch
    with pytest.MonkeyPatch.context() as mp:
      mp.setattr(setup_lib.Setup, "batch",
                 lambda self, seed, step: steps.append(step) or batch(self, seed, step))
      job.train_and_evaluate(_config(), str(root / "resumed"))
    (root / "steps_after_resume.json").write_text(json.dumps(steps))

  root = _build_once(tmp_path_factory, "runs", build)
  read = lambda p: json.loads((root / p).read_text())  # noqa: E731
  return types.SimpleNamespace(
      full=root / "full", resumed=root / "resumed", stopped=root / "stopped",
      summary_full=read("full/summary.json"), summary_resumed=read("resumed/summary.json"),
      steps_after_resume=read("steps_after_resume.json"))


def _rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f if line.strip()]


def _restore(trainer, workdir, seed=0):
  """(step, state on the host) of the newest checkpoint of `seed` in `workdir`."""
  mngr = checkpoint.manager(os.path.join(workdir, f"seed_{seed}", "checkpoints"), 1)
  try:
    state = checkpoint.restore_latest(mngr, trainer.abstract_state, trainer.state_sharding)
    return mngr.latest_step(), (None if state is None else _to_host(state))
  finally:
    mngr.close()


def _assert_trees_equal(a, b, **tol):
  flat_a, flat_b = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves(b)
  assert len(flat_a) == len(flat_b)
  for (path, x), y in zip(flat_a, flat_b):
    if tol:
      np.testing.assert_allclose(x, y, err_msg=jax.tree_util.keystr(path), **tol)
    else:
      np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))


# ----------------------------------------------------------------------------
# Golden step, devices, resume


def test_golden_one_step(one_device):
  got = {k: one_device.metrics[0][k] for k in GOLDEN_STEP_1}
  for key, want in GOLDEN_STEP_1.items():
    assert math.isclose(got[key], want, rel_tol=1e-4), (
        f"step-1 {key} of the `test` config is {got[key]!r}, recorded {want!r} (all: {got}). "
        f"If this change is intended, regenerate el_jax.tools.golden.STEP_1 with the command in "
        f"el_jax/tools/golden.py and paste the new values.")


def test_one_vs_eight_devices(one_device, runs):
  """Data-parallel training over 8 devices equals one device up to float rounding."""
  train_rows = {r["step"]: r for r in _rows(runs.full) if r["kind"] == "train"}
  assert sorted(train_rows) == [1, 2, 4, 6, 8]
  for step, row in train_rows.items():
    m1 = one_device.metrics[step - 1]
    for key, v1 in m1.items():
      v8 = row[key]
      if key.startswith("n_"):
        assert v8 == v1, key
      elif v8 is None:  # a group absent from this batch
        assert m1[key.replace("loss_", "n_").replace("ce_", "n_")] == 0, key
      else:
        assert math.isclose(v8, v1, rel_tol=2e-4, abs_tol=1e-5), (step, key, v8, v1)
  step, state8 = _restore(one_device.trainer, runs.full)
  assert step == 2 * K
  _assert_trees_equal(state8["params"], one_device.state["params"], rtol=1e-3, atol=1e-5)
  assert int(state8["step"]) == int(one_device.state["step"]) == 2 * K


def test_a_compile_option_this_xla_does_not_know_is_left_out(monkeypatch, capfd):
  """A CPU_DOTS option the running XLA does not know (`jax.jit` would fail on it) is left out
  of the options a run compiles with, with one line on stderr once per process; a known one
  is kept; the run trains with what is left."""
  monkeypatch.setattr(step_lib, "_KNOWN_OPTIONS", {})
  monkeypatch.setitem(step_lib.CPU_DOTS, "odd", {"xla_el_jax_no_such_option": True,
                                                 "xla_cpu_use_xnnpack": False})
  capfd.readouterr()
  for _ in range(2):
    assert step_lib.known_options(step_lib.CPU_DOTS["odd"]) == {"xla_cpu_use_xnnpack": False}
  err = capfd.readouterr().err
  assert err.count("\n") == 1 and "has no compile option xla_el_jax_no_such_option" in err, err
  setup = setup_lib.Setup(_config(num_devices=1, **{"train.cpu_dots": "odd"}))
  trainer = setup_lib.Trainer(setup)
  assert trainer.compiler_options == {"xla_cpu_use_xnnpack": False}
  state = trainer.init(0)
  state, m = trainer.step(state, trainer.put_batch(setup.batch(0, 0)))
  assert np.isfinite(float(jax.device_get(m["loss"])))


def test_eigen_cpu_dots_train_like_xla_dots(one_device):
  """`train.cpu_dots="eigen"` (another matmul library, so other rounding) trains the `test`
  config to the same metrics and parameters within float tolerance, and really compiles
  another program (no YNNPACK fusion in its HLO)."""
  setup = setup_lib.Setup(_config(num_devices=1, **{"train.cpu_dots": "eigen"}))
  trainer = setup_lib.Trainer(setup)
  assert trainer.compiler_options == step_lib.CPU_DOTS["eigen"]
  state = trainer.init(0)
  batch0 = trainer.put_batch(setup.batch(0, 0))
  assert "ynn" not in trainer.step.lower(state, batch0).compile().as_text()
  for step in range(setup.config.train.num_steps):
    state, m = trainer.step(state, trainer.put_batch(setup.batch(0, step)))
    for key, v in jax.device_get(m).items():
      assert math.isclose(float(v), one_device.metrics[step][key], rel_tol=1e-4,
                          abs_tol=1e-6), (step, key)
  _assert_trees_equal(_to_host(state["params"]), one_device.state["params"], rtol=1e-4,
                      atol=1e-6)


def test_attention_blocks_train_like_one_einsum(one_device):
  """`train.attention_blocks=4` (causal attention in 4 query blocks, keys cropped: the same
  function, sums in another order) trains the `test` config to the metrics and parameters of
  the one-einsum attention within float tolerance, with the default matmuls and with
  `cpu_dots="auto"`, and really computes fewer FLOPs."""
  base = setup_lib.Trainer(setup_lib.Setup(_config(num_devices=1)))
  for overrides in ({"train.attention_blocks": 4},
                    {"train.attention_blocks": 4, "train.cpu_dots": "auto"}):
    setup = setup_lib.Setup(_config(num_devices=1, **overrides))
    assert setup.model_cfg.attention_blocks == 4
    trainer = setup_lib.Trainer(setup)
    state = trainer.init(0)
    batch0 = trainer.put_batch(setup.batch(0, 0))

    def flops(tr, st):
      cost = tr.step.lower(st, batch0).compile().cost_analysis()
      return (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]
    assert flops(trainer, state) < flops(base, base.init(0))
    for step in range(setup.config.train.num_steps):
      state, m = trainer.step(state, trainer.put_batch(setup.batch(0, step)))
      for key, v in jax.device_get(m).items():
        assert math.isclose(float(v), one_device.metrics[step][key], rel_tol=1e-4,
                            abs_tol=1e-6), (overrides, step, key)
    _assert_trees_equal(_to_host(state["params"]), one_device.state["params"], rtol=1e-4,
                        atol=1e-6)


def test_stop_at_step_stops_resumably(runs):
  stopped = runs.stopped / "seed_0"
  assert not (stopped / "final.json").exists()
  assert not (runs.stopped / "summary.json").exists()
  assert sorted(os.listdir(stopped / "checkpoints")) == [str(K)]
  assert max(r["step"] for r in _rows(runs.stopped)) == K


def test_resume_matches_uninterrupted_run(runs, one_device):
  assert runs.steps_after_resume == list(range(K, 2 * K))  # restored, not retrained from 0
  step_full, full = _restore(one_device.trainer, runs.full)
  step_res, resumed = _restore(one_device.trainer, runs.resumed)
  assert step_full == step_res == 2 * K
  _assert_trees_equal(full, resumed)  # params and optimizer state, bit for bit
  assert runs.summary_resumed["per_seed"] == runs.summary_full["per_seed"]
  assert runs.summary_resumed["aggregate"] == runs.summary_full["aggregate"]

  def without_time(rows):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]

  rows_full, rows_res = _rows(runs.full), _rows(runs.resumed)
  assert without_time(rows_res) == without_time(rows_full)
  keys = [(r["seed"], r["step"], r["kind"]) for r in rows_res]
  assert len(keys) == len(set(keys)), f"duplicated metrics rows after resume: {keys}"
  assert {r["kind"] for r in rows_res} == {"train", "eval"}


def test_finished_seed_is_not_retrained(runs, monkeypatch, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(runs.full, workdir)
  metrics_before = (workdir / "metrics.jsonl").read_text()
  checkpoints_before = reliability.snapshot(workdir / "seed_0")
  final = json.loads((workdir / "seed_0" / "final.json").read_text())

  def forbidden(*args, **kwargs):
    raise AssertionError("a finished seed was trained or evaluated again")

  monkeypatch.setattr(setup_lib.Setup, "batch", forbidden)
  monkeypatch.setattr(setup_lib.Trainer, "evaluate", forbidden)
  summary = job.train_and_evaluate(_config(), str(workdir))
  assert summary["per_seed"] == [final]
  assert summary["num_params"] == runs.summary_full["num_params"] > 0
  assert (workdir / "metrics.jsonl").read_text() == metrics_before
  assert reliability.snapshot(workdir / "seed_0") == checkpoints_before


def test_workdir_of_another_config_is_refused(runs, tmp_path):
  """A finished seed is read back only for the config that trained it."""
  workdir = tmp_path / "run"
  shutil.copytree(runs.full, workdir)
  before = reliability.snapshot(workdir)
  with pytest.raises(ValueError, match=r"trained with a different config \(optim\.lr: 0\.003 -> "
                     r"0\.001, train\.num_steps: 8 -> 6\)"):
    job.train_and_evaluate(_config(**{"optim.lr": 1e-3, "train.num_steps": 6}), str(workdir))
  assert reliability.snapshot(workdir) == before  # nothing read back, nothing written
  # Fields that do not change what a seed computed may differ.
  summary = job.train_and_evaluate(_config(**{"train.log_every": 3, "progress": True}),
                                     str(workdir))
  assert summary["per_seed"] == runs.summary_full["per_seed"]


def test_retraining_a_lost_seed_replaces_its_old_rows(runs, tmp_path):
  """Seed files deleted but metrics.jsonl kept: the new run's rows replace the old ones."""
  workdir = tmp_path / "run"
  shutil.copytree(runs.full, workdir)
  shutil.rmtree(workdir / "seed_0")
  job.train_and_evaluate(_config(), str(workdir))
  rows = [{k: v for k, v in r.items() if k != "time_s"} for r in _rows(workdir)]
  keys = [(r["seed"], r["step"], r["kind"]) for r in rows]
  assert len(keys) == len(set(keys)), f"stale rows of the lost run were kept: {keys}"
  assert rows == [{k: v for k, v in r.items() if k != "time_s"} for r in _rows(runs.full)]


# ----------------------------------------------------------------------------
# Failures: non-finite loss, corrupt checkpoint


def test_non_finite_loss_names_the_step_and_keeps_the_checkpoint(runs, one_device, tmp_path,
                                                                 monkeypatch):
  """Resuming from the step-K checkpoint, the batch of step K+1 has a NaN loss mask.

  (Same program as the runs above: nothing new to compile.) checkpoint_every=1
  would save step K+1 right after its check.
  """
  workdir = tmp_path / "run"
  shutil.copytree(runs.stopped, workdir)
  batch = setup_lib.Setup.batch

  def poisoned(self, seed, step):
    b = batch(self, seed, step)
    if step == K:  # 0-based: the batch of step K + 1
      b["loss_mask"] = np.full_like(b["loss_mask"], np.nan)
    return b

  monkeypatch.setattr(setup_lib.Setup, "batch", poisoned)
  with pytest.raises(FloatingPointError, match=rf"non-finite training loss.* at step {K + 1} "
                                               r"\(seed 0\)"):
    job.train_and_evaluate(_config(**{"train.checkpoint_every": 1}), str(workdir))
  step, state = _restore(one_device.trainer, workdir)
  assert step == K, "a diverged state was checkpointed"
  _, original = _restore(one_device.trainer, runs.stopped)
  _assert_trees_equal(state, original)
  assert not (workdir / "seed_0" / "final.json").exists()
  assert max(r["step"] for r in _rows(workdir)) == K


def test_diverged_parameters_are_caught_before_the_checkpoint(tmp_path):
  """A too-large step: the loss is finite (computed before the update), the new parameters are not.

  train_seed checks each step's metrics right before it may checkpoint that
  step's state, so the check must look at the updated parameters too.
  """
  setup = types.SimpleNamespace(config=_config(), schedule=lambda step: 1e30, steps_per_epoch=4,
                                task=types.SimpleNamespace(groups=("easy", "hard")))
  metrics = {"loss": 2.0, "loss_easy": 1.0, "loss_hard": 3.0, "ce": 2.0, "ce_easy": 1.0,
             "ce_hard": 3.0, "n_easy": 8.0, "n_hard": 2.0, "grad_norm": 1.0,
             "update_norm": float("inf"), "param_norm": float("inf")}
  writer = metrics_lib.MetricsWriter(str(tmp_path / "metrics.jsonl"))
  with pytest.raises(FloatingPointError, match=r"non-finite training param_norm .* at step 6 "
                                               r"\(seed 3\)"):
    train.check_and_log((6, metrics), 3, setup, writer, None, 0.0)
  assert writer.rows() == []


def _truncate_metadata(ckpt):
  p = ckpt / "default" / "_METADATA"
  p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _garble_array_data(ckpt):
  data = sorted((ckpt / "default" / "d").iterdir(), key=lambda p: p.stat().st_size)
  assert data, "orbax layout changed: no array data under default/d"
  raw = bytearray(data[-1].read_bytes())
  mid = len(raw) // 2
  raw[mid:mid + 64] = b"\xff" * len(raw[mid:mid + 64])
  data[-1].write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", [_truncate_metadata, _garble_array_data],
                         ids=["truncated_metadata", "garbled_array_data"])
def test_corrupt_checkpoint_is_a_clear_error(runs, tmp_path, damage):
  workdir = tmp_path / "run"
  shutil.copytree(runs.stopped, workdir)
  damage(workdir / "seed_0" / "checkpoints" / str(K))
  before = reliability.snapshot(workdir / "seed_0")
  metrics_before = (workdir / "metrics.jsonl").read_text()
  with pytest.raises(RuntimeError, match=rf"checkpoint \S*seed_0/checkpoints/{K} could not be "
                                         r"restored .*nothing was deleted"):
    job.train_and_evaluate(_config(), str(workdir))
  assert reliability.snapshot(workdir / "seed_0") == before  # no restart from scratch, nothing removed
  assert (workdir / "metrics.jsonl").read_text() == metrics_before


# ----------------------------------------------------------------------------
# Decoding and evaluation


def test_greedy_answers_feeds_back_its_own_predictions(monkeypatch):
  spec = copy_task.CopyTaskSpec(seq_len=3, pad_len=3)
  k, nl = 2, spec.num_letters
  data, _ = copy_task.make_datasets(spec, num_train=6, num_test=1, seed=3)
  ctx_CxT, _ = copy_task.pack(data.tokens, k)
  seg_CxT = np.broadcast_to(np.repeat(np.arange(k), spec.string_len), ctx_CxT.shape)
  decode = functools.partial(copy_tasks.greedy_answers, None, spec, k, None,
                             jnp.asarray(ctx_CxT), jnp.asarray(seg_CxT))

  # A "model" that predicts (input letter + 1): the first answer letter follows
  # <CLS>, every later one must follow the model's own previous prediction.
  def next_letter(graphdef, params, tokens_BxT, *args):
    return jax.nn.one_hot((tokens_BxT + 1) % nl, spec.vocab_size)

  monkeypatch.setattr(copy_tasks.decoder, "apply", next_letter)
  chain = (spec.cls_id + 1 + np.arange(spec.seq_len)) % nl
  preds = np.asarray(decode())
  assert preds.shape == (3, k, spec.seq_len)
  np.testing.assert_array_equal(preds, np.broadcast_to(chain, preds.shape))

  # A perfect copier (predicts the token answer_start - 2 positions back):
  # every slot of every context must get its own string's answer.
  lag = spec.answer_start - 2

  def copier(graphdef, params, tokens_BxT, *args):
    return jax.nn.one_hot(jnp.roll(tokens_BxT, lag, axis=1), spec.vocab_size)

  monkeypatch.setattr(copy_tasks.decoder, "apply", copier)
  np.testing.assert_array_equal(np.asarray(decode()).reshape(-1, spec.seq_len), data.answers)


def test_evaluate_counts_em_and_cl_per_group():
  setup = setup_lib.Setup(_config())
  trainer = setup_lib.Trainer(setup)
  task = setup.task
  spec, k, lc = task.spec, task.k, task.spec.seq_len
  n = 45  # not a multiple of the strings per evaluation call: the last call is padded
  ds = copy_task.CopyDataset(tokens=task.test.tokens[:n], easy=task.test.easy[:n], spec=spec)
  assert 0 < ds.easy.sum() < n

  def planted(tokens_NxS):  # 0: right, 1: last letter wrong, 2: all wrong (by first letter)
    first = tokens_NxS[:, 1]
    return np.where(first < 9, 0, np.where(first < 18, 1, 2))

  shapes = []

  def fake_decode(params, ctx_CxT, seg_CxT):
    ctx = np.asarray(ctx_CxT)
    shapes.append(ctx.shape)
    strings = ctx.reshape(-1, spec.string_len)
    pred = strings[:, copy_task.answer_positions(spec)].copy()
    kind = planted(strings)
    pred[kind == 1, -1] += 1
    pred[kind == 2] += 1
    return pred.reshape(ctx.shape[0], k, lc)

  trainer.decode = fake_decode
  out = trainer.evaluate(None, ds)
  assert all(c % 8 == 0 for c, _ in shapes)  # whole contexts on every device
  kind = planted(ds.tokens)
  assert set(kind) == {0, 1, 2}
  cl_per_string = np.select([kind == 0, kind == 1], [1.0, (lc - 1) / lc], 0.0)
  for g, sel in (("easy", ds.easy), ("hard", ~ds.easy), ("all", np.ones(n, bool))):
    assert out[f"n_{g}"] == sel.sum()
    assert out[f"em_{g}"] == pytest.approx(np.mean(kind[sel] == 0)), g
    assert out[f"cl_{g}"] == pytest.approx(np.mean(cl_per_string[sel])), g


@pytest.mark.parametrize("preset", [p for p in decoder.PRESETS if decoder.preset(
    p, vocab_size=2).causal])  # the bidirectional "encoder": tests/test_mlm.py
@pytest.mark.parametrize("doc_mask", [False, True], ids=["packed", "doc_mask"])
def test_decoder_is_causal_by_gradients(preset, doc_mask, monkeypatch):
  """d logits[t] / d (embedding at s) is zero for s > t, and across strings with doc_mask."""
  setup = setup_lib.Setup(_config(**{"model.preset": preset, "model.doc_mask": doc_mask}))
  cfg = setup.model_cfg  # the `test` model: 2 strings of 11 tokens per context
  t, d, v = cfg.max_len, cfg.embed_dim, cfg.vocab_size
  graphdef, params = decoder.init(cfg, 0)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, v, (1, t)), jnp.int32)
  seg_T = setup.task.segment_T
  assert 0 < seg_T.sum() < t  # two strings
  shift = {}
  embed_call = nnx.Embed.__call__
  monkeypatch.setattr(nnx.Embed, "__call__",
                      lambda self, ids, *a, **kw: embed_call(self, ids, *a, **kw) + shift["x"])

  def logits_of(x_1xTxD):
    shift["x"] = x_1xTxD
    return decoder.apply(graphdef, params, tokens, jnp.asarray(seg_T[None]))

  jac = jax.jit(jax.jacrev(logits_of))(jnp.zeros((1, t, d), jnp.float32))  # [1, T, V, 1, T, D]
  assert jac.shape == (1, t, v, 1, t, d)
  sens_TxT = np.abs(np.asarray(jac)).max(axis=(0, 2, 3, 5))
  allowed = np.tril(np.ones((t, t), bool))
  if doc_mask:
    allowed &= seg_T[:, None] == seg_T[None, :]
  assert np.all(sens_TxT[~allowed] == 0), f"information flows where it must not:\n{sens_TxT}"
  assert np.all(sens_TxT[allowed] > 0), f"no gradient where attention is allowed:\n{sens_TxT}"


# ----------------------------------------------------------------------------
# Config errors


CONFIG_ERRORS = {
    "context_len": ({"data.context_len": 23}, ["context length 23", "string length 11"]),
    "batch_strings": ({"train.batch_strings": 15}, ["train.batch_strings=15", "2 strings"]),
    "devices": ({"num_devices": 3}, ["8 contexts per batch", "over 3 devices"]),
    "loss": ({"loss.name": "e9"}, ["'e9'", "'ce'", "'e1'", "'e2'", "'e3'"]),
    "optimizer": ({"optim.name": "lion"}, ["'lion'", "'adamw'", "'adam'", "'sgd'"]),
    "decay": ({"optim.decay": "step"}, ["'step'", "'constant'", "'cosine'", "'linear'"]),
    "preset": ({"model.preset": "llama"}, ["'llama'", "'gpt_neox'", "'gpt2'"]),
    "lr_nan": ({"optim.lr": float("nan")}, ["optim.lr=nan"]),
    "task": ({"task": "ntp_linear"}, ["'ntp_linear'", "'copy_task'"]),
    "no_seeds": ({"seeds": ()}, ["config.seeds is empty"]),
    "cpu_dots": ({"train.cpu_dots": "mkl"}, ["train.cpu_dots='mkl'", "'xla'", "'eigen'"]),
    "attention_blocks": ({"train.attention_blocks": 0}, ["train.attention_blocks=0",
                                                         ">= 1"]),
}


@pytest.mark.parametrize("case", sorted(CONFIG_ERRORS))
def test_config_error_names_value_and_allowed(case, tmp_path):
  overrides, fragments = CONFIG_ERRORS[case]
  with pytest.raises(ValueError) as e:
    job.train_and_evaluate(_config(**overrides), str(tmp_path / "run"))
  for fragment in fragments:
    assert fragment in str(e.value), (fragment, str(e.value))
  assert not list((tmp_path / "run").glob("seed_*"))  # failed before any training


# ----------------------------------------------------------------------------
# Optimizer schedules


def _optim_config(**overrides):
  cfg = config_lib.get_config("copy_task", "test").optim
  cfg.update(dict(lr=1.0, warmup_steps=4, final_lr_frac=0.1, grad_clip=0.0))
  cfg.update(overrides)
  return cfg


# Warmup 4 steps from lr/4 to lr, then 8 decay steps to 0.1 (num_steps = 12).
_COS = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4))  # cosine, 2 of 8 decay steps done
SCHEDULES = {
    "constant": {0: 0.25, 1: 0.4375, 3: 0.8125, 4: 1.0, 8: 1.0, 12: 1.0, 50: 1.0},
    "cosine": {0: 0.25, 2: 0.625, 4: 1.0, 6: _COS, 8: 0.55, 12: 0.1, 50: 0.1},
    "linear": {0: 0.25, 2: 0.625, 4: 1.0, 6: 0.775, 8: 0.55, 12: 0.1, 50: 0.1},
}


@pytest.mark.parametrize("decay", sorted(SCHEDULES))
def test_schedule_values(decay):
  schedule = optim.make_schedule(_optim_config(decay=decay), num_steps=12)
  for step, want in SCHEDULES[decay].items():
    assert float(schedule(step)) == pytest.approx(want, rel=1e-6), (decay, step)


def test_schedule_without_warmup():
  schedule = optim.make_schedule(_optim_config(decay="cosine", warmup_steps=0), num_steps=12)
  got = [float(schedule(s)) for s in (0, 6, 12)]
  assert got == pytest.approx([1.0, 0.55, 0.1], rel=1e-6)


def test_optimizer_uses_schedule_and_clipping():
  g = {"w": jnp.array([3.0, 4.0])}  # global norm 5
  tx, _ = optim.make_optimizer(_optim_config(name="sgd", grad_clip=0.5), num_steps=12)
  updates, _ = tx.update(g, tx.init(g), g)
  np.testing.assert_allclose(updates["w"], -0.25 * np.array([0.3, 0.4]), rtol=1e-6)
  tx, _ = optim.make_optimizer(_optim_config(name="adamw"), num_steps=12)
  state = tx.init(g)
  for lr in (0.25, 0.4375, 0.625, 0.8125, 1.0):  # Adam's step is ~lr for a constant gradient
    updates, state = tx.update(g, state, g)
    np.testing.assert_allclose(updates["w"], [-lr, -lr], rtol=1e-4)


@pytest.mark.parametrize("overrides,fragment", [
    ({"lr": 0.0}, "optim.lr=0.0"), ({"lr": float("inf")}, "optim.lr=inf"),
    ({"warmup_steps": -1}, "optim.warmup_steps=-1"), ({"grad_clip": -1.0}, "optim.grad_clip=-1.0"),
])
def test_bad_optimizer_values(overrides, fragment):
  with pytest.raises(ValueError, match=fragment):
    optim.make_optimizer(_optim_config(**overrides), num_steps=12)
