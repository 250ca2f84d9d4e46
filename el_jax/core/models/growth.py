"""Function-preserving growth of transformers (seed 002, appendix B.4).

A small model is embedded into a larger one with identical outputs, so that
Tr(H) of models of different sizes can be compared in one parameterisation.

Widening by an integer factor r replicates the residual stream r times:
x' = [x, x, ..., x] (block tiling). Replication keeps the mean and variance
over the feature axis, so every LayerNorm with tiled scale and bias outputs the
tiled normalised vector; the LayerNorm epsilon is unaffected, and it does not
matter whether the norm sits before (pre-LN) or after (post-LN, BERT) the
residual add. Each linear map that reads the stream divides its weights by r
(r identical copies are summed), every map that writes the stream tiles its
outputs. Attention grows by r times as many heads of the same head dimension
(head h' = c H + h copies head h), so scores, rotary phases and the softmax
scale are unchanged. The MLP hidden layer may grow by its own factor r_m (the
map out of it divides by r_m). With tied embeddings the unembedding is the
tiled embedding, which would multiply the logits by r: the final LayerNorm's
scale and bias are divided by r instead. All of this is exact in real
arithmetic; in floating point the logits agree to rounding (~1e-6 relative in
float32, a sum of r copies is taken in a different order).

Deepening appends residual blocks whose output projections (attention out and
MLP out, kernel and bias) are zero, so each new block is the identity; the
rest of the new block is zero too except LayerNorm scales (one), as in the
paper ("fill in zeros to the added parameters"). This is exact only for
pre-LN blocks (x + f(LN(x)), both decoder presets): a post-LN block
LN(x + f(x)) renormalises the stream even when f = 0, so a post-LN encoder
(BERT) can be widened exactly but not deepened this way (tested).

The functions on pure dicts (`widen_tree`, `deepen_tree`) take a `roles` map
from leaf path to the leaf's role in the block structure, so any transformer
with the same layout (e.g. an MLM encoder: separate q/k/v, post-LN, an
embedding LayerNorm) can reuse them; `decoder_roles` is the map for
`el_jax.core.models.decoder`. `widen` / `deepen` / `grow` work on (DecoderConfig,
params State).
"""
import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from el_jax.core.models import decoder

# Roles of leaves (see `widen_tree`).
STREAM = "stream"  # last axis is the residual stream: tile (embeddings, norms, biases into the stream)
STREAM_NORM_TIED = "stream_norm_tied"  # final norm before a tied unembedding: tile, then / r
HEADS_IN_KERNEL = "heads_in_kernel"  # [D, n*H*K] (n = 3 fused qkv, 1 separate): / r, tile heads
HEADS_IN_BIAS = "heads_in_bias"  # [n*H*K]: tile heads
HEADS_OUT_KERNEL = "heads_out_kernel"  # [H*K, D]: tile both axes, / r
MLP_IN_KERNEL = "mlp_in_kernel"  # [D, M]: tile, / r
MLP_IN_BIAS = "mlp_in_bias"  # [M]: tile by r_m
MLP_OUT_KERNEL = "mlp_out_kernel"  # [M, D]: tile, / r_m
VOCAB_OUT_KERNEL = "vocab_out_kernel"  # [D, V]: tile, / r
ROLES = (STREAM, STREAM_NORM_TIED, HEADS_IN_KERNEL, HEADS_IN_BIAS, HEADS_OUT_KERNEL,
         MLP_IN_KERNEL, MLP_IN_BIAS, MLP_OUT_KERNEL, VOCAB_OUT_KERNEL)


def _tile(x, axis, r):
  return jnp.concatenate([x] * r, axis=axis) if r > 1 else x


def _paths(tree):
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return [tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path) for path, _ in flat]


def widen_tree(pure, roles, *, r, r_mlp, num_heads, num_qkv):
  """Widens a pure-dict params tree leaf by leaf.

  Args:
    pure: nested dict of arrays (e.g. `nnx.to_pure_dict(params)`).
    roles: dict leaf path (tuple of keys) -> role (one of ROLES); every leaf
      must have a role.
    r: integer width factor of the residual stream and of the number of heads.
    r_mlp: integer factor of the MLP hidden width.
    num_heads: heads of the small model.
    num_qkv: number of head groups in a heads_in map (3 for a fused qkv).

  Returns:
    The widened nested dict.
  """

  def grow(path, x):
    role = roles.get(path)
    if role is None:
      raise ValueError(f"no growth role for parameter {'/'.join(map(str, path))}")
    if role == STREAM:
      return _tile(x, -1, r)
    if role == STREAM_NORM_TIED:
      return _tile(x, -1, r) / r
    if role == HEADS_IN_KERNEL:
      d = x.shape[0]
      x = x.reshape(d, num_qkv, num_heads, -1)
      return _tile(_tile(x, 2, r), 0, r).reshape(r * d, -1) / r
    if role == HEADS_IN_BIAS:
      return _tile(x.reshape(num_qkv, num_heads, -1), 1, r).reshape(-1)
    if role == HEADS_OUT_KERNEL:
      return _tile(_tile(x, 0, r), 1, r) / r
    if role == MLP_IN_KERNEL:
      return _tile(_tile(x, 0, r), 1, r_mlp) / r
    if role == MLP_IN_BIAS:
      return _tile(x, 0, r_mlp)
    if role == MLP_OUT_KERNEL:
      return _tile(_tile(x, 0, r_mlp), 1, r) / r_mlp
    if role == VOCAB_OUT_KERNEL:
      return _tile(x, 0, r) / r
    raise ValueError(f"unknown growth role {role!r}; valid: {ROLES}")

  return jax.tree_util.tree_map_with_path(
      lambda p, x: grow(tuple(getattr(k, "key", getattr(k, "idx", k)) for k in p), x), pure)


def zero_block_like(block):
  """An identity residual block: zeros everywhere, LayerNorm scales one."""
  return jax.tree_util.tree_map_with_path(
      lambda p, x: jnp.ones_like(x) if getattr(p[-1], "key", None) == "scale" else jnp.zeros_like(x),
      block)


def deepen_tree(pure, *, num_new, blocks_key="blocks"):
  """Appends `num_new` identity blocks after the last one of `pure[blocks_key]`."""
  blocks = dict(pure[blocks_key])
  n = len(blocks)
  if sorted(blocks) != list(range(n)):
    raise ValueError(f"{blocks_key} must be keyed 0..{n - 1}, got {sorted(blocks)}")
  for i in range(num_new):
    blocks[n + i] = zero_block_like(blocks[n - 1])
  return {**pure, blocks_key: blocks}


def decoder_roles(cfg, pure):
  """Growth roles of every leaf of an `el_jax.core.models.decoder` params tree."""
  roles = {}
  for path in _paths(pure):
    top, last = path[0], path[-1]
    if top == "blocks":
      sub = path[2:-1]
      if sub == ("attn", "qkv"):
        role = HEADS_IN_KERNEL if last == "kernel" else HEADS_IN_BIAS
      elif sub == ("attn", "out"):
        role = HEADS_OUT_KERNEL if last == "kernel" else STREAM
      elif sub == ("mlp", "fc_in"):
        role = MLP_IN_KERNEL if last == "kernel" else MLP_IN_BIAS
      elif sub == ("mlp", "fc_out"):
        role = MLP_OUT_KERNEL if last == "kernel" else STREAM
      elif sub in (("ln1",), ("ln2",)):
        role = STREAM
      else:
        role = None
    elif top in ("embed", "pos_embed"):
      role = STREAM
    elif top == "ln_f":
      role = STREAM_NORM_TIED if cfg.tie_embeddings else STREAM
    elif top == "unembed":
      role = VOCAB_OUT_KERNEL
    else:
      role = None
    if role is None:
      raise ValueError(f"decoder_roles: unexpected parameter {'/'.join(map(str, path))}")
    roles[path] = role
  return roles


def _to_state(cfg, pure):
  _, template = decoder.init(cfg, 0)
  nnx.replace_by_pure_dict(template, pure)
  return template


def _check_transformer(cfg):
  if cfg.arch != "transformer":
    raise ValueError(f"function-preserving growth is built for the transformer presets; this model "
                     f"is arch={cfg.arch!r} (model.preset 'bilstm' has no growth map)")


def _factor(big, small, name):
  if big % small:
    raise ValueError(f"{name}: {big} is not a multiple of {small}; function-preserving "
                     "widening needs an integer factor (use the least common multiple)")
  return big // small


def widen(cfg, params, *, factor, mlp_factor=None):
  """Widens a decoder by `factor` (embed_dim, num_heads) and `mlp_factor` (mlp_dim).

  Returns (bigger_cfg, bigger_params) with the same logits (to float rounding).
  """
  _check_transformer(cfg)
  mlp_factor = factor if mlp_factor is None else mlp_factor
  for name, f in (("factor", factor), ("mlp_factor", mlp_factor)):
    if not isinstance(f, int) or f < 1:
      raise ValueError(f"{name} must be an integer >= 1, got {f!r}")
  big = dataclasses.replace(cfg, embed_dim=factor * cfg.embed_dim,
                            num_heads=factor * cfg.num_heads, mlp_dim=mlp_factor * cfg.mlp_dim)
  pure = nnx.to_pure_dict(params)
  pure = widen_tree(pure, decoder_roles(cfg, pure), r=factor, r_mlp=mlp_factor,
                    num_heads=cfg.num_heads, num_qkv=3)
  return big, _to_state(big, pure)


def deepen(cfg, params, *, num_layers):
  """Appends identity blocks up to `num_layers`; returns (bigger_cfg, bigger_params)."""
  _check_transformer(cfg)
  if num_layers < cfg.num_layers:
    raise ValueError(f"num_layers={num_layers} < current {cfg.num_layers}")
  big = dataclasses.replace(cfg, num_layers=num_layers)
  pure = deepen_tree(nnx.to_pure_dict(params), num_new=num_layers - cfg.num_layers)
  return big, _to_state(big, pure)


def grow(cfg, params, target):
  """Embeds (cfg, params) into the larger DecoderConfig `target` with identical logits.

  `target` must differ from `cfg` only in embed_dim, num_heads (same integer
  factor, so the head dim is kept), mlp_dim (integer factor) and num_layers
  (>= the current one). Returns (target, params of target).
  """
  _check_transformer(cfg)
  r = _factor(target.embed_dim, cfg.embed_dim, "embed_dim")
  if target.num_heads != r * cfg.num_heads:
    raise ValueError(f"num_heads must grow with embed_dim (same head dim): expected "
                     f"{r * cfg.num_heads}, got {target.num_heads}")
  r_mlp = _factor(target.mlp_dim, cfg.mlp_dim, "mlp_dim")
  same = dataclasses.replace(target, embed_dim=cfg.embed_dim, num_heads=cfg.num_heads,
                             mlp_dim=cfg.mlp_dim, num_layers=cfg.num_layers)
  if same != cfg:
    raise ValueError(f"grow changes only widths and depth; other fields differ: {same} vs {cfg}")
  cfg, params = widen(cfg, params, factor=r, mlp_factor=r_mlp)
  cfg, params = deepen(cfg, params, num_layers=target.num_layers)
  assert cfg == target
  return cfg, params
