"""Hugging Face GPT-2 checkpoints in and out of el_jax's `gpt2` decoder.

A Hugging Face GPT-2 checkpoint directory holds `config.json` and
`model.safetensors`. `load_gpt2` turns it into a `DecoderConfig` (the `gpt2`
preset: pre-LN, learned positions, tied unembedding, with the checkpoint's
LayerNorm epsilon and GELU variant) and a params `State` for
`el_jax.core.models.decoder`; `save_gpt2` writes the inverse, so a model trained in
el_jax is stored like a real checkpoint (the names, layout, config keys and
`{"format": "pt"}` metadata `transformers` writes for a `GPT2LMHeadModel`).

Using the released GPT-2 (no download happens here; fetch the two files of
https://huggingface.co/gpt2, i.e. `openai-community/gpt2`, yourself, e.g.
`huggingface-cli download gpt2 config.json model.safetensors --local-dir gpt2`):

  from el_jax.core.models import decoder, pretrained
  cfg, params = pretrained.load_gpt2("gpt2")        # the folder with the two files
  graphdef, _ = decoder.init(cfg, 0)                # the structure only
  logits = decoder.apply(graphdef, params, tokens)  # tokens [B, T], T <= 1024: [B, T, 50257]

Reading and writing checkpoints needs the `safetensors` package (el_jax's `text` extra,
`el_jax.infra.extras`); it is imported only then, so the decoder's other users never load it.

`tokens` are GPT-2 byte-level BPE ids (e.g. from the `tokenizers` package with
the checkpoint's vocab.json / merges.txt). `decoder.init` spends one random
init of the full model to get the structure.

The layouts match one to one: a Conv1D weight is stored `[in, out]` like a
Flax kernel, `c_attn` is q | k | v on the output axis with heads contiguous
inside each (the decoder's `qkv` layout), LayerNorm `weight` is Flax's
`scale`. Tensor names may carry the `transformer.` prefix (a saved
`GPT2LMHeadModel`) or not (a `GPT2Model`, and the hub's own file). The
attention-mask buffers `h.{i}.attn.bias` / `h.{i}.attn.masked_bias` are not
parameters and are ignored; `lm_head.weight`, if stored, must equal
`wte.weight` (the unembedding is tied). Config keys the network does not
depend on (dropout rates, token ids, summary heads, ...) are ignored; options
that would change it beyond the decoder's `gpt2` preset are a ValueError
naming them. The generic names of GPT2Config's `attribute_map` (hidden_size,
max_position_embeddings, num_attention_heads, num_hidden_layers) are read like
n_embd, n_positions, n_head, n_layer; a config giving both names with
different values is a ValueError. Every tensor is read as float32 (el_jax's
parameter dtype): float16 and bfloat16 checkpoints are upcast exactly.

Token ids must be < the checkpoint's vocab_size (an id beyond the embedding
makes every logit of the sequence NaN, not an error, inside JAX): encode text
with `gpt2_bpe.encode(text, vocab_size=cfg.vocab_size)` or check ids with
`gpt2_bpe.check_ids(tokens, cfg.vocab_size)` before `decoder.apply`.
"""
import os
import re

import jax
import jax.numpy as jnp
import ml_dtypes  # NumPy's bfloat16 (a JAX dependency); safetensors reads BF16 tensors with it
import numpy as np
from flax import nnx

from el_jax.infra import checkpoint
from el_jax.infra import extras
from el_jax.core.models import decoder
from el_jax.infra import workdir as wd

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PREFIX = "transformer."  # the GPT2LMHeadModel layout; the bare GPT2Model layout has none
PREFIXES = (PREFIX, "")

# Hugging Face `activation_function` -> DecoderConfig.activation. gelu_new, gelu_pytorch_tanh,
# gelu_fast and gelu_accurate are the same tanh approximation of GELU; "gelu" and
# "gelu_python" are the erf form (transformers' ACT2FN). Others (relu, quick_gelu, gelu_10,
# silu, ...) are refused.
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "gelu_accurate": "gelu_tanh", "gelu": "gelu_exact", "gelu_python": "gelu_exact"}
_ACTIVATION_NAMES = {"gelu_tanh": "gelu_new", "gelu_exact": "gelu"}  # what save_gpt2 writes

# GPT2Config's defaults, used (as transformers does) for keys a config.json leaves out.
HF_DEFAULTS = {
    "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
    "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
    "initializer_range": 0.02,
}
# GPT2Config.attribute_map: generic names transformers accepts for GPT-2's own keys.
ALIASES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
           "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}
# Options the decoder implements only at one value: key -> that value (GPT2Config's default).
SUPPORTED_ONLY = {
    "scale_attn_weights": True,  # scores / sqrt(head_dim)
    "scale_attn_by_inverse_layer_idx": False,  # would also divide layer i's scores by i + 1
    "add_cross_attention": False,  # encoder-decoder cross-attention blocks
    "tie_word_embeddings": True,  # lm_head = wte
}
# reorder_and_upcast_attn (any value) is accepted: it computes the same scores and softmax
# in float32 (the decoder always does) with the 1/sqrt(head_dim) applied before the product.
# Config keys that, when set (not null / empty), describe weights el_jax cannot use as stored.
_REFUSED_IF_SET = {
    "pruned_heads": "pruned attention heads (el_jax's decoder needs every head of every layer)",
    "quantization_config": "quantized weights (el_jax reads float tensors only)",
}
# safetensors dtypes read (BF16 through ml_dtypes); others (F8_*, ...) are refused by name.
_READABLE = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8",
             "BOOL")
_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
# Non-parameter buffers of the attention (causal mask, fill value), after the prefix.
_BUFFER = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")
_LM_HEAD = "lm_head.weight"
# Per block: Hugging Face module -> (decoder module path, LayerNorm?).
_BLOCK = (("ln_1", ("ln1",), True), ("attn.c_attn", ("attn", "qkv"), False),
          ("attn.c_proj", ("attn", "out"), False), ("ln_2", ("ln2",), True),
          ("mlp.c_fc", ("mlp", "fc_in"), False), ("mlp.c_proj", ("mlp", "fc_out"), False))


def _int(hf, key):
  v = hf.get(key, HF_DEFAULTS[key])
  if isinstance(v, bool) or not isinstance(v, int) or v < 1:
    name = hf.get("_names", {}).get(key, key)
    raise ValueError(f"GPT-2 config {name}={v!r} must be an integer >= 1")
  return v


def canonical_config(hf):
  """`hf` with GPT2Config's alias keys (`ALIASES`) renamed to GPT-2's own (n_embd, ...).

  ValueError if a config gives a key under both names with different values.
  The result's "_names" maps a renamed key to the name the file used (for errors).
  """
  out, names = dict(hf), {}
  for alias, key in ALIASES.items():
    if alias not in out:
      continue
    v = out.pop(alias)
    if key in out and (out[key] != v or type(out[key]) is not type(v)):
      raise ValueError(f"GPT-2 config sets {key}={out[key]!r} and its alias {alias}={v!r}; "
                       f"transformers reads them as one setting: give one, or equal values")
    if key not in out:
      out[key], names[key] = v, alias
  out["_names"] = names
  return out


def config_from_hf(hf):
  """The `gpt2` DecoderConfig of a Hugging Face GPT-2 `config.json` dict; ValueError if unsupported."""
  if not isinstance(hf, dict):
    raise ValueError(f"a GPT-2 config must be a JSON object, got {type(hf).__name__}")
  model_type = hf.get("model_type", "gpt2")
  if model_type != "gpt2":
    raise ValueError(f"config model_type={model_type!r}; only 'gpt2' checkpoints can be loaded")
  hf = canonical_config(hf)
  bad = {k: hf[k] for k, ok in SUPPORTED_ONLY.items() if k in hf and hf[k] != ok}
  if bad:
    raise ValueError("unsupported GPT-2 config option(s) "
                     + ", ".join(f"{k}={v!r}" for k, v in bad.items())
                     + "; el_jax's gpt2 decoder needs "
                     + ", ".join(f"{k}={SUPPORTED_ONLY[k]}" for k in bad))
  for key, what in _REFUSED_IF_SET.items():
    if hf.get(key):
      raise ValueError(f"unsupported GPT-2 config option {key}={hf[key]!r}: {what}; give a "
                       f"checkpoint without {key}")
  act = hf.get("activation_function", HF_DEFAULTS["activation_function"])
  if act not in ACTIVATIONS:
    raise ValueError(f"unsupported GPT-2 config activation_function={act!r}; "
                     f"allowed: {sorted(ACTIVATIONS)}")
  d, n_head = _int(hf, "n_embd"), _int(hf, "n_head")
  n_inner = hf.get("n_inner")
  if n_inner is not None:
    n_inner = _int(hf, "n_inner")
  eps = hf.get("layer_norm_epsilon", HF_DEFAULTS["layer_norm_epsilon"])
  std = hf.get("initializer_range", HF_DEFAULTS["initializer_range"])
  for key, v in (("layer_norm_epsilon", eps), ("initializer_range", std)):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
      raise ValueError(f"GPT-2 config {key}={v!r} must be a number > 0")
  if d % n_head:
    names = hf["_names"]
    raise ValueError(f"GPT-2 config {names.get('n_embd', 'n_embd')}={d} is not divisible by "
                     f"{names.get('n_head', 'n_head')}={n_head}")
  return decoder.preset(
      "gpt2", vocab_size=_int(hf, "vocab_size"), num_layers=_int(hf, "n_layer"), num_heads=n_head,
      embed_dim=d, mlp_dim=n_inner or 4 * d, max_len=_int(hf, "n_positions"),
      layer_norm_eps=float(eps), activation=ACTIVATIONS[act], init_std=float(std))


def _check_gpt2_config(cfg):
  """ValueError unless `cfg` is a network a Hugging Face GPT-2 expresses."""
  want = dict(position="learned", parallel_residual=False, tie_embeddings=True, causal=True,
              doc_mask=False)
  bad = {k: getattr(cfg, k) for k, v in want.items() if getattr(cfg, k) != v}
  if bad:
    raise ValueError(f"not a GPT-2 architecture: {bad}; a Hugging Face GPT-2 needs "
                     + ", ".join(f"{k}={want[k]}" for k in bad) + " (the 'gpt2' preset)")


def hf_config(cfg):
  """The Hugging Face `config.json` dict of a `gpt2` DecoderConfig (inverse of `config_from_hf`)."""
  _check_gpt2_config(cfg)
  return {
      "model_type": "gpt2",
      "architectures": ["GPT2LMHeadModel"],
      "vocab_size": cfg.vocab_size,
      "n_positions": cfg.max_len,
      "n_embd": cfg.embed_dim,
      "n_layer": cfg.num_layers,
      "n_head": cfg.num_heads,
      "n_inner": None if cfg.mlp_dim == 4 * cfg.embed_dim else cfg.mlp_dim,
      "activation_function": _ACTIVATION_NAMES[cfg.activation],
      "layer_norm_epsilon": cfg.layer_norm_eps,
      "initializer_range": cfg.init_std,
      # el_jax's decoder has no dropout; a model trained here was trained without it.
      "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
      **SUPPORTED_ONLY, "reorder_and_upcast_attn": False,
  }


def _names(num_layers):
  """Hugging Face tensor name (no prefix) -> path of the leaf in the decoder's pure params dict."""
  names = {"wte.weight": ("embed", "embedding"), "wpe.weight": ("pos_embed",),
           "ln_f.weight": ("ln_f", "scale"), "ln_f.bias": ("ln_f", "bias")}
  for i in range(num_layers):
    for hf, ours, is_ln in _BLOCK:
      names[f"h.{i}.{hf}.weight"] = ("blocks", i, *ours, "scale" if is_ln else "kernel")
      names[f"h.{i}.{hf}.bias"] = ("blocks", i, *ours, "bias")
  return names


def _template(cfg):
  """The decoder's params State for `cfg` with abstract leaves (shapes, no random init)."""
  model = nnx.eval_shape(lambda: decoder.Decoder(cfg, rngs=nnx.Rngs(params=0)))
  return nnx.split(model, nnx.Param)[1]


def _get(tree, path):
  for k in path:
    tree = tree[k]
  return tree


def _set(tree, path, value):
  for k in path[:-1]:
    tree = tree.setdefault(k, {})
  tree[path[-1]] = value


def _strip(tensors):
  """Drops the `transformer.` prefix (either layout, not both at once) and the mask buffers."""
  out = {}
  for name, x in tensors.items():
    bare = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if _BUFFER.fullmatch(bare):
      continue
    if bare in out:
      raise ValueError(f"tensor {bare!r} is stored twice (with and without the {PREFIX!r} prefix)")
    out[bare] = x
  return out


def _float32(name, x):
  """float32 copy of a float tensor (float16 / bfloat16 upcast exactly); ValueError otherwise."""
  x = np.asarray(x)
  if x.dtype.kind != "f" and x.dtype != np.dtype(ml_dtypes.bfloat16):
    raise ValueError(f"tensor {name!r} has dtype {x.dtype}; expected floating point "
                     f"(float32, float16, bfloat16 or float64)")
  x = x.astype(np.float32)
  bad = ~np.isfinite(x)
  if bad.any():
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    raise ValueError(f"tensor {name!r} has {int(bad.sum())} non-finite value(s) (first "
                     f"{x[where]} at index {where}); the checkpoint is damaged")
  return x


def _safetensors(what):
  """The safetensors package (with safetensors.numpy), imported only when a checkpoint is
  read or written (el_jax's `text` extra); MissingDependency, one line naming `what`, if it
  is not installed."""
  extras.require("safetensors.numpy", what)
  return extras.require("safetensors", what)


def read_safetensors(path):
  """{name: NumPy array} of a safetensors file, BF16 tensors included (as ml_dtypes.bfloat16).

  ValueError naming the file if it is not safetensors, or naming the tensor if its
  dtype cannot be read (float8, ...).
  """
  safetensors = _safetensors(f"reading the GPT-2 weights {path}")
  try:
    with safetensors.safe_open(path, framework="numpy") as f:
      names = list(f.keys())
      kinds = {n: f.get_slice(n).get_dtype() for n in names}
      bad = [n for n in names if kinds[n] not in _READABLE]
      if not bad:
        return {n: f.get_tensor(n) for n in names}
  except (safetensors.SafetensorError, OSError, TypeError, ValueError, AttributeError) as e:
    raise ValueError(f"{path} cannot be read as safetensors ({e})") from None
  raise ValueError(f"{path}: tensor {bad[0]!r} has dtype {kinds[bad[0]]}"
                   + (f" (and {len(bad) - 1} more tensors like it)" if len(bad) > 1 else "")
                   + f"; GPT-2 weights must be stored as one of {', '.join(_FLOAT_DTYPES)}")


def params_from_hf(cfg, tensors):
  """Decoder params State of `cfg` from Hugging Face GPT-2 tensors {name: array}.

  Names may carry the `transformer.` prefix; mask buffers are skipped; a stored
  `lm_head.weight` must equal `wte.weight`. A missing, unexpected or mis-shaped
  tensor is a ValueError naming it (and the expected and found shapes).
  """
  _check_gpt2_config(cfg)
  tensors = _strip(tensors)
  template = _template(cfg)
  shapes = nnx.to_pure_dict(template)
  names = _names(cfg.num_layers)
  unexpected = sorted(set(tensors) - set(names) - {_LM_HEAD})
  if unexpected:
    found = ", ".join(f"{n!r} {tuple(np.shape(tensors[n]))}" for n in unexpected[:8])
    raise ValueError(f"unexpected tensor(s) in the GPT-2 checkpoint: {found}"
                     + (f" (and {len(unexpected) - 8} more)" if len(unexpected) > 8 else "")
                     + f"; a {cfg.num_layers}-layer GPT-2 has wte, wpe, h.0 .. "
                     f"h.{cfg.num_layers - 1} and ln_f (and the mask buffers, lm_head = wte)")
  pure = {}
  for name, path in names.items():
    want = tuple(_get(shapes, path).shape)
    if name not in tensors:
      raise ValueError(f"missing tensor {name!r} in the GPT-2 checkpoint (expected shape {want})")
    got = tuple(np.shape(tensors[name]))
    if got != want:
      raise ValueError(f"tensor {name!r} has shape {got}; expected {want}")
    _set(pure, path, jnp.asarray(_float32(name, tensors[name])))
  if _LM_HEAD in tensors:
    wte, head = _float32("wte.weight", tensors["wte.weight"]), _float32(_LM_HEAD, tensors[_LM_HEAD])
    if head.shape != wte.shape:
      raise ValueError(f"tensor {_LM_HEAD!r} has shape {head.shape}; expected {wte.shape} "
                       "(tied to wte.weight)")
    if not np.array_equal(head, wte):
      raise ValueError(f"tensor {_LM_HEAD!r} differs from wte.weight (max |difference| "
                       f"{float(np.max(np.abs(head - wte))):.3g}); el_jax's gpt2 decoder ties "
                       "the unembedding to the embedding")
  nnx.replace_by_pure_dict(template, pure)
  return template


def params_to_hf(cfg, params, prefix=PREFIX):
  """Hugging Face GPT-2 tensors {name: float32 array} of decoder params (inverse of `params_from_hf`)."""
  _check_gpt2_config(cfg)
  if prefix not in PREFIXES:
    raise ValueError(f"prefix={prefix!r}; allowed: {PREFIXES}")
  pure = params if isinstance(params, dict) else nnx.to_pure_dict(params)
  shapes = nnx.to_pure_dict(_template(cfg))
  names = _names(cfg.num_layers)
  ours = {p: n for n, p in names.items()}
  flat = {}

  def walk(tree, path):
    if isinstance(tree, dict):
      for k, v in tree.items():
        walk(v, path + (k,))
    else:
      flat[path] = tree

  walk(pure, ())
  extra = sorted("/".join(map(str, p)) for p in set(flat) - set(ours))
  if extra:
    raise ValueError(f"unexpected parameter(s) {extra[:8]} for a {cfg.num_layers}-layer gpt2 decoder")
  out = {}
  for path, name in ours.items():
    want = tuple(_get(shapes, path).shape)
    key = "/".join(map(str, path))
    if path not in flat:
      raise ValueError(f"missing parameter {key} (expected shape {want})")
    x = np.asarray(flat[path])
    if x.shape != want:
      raise ValueError(f"parameter {key} has shape {x.shape}; expected {want}")
    out[prefix + name] = np.ascontiguousarray(x, dtype=np.float32)
  return out


def load_gpt2(path):
  """Reads a Hugging Face GPT-2 checkpoint directory (config.json + model.safetensors).

  Args:
    path: the directory.

  Returns:
    (cfg, params): the `gpt2` DecoderConfig and its params State; with
    `graphdef, _ = decoder.init(cfg, 0)`, `decoder.apply(graphdef, params,
    tokens)` gives GPT-2's logits.
  """
  config_path, weights_path = (os.path.join(path, n) for n in (CONFIG_NAME, WEIGHTS_NAME))
  for p in (config_path, weights_path):
    if not os.path.isfile(p):
      raise ValueError(f"{p} not found; a GPT-2 checkpoint directory holds {CONFIG_NAME} "
                       f"and {WEIGHTS_NAME}")
  config = wd.read_json(config_path, what="a GPT-2 config")
  try:
    cfg = config_from_hf(config)
  except ValueError as e:
    raise ValueError(f"{config_path}: {e}") from None
  return cfg, params_from_hf(cfg, read_safetensors(weights_path))


def save_gpt2(path, cfg, params, prefix=PREFIX):
  """Writes `params` of a `gpt2` decoder as a Hugging Face GPT-2 checkpoint directory.

  Args:
    path: the directory (created if needed); config.json and model.safetensors
      in it are replaced atomically.
    cfg: the DecoderConfig (the `gpt2` preset; any LayerNorm epsilon, GELU
      variant and sizes).
    params: its params State (or the pure dict of it).
    prefix: "transformer." (GPT2LMHeadModel's names, the default) or "" (GPT2Model's).
  """
  tensors = params_to_hf(cfg, params, prefix)
  config = hf_config(cfg)
  safetensors = _safetensors(f"writing a GPT-2 checkpoint to {path}")
  with wd.atomic_open(os.path.join(path, WEIGHTS_NAME), binary=True) as f:
    f.write(safetensors.numpy.save(tensors, metadata={"format": "pt"}))
  wd.write_json(os.path.join(path, CONFIG_NAME), config, indent=2)


def export_run(config, workdir, out, seed=None, step=None, prefix=PREFIX):
  """Writes the parameters of a finished (or checkpointed) run of a `gpt2`-preset config
  as a Hugging Face GPT-2 checkpoint directory `out` (what `load_gpt2` and
  `model.pretrained` read), e.g. the small GPT-2 that `configs/text_lm.py` pretrains.

  Args:
    config: the run's config (its task gives the vocabulary and the context).
    workdir: the run's workdir.
    out: the checkpoint directory to write.
    seed: the model seed (default: the config's first).
    step: the checkpoint step (default: the newest).

  Returns:
    (DecoderConfig, step exported).
  """
  if config.model.preset != "gpt2":
    raise ValueError(f"model.preset={config.model.preset!r}: only 'gpt2' models are written in "
                     f"the Hugging Face GPT-2 layout")
  seed = int(config.seeds[0]) if seed is None else int(seed)
  # The vocabulary and context (the task's) from the checkpoint's shapes: no data is built.
  step, shapes = checkpoint.param_shapes(workdir, seed, step)
  shapes = {k.removesuffix(".value"): v for k, v in shapes.items()}  # nnx.Param leaves
  if "embed.embedding" not in shapes or "pos_embed" not in shapes:
    raise ValueError(f"{workdir} (step {step}) is not a run of a 'gpt2'-preset decoder "
                     f"(no embed.embedding / pos_embed parameters)")
  cfg = decoder.config_from(config.model, shapes["embed.embedding"][0], shapes["pos_embed"][0])
  abstract = jax.eval_shape(lambda: decoder.init(cfg, 0)[1])
  here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  params, step = checkpoint.load_params_from(workdir, seed, abstract, here, step)
  save_gpt2(out, cfg, params, prefix=prefix)
  return cfg, step
