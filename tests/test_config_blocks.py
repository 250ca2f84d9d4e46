"""Every config builds its loss, optim, loop and flatness blocks from el_jax.run.config_blocks."""
import pytest

from el_jax.run import config as config_lib
from el_jax.run import config_blocks as blocks

CONFIGS = ("copy_task", "hmm_mlm", "label_copy", "path_star", "pcfg_mlm", "text_lm")
LOOP = {"num_steps", "log_every", "eval_every", "checkpoint_every", "stop_at_step", "vmap_seeds",
        "vmap_seeds_impl", "cpu_dots", "attention_blocks", "tensorboard"}


@pytest.mark.parametrize("name", CONFIGS)
def test_config_blocks_have_the_shared_fields(name):
  module = config_lib.load_config_module(name)
  for variant in module.VARIANTS:
    c = module.get_config(variant)
    assert set(c.optim) == {k for k, _ in blocks.OPTIM_DEFAULTS}, (name, variant)
    assert c.flatness.to_dict() == blocks.flatness().to_dict(), (name, variant)
    if name != "text_lm":  # text_lm pretrains with plain CE: name and reduction only
      assert set(c.loss) == set(blocks.loss()), (name, variant)
    assert LOOP <= set(c.train), (name, variant)


def test_optim_sets_values_and_refuses_unknown_fields():
  c = blocks.optim(lr=3e-4, decay="cosine")
  assert c.lr == 3e-4 and c.decay == "cosine" and c.b2 == 0.999
  with pytest.raises(ValueError, match=r"optim fields \['learning_rate'\] do not exist"):
    blocks.optim(learning_rate=1.0)


def test_loop_adds_optional_fields_only_when_given():
  import ml_collections
  t = blocks.loop(ml_collections.ConfigDict(), num_steps=5, log_every=1, eval_every=0,
                  checkpoint_every=5)
  assert set(t) == LOOP and t.stop_at_step == 0 and t.cpu_dots == "xla"
  assert t.attention_blocks == 1 and t.tensorboard is True
  t = blocks.loop(ml_collections.ConfigDict(), num_steps=5, log_every=1, eval_every=0,
                  checkpoint_every=5, keep_checkpoints=0, init_from="")
  assert set(t) == LOOP | {"keep_checkpoints", "init_from"}


def test_each_loss_block_holds_exactly_that_loss_hyperparameters():
  """LOSS_HPARAMS (the config side) names, per loss, the keyword arguments of its function in
  el_jax.core.losses (the math side); every loss with hyperparameters has a block."""
  from el_jax.core import losses
  table = dict((n, tuple(f for f, _, _ in fields)) for n, fields in blocks.LOSS_HPARAMS)
  want = {n: losses._hparam_names(fn) for n, fn in losses.LOSSES.items() if losses._hparam_names(fn)}
  assert table == want
  c = blocks.loss()
  for n, fields in blocks.LOSS_HPARAMS:
    assert c[n].to_dict() == {f: d for f, d, _ in fields}


def test_old_flat_loss_fields_upgrade_and_compare_equal():
  """A config.json / result row written with the flat, shared loss fields (`loss.lam`) is
  today's config when it trains the same thing; the old layout is refused with where each
  field lives now, on the command line and in code."""
  import pytest as _pytest
  from el_jax.core import losses
  new = config_lib.flatten(config_lib.config_dict(config_lib.get_config(
      "copy_task", "test", {"loss.name": "e1", "loss.e1.lam": 4.0})))
  old = {k: v for k, v in new.items() if k.count(".") < 2 or not k.startswith("loss.")}
  old.update({"loss.lam": 4.0, "loss.b": 1.0, "loss.eps": 0.1, "loss.gamma": 2.0,
              "loss.reweight_strategy": "linupper", "loss.reweight_r": 1.0})
  up = config_lib.upgrade(old)
  assert up["loss.e1.lam"] == up["loss.e2.lam"] == up["loss.spectral_decoupling.lam"] == 4.0
  assert up["loss.focal.gamma"] == up["loss.dice.gamma"] == 2.0
  assert up["loss.reweight.strategy"] == "linupper" and "loss.lam" not in up
  assert config_lib.config_diff(old, new) == []
  assert config_lib.config_diff(old, {**new, "loss.e1.lam": 1.0}) == ["loss.e1.lam"]
  assert config_lib.upgrade_overrides({"loss.name": "e1", "loss.lam": 2.0, "loss.b": 3.0}, "e1") \
      == {"loss.name": "e1", "loss.e1.lam": 2.0}  # e1 takes no b: it was inert
  with _pytest.raises(ValueError, match=r"loss.lam has moved.*loss.e1.lam, loss.e2.lam"):
    losses.validate_config({"name": "e1", "lam": 4.0})
  with _pytest.raises(ValueError, match=r"unknown config key 'loss.lam': loss.lam has moved"):
    config_lib.get_config("copy_task", "test", {"loss.lam": 4.0})
