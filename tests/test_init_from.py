"""train.init_from (continue another run's parameters with a fresh optimizer), reading
params of saved checkpoints (checkpoint.restore_params) and keeping every checkpoint."""
import dataclasses

import jax
import numpy as np
import pytest

from el_jax.infra import checkpoint
from el_jax.run import job
from el_jax.infra import metrics as metrics_lib
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib


def _config(**overrides):
  cfg = config_lib.get_config("copy_task", "test", {"num_devices": 1, **overrides})
  return cfg


def test_init_from_starts_at_the_other_runs_parameters(tmp_path):
  first = _config()
  first.train.keep_checkpoints = 0  # keep every checkpoint (steps 4 and 8)
  a = job.train_and_evaluate(first, str(tmp_path / "a"))
  assert checkpoint.checkpoint_steps(str(tmp_path / "a"), 0) == [4, 8]

  second = _config(**{"optim.name": "sgd", "optim.lr": 1e-9})
  second.train.init_from = str(tmp_path / "a")
  b_dir = str(tmp_path / "b")
  job.train_and_evaluate(second, b_dir)
  rows = metrics_lib.read_rows(b_dir)
  step0 = [r for r in rows if r["kind"] == "eval" and r["step"] == 0][0]
  final_a = a["per_seed"][0]
  for key in ("train_em_all", "test_cl_all", "valid_cl_hard"):
    assert step0[key] == final_a[key], key  # same parameters, evaluated again

  trainer = setup_lib.Trainer(setup_lib.Setup(second))  # an SGD trainer reads the AdamW run's params
  p8 = checkpoint.restore_params(trainer, str(tmp_path / "a"), 0)
  p4 = checkpoint.restore_params(trainer, str(tmp_path / "a"), 0, step=4)
  pb = checkpoint.restore_params(trainer, b_dir, 0)
  leaves = lambda t: jax.tree.leaves(jax.device_get(t))  # noqa: E731
  diff48 = max(float(np.abs(x - y).max()) for x, y in zip(leaves(p8), leaves(p4)))
  diffb8 = max(float(np.abs(x - y).max()) for x, y in zip(leaves(p8), leaves(pb)))
  assert diff48 > 1e-4 and diffb8 < 1e-6  # lr 1e-9: b barely moved from a's step 8
  with pytest.raises(ValueError, match=r"no checkpoint of seed 0 at step 5; saved steps: \[4, 8\]"):
    checkpoint.restore_params(trainer, str(tmp_path / "a"), 0, step=5)


def test_init_from_a_different_model_names_the_parameter(tmp_path):
  job.train_and_evaluate(_config(), str(tmp_path / "a"))
  other = _config(**{"model.num_layers": 3})
  other.train.init_from = str(tmp_path / "a")
  with pytest.raises(ValueError, match=r"parameter blocks\.2\..* is missing, this model needs"):
    job.train_and_evaluate(other, str(tmp_path / "c"))
  missing = _config()
  missing.train.init_from = str(tmp_path / "nowhere")
  with pytest.raises(ValueError, match=r"train\.init_from=.*nowhere.* is not a workdir"):
    setup_lib.validate_config(missing)


def test_model_pretrained_fine_tunes_from_a_gpt2_checkpoint(tmp_path):
  """`model.pretrained`: a Hugging Face GPT-2 directory (written by `save_gpt2`) gives the
  starting weights; the architecture must match the config's, and mismatches are named."""
  from el_jax.core.models import decoder, pretrained
  cfg = _config(**{"model.preset": "gpt2", "optim.name": "sgd", "optim.lr": 1e-9})
  setup = setup_lib.Setup(cfg)
  _, ckpt_params = decoder.init(setup.model_cfg, 123)  # not the seed-0 init of the run
  pretrained.save_gpt2(str(tmp_path / "gpt2"), setup.model_cfg, ckpt_params)
  cfg.model.pretrained = str(tmp_path / "gpt2")
  cfg.seeds = (0, 1)  # every seed starts from the checkpoint (its buffers are not donated away)
  job.train_and_evaluate(cfg, str(tmp_path / "ft"))
  trainer = setup_lib.Trainer(setup_lib.Setup(cfg))
  ckpt = jax.tree.leaves(jax.device_get(ckpt_params))
  init0 = jax.tree.leaves(jax.device_get(decoder.init(setup.model_cfg, 0)[1]))
  for seed in cfg.seeds:
    after = jax.tree.leaves(jax.device_get(checkpoint.restore_params(trainer, str(tmp_path / "ft"),
                                                                seed)))
    assert max(float(np.abs(x - y).max()) for x, y in zip(after, ckpt)) < 1e-6
    assert max(float(np.abs(x - y).max()) for x, y in zip(after, init0)) > 1e-2

  wrong = _config(**{"model.preset": "gpt2", "model.num_layers": 3})
  wrong.model.pretrained = str(tmp_path / "gpt2")
  with pytest.raises(ValueError, match=r"model\.num_layers=3 \(checkpoint 2\)"):
    setup_lib.Setup(wrong)
  neox = _config()
  neox.model.pretrained = str(tmp_path / "gpt2")
  with pytest.raises(ValueError, match=r"set model\.preset='gpt2'"):
    setup_lib.Setup(neox)
  missing = _config(**{"model.preset": "gpt2"})
  missing.model.pretrained = str(tmp_path / "nowhere")
  with pytest.raises(ValueError, match=r"model\.pretrained=.*nowhere.* is not a Hugging Face"):
    setup_lib.validate_config(missing)


def test_model_pretrained_with_a_seed_field_fine_tunes_each_seed_from_its_own(tmp_path):
  """`model.pretrained` containing "{seed}": seed s starts from checkpoint s (several
  independently pretrained models fine-tuned in one run); a missing seed's checkpoint, another
  field or another architecture are named."""
  from el_jax.core.models import decoder, pretrained
  cfg = _config(**{"model.preset": "gpt2", "optim.name": "sgd", "optim.lr": 1e-9})
  setup = setup_lib.Setup(cfg)
  ckpts = {}
  for seed in (0, 1):  # two different checkpoints, neither the run's own init
    _, ckpts[seed] = decoder.init(setup.model_cfg, 100 + seed)
    pretrained.save_gpt2(str(tmp_path / f"gpt2_{seed}"), setup.model_cfg, ckpts[seed])
  cfg.model.pretrained = str(tmp_path / "gpt2_{seed}")
  cfg.seeds = (0, 1)
  job.train_and_evaluate(cfg, str(tmp_path / "ft"))
  trainer = setup_lib.Trainer(setup_lib.Setup(cfg))
  leaves = lambda t: jax.tree.leaves(jax.device_get(t))  # noqa: E731
  gap = lambda a, b: max(float(np.abs(x - y).max()) for x, y in zip(leaves(a), leaves(b)))  # noqa: E731
  assert gap(ckpts[0], ckpts[1]) > 1e-2
  for seed in cfg.seeds:
    after = checkpoint.restore_params(trainer, str(tmp_path / "ft"), seed)
    assert gap(after, ckpts[seed]) < 1e-6 and gap(after, ckpts[1 - seed]) > 1e-2, seed

  three = cfg.copy_and_resolve_references()
  three.seeds = (0, 1, 2)
  with pytest.raises(ValueError, match=r"\(seed 2: .*gpt2_2.*\) is not a Hugging Face"):
    setup_lib.validate_config(three)
  field = cfg.copy_and_resolve_references()
  field.model.pretrained = str(tmp_path / "gpt2_{model}")
  with pytest.raises(ValueError, match=r"the only field a path may contain is \{seed\}"):
    setup_lib.validate_config(field)
  deeper = dataclasses.replace(setup.model_cfg, num_layers=3)  # not the config's size
  pretrained.save_gpt2(str(tmp_path / "gpt2_2"), deeper, decoder.init(deeper, 7)[1])
  with pytest.raises(ValueError, match=r"gpt2_2.* model\.num_layers=2 \(checkpoint 3\)"):
    setup_lib.Setup(three).pretrained_params_for(2)
  longer = dataclasses.replace(setup.model_cfg, max_len=setup.model_cfg.max_len + 8)
  pretrained.save_gpt2(str(tmp_path / "gpt2_2"), longer, decoder.init(longer, 7)[1])
  with pytest.raises(ValueError, match=r"checkpoint of seed 2 .* not the architecture"):
    setup_lib.Setup(three).pretrained_params_for(2)  # fits the config, but not seed 0's model
