"""Hugging Face GPT-2 checkpoints as transformers writes them.

Config keys under GPT2Config's alias names (hidden_size, num_attention_heads, ...),
conflicting names, options the decoder does not implement, float16 / bfloat16 / float8
tensors, and token ids beyond the vocabulary: each loads right (the logits of an
independent NumPy GPT-2) or is one ValueError naming the file, key, tensor or id."""
import json
import os

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from el_jax.core.data import gpt2_bpe
from el_jax.core.models import decoder
from el_jax.core.models import pretrained
from el_jax.core.tasks import label_copy as lc_task
from el_jax.core.tasks import text_lm
from el_jax.run import config as config_lib
from test_pretrained import _hf_tensors, _np_gpt2, _write

# 24 dims: divisible by the 4 heads of the checkpoint and by GPT2Config's default 12, so a
# loader that ignored `num_attention_heads` would load 12 heads without complaint.
D, HEADS, L, V, P = 24, 4, 2, 40, 16


def _tensors(seed, d=D, n_layer=L):
  """Random GPT-2 tensors in the HF layout (no prefix) at this file's sizes."""
  return _hf_tensors(seed, d=d, n_layer=n_layer, vocab=V, positions=P)


def _canonical(**overrides):
  hf = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
        "n_positions": P, "n_ctx": P, "n_embd": D, "n_layer": L, "n_head": HEADS,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
  hf.update(overrides)
  return hf


def _aliased(**overrides):
  """The same network under transformers' generic names only (what a config saved from
  `GPT2Config(hidden_size=..., num_attention_heads=..., ...)` holds)."""
  hf = {"model_type": "gpt2", "vocab_size": V, "hidden_size": D, "num_hidden_layers": L,
        "num_attention_heads": HEADS, "max_position_embeddings": P,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
  hf.update(overrides)
  return hf


def _tokens(seed, n):
  return np.random.default_rng(seed).integers(0, V, (2, n)).astype(np.int32)


def _logits(cfg, params, tokens):
  graphdef, _ = decoder.init(cfg, 0)
  return np.asarray(decoder.apply(graphdef, params, tokens))


# ---------------------------------------------------------------- config keys

CONFIGS = {
    "aliases_only": _aliased(),
    "canonical_n_embd_alias_heads": {**_canonical(), "num_attention_heads": HEADS},
    "both_names_equal": {**_canonical(), "hidden_size": D, "num_attention_heads": HEADS,
                         "num_hidden_layers": L, "max_position_embeddings": P},
}
CONFIGS["canonical_n_embd_alias_heads"].pop("n_head")


@pytest.mark.parametrize("prefix", ["transformer.", ""])
@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_alias_keys_load_the_numpy_gpt2(tmp_path, case, prefix):
  t = _tensors(0)
  cfg, params = pretrained.load_gpt2(_write(tmp_path / "ckpt", CONFIGS[case], t, prefix))
  assert (cfg.embed_dim, cfg.num_heads, cfg.num_layers, cfg.max_len, cfg.vocab_size) == (
      D, HEADS, L, P, V)
  tokens = _tokens(1, P)
  want = _np_gpt2(t, tokens, HEADS, 1e-5, "gelu_new")
  np.testing.assert_allclose(_logits(cfg, params, tokens), want, rtol=1e-4, atol=1e-4)
  # Sharp enough: GPT2Config's default 12 heads (what an ignored alias gave) is far off.
  assert np.abs(want - _np_gpt2(t, tokens, 12, 1e-5, "gelu_new")).max() > 1e-2


@pytest.mark.parametrize("alias, key", sorted(pretrained.ALIASES.items()))
def test_conflicting_names_are_both_named(tmp_path, alias, key):
  hf = _canonical()
  hf[alias] = hf[key] * 2
  path = _write(tmp_path / "ckpt", hf, _tensors(0))
  with pytest.raises(ValueError) as e:
    pretrained.load_gpt2(path)
  msg = str(e.value)
  assert msg.startswith(os.path.join(path, "config.json") + ": "), msg
  assert f"sets {key}={hf[key]} and its alias {alias}={hf[alias]}" in msg


def test_an_alias_with_a_bad_value_is_named_by_its_own_name(tmp_path):
  path = _write(tmp_path / "ckpt", _aliased(num_attention_heads=5), _tensors(0))
  with pytest.raises(ValueError, match=r"hidden_size=24 is not divisible by num_attention_heads=5"):
    pretrained.load_gpt2(path)
  path = _write(tmp_path / "ckpt2", _aliased(num_hidden_layers=0), _tensors(0))
  with pytest.raises(ValueError, match=r"num_hidden_layers=0 must be an integer >= 1"):
    pretrained.load_gpt2(path)


@pytest.mark.parametrize("key, value", [
    ("scale_attn_by_inverse_layer_idx", True), ("add_cross_attention", True),
    ("scale_attn_weights", False), ("tie_word_embeddings", False),
    ("pruned_heads", {"0": [1]}), ("quantization_config", {"quant_method": "bitsandbytes"}),
    ("activation_function", "quick_gelu"), ("activation_function", "relu"),
    ("model_type", "gpt_neox")])
def test_unsupported_values_are_refused_by_name(tmp_path, key, value):
  path = _write(tmp_path / "ckpt", _canonical(**{key: value}), _tensors(0))
  with pytest.raises(ValueError) as e:
    pretrained.load_gpt2(path)
  msg = str(e.value)
  assert "\n" not in msg and f"{key}={value!r}" in msg and "config.json" in msg, msg


@pytest.mark.parametrize("extra, activation", [
    ({"reorder_and_upcast_attn": True}, "gelu_new"),  # the same math, in float32
    ({"pruned_heads": {}, "quantization_config": None, "torch_dtype": "float32"}, "gelu_new"),
    ({"activation_function": "gelu_python"}, "gelu"),
    ({"activation_function": "gelu_accurate"}, "gelu_new"),
])
def test_harmless_values_load(tmp_path, extra, activation):
  t = _tensors(2)
  cfg, params = pretrained.load_gpt2(_write(tmp_path / "ckpt", _canonical(**extra), t))
  tokens = _tokens(3, 9)
  np.testing.assert_allclose(_logits(cfg, params, tokens),
                             _np_gpt2(t, tokens, HEADS, 1e-5, activation), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("prefix", ["transformer.", ""])
def test_half_precision_checkpoints_are_upcast(tmp_path, dtype, prefix):
  t = _tensors(4)
  half = {k: v.astype(dtype) for k, v in t.items()}
  half["lm_head.weight"] = half["wte.weight"].copy()
  path = _write(tmp_path / "ckpt", _canonical(), half, prefix)
  stored = safetensors.numpy.load_file(os.path.join(path, "model.safetensors"))
  assert {x.dtype for x in stored.values()} == {np.dtype(dtype)}
  cfg, params = pretrained.load_gpt2(path)
  rounded = {k: v.astype(dtype).astype(np.float32) for k, v in t.items()}
  want = pretrained.params_from_hf(cfg, rounded)  # the fp32 original, rounded, then upcast
  for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
    assert x.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert any(not np.array_equal(rounded[k], t[k]) for k in t)  # the rounding is real
  tokens = _tokens(5, P)
  np.testing.assert_allclose(_logits(cfg, params, tokens),
                             _np_gpt2(rounded, tokens, HEADS, 1e-5, "gelu_new"),
                             rtol=1e-4, atol=1e-4)


def test_unreadable_or_non_float_dtypes_are_named(tmp_path):
  t = _tensors(0)
  t8 = dict(t, **{"wte.weight": t["wte.weight"].astype(ml_dtypes.float8_e4m3fn)})
  path = _write(tmp_path / "f8", _canonical(), t8, "transformer.")
  with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'transformer\.wte\.weight' "
                     r"has dtype F8_E4M3; GPT-2 weights must be stored as one of F64, F32, "
                     r"F16, BF16"):
    pretrained.load_gpt2(path)
  ti = dict(t, **{"ln_f.bias": np.zeros(D, np.int32)})
  with pytest.raises(ValueError, match=r"tensor 'ln_f\.bias' has dtype int32; expected floating"):
    pretrained.load_gpt2(_write(tmp_path / "int", _canonical(), ti))
  tn = dict(t, **{"h.1.mlp.c_fc.bias": np.full(4 * D, np.nan, np.float32)})
  with pytest.raises(ValueError, match=r"tensor 'h\.1\.mlp\.c_fc\.bias' has 96 non-finite value"):
    pretrained.load_gpt2(_write(tmp_path / "nan", _canonical(), tn))
  (tmp_path / "junk").mkdir()
  (tmp_path / "junk" / "config.json").write_text(json.dumps(_canonical()))
  (tmp_path / "junk" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad}")
  with pytest.raises(ValueError, match=r"model\.safetensors cannot be read as safetensors"):
    pretrained.load_gpt2(str(tmp_path / "junk"))


# --------------------------------------------------------- out-of-vocabulary ids

def test_out_of_vocabulary_ids_are_an_error_on_the_host(tmp_path):
  cfg, params = pretrained.load_gpt2(_write(tmp_path / "ckpt", _canonical(), _tensors(0)))
  tokens = _tokens(0, 8)
  tokens[1, 5] = V
  # What the check prevents: inside JAX the id reads NaN, and the whole row goes NaN.
  assert np.isnan(_logits(cfg, params, tokens)[1]).all()
  with pytest.raises(ValueError, match=rf"batch: token id {V} at index \(1, 5\) is outside the "
                     rf"model's vocabulary of {V} tokens \(ids 0\.\.{V - 1}\)"):
    gpt2_bpe.check_ids(tokens, cfg.vocab_size, "batch")
  ok = gpt2_bpe.check_ids(_tokens(0, 8), cfg.vocab_size)
  assert ok.dtype == np.int32
  with pytest.raises(ValueError, match=r"token id -1 at index 2"):
    gpt2_bpe.check_ids([0, 1, -1], V)
  with pytest.raises(ValueError, match=r"must be integers, got dtype float64"):
    gpt2_bpe.check_ids([0.0, 1.0], V)


def test_encode_for_a_model_checks_its_vocabulary():
  assert gpt2_bpe.encode("Hello world", vocab_size=gpt2_bpe.VOCAB_SIZE) == [15496, 995]
  with pytest.raises(ValueError, match=r"the GPT-2 tokens of 'Hello world': token id 15496 at "
                     rf"index 0 is outside the model's vocabulary of {V} tokens.*needs vocab_size "
                     r">= 50257"):
    gpt2_bpe.encode("Hello world", vocab_size=V)
  assert gpt2_bpe.encode_batch(["", "!"], vocab_size=V) == [[], [0]]
  with pytest.raises(ValueError, match=r"tokens of text 1 \(' world'\): token id 995"):
    gpt2_bpe.encode_batch(["!", " world"], vocab_size=V)


def test_label_copy_task_refuses_out_of_vocabulary_cached_ids(tmp_path):
  cfg = config_lib.get_config("label_copy", "test", {"data.cache_dir": str(tmp_path / "cache")})
  task = lc_task.LabelCopyTask(cfg)
  path = task.data.path
  with np.load(path) as z:
    arrays = dict(z)
  arrays["valid_rows"] = arrays["valid_rows"].copy()
  arrays["valid_rows"][3, 4] = gpt2_bpe.VOCAB_SIZE
  with open(path, "wb") as f:
    np.savez(f, **arrays)
  with pytest.raises(ValueError, match=rf"the valid split of {path}: token id 50257 at index "
                     r"\(3, 4\) .*; delete that cache file to rebuild it"):
    lc_task.LabelCopyTask(cfg)


def test_text_lm_rebuilds_cached_rows_with_out_of_vocabulary_ids(tmp_path, capsys):
  cfg = config_lib.get_config("text_lm", "test", {"data.cache_dir": str(tmp_path / "cache")})
  rows = text_lm.build_rows(cfg.data)[0]
  cached = [p for p in os.listdir(cfg.data.cache_dir) if p.startswith("rows_")]
  path = os.path.join(cfg.data.cache_dir, cached[0])
  with np.load(path) as z:
    arrays = dict(z)
  arrays["rows"] = arrays["rows"].copy()
  arrays["rows"][0, 0] = -7
  with open(path, "wb") as f:
    np.savez(f, **arrays)
  capsys.readouterr()
  again = text_lm.build_rows(cfg.data)[0]
  np.testing.assert_array_equal(again, rows)
  err = capsys.readouterr().err
  assert "the cached rows: token id -7 at index (0, 0)" in err and "rebuilding" in err
