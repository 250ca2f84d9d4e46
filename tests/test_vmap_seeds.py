"""All seeds as one compiled program (`train.vmap_seeds`, el_jax.run.seeds) against sequential training.

The reference is each seed of the copy-task `test` config trained alone by `Trainer.step`
on one device (as `train._train_seed` does). Against it, per seed, up to float rounding:
`train_and_evaluate` with `vmap_seeds` ("map" on one device, stopped at step K by
`train.stop_at_step`, then resumed): its metrics rows, checkpoints, final.json and summary;
and the "vmap" step on the 8 forced CPU devices of conftest.py (mesh seed 2 x data 4).
"""
import json
import math
import os
import types

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from el_jax.infra import checkpoint
from el_jax.run import job
from el_jax.infra import metrics as metrics_lib
from el_jax.run import seeds as seeds_lib
from el_jax.core.tasks import copy_task as copy_tasks
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

K = 4  # stop_at_step of the resumed run: half of the `test` variant's 8 steps
SEEDS = (0, 1)


def _config(**overrides):
  config = config_lib.get_config("copy_task", "test", overrides)
  config.seeds = SEEDS
  config.progress = False
  config.train.eval_every = 0  # evaluate at the end only (fast)
  config.model.num_layers = 1  # half the `test` model: compiles faster
  return config


def _host(tree):
  return jax.tree.map(np.asarray, jax.device_get(tree))


@pytest.fixture(scope="module")
def reference():
  """Each seed trained alone on one device: {seed: per-step metrics}, {seed: initial / final
  state (on the host)}."""
  setup = setup_lib.Setup(_config(num_devices=1))
  trainer = setup_lib.Trainer(setup)
  metrics, inits, states = {}, {}, {}
  for seed in SEEDS:
    state, metrics[seed] = trainer.init(seed), []
    inits[seed] = _host(state)
    for step in range(setup.config.train.num_steps):
      state, m = trainer.step(state, trainer.put_batch(setup.batch(seed, step)))
      metrics[seed].append({k: float(v) for k, v in jax.device_get(m).items()})
    states[seed] = _host(state)
  return types.SimpleNamespace(trainer=trainer, metrics=metrics, inits=inits, states=states)


@pytest.fixture(scope="module")
def map_run(tmp_path_factory):
  """train_and_evaluate with vmap_seeds ("map", one device): stopped at K, then resumed."""
  workdir = str(tmp_path_factory.mktemp("vmap_seeds") / "map")
  config = _config(num_devices=1, **{"train.vmap_seeds": True, "train.vmap_seeds_impl": "map"})
  out = types.SimpleNamespace(workdir=workdir, batches_after_resume=[])
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(copy_tasks.CopyTask, "write_plots", lambda self, rows, workdir: None)  # not tested here
    config.train.stop_at_step = K
    assert job.train_and_evaluate(config, workdir) is None
    out.stopped_checkpoints = {s: checkpoint.checkpoint_steps(workdir, s) for s in SEEDS}
    out.stopped_rows = _rows(workdir)
    config.train.stop_at_step = 0
    batch = setup_lib.Setup.batch
    mp.setattr(setup_lib.Setup, "batch", lambda self, seed, step: (
        out.batches_after_resume.append((seed, step)) or batch(self, seed, step)))
    out.summary = job.train_and_evaluate(config, workdir)
  return out


def _rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f if line.strip()]


def _assert_metrics_close(got, want, where):
  """Step metrics (or a row holding them) `got` equal `want` up to float rounding."""
  for key, w in want.items():
    g = got[key]
    if key.startswith("n_"):
      assert g == w, (where, key)
    elif g is None:  # a group absent from this batch (a row's value)
      assert want[key.replace("loss_", "n_").replace("ce_", "n_")] == 0, (where, key)
    else:
      assert math.isclose(g, w, rel_tol=2e-4, abs_tol=1e-5), (where, key, g, w)


def _assert_trees_close(got, want, where):
  flat_got = jax.tree_util.tree_leaves_with_path(got)
  flat_want = jax.tree_util.tree_leaves(want)
  assert len(flat_got) == len(flat_want)
  for (path, g), w in zip(flat_got, flat_want):
    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5,
                               err_msg=f"{where} {jax.tree_util.keystr(path)}")


def test_seed_mesh_rule():
  assert seeds_lib.seed_mesh_shape(4, 8, "vmap") == (4, 2)
  assert seeds_lib.seed_mesh_shape(2, 8, "vmap") == (2, 4)
  assert seeds_lib.seed_mesh_shape(10, 8, "vmap") == (2, 4)
  assert seeds_lib.seed_mesh_shape(3, 8, "vmap") == (1, 8)  # seeds do not divide: data only
  assert seeds_lib.seed_mesh_shape(16, 8, "vmap") == (8, 1)
  assert seeds_lib.seed_mesh_shape(4, 8, "map") == (1, 8)
  assert seeds_lib.seed_mesh_shape(3, 1, "vmap") == (1, 1)
  assert seeds_lib.resolve_impl("auto", "cpu") == "map"
  assert seeds_lib.resolve_impl("auto", "gpu") == "vmap"
  assert seeds_lib.resolve_impl("vmap", "cpu") == "vmap"


def test_map_run_stopped_and_resumed_equals_sequential(map_run, reference):
  """Rows, checkpoints, final.json and summary of each seed == that seed trained alone."""
  assert map_run.stopped_checkpoints == {s: [K] for s in SEEDS}  # every seed stopped at K
  assert {(r["seed"], r["step"]) for r in map_run.stopped_rows} == {
      (s, t) for s in SEEDS for t in (1, 2, 4)}
  # Resumed from step K, not retrained from 0: each step's batches of both seeds, once.
  assert map_run.batches_after_resume == [(s, t) for t in range(K, 2 * K) for s in SEEDS]
  rows = _rows(map_run.workdir)
  keys = [(r["seed"], r["step"], r["kind"]) for r in rows]
  assert len(keys) == len(set(keys)), f"duplicated metrics rows: {keys}"
  trainer = reference.trainer
  for seed in SEEDS:
    train_rows = {r["step"]: r for r in rows if r["seed"] == seed and r["kind"] == "train"}
    assert sorted(train_rows) == [1, 2, 4, 6, 8]  # log_every=2, and step 1
    for step, row in train_rows.items():
      want = reference.metrics[seed][step - 1]
      assert set(row) == {"seed", "step", "kind", "lr", "epoch", "time_s", *want}
      assert row["lr"] == float(trainer.setup.schedule(step - 1))
      _assert_metrics_close(row, want, (seed, step))
    mngr = checkpoint.manager(os.path.join(map_run.workdir, f"seed_{seed}",
                                                  "checkpoints"), 1)
    try:
      assert mngr.latest_step() == 2 * K
      state = _host(checkpoint.restore_latest(mngr, trainer.abstract_state, trainer.state_sharding))
    finally:
      mngr.close()
    _assert_trees_close(state, reference.states[seed], f"seed {seed}")
    # The final evaluation is that of the reference parameters by the sequential evaluator.
    evals = [r for r in rows if r["seed"] == seed and r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [2 * K]
    params = jax.device_put(reference.states[seed]["params"], trainer.repl)
    want = {"seed": seed, "step": 2 * K, "kind": "eval"}
    for split, ds in trainer.setup.task.eval_sets():
      want.update({f"{split}_{k}": v for k, v in trainer.evaluate(params, ds).items()})
    assert evals[0] == want
    final = json.loads(open(os.path.join(map_run.workdir, f"seed_{seed}", "final.json")).read())
    assert final == want
    assert map_run.summary["per_seed"][SEEDS.index(seed)] == want
  assert map_run.summary["seeds"] == list(SEEDS)


@pytest.mark.all_devices
def test_vmap_step_on_eight_devices_equals_sequential(reference):
  """The vmapped step with the seed axis sharded (2 seeds, 8 devices: seed 2 x data 4)."""
  assert len(jax.devices()) == 8  # conftest.py
  trainer = setup_lib.Trainer(setup_lib.Setup(_config()))
  stacked = seeds_lib.StackedTrainer(trainer, SEEDS, "vmap")
  assert dict(stacked.mesh.shape) == {"seed": 2, "data": 4}
  # The initial states of the reference, stacked on the host (StackedTrainer.init, i.e.
  # Trainer.init per seed, is tested on one device above; this saves compiling it for 8).
  state = jax.device_put(jax.tree.map(lambda *x: np.stack(x), *(reference.inits[s] for s in SEEDS)),
                         stacked.state_sharding)
  leaf = jax.tree.leaves(state["params"])[0]
  assert leaf.sharding.spec == P("seed") and leaf.shape[0] == len(SEEDS)
  for step in range(trainer.setup.config.train.num_steps):
    batch = stacked.put_batch(stacked.host_batch(step))
    assert batch["inputs"].sharding.spec == P("seed", "data")
    state, m = stacked.step(state, batch)
    m = jax.device_get(m)
    for i, seed in enumerate(SEEDS):
      _assert_metrics_close({k: float(v[i]) for k, v in m.items()},
                            reference.metrics[seed][step], (seed, step + 1))
  for seed, s in zip(SEEDS, stacked.unstack(state)):
    _assert_trees_close(_host(s), reference.states[seed], f"seed {seed}")


def test_unsupported_combinations_and_bad_values_are_refused(tmp_path):
  on = {"train.vmap_seeds": True}
  with pytest.raises(ValueError, match=r"^train\.vmap_seeds=True does not support "
                     r"flatness\.every=2 \(set it to 0\); or set train\.vmap_seeds=False"):
    setup_lib.validate_config(_config(**on, **{"flatness.every": 2}))
  src = tmp_path / "src"
  (src / "seed_0" / "checkpoints").mkdir(parents=True)
  config = _config(**on)
  config.train.init_from = str(src)
  with pytest.raises(ValueError, match=r"does not support train\.init_from='.*src' \(set it "
                     r"to ''\)"):
    setup_lib.validate_config(config)
  gpt2 = tmp_path / "gpt2"
  gpt2.mkdir()
  (gpt2 / "config.json").write_text("{}")
  config = _config(**on)
  config.model.pretrained = str(gpt2)
  with pytest.raises(ValueError, match=r"does not support model\.pretrained="):
    setup_lib.validate_config(config)
  config = _config()
  with config.ignore_type():
    config.train.vmap_seeds = "yes"
  with pytest.raises(ValueError, match=r"^train\.vmap_seeds='yes' must be True or False$"):
    setup_lib.validate_config(config)
  with pytest.raises(ValueError, match=r"^train\.vmap_seeds_impl='pmap' must be one of "
                     r"\('auto', 'vmap', 'map'\)$"):
    setup_lib.validate_config(_config(**{"train.vmap_seeds_impl": "pmap"}))
  setup_lib.validate_config(_config(**{"flatness.every": 2}))  # fine without vmap_seeds


def test_seeds_resuming_from_different_steps_train_as_one_group_per_step(tmp_path, monkeypatch):
  """A sequential run stopped midway (seed 0 at step K, seed 1 not started, seed 2 finished):
  one stacked group per starting step, finished seeds read back, results in seed order."""
  config = _config(**{"train.vmap_seeds": True})
  config.seeds = (0, 1, 2)
  (tmp_path / "seed_0" / "checkpoints" / str(K)).mkdir(parents=True)
  final2 = {"seed": 2, "step": 2 * K, "kind": "eval", "test_em_all": 0.5}
  (tmp_path / "seed_2").mkdir()
  (tmp_path / "seed_2" / "final.json").write_text(json.dumps(final2))
  groups = []

  def fake_group(trainer, arms, members, start, stop, impl):
    assert [arm.workdir for arm in arms] == [str(tmp_path)]
    groups.append(([s for _, s in members], start, stop))
    return {(a, s): {"seed": s} for a, s in members}

  monkeypatch.setattr(seeds_lib, "_train_group", fake_group)
  trainer = types.SimpleNamespace(setup=types.SimpleNamespace(
      config=config, task=types.SimpleNamespace(data_iterator=lambda seed: None)))
  writer = metrics_lib.MetricsWriter(str(tmp_path / "metrics.jsonl"))
  finals = seeds_lib.train_seeds(trainer, str(tmp_path), writer)
  assert groups == [([0], K, 2 * K), ([1], 0, 2 * K)]
  assert finals == [{"seed": 0}, {"seed": 1}, final2]
  # Stopped at K: seed 0 is there already, only seed 1 trains, and the run reports a stop.
  groups.clear()
  config.train.stop_at_step = K
  assert seeds_lib.train_seeds(trainer, str(tmp_path), writer) is None
  assert groups == [([1], 0, K)]
