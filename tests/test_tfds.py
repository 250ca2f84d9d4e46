"""TFDS builders (el_jax.core.data.tfds_builders), the grain loader (el_jax.core.data.loader) and the
copy task's data.pipeline="grain" with its iterator state in the orbax checkpoints."""
import json
import os

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from el_jax.infra import checkpoint
from el_jax.core import data as data_lib
from el_jax.core.data import copy_task
from el_jax.core.data import loader
from el_jax.core.data import mlm_data
from el_jax.core.data import path_star
from el_jax.core.data import tfds_builders
from el_jax.infra import metrics as metrics_lib
from el_jax.core.tasks import base
from el_jax.core.tasks import copy_task as copy_tasks
from el_jax.core.tasks import path_star as path_star_tasks
from el_jax.run import train
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  """EL_JAX_CACHE in a temporary folder for this module (the TFDS data dir is under it)."""
  folder = tmp_path_factory.mktemp("el_jax_cache")
  old = os.environ.get("EL_JAX_CACHE")
  os.environ["EL_JAX_CACHE"] = str(folder)
  yield folder
  if old is None:
    del os.environ["EL_JAX_CACHE"]
  else:
    os.environ["EL_JAX_CACHE"] = old


def _copy_config(**overrides):
  config = config_lib.get_config("copy_task", "test", overrides)
  config.progress = False
  config.num_devices = 1
  return config


@pytest.fixture(scope="module")
def copy_source(cache):
  return tfds_builders.data_source("el_jax_copy_task", _copy_config())


# ----------------------------------------------------------------------------
# Builders: records equal the generators'


def test_copy_task_records_equal_the_generator(copy_source, cache):
  d = _copy_config().data
  spec = copy_task.CopyTaskSpec(d.seq_len, d.pad_len, d.p_easy, d.num_letters)
  want = copy_task.make_splits(spec, d.num_train, d.num_valid, d.num_test, seed=d.data_seed)
  assert set(copy_source) == {"train", "valid", "test"}
  for name, ds in want.items():
    got = loader.read(copy_source[name], range(len(copy_source[name])))
    np.testing.assert_array_equal(got["tokens"], ds.tokens)  # same rows, same order
    np.testing.assert_array_equal(got["easy"], ds.easy)
    assert got["tokens"].dtype == np.int32
  # A user reads it by name with plain TFDS (the data set is found on disk, no TensorFlow).
  name = tfds_builders.CopyTaskConfig.from_el_jax(_copy_config()).name
  src = tfds.data_source(f"el_jax_copy_task/{name}", data_dir=str(cache / "tfds"))
  assert len(src["valid"]) == d.num_valid
  np.testing.assert_array_equal(src["valid"][5]["tokens"], want["valid"].tokens[5])
  assert "tensorflow" not in __import__("sys").modules


def test_copy_task_configs_of_other_parameters_are_other_data_sets():
  a = tfds_builders.CopyTaskConfig.make(num_train=64)
  b = tfds_builders.CopyTaskConfig.make(num_train=65)
  c = tfds_builders.CopyTaskConfig.make(p_easy=0.5)
  assert len({a.name, b.name, c.name}) == 3


def test_path_star_records_equal_the_task_and_the_reference_file(cache):
  ref_file = data_lib.path_star_test_file(2, 3, 50)  # shipped with el_jax, unpacked into `cache`
  config = config_lib.get_config("path_star", "test", {
      "data.num_nodes": 50, "data.num_test": 30, "data.test_file": "reference"})
  task = path_star_tasks.PathStarTask(config)
  src = tfds_builders.data_source("el_jax_path_star", config)
  for name, graphs in (("train", task.train), ("valid", task.valid), ("test", task.test)):
    got = loader.read(src[name], range(len(src[name])))
    for field in ("edges", "source", "goal", "path"):
      np.testing.assert_array_equal(got[field], getattr(graphs, field), err_msg=f"{name} {field}")
  # The test split is the file's first 30 lines, parsed independently here.
  with open(ref_file) as f:
    lines = f.read().splitlines()[:30]
  edges, source, goal, p = path_star.parse_line(lines[7])
  rec = src["test"][7]
  assert rec["edges"].tolist() == [list(e) for e in edges]
  assert (int(rec["source"]), int(rec["goal"]), rec["path"].tolist()) == (source, goal, p)
  # Without the file, the test split is generated (stream 1): another config, other graphs.
  gen = tfds_builders.PathStarConfig.from_el_jax(
      config_lib.get_config("path_star", "test", {"data.num_nodes": 50, "data.num_test": 30}))
  assert gen.name != tfds_builders.PathStarConfig.from_el_jax(config).name


@pytest.mark.parametrize("name", ["pcfg_mlm", "hmm_mlm"])
def test_mlm_sentences_equal_the_cached_corpus(name, cache, tmp_path):
  config = config_lib.get_config(name, "test", {"data.cache_dir": str(tmp_path)})
  builder_name = {"pcfg_mlm": "el_jax_pcfg", "hmm_mlm": "el_jax_hmm"}[name]
  src = tfds_builders.data_source(builder_name, config)
  lang = mlm_data.language(config.data)
  corpus = mlm_data.build(config.data, lang)  # the MLM tasks' own path (npz cache)
  for split in ("train", "valid", "test"):
    got = loader.read(src[split], range(len(src[split])))
    want = corpus.splits[split]
    np.testing.assert_array_equal(got["tokens"], want.tokens)
    np.testing.assert_array_equal(got["length"], want.lengths)
    if split == "train":  # the masks `train_eval_split` draws for training sentences
      want_mask = mlm_data.train_eval_split(corpus, lang, 16, config.data.data_seed).mask_pos
      np.testing.assert_array_equal(got["mask_pos"][:16], want_mask)
    else:
      np.testing.assert_array_equal(got["mask_pos"], want.mask_pos)
    if name == "hmm_mlm":
      np.testing.assert_array_equal(got["states"], want.states)
    else:
      assert "states" not in got


# ----------------------------------------------------------------------------
# Loader


def _records(n):
  return [{"i": np.int32(i)} for i in range(n)]


NO_SHARD = grain.sharding.NoSharding()


def test_loader_epochs_are_fresh_permutations_deterministic_in_seed_and_epoch():
  n, b = 23, 5  # 4 steps per epoch, 3 records dropped per epoch
  ld = loader.Loader(_records(n), b, seed=7, shard_options=NO_SHARD)
  assert ld.steps_per_epoch == 4
  epochs = [np.concatenate([ld[e * 4 + i]["i"] for i in range(4)]) for e in range(3)]
  for e in epochs:
    assert len(set(e.tolist())) == 20 and set(e.tolist()) <= set(range(n))
  assert len({tuple(e) for e in epochs}) == 3  # each epoch its own order
  again = loader.Loader(_records(n), b, seed=7, shard_options=NO_SHARD)
  for step in range(12):
    np.testing.assert_array_equal(again[step]["i"], ld[step]["i"])
    np.testing.assert_array_equal(ld.indices(step), ld[step]["i"])
  # Other seeds: other orders, also not the neighbour seed's next epoch (grain reseeds each
  # epoch with seed + epoch; el_jax hashes the seed first).
  other = loader.Loader(_records(n), b, seed=8, shard_options=NO_SHARD)
  other_epochs = [np.concatenate([other[e * 4 + i]["i"] for i in range(4)]) for e in range(3)]
  assert not any(np.array_equal(x, y) for x in epochs for y in other_epochs)


def test_loader_shards_are_disjoint_and_cover_the_global_batch(copy_source):
  src = copy_source["train"]
  full = loader.Loader(src, 16, seed=3, shard_options=NO_SHARD)
  parts = [loader.Loader(src, 16, seed=3,
                         shard_options=grain.sharding.ShardOptions(shard_index=p, shard_count=2))
           for p in range(2)]
  for step in (0, 3, 4, 9):  # both epochs
    got = [p[step]["tokens"] for p in parts]
    assert got[0].shape == got[1].shape == (8, src[0]["tokens"].size)
    np.testing.assert_array_equal(np.concatenate(got), full[step]["tokens"])  # covering, in order
    idx = [set(full.indices(step)[p.rows].tolist()) for p in parts]
    assert not idx[0] & idx[1] and len(idx[0] | idx[1]) == 16  # disjoint records
  with pytest.raises(ValueError, match="cannot be split over 3 processes"):
    loader.Loader(src, 16, seed=3, shard_options=grain.sharding.ShardOptions(0, 3))
  # The default is this JAX process of all (one here).
  assert loader.Loader(src, 16, seed=3).shard_count == jax.process_count() == 1


def test_iterator_state_round_trips_through_json():
  ld = loader.Loader(_records(23), 5, seed=1, shard_options=NO_SHARD)
  it = ld.iterator()
  first = [next(it)["i"] for _ in range(6)]
  state = json.loads(json.dumps(it.get_state()))
  assert state["step"] == 6
  rest = [next(it)["i"] for _ in range(5)]
  resumed = ld.iterator()
  resumed.set_state(state)
  assert resumed.step == 6
  for a, b in zip(rest, [next(resumed)["i"] for _ in range(5)]):
    np.testing.assert_array_equal(a, b)
  for step, batch in enumerate(first):  # the iterator gives the random-access batches
    np.testing.assert_array_equal(batch, ld[step]["i"])
  with pytest.raises(ValueError, match="not a StepIterator state"):
    resumed.set_state({"next_index": 3})


# ----------------------------------------------------------------------------
# data.pipeline="grain" in the copy task and the loop


def test_unknown_pipeline_is_a_clear_error():
  with pytest.raises(ValueError, match=r"data.pipeline='disk' is not one of \('memory', 'grain'\)"):
    setup_lib.validate_config(_copy_config(**{"data.pipeline": "disk"}))


def test_memory_pipeline_is_inert_for_old_configs():
  flat = config_lib.flatten(config_lib.config_dict(_copy_config()))
  old = {k: v for k, v in flat.items() if k != "data.pipeline"}  # written before the field
  assert config_lib.config_diff(old, flat) == []
  assert config_lib.config_diff(old, {**flat, "data.pipeline": "grain"}) == ["data.pipeline"]


@pytest.fixture(scope="module")
def grain_setup(cache):
  # No evaluation (eval_every=0, and runs stop at step 8 of 16): the resume test compiles
  # the train step only.
  return setup_lib.Setup(_copy_config(**{"data.pipeline": "grain", "train.eval_every": 0,
                                     "train.num_steps": 16}))


def test_grain_batches_are_the_task_format_of_the_loader_records(grain_setup):
  task = grain_setup.task
  memory = copy_tasks.CopyTask(_copy_config())
  for name in ("train", "valid", "test"):  # the splits read from TFDS equal the generated ones
    np.testing.assert_array_equal(task.splits()[name].tokens, memory.splits()[name].tokens)
  ld = task._loader(0)
  it = task.data_iterator(0)
  for step in range(6):  # two epochs of 4 steps
    got = task.batch(0, step)
    idx = ld.indices(step)
    want = memory.make_batch(memory.train.tokens[idx], memory.train.easy[idx])
    assert set(got) == set(want)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k], err_msg=k)
      assert got[k].dtype == want[k].dtype
    nxt = next(it)
    for k in want:
      np.testing.assert_array_equal(nxt[k], got[k])
  # Seeds differ; and the order is not the memory pipeline's (grain's own shuffle).
  assert not np.array_equal(task.batch(1, 0)["inputs"], task.batch(0, 0)["inputs"])
  assert base.order_seed(0, 0) != base.order_seed(0, 1)


def test_path_star_grain_batches_are_the_task_format(cache):
  config = config_lib.get_config("path_star", "test", {"data.pipeline": "grain"})
  task = path_star_tasks.PathStarTask(config)
  memory = path_star_tasks.PathStarTask(config_lib.get_config("path_star", "test"))
  for name in ("train", "valid", "test"):
    for field in ("edges", "source", "goal", "path"):
      np.testing.assert_array_equal(getattr(getattr(task, name), field),
                                    getattr(getattr(memory, name), field))
  ld = task._loader(2)
  for step in (0, 5):  # epochs 0 and 1 (4 steps each)
    idx = ld.indices(step)
    got, want = task.batch(2, step), memory.make_batch(memory.inputs[idx], memory.targets[idx])
    assert set(got) == set(want) == set(memory.batch(2, step))
    for k in want:
      np.testing.assert_array_equal(got[k], want[k], err_msg=k)
      assert got[k].dtype == want[k].dtype
  it = task.data_iterator(2)
  np.testing.assert_array_equal(next(it)["inputs"], task.batch(2, 0)["inputs"])
  assert memory.data_iterator(2) is None


def _cheap_step(state, batch):
  """A stand-in for the model's train step (whose compilation would cost ~12 s of CPU here;
  tests/test_train.py covers resuming the real one): every parameter becomes
  0.5 * itself + a function of the batch, so the final params depend on every batch and on
  their order."""
  x = batch["inputs"].astype(jnp.float32)
  bump = jnp.sum(x * (1.0 + jnp.arange(x.size, dtype=jnp.float32).reshape(x.shape))) * 1e-6
  params = jax.tree.map(lambda p: 0.5 * p + bump.astype(p.dtype), state["params"])
  metrics = {"loss": bump, "ce": bump, "param_norm": jnp.float32(1.0)}
  for g in ("easy", "hard"):
    metrics |= {f"loss_{g}": bump, f"ce_{g}": bump, f"n_{g}": jnp.sum(batch[f"mask_{g}"])}
  return {**state, "params": params, "step": state["step"] + 1}, metrics


def test_grain_resume_sees_the_batches_of_an_uninterrupted_run(grain_setup, tmp_path):
  trainer = setup_lib.Trainer(grain_setup)
  abstract = trainer.abstract_state
  trainer.init = lambda seed: jax.device_put(  # zeros: no compiled initialisation needed
      jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), abstract), trainer.state_sharding)
  trainer.step = jax.jit(_cheap_step)
  tcfg = grain_setup.config.train
  seen = []
  put = trainer.put_batch

  def recording_put(batch):
    seen.append(np.asarray(batch["inputs"]).copy())
    return put(batch)

  trainer.put_batch = recording_put

  def run(workdir, stop):
    tcfg.stop_at_step = stop
    os.makedirs(workdir, exist_ok=True)
    writer = metrics_lib.MetricsWriter(os.path.join(workdir, "metrics.jsonl"))
    return train.train_seed(trainer, 0, str(workdir), writer)

  full_dir, res_dir = tmp_path / "full", tmp_path / "resumed"
  assert run(full_dir, 8) is None  # steps 0..7 (two epochs of 4 steps)
  full_batches = list(seen)
  seen.clear()
  assert run(res_dir, 4) is None
  saved = json.loads((res_dir / "seed_0" / "checkpoints" / "4" / "data" / "metadata").read_text())
  assert saved == {"step": 4, "grain": {"next_index": 4}}
  assert run(res_dir, 8) is None  # resumed at step 4
  assert len(full_batches) == len(seen) == 8
  for a, b in zip(full_batches, seen):
    np.testing.assert_array_equal(a, b)
  # A resume that did not restore the iterator would have restarted at step 0's batch.
  assert not np.array_equal(full_batches[4], full_batches[0])
  # The params at step 8, read as `load_params_from` reads any checkpoint ("default" item).
  full = checkpoint.restore_params(trainer, str(full_dir), 0, step=8)
  resumed = checkpoint.restore_params(trainer, str(res_dir), 0, step=8)
  leaves = jax.tree.leaves(jax.device_get(full))
  assert any(np.any(a != 0) for a in leaves)
  for a, b in zip(leaves, jax.tree.leaves(jax.device_get(resumed))):
    np.testing.assert_array_equal(a, b)  # bit for bit
