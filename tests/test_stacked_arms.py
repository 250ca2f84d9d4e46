"""Runs that differ in seeds and numeric hyperparameters as one program (el_jax.run.seeds,
"Stacked runs"; `Grid.run(stacked=True)`, `job.train_arms`) against the same runs trained
one after the other.

The reference is each run of a small grid trained alone by `Grid.run()` (the sequential
path of every experiment). Against it, per run: the stacked grid's row (everything but the
wall time, the workdir and the `stacked` field), each seed's final evaluation, every
metrics row and the newest checkpoint, at the tolerances of tests/test_vmap_seeds.py (step
metrics rel 2e-4 / abs 1e-5, parameters and optimizer state rtol 1e-3 / atol 1e-5). The
copy-task grid (CE, E1 + warmup, CE at another learning rate, weight decay and cosine decay,
with 2, 2 and 1 seeds) is killed after step 6 and resumed: every run continues from its
checkpoint of step 4. The path-star grid is the Table 1 pair (CE, E1 + warmup). The "vmap"
step (the accelerators' default) is checked against the same references on one device.

E1 at lam 0 and CE: as functions of the logits they are equal bit for bit (values and
gradients, eager and compiled with lam traced); inside a compiled train step XLA fuses the
two graphs differently and the parameters differ at float rounding, bounded below.
"""
import functools
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from el_jax.core import losses
from el_jax.infra import checkpoint
from el_jax.run import config as config_lib
from el_jax.run import grid as grid_lib
from el_jax.run import job
from el_jax.run import seeds as seeds_lib
from el_jax.run import setup as setup_lib
from shared_fixtures import once_per_session

# The tolerances of tests/test_vmap_seeds.py.
METRIC_RTOL, METRIC_ATOL = 2e-4, 1e-5  # step metrics, evaluations
TREE_RTOL, TREE_ATOL = 1e-3, 1e-5  # parameters and optimizer state of a checkpoint
# One compiled train step of E1 at lam 0 against CE (the copy-task `test` model): the largest
# parameter difference, measured 4.3e-8 (float32 rounding of parameters of size ~0.02-1).
E1_CE_STEP_ATOL = 2e-7

SMALL = {"model.num_layers": 1}  # half the `test` model: compiles faster
COPY_RUNS = {  # label: (overrides, seeds)
    "ce": ({"loss.name": "ce"}, (0, 1)),
    "e1_warmup": ({"loss.name": "e1", "loss.e1.lam": 4.0, "optim.warmup_steps": 3}, (0, 1)),
    "ce_lr": ({"loss.name": "ce", "optim.lr": 1e-2, "optim.weight_decay": 0.1,
               "optim.decay": "cosine", "optim.final_lr_frac": 0.1}, (2,)),
}
PATH_STAR_RUNS = {
    "ce": ({"loss.name": "ce", "train.eval_every": 0}, (0, 1)),
    "e1_warmup": ({"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 4,
                   "train.eval_every": 0}, (0, 1)),
}
KILLED_AT = 6  # the copy-task stacked run is killed before step 7; its checkpoint is step 4
K = 4


class Killed(Exception):
  pass


def _grid(path, runs_dir, task, runs):
  g = grid_lib.Grid(path, runs_dir=runs_dir)
  for label, (overrides, seeds) in runs.items():
    g.add(label, task, "test", {**SMALL, **overrides}, seeds=seeds)
  return g


def _build(folder, task, runs, kill=False):
  """The grid trained run by run and stacked (killed after step KILLED_AT and resumed when
  `kill`): their rows, and what the stacked run did."""
  out = {"seq": _grid(f"{folder}/seq.json", f"{folder}/seq", task, runs).run(verbose=False)}
  stacked = _grid(f"{folder}/stacked.json", f"{folder}/stacked", task, runs)
  with pytest.MonkeyPatch.context() as mp:
    if kill:
      host_batch = seeds_lib.StackedTrainer.host_batch

      def killing(self, step):
        if step == KILLED_AT:
          raise Killed(f"killed before step {step + 1}")
        return host_batch(self, step)
      mp.setattr(seeds_lib.StackedTrainer, "host_batch", killing)
      with pytest.raises(Killed):
        stacked.run(verbose=False, stacked=True)
      mp.setattr(seeds_lib.StackedTrainer, "host_batch", host_batch)
      out["killed_checkpoints"] = {
          label: {s: checkpoint.checkpoint_steps(f"{folder}/stacked/{label}", s)
                  for s in seeds} for label, (_, seeds) in runs.items()}
    calls = []
    batch = setup_lib.Setup.batch
    mp.setattr(setup_lib.Setup, "batch", lambda self, seed, step: (
        calls.append((seed, step)) or batch(self, seed, step)))
    out["stacked"] = stacked.run(verbose=False, stacked=True)
  out["batches"] = calls
  return out


@pytest.fixture(scope="module")
def copy_grids(tmp_path_factory):
  return once_per_session(tmp_path_factory, "stacked_arms_copy",
                          lambda folder: _build(folder, "copy_task", COPY_RUNS, kill=True))


@pytest.fixture(scope="module")
def path_star_grids(tmp_path_factory):
  return once_per_session(tmp_path_factory, "stacked_arms_path_star",
                          lambda folder: _build(folder, "path_star", PATH_STAR_RUNS))


def _close(got, want, where, rtol=METRIC_RTOL, atol=METRIC_ATOL):
  """Two JSON values equal, floats up to the tolerances (ints, strings, None exactly)."""
  if isinstance(want, dict):
    assert set(got) == set(want), where
    for k in want:
      _close(got[k], want[k], f"{where}.{k}", rtol, atol)
  elif isinstance(want, list):
    assert len(got) == len(want), where
    for i, (g, w) in enumerate(zip(got, want)):
      _close(g, w, f"{where}[{i}]", rtol, atol)
  elif isinstance(want, float) and not isinstance(got, bool):
    assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=rtol,
                                                          abs_tol=atol), (where, got, want)
  else:
    assert got == want, (where, got, want)


def _rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  keys = [(r["seed"], r["step"], r["kind"]) for r in rows]
  assert len(keys) == len(set(keys)), f"duplicated metrics rows in {workdir}: {keys}"
  return {k: r for k, r in zip(keys, rows)}


def _latest_state(workdir, seed, trainer):
  mngr = checkpoint.manager(os.path.join(workdir, f"seed_{seed}", "checkpoints"), 1)
  try:
    state = checkpoint.restore_latest(mngr, trainer.abstract_state, trainer.state_sharding)
  finally:
    mngr.close()
  return jax.tree.map(np.asarray, jax.device_get(state))


def _trees_close(got, want, where):
  for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=TREE_RTOL, atol=TREE_ATOL,
                               err_msg=f"{where} {jax.tree_util.keystr(path)}")


def _assert_stacked_equals_sequential(grids, runs):
  seq = {r["label"]: r for r in grids["seq"]}
  stacked = {r["label"]: r for r in grids["stacked"]}
  assert list(stacked) == list(runs)
  labels = list(runs)
  total = sum(len(seeds) for _, seeds in runs.values())
  trainer = None
  for label, (_, seeds) in runs.items():
    a, b = seq[label], stacked[label]
    # The row: that of the run trained alone, but for where and how long it trained.
    assert "stacked" not in a and b["stacked"]["runs"] == labels
    # Its share of the program's wall time, by seeds (both rounded to 0.1 s).
    assert abs(b["seconds"] - b["stacked"]["seconds"] * len(seeds) / total) <= 0.1
    same = {k: v for k, v in a.items() if k not in ("seconds", "workdir")}
    _close({k: v for k, v in b.items() if k not in ("seconds", "workdir", "stacked")}, same,
           label)
    assert b["config"] == a["config"] and b["seeds"] == list(seeds)
    # Every metrics row (the train rows' learning rate from the run's own schedule).
    ra, rb = _rows(a["workdir"]), _rows(b["workdir"])
    assert set(rb) == set(ra), label
    for key, want in ra.items():
      got = dict(rb[key])
      if key[2] == "train":
        assert got["lr"] == want["lr"], (label, key)
        got["time_s"] = want["time_s"]
      _close(got, want, f"{label} {key}")
    # Each seed's final.json, summary and newest checkpoint.
    summary = json.loads(open(os.path.join(b["workdir"], "summary.json")).read())
    for i, seed in enumerate(seeds):
      final = json.loads(open(os.path.join(b["workdir"], f"seed_{seed}", "final.json")).read())
      assert summary["per_seed"][i] == final
      _close(final, ra[(seed, final["step"], "eval")], f"{label} seed {seed} final")
      if trainer is None:  # (every run has the same model and optimizer state shapes)
        trainer = setup_lib.Trainer(setup_lib.Setup(grid_lib.make_config(
            a["config_name"], a["variant"], a["overrides"], seeds)))
      _trees_close(_latest_state(b["workdir"], seed, trainer),
                   _latest_state(a["workdir"], seed, trainer), f"{label} seed {seed}")


def test_copy_task_stacked_runs_equal_sequential_runs(copy_grids):
  _assert_stacked_equals_sequential(copy_grids, COPY_RUNS)


def test_copy_task_stacked_runs_resume_every_run_after_a_kill(copy_grids):
  # Killed before step 7: every seed of every run has its checkpoint of step 4, none later.
  assert copy_grids["killed_checkpoints"] == {
      label: {s: [K] for s in seeds} for label, (_, seeds) in COPY_RUNS.items()}
  # The rerun continued from step 4, not from 0: each step's batch of each seed, once.
  seeds = sorted({s for _, ss in COPY_RUNS.values() for s in ss})
  assert sorted(copy_grids["batches"]) == [(s, t) for s in seeds for t in range(K, 8)]


def test_path_star_stacked_runs_equal_sequential_runs(path_star_grids):
  _assert_stacked_equals_sequential(path_star_grids, PATH_STAR_RUNS)
  # Trained from step 0 (no resume): each seed's batch of each step once, shared by the
  # runs that train that seed.
  assert sorted(path_star_grids["batches"]) == [(s, t) for s in (0, 1) for t in range(8)]


def test_vmap_step_of_stacked_runs_equals_sequential(copy_grids):
  """The "vmap" implementation (the accelerators' default) of the copy-task runs' step,
  from the same initial states, against the sequential runs' final checkpoints."""
  seq = {r["label"]: r for r in copy_grids["seq"]}
  configs = [grid_lib.make_config("copy_task", "test", {**SMALL, **ov}, seeds)
             for ov, seeds in COPY_RUNS.values()]
  setup = setup_lib.Setup(configs[0])
  trainer = setup_lib.Trainer(setup)
  setups = [setup] + [setup.with_config(c) for c in configs[1:]]
  members = [(a, s) for a, c in enumerate(configs) for s in c.seeds]
  loss = seeds_lib.stacked_loss(configs)
  assert loss == "e1"
  per_arm = [seeds_lib.arm_hparams(st, loss) for st in setups]
  assert per_arm[0]["loss"] == {"lam": 0.0} and per_arm[1]["loss"] == {"lam": 4.0}
  hparams = jax.tree.map(lambda *x: np.stack(x), *(per_arm[a] for a, _ in members))
  stacked = seeds_lib.StackedTrainer(trainer, [s for _, s in members], "vmap", hparams,
                                     seeds_lib.hparam_step(trainer, loss))
  state = stacked.init()
  for step in range(configs[0].train.num_steps):
    state, _ = stacked.step(state, stacked.put_batch(stacked.host_batch(step)))
  for (a, seed), s in zip(members, stacked.unstack(state)):
    label = list(COPY_RUNS)[a]
    _trees_close(jax.tree.map(np.asarray, jax.device_get(s)),
                 _latest_state(seq[label]["workdir"], seed, trainer), f"{label} seed {seed}")


def test_label_smoothing_runs_stack_with_their_own_eps():
  """Two path-star runs of label smoothing (eps 0.05 and 0.2, other learning rates) stacked
  ("map"): each slot's step metrics equal its run's sequential steps."""
  configs = [grid_lib.make_config("path_star", "test", {
      **SMALL, "loss.name": "label_smoothing", "loss.label_smoothing.eps": eps,
      "optim.lr": lr}, (0,)) for eps, lr in ((0.05, 3e-3), (0.2, 1e-2))]
  setup = setup_lib.Setup(configs[0])
  trainer = setup_lib.Trainer(setup)
  setups = [setup, setup.with_config(configs[1])]
  hparams = jax.tree.map(lambda *x: np.stack(x), *(seeds_lib.arm_hparams(st, "label_smoothing")
                                                   for st in setups))
  assert list(hparams["loss"]["eps"]) == [np.float32(0.05), np.float32(0.2)]
  stacked = seeds_lib.StackedTrainer(trainer, (0, 0), "map", hparams,
                                     seeds_lib.hparam_step(trainer, "label_smoothing"))
  state = stacked.init()
  alone = [trainer.init(0), trainer.init(0)]
  steps = [trainer.step, setup_lib.Trainer(setups[1]).step]
  for step in range(3):
    state, m = stacked.step(state, stacked.put_batch(stacked.host_batch(step)))
    m = jax.device_get(m)
    for i in range(2):
      alone[i], want = steps[i](alone[i], trainer.put_batch(setup.batch(0, step)))
      want = jax.device_get(want)
      for k in ("loss", "ce", "grad_norm", "param_norm"):
        assert math.isclose(float(m[k][i]), float(want[k]), rel_tol=METRIC_RTOL,
                            abs_tol=METRIC_ATOL), (i, step, k)
  assert float(m["loss"][0]) != float(m["loss"][1])


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e3])
def test_e1_at_lam_0_is_ce_bit_for_bit(scale):
  """Per-token values and gradients with respect to the logits: equal, eager and compiled
  with lam a traced value (as a stacked CE run computes it)."""
  k1, k2 = jax.random.split(jax.random.key(0))
  f = jax.random.normal(k1, (16, 9, 40)) * scale
  y = jax.random.randint(k2, (16, 9), 0, 40)
  np.testing.assert_array_equal(losses.e1_loss(f, y, lam=0.0), losses.ce_loss(f, y))
  np.testing.assert_array_equal(jax.grad(lambda f: losses.e1_loss(f, y, lam=0.0).sum())(f),
                                jax.grad(lambda f: losses.ce_loss(f, y).sum())(f))
  ce = jax.jit(jax.value_and_grad(lambda f: losses.ce_loss(f, y).mean()))(f)
  e1 = jax.jit(jax.value_and_grad(lambda f, lam: losses.e1_loss(f, y, lam=lam).mean()))(
      f, jnp.float32(0.0))
  np.testing.assert_array_equal(e1[0], ce[0])
  np.testing.assert_array_equal(e1[1], ce[1])


def test_e1_at_lam_0_in_a_compiled_train_step_is_ce_up_to_rounding():
  """One compiled train step of the copy-task `test` model: the step's metrics are equal,
  the parameters after it differ by at most E1_CE_STEP_ATOL (XLA fuses the two graphs
  differently: not bit for bit, but float32 rounding)."""
  cfg = config_lib.get_config("copy_task", "test", {"num_devices": 1})
  setup = setup_lib.Setup(cfg)
  trainer = setup_lib.Trainer(setup)
  batch = trainer.put_batch(setup.batch(0, 0))
  ce_state, ce_m = jax.jit(trainer.pure_step)(trainer.init(0), batch)
  e1_step = jax.jit(lambda s, b, lam: trainer.pure_step_with(
      functools.partial(losses.e1_loss, lam=lam), setup.tx)(s, b))
  e1_state, e1_m = e1_step(trainer.init(0), batch, jnp.float32(0.0))
  ce_m, e1_m = jax.device_get(ce_m), jax.device_get(e1_m)
  for k in ("loss", "ce", "grad_norm"):
    assert math.isclose(float(e1_m[k]), float(ce_m[k]), rel_tol=1e-6), k
  diff = max(float(np.max(np.abs(a - b))) for a, b in
             zip(jax.tree.leaves(jax.device_get(e1_state)), jax.tree.leaves(jax.device_get(ce_state))))
  assert diff <= E1_CE_STEP_ATOL, diff


def test_runs_differing_in_another_field_are_refused_before_training(tmp_path):
  def grid(a, b):
    g = grid_lib.Grid(str(tmp_path / "x.json"), runs_dir=str(tmp_path / "runs"))
    g.add("a", "copy_task", "test", a, seeds=(0,))
    g.add("b", "copy_task", "test", b, seeds=(1,))
    return g

  cases = [({}, {"model.embed_dim": 32}, "model.embed_dim", "16 vs 32"),
           ({"loss.name": "ce"}, {"loss.name": "e2"}, "loss.name", "'ce' vs 'e2'"),
           ({}, {"optim.name": "adam"}, "optim.name", "'adamw' vs 'adam'"),
           ({}, {"model.dtype": "bfloat16"}, "model.dtype", "'float32' vs 'bfloat16'"),
           ({}, {"train.batch_strings": 8}, "train.batch_strings", "16 vs 8"),
           ({}, {"loss.reduction": "reweight"}, "loss.reduction", "'mean' vs 'reweight'")]
  for a, b, field, values in cases:
    with pytest.raises(ValueError) as e:
      grid(a, b).run(verbose=False, stacked=True)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"a and b cannot train as one program: they differ "
                                              f"in {field} ({values}); stacked runs may differ "
                                              f"only in seeds, optim.lr,"), msg
  assert not (tmp_path / "runs").exists()  # refused before anything trained
  with pytest.raises(ValueError, match=r"^b: stacked runs do not support flatness\.every=2 "
                     r"\(set it to 0\); train it alone$"):
    grid({}, {"flatness.every": 2}).run(verbose=False, stacked=True)
  # What may differ: seeds, the schedule, weight decay, the loss's hyperparameters, CE with E1.
  seeds_lib.check_arms([
      grid_lib.make_config("copy_task", "test", ov, seeds) for ov, seeds in (
          ({"loss.name": "ce"}, (0,)),
          ({"loss.name": "e1", "loss.e1.lam": 2.0, "optim.warmup_steps": 2}, (0, 1)),
          ({"optim.lr": 1e-2, "optim.decay": "wsd", "optim.decay_frac": 0.5,
            "optim.weight_decay": 0.1, "optim.final_lr_frac": 0.2, "progress": True}, (3,)))])
  seeds_lib.check_arms([grid_lib.make_config("path_star", "test", {
      "loss.name": "label_smoothing", "loss.label_smoothing.eps": eps}) for eps in (0.0, 0.1)])
  with pytest.raises(ValueError, match=r"^train_arms: the runs must have distinct workdirs"):
    job.train_arms([grid_lib.make_config("copy_task", "test")] * 2, [str(tmp_path / "w")] * 2)
