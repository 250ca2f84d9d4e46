"""Hugging Face GPT-2 checkpoints: load_gpt2 gives GPT-2's logits (checked against an
independent float64 NumPy GPT-2 on the HF tensor layout), save_gpt2 is its inverse, and
malformed checkpoints are ValueErrors naming the tensor or the option."""
import dataclasses
import json
import math

import jax
import numpy as np
import pytest
import safetensors.numpy
from scipy import special

from el_jax.core.models import decoder
from el_jax.core.models import pretrained

D, L, H, V, P = 16, 2, 2, 50, 32


def _apply(graphdef, params, tokens):
  """Eager on purpose: op-by-op dispatch of this tiny model beats compiling each config."""
  return decoder.apply(graphdef, params, tokens)


def _hf_config(**overrides):
  hf = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
        "n_positions": P, "n_ctx": P, "n_embd": D, "n_layer": L, "n_head": H,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1,
        "bos_token_id": 0, "eos_token_id": 0, "initializer_range": 0.02}
  hf.update(overrides)
  return hf


def _hf_tensors(seed, n_inner=None, buffers=True, d=D, n_layer=L, vocab=V, positions=P):
  """Random GPT-2 tensors in the HF layout (no prefix), scaled so every part matters
  (n_inner: the MLP width, default 4 d)."""
  n_inner = 4 * d if n_inner is None else n_inner
  rng = np.random.default_rng(seed)
  w = lambda *s: rng.normal(0.0, 0.3, s).astype(np.float32)  # noqa: E731
  t = {"wte.weight": rng.normal(0.0, 1.0, (vocab, d)).astype(np.float32),
       "wpe.weight": rng.normal(0.0, 0.5, (positions, d)).astype(np.float32),
       "ln_f.weight": 1 + w(d), "ln_f.bias": w(d)}
  for i in range(n_layer):
    t |= {f"h.{i}.ln_1.weight": 1 + w(d), f"h.{i}.ln_1.bias": w(d),
          f"h.{i}.attn.c_attn.weight": w(d, 3 * d), f"h.{i}.attn.c_attn.bias": w(3 * d),
          f"h.{i}.attn.c_proj.weight": w(d, d), f"h.{i}.attn.c_proj.bias": w(d),
          f"h.{i}.ln_2.weight": 1 + w(d), f"h.{i}.ln_2.bias": w(d),
          f"h.{i}.mlp.c_fc.weight": w(d, n_inner), f"h.{i}.mlp.c_fc.bias": w(n_inner),
          f"h.{i}.mlp.c_proj.weight": w(n_inner, d), f"h.{i}.mlp.c_proj.bias": w(d)}
    if buffers:  # what HF stores besides the parameters
      t[f"h.{i}.attn.bias"] = np.tril(np.ones((positions, positions), np.float32))[None, None]
      t[f"h.{i}.attn.masked_bias"] = np.asarray(-1e4, np.float32)
  return t


def _write(path, hf, tensors, prefix=""):
  path.mkdir(parents=True, exist_ok=True)
  (path / "config.json").write_text(json.dumps(hf))
  safetensors.numpy.save_file({(k if k == "lm_head.weight" else prefix + k): v
                               for k, v in tensors.items()}, str(path / "model.safetensors"))
  return str(path)


def _np_gpt2(t, tokens, n_head, eps, activation):
  """GPT-2 forward pass in float64 straight from HF tensors (no prefix): logits [B, T, V]."""
  t = {k: np.asarray(v, np.float64) for k, v in t.items()}
  b, n = tokens.shape
  d = t["wte.weight"].shape[1]
  k = d // n_head

  def ln(x, name):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * t[name + ".weight"] + t[name + ".bias"]

  def conv1d(x, name):
    return x @ t[name + ".weight"] + t[name + ".bias"]

  def gelu(x):
    if activation == "gelu_new":
      return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + special.erf(x / math.sqrt(2)))

  causal = np.tril(np.ones((n, n), bool))
  x = t["wte.weight"][tokens] + t["wpe.weight"][:n][None]
  i = 0
  while f"h.{i}.ln_1.weight" in t:
    q, kk, v = np.split(conv1d(ln(x, f"h.{i}.ln_1"), f"h.{i}.attn.c_attn"), 3, axis=-1)
    q, kk, v = (z.reshape(b, n, n_head, k).transpose(0, 2, 1, 3) for z in (q, kk, v))
    s = q @ kk.transpose(0, 1, 3, 2) / math.sqrt(k)
    s = np.where(causal, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    a = (p @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
    x = x + conv1d(a, f"h.{i}.attn.c_proj")
    x = x + conv1d(gelu(conv1d(ln(x, f"h.{i}.ln_2"), f"h.{i}.mlp.c_fc")), f"h.{i}.mlp.c_proj")
    i += 1
  return ln(x, "ln_f") @ t["wte.weight"].T


def _tokens(seed, n):
  return np.random.default_rng(seed).integers(0, V, (3, n)).astype(np.int32)


# (prefix, extra config, n_inner, lm_head stored): both key layouts, both GELUs, a
# LayerNorm epsilon large enough that a wrong one would show, a non-default n_inner.
CASES = {
    "prefixed": ("transformer.", {}, 4 * D, True),
    "bare": ("", {}, 4 * D, False),
    "erf_gelu_big_eps_n_inner": ("", {"activation_function": "gelu", "layer_norm_epsilon": 0.3,
                                      "n_inner": 24}, 24, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_load_matches_numpy_gpt2(tmp_path, case):
  prefix, extra, n_inner, lm_head = CASES[case]
  hf = _hf_config(**extra)
  t = _hf_tensors(0, n_inner)
  stored = dict(t, **({"lm_head.weight": t["wte.weight"].copy()} if lm_head else {}))
  cfg, params = pretrained.load_gpt2(_write(tmp_path / "ckpt", hf, stored, prefix))
  assert (cfg.embed_dim, cfg.num_layers, cfg.num_heads, cfg.vocab_size, cfg.max_len,
          cfg.mlp_dim) == (D, L, H, V, P, n_inner)
  assert cfg.layer_norm_eps == hf["layer_norm_epsilon"]
  graphdef, _ = decoder.init(cfg, 0)
  for n in (P, 7):
    tokens = _tokens(n, n)
    want = _np_gpt2(t, tokens, H, hf["layer_norm_epsilon"], hf["activation_function"])
    got = np.asarray(_apply(graphdef, params, tokens))
    assert got.shape == (3, n, V) and np.abs(want).max() > 1.0  # non-trivial logits
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_wrong_epsilon_or_gelu_would_be_detected(tmp_path):
  """The comparison above is sharp enough to see the settings the loader must carry over."""
  hf = _hf_config(layer_norm_epsilon=0.3)
  t = _hf_tensors(1)
  cfg, params = pretrained.load_gpt2(_write(tmp_path / "ckpt", hf, t))
  tokens = _tokens(0, P)
  want = _np_gpt2(t, tokens, H, 0.3, "gelu_new")
  for wrong in (dict(layer_norm_eps=1e-6), dict(activation="gelu_exact")):
    graphdef, _ = decoder.init(dataclasses.replace(cfg, **wrong), 0)
    got = np.asarray(_apply(graphdef, params, tokens))
    assert np.abs(got - want).max() > 1e-3, wrong


@pytest.mark.parametrize("prefix", ["transformer.", ""])
def test_save_load_round_trip(tmp_path, prefix):
  cfg = decoder.preset("gpt2", vocab_size=V, num_layers=L, num_heads=H, embed_dim=D,
                       mlp_dim=24, max_len=P, layer_norm_eps=1e-5)
  graphdef, params = decoder.init(cfg, 3)
  params = jax.tree.map(lambda x: x + 0.2 * np.random.default_rng(x.size).normal(size=x.shape)
                        .astype(np.float32), params)  # LN scales / biases away from 1 / 0
  out = tmp_path / "saved"
  pretrained.save_gpt2(str(out), cfg, params, prefix=prefix)
  hf = json.loads((out / "config.json").read_text())
  assert hf["model_type"] == "gpt2" and hf["n_inner"] == 24 and hf["layer_norm_epsilon"] == 1e-5
  stored = safetensors.numpy.load_file(str(out / "model.safetensors"))
  assert all(k.startswith(prefix) for k in stored) and "lm_head.weight" not in stored
  assert len(stored) == 4 + 12 * L
  # The written tensors are GPT-2's: the NumPy GPT-2 on them gives el_jax's logits.
  tokens = _tokens(5, 11)
  bare = {k[len(prefix):]: v for k, v in stored.items()}
  np.testing.assert_allclose(np.asarray(_apply(graphdef, params, tokens)),
                             _np_gpt2(bare, tokens, H, 1e-5, "gelu_new"), rtol=1e-4, atol=1e-4)
  cfg2, params2 = pretrained.load_gpt2(str(out))
  assert cfg2 == cfg
  for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(params2), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_save_refuses_a_non_gpt2_architecture(tmp_path):
  cfg = decoder.preset("gpt_neox", vocab_size=V, num_layers=1, num_heads=H, embed_dim=D,
                       mlp_dim=64, max_len=P)
  _, params = decoder.init(cfg, 0)
  with pytest.raises(ValueError, match=r"not a GPT-2 architecture.*position.*'rotary'"):
    pretrained.save_gpt2(str(tmp_path / "x"), cfg, params)
  assert not (tmp_path / "x").exists()


def test_missing_tensor_is_named(tmp_path):
  t = _hf_tensors(0)
  del t["h.1.mlp.c_fc.bias"]
  with pytest.raises(ValueError, match=r"missing tensor 'h\.1\.mlp\.c_fc\.bias'.*\(64,\)"):
    pretrained.load_gpt2(_write(tmp_path / "bad", _hf_config(), t, "transformer."))


def test_misshaped_tensor_is_named(tmp_path):
  t = _hf_tensors(0)
  t["h.0.attn.c_attn.weight"] = np.ascontiguousarray(t["h.0.attn.c_attn.weight"].T)
  with pytest.raises(ValueError, match=r"'h\.0\.attn\.c_attn\.weight' has shape \(48, 16\); "
                     r"expected \(16, 48\)"):
    pretrained.load_gpt2(_write(tmp_path / "bad", _hf_config(), t))


def test_unexpected_tensor_is_named(tmp_path):
  t = _hf_tensors(0)
  t["h.2.ln_1.weight"] = t["h.1.ln_1.weight"]  # a third layer in a 2-layer config
  with pytest.raises(ValueError, match=r"unexpected tensor.*'h\.2\.ln_1\.weight'"):
    pretrained.load_gpt2(_write(tmp_path / "bad", _hf_config(), t, "transformer."))


def test_lm_head_must_equal_wte(tmp_path):
  t = _hf_tensors(0)
  t["lm_head.weight"] = t["wte.weight"] + np.float32(1e-3)
  with pytest.raises(ValueError, match=r"'lm_head\.weight' differs from wte\.weight"):
    pretrained.load_gpt2(_write(tmp_path / "bad", _hf_config(), t, "transformer."))


# reorder_and_upcast_attn=True is accepted (the same attention math in float32): see
# tests/test_reliability_pretrained.py.
@pytest.mark.parametrize("option, value", [("scale_attn_by_inverse_layer_idx", True),
                                           ("scale_attn_weights", False),
                                           ("tie_word_embeddings", False),
                                           ("activation_function", "relu"),
                                           ("model_type", "gpt_neox")])
def test_unsupported_config_option_is_named(tmp_path, option, value):
  path = _write(tmp_path / "bad", _hf_config(**{option: value}), _hf_tensors(0))
  with pytest.raises(ValueError, match=rf"{option}.*{value!r}"):
    pretrained.load_gpt2(path)


def test_missing_files_and_bad_decoder_fields():
  with pytest.raises(ValueError, match=r"config\.json not found"):
    pretrained.load_gpt2("/nonexistent_gpt2_dir")
  with pytest.raises(ValueError, match=r"layer_norm_eps=0\.0 must be a number > 0"):
    decoder.preset("gpt2", vocab_size=V, layer_norm_eps=0.0)
  with pytest.raises(ValueError, match=r"activation='relu'; allowed"):
    decoder.preset("gpt2", vocab_size=V, activation="relu")
