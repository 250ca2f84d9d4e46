"""Every config builds its loss, optim, loop and flatness blocks from el_jax.config_blocks."""
import pytest

from el_jax import config as config_lib
from el_jax import config_blocks as blocks

CONFIGS = ("copy_task", "hmm_mlm", "label_copy", "path_star", "pcfg_mlm", "text_lm")
LOOP = {"num_steps", "log_every", "eval_every", "checkpoint_every", "stop_at_step", "vmap_seeds",
        "vmap_seeds_impl", "cpu_dots"}


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
  t = blocks.loop(ml_collections.ConfigDict(), num_steps=5, log_every=1, eval_every=0,
                  checkpoint_every=5, keep_checkpoints=0, init_from="")
  assert set(t) == LOOP | {"keep_checkpoints", "init_from"}
