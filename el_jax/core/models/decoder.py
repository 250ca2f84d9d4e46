"""A small causal transformer decoder in Flax NNX, used functionally.

The presets cover the architectures of the papers el_jax reproduces:

* ``gpt_neox``: rotary positions, parallel attention + MLP residual
  (``x + attn(ln1(x)) + mlp(ln2(x))``), untied input/output embeddings;
  the model of the copy-task experiments (seed 000).
* ``gpt2``: learned absolute positions, sequential residual, tied
  embeddings; nanoGPT / GPT-mini of the path-star experiments. With
  ``layer_norm_eps=1e-5`` it is exactly Hugging Face's GPT-2
  (``el_jax.core.models.pretrained.load_gpt2`` / ``save_gpt2``).
* ``encoder``: the bidirectional (BERT-style, pre-LN, tied) transformer
  of seed 002's masked-LM experiments.
* ``bilstm``: not a transformer: bidirectional LSTM layers
  (``el_jax.core.models.lstm``), the model seed 002 trains on its HMM data.

Every field can be set on its own. Packed strings attend to earlier strings
in the same context (as in the paper) unless ``doc_mask`` is on, in which
case ``segment_ids`` restrict attention to the same string.

Functional use: ``graphdef, params = init(cfg, seed)`` once, then
``apply(graphdef, params, tokens)`` inside pure jitted code (``nnx.merge``
happens inside the trace, so it costs nothing at run time).
"""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from el_jax.core.models import lstm

POSITIONS = ("rotary", "learned")
# MLP nonlinearities: "gelu_tanh" is the tanh approximation (GPT-2's "gelu_new"),
# "gelu_exact" the erf form (Hugging Face "gelu").
ACTIVATIONS = ("gelu_tanh", "gelu_exact")
PRESETS = ("gpt_neox", "gpt2", "encoder", "bilstm")
# "transformer" (the Decoder below) | "bilstm" (el_jax.core.models.lstm: seed 002's HMM model)
ARCHS = ("transformer", "bilstm")
# The std of every normal initialisation of the transformer (embeddings, positions, QKV, MLP in;
# the output projections get it / sqrt(2 * layers)): GPT-2's 0.02, every committed result's.
DEFAULT_INIT_STD = 0.02


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  vocab_size: int
  num_layers: int = 4
  num_heads: int = 4
  embed_dim: int = 128
  mlp_dim: int = 512
  max_len: int = 2048
  position: str = "rotary"  # "rotary" | "learned"
  parallel_residual: bool = True  # GPT-NeoX style x + attn(ln1 x) + mlp(ln2 x)
  tie_embeddings: bool = False  # GPT-2 ties the unembedding to the embedding
  doc_mask: bool = False  # restrict attention to tokens of the same segment
  causal: bool = True  # False: bidirectional attention (an encoder, e.g. for masked LM)
  rotary_base: float = 10000.0
  init_std: float = DEFAULT_INIT_STD
  # compute dtype: "float32" | "bfloat16" (mixed precision: every matmul -- QKV, attention,
  # output projection, MLP, unembedding -- in bf16 with float32 weights, float32 residual
  # stream, LayerNorms, softmax, logits and loss)
  dtype: str = "float32"
  layer_norm_eps: float = 1e-6  # LayerNorm epsilon (Flax's default; GPT-2 checkpoints use 1e-5)
  activation: str = "gelu_tanh"  # MLP nonlinearity, one of ACTIVATIONS
  # How causal self-attention is computed (not what): 1 = one einsum over every query and key
  # (every committed result); n > 1 = the queries in n contiguous blocks, each block against
  # the keys up to its own end only (the rest are masked anyway), head-major: the same
  # function up to float rounding with fewer FLOPs (`train.attention_blocks`, docs/bench.md).
  attention_blocks: int = 1
  # "transformer" | "bilstm": bidirectional LSTM layers of width embed_dim (el_jax.core.models.lstm;
  # the attention, MLP and position fields are then unused)
  arch: str = "transformer"

  def __post_init__(self):
    if self.arch not in ARCHS:
      raise ValueError(f"model arch={self.arch!r}; allowed: {ARCHS}")
    if self.position not in POSITIONS:
      raise ValueError(f"model.position={self.position!r}; allowed: {POSITIONS}")
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"model.dtype={self.dtype!r}; allowed: 'float32', 'bfloat16'")
    if self.activation not in ACTIVATIONS:
      raise ValueError(f"model.activation={self.activation!r}; allowed: {ACTIVATIONS}")
    if (isinstance(self.layer_norm_eps, bool) or not isinstance(self.layer_norm_eps, (int, float))
        or not self.layer_norm_eps > 0):
      raise ValueError(f"model.layer_norm_eps={self.layer_norm_eps!r} must be a number > 0")
    for name in ("vocab_size", "num_layers", "num_heads", "embed_dim", "mlp_dim", "max_len"):
      if int(getattr(self, name)) < 1:
        raise ValueError(f"model.{name}={getattr(self, name)} must be >= 1")
    if self.arch == "bilstm":  # no attention: its fields are unused
      return
    if self.embed_dim % self.num_heads:
      raise ValueError(f"model.embed_dim={self.embed_dim} is not divisible by "
                       f"model.num_heads={self.num_heads}")
    if (isinstance(self.attention_blocks, bool) or not isinstance(self.attention_blocks, int)
        or self.attention_blocks < 1):
      raise ValueError(f"attention_blocks={self.attention_blocks!r} must be an integer >= 1")
    if self.position == "rotary" and (self.embed_dim // self.num_heads) % 2:
      raise ValueError(f"rotary positions need an even head dim; got "
                       f"{self.embed_dim}/{self.num_heads}={self.embed_dim // self.num_heads}")

  @property
  def feature_dim(self):
    """Width of `features` (what probes read): embed_dim, or 2 * embed_dim for the bilstm's
    concatenated forward and backward states."""
    return 2 * self.embed_dim if self.arch == "bilstm" else self.embed_dim

  @property
  def head_dim(self):
    return self.embed_dim // self.num_heads

  @property
  def compute_dtype(self):
    return jnp.bfloat16 if self.dtype == "bfloat16" else jnp.float32

  @property
  def matmul_dtype(self):
    """The `dtype` of the model's nnx.Linear layers: bfloat16 (inputs and float32 weights cast
    to bf16 for the matmul, bf16 out) under mixed precision, else None (Flax's own float32)."""
    return jnp.bfloat16 if self.dtype == "bfloat16" else None


def validate_model_config(m):
  """Checks config.model (preset, sizes, heads, dtype) before any data is built: ValueError."""
  if m.preset not in PRESETS:
    raise ValueError(f"unknown model preset {m.preset!r}; valid presets: {PRESETS}")
  for name in ("num_layers", "num_heads", "embed_dim", "mlp_dim"):
    v = m[name]
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
      raise ValueError(f"model.{name}={v!r} must be an integer")
  if m.mlp_dim < 0:
    raise ValueError(f"model.mlp_dim={m.mlp_dim} must be >= 1 (or 0 = 4 * embed_dim)")
  std = _init_std(m)
  if (isinstance(std, bool) or not isinstance(std, (int, float, np.floating))
      or not 0 < std < float("inf")):
    raise ValueError(f"model.init_std={std!r} must be a finite number > 0 (the std of the "
                     f"transformer's normal initialisation; default {DEFAULT_INIT_STD})")
  if m.preset == "bilstm" and std != DEFAULT_INIT_STD:
    raise ValueError(f"model.init_std={std!r} is the transformer's initialisation; the bilstm "
                     f"uses PyTorch's (N(0, 1) word vectors): leave it at {DEFAULT_INIT_STD}")
  preset(m.preset, vocab_size=1, num_layers=m.num_layers, num_heads=m.num_heads,
         embed_dim=m.embed_dim, mlp_dim=m.mlp_dim or 4 * m.embed_dim, max_len=1,
         doc_mask=m.doc_mask, dtype=m.dtype, init_std=float(std))


def _init_std(m):
  """`model.init_std` of a config's model block; blocks without the field (every task but the
  MLM's) keep the DecoderConfig default."""
  return m.get("init_std", DEFAULT_INIT_STD) if hasattr(m, "get") else DEFAULT_INIT_STD


def config_from(m, vocab_size, max_len):
  """The DecoderConfig of a config's `model` block for a vocabulary and a context length."""
  return preset(m.preset, vocab_size=vocab_size, num_layers=m.num_layers, num_heads=m.num_heads,
                embed_dim=m.embed_dim, mlp_dim=m.mlp_dim or 4 * m.embed_dim, max_len=max_len,
                doc_mask=m.doc_mask, dtype=m.dtype, init_std=float(_init_std(m)))


def preset(name, **overrides):
  """Architecture presets; any DecoderConfig field may be overridden."""
  if name == "gpt_neox":
    base = dict(position="rotary", parallel_residual=True, tie_embeddings=False)
  elif name == "gpt2":
    base = dict(position="learned", parallel_residual=False, tie_embeddings=True)
  elif name == "encoder":  # BERT-style bidirectional encoder (pre-LN, learned positions, tied)
    base = dict(position="learned", parallel_residual=False, tie_embeddings=True, causal=False)
  elif name == "bilstm":  # bidirectional LSTM layers, untied unembedding (el_jax.core.models.lstm)
    base = dict(arch="bilstm", tie_embeddings=False, causal=False)
  else:
    raise ValueError(f"unknown model preset {name!r}; valid presets: {PRESETS}")
  base.update(overrides)
  return DecoderConfig(**base)


def _normal(std):
  return nnx.initializers.normal(stddev=std)


def rotary(x_BxTxHxK, positions_T, base):
  """Rotary position embedding, GPT-NeoX "rotate half" convention."""
  k = x_BxTxHxK.shape[-1]
  inv_freq = 1.0 / (base ** (jnp.arange(0, k, 2, dtype=jnp.float32) / k))
  ang_TxK2 = positions_T.astype(jnp.float32)[:, None] * inv_freq[None, :]
  cos = jnp.concatenate([jnp.cos(ang_TxK2)] * 2, axis=-1)[None, :, None, :]
  sin = jnp.concatenate([jnp.sin(ang_TxK2)] * 2, axis=-1)[None, :, None, :]
  x1, x2 = jnp.split(x_BxTxHxK, 2, axis=-1)
  rot = jnp.concatenate([-x2, x1], axis=-1)
  return (x_BxTxHxK * cos.astype(x_BxTxHxK.dtype) + rot * sin.astype(x_BxTxHxK.dtype))


class Attention(nnx.Module):

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d = cfg.embed_dim
    out_std = cfg.init_std / math.sqrt(2 * cfg.num_layers)
    self.qkv = nnx.Linear(d, 3 * d, kernel_init=_normal(cfg.init_std), dtype=cfg.matmul_dtype,
                          rngs=rngs)
    self.out = nnx.Linear(d, d, kernel_init=_normal(out_std), dtype=cfg.matmul_dtype, rngs=rngs)

  def __call__(self, x_BxTxD, mask_BxTxT, query_positions_P=None):
    """Causal self-attention; with `query_positions_P` only those queries.

    Keys and values always cover all T positions; the output is `[B, T, D]`,
    or `[B, P, D]` for the P static query positions.
    """
    cfg = self.cfg
    b, t, _ = x_BxTxD.shape
    q, k, v, mask_BxTxT = self.heads(x_BxTxD, mask_BxTxT, query_positions_P)
    if cfg.attention_blocks > 1 and cfg.causal and query_positions_P is None and t > 1:
      y = self.attend_blocked(q, k, v, mask_BxTxT, cfg.attention_blocks)
    else:
      y = self.attend(q, k, v, mask_BxTxT)
    return self.out(y.reshape(b, q.shape[1], cfg.embed_dim))

  def heads(self, x_BxTxD, mask_BxTxT, query_positions_P=None):
    """(q `[B, Q, H, K]`, k, v `[B, T, H, K]`, the mask `[B, Q, T]`): the projections, at the
    Q query positions (all T, or `query_positions_P`), with rotary positions applied."""
    cfg = self.cfg
    b, t, _ = x_BxTxD.shape
    qkv = self.qkv(x_BxTxD).astype(cfg.compute_dtype).reshape(b, t, 3, cfg.num_heads,
                                                               cfg.head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    pos = jnp.arange(t)
    if query_positions_P is not None:
      pos_q = jnp.asarray(query_positions_P)
      q = q[:, pos_q]
      mask_BxTxT = mask_BxTxT[:, pos_q]
    else:
      pos_q = pos
    if cfg.position == "rotary":
      q = rotary(q, pos_q, cfg.rotary_base)
      k = rotary(k, pos, cfg.rotary_base)
    return q, k, v, mask_BxTxT

  def probs(self, x_BxTxD, mask_BxTxT):
    """The attention weights `[B, H, T, T]` (query, key) of input `x` (after the block's
    LayerNorm), float32: what `__call__` averages the values with."""
    q, k, _, mask_BxTxT = self.heads(x_BxTxD, mask_BxTxT)
    return self.softmax_scores(q, k, mask_BxTxT)

  def softmax_scores(self, q_BxQxHxK, k_BxTxHxK, mask_BxQxT):
    """softmax(q k^T / sqrt(K), masked) `[B, H, Q, T]` (scores and softmax in float32)."""
    dt = self.cfg.compute_dtype
    scores = (jnp.einsum("bqhk,bshk->bhqs", q_BxQxHxK, k_BxTxHxK)
              / jnp.asarray(math.sqrt(self.cfg.head_dim), dt))
    scores = jnp.where(mask_BxQxT[:, None], scores.astype(jnp.float32), -1e30)
    return jax.nn.softmax(scores, axis=-1)

  def attend_blocked(self, q_BxTxHxK, k_BxTxHxK, v_BxTxHxK, mask_BxTxT, blocks):
    """`attend` of causal attention with every query (Q = T), in `blocks` contiguous query
    blocks: the block of queries [a, e) against the keys [0, e) only, since its queries
    attend to no later key (the causal mask, and-ed with any document mask, is False there).
    Head-major ([B, H, T, K]) einsums. Equal to `attend` up to float rounding (the masked
    scores' softmax weights are exactly 0 there, so only the order of the sums differs);
    [B, T, H, K] out."""
    dt = self.cfg.compute_dtype
    t = q_BxTxHxK.shape[1]
    n = min(blocks, t)
    edges = [round(i * t / n) for i in range(n + 1)]
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q_BxTxHxK, k_BxTxHxK, v_BxTxHxK))
    scale = jnp.asarray(math.sqrt(self.cfg.head_dim), dt)
    outs = []
    for a, e in zip(edges[:-1], edges[1:]):
      scores = jnp.einsum("bhqk,bhsk->bhqs", q[:, :, a:e], k[:, :, :e]) / scale
      scores = jnp.where(mask_BxTxT[:, None, a:e, :e], scores.astype(jnp.float32), -1e30)
      probs = jax.nn.softmax(scores, axis=-1).astype(dt)
      outs.append(jnp.einsum("bhqs,bhsk->bhqk", probs, v[:, :, :e]))
    return jnp.concatenate(outs, axis=2).transpose(0, 2, 1, 3)

  def attend(self, q_BxQxHxK, k_BxTxHxK, v_BxTxHxK, mask_BxQxT):
    """softmax(q k^T / sqrt(K), masked) v -> `[B, Q, H, K]` (scores and softmax in float32)."""
    probs = self.softmax_scores(q_BxQxHxK, k_BxTxHxK, mask_BxQxT).astype(self.cfg.compute_dtype)
    return jnp.einsum("bhqs,bshk->bqhk", probs, v_BxTxHxK)


class MLP(nnx.Module):

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs):
    out_std = cfg.init_std / math.sqrt(2 * cfg.num_layers)
    self.approximate = cfg.activation == "gelu_tanh"
    self.fc_in = nnx.Linear(cfg.embed_dim, cfg.mlp_dim, kernel_init=_normal(cfg.init_std),
                            dtype=cfg.matmul_dtype, rngs=rngs)
    self.fc_out = nnx.Linear(cfg.mlp_dim, cfg.embed_dim, kernel_init=_normal(out_std),
                             dtype=cfg.matmul_dtype, rngs=rngs)

  def __call__(self, x):
    return self.fc_out(jax.nn.gelu(self.fc_in(x), approximate=self.approximate))


class Block(nnx.Module):

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs):
    self.parallel = cfg.parallel_residual
    self.ln1 = nnx.LayerNorm(cfg.embed_dim, epsilon=cfg.layer_norm_eps, rngs=rngs)
    self.attn = Attention(cfg, rngs=rngs)
    self.ln2 = nnx.LayerNorm(cfg.embed_dim, epsilon=cfg.layer_norm_eps, rngs=rngs)
    self.mlp = MLP(cfg, rngs=rngs)

  def __call__(self, x, mask, query_positions_P=None):
    """`[B, T, D] -> [B, T, D]`, or `[B, P, D]` at static `query_positions_P`."""
    x_q = x if query_positions_P is None else x[:, jnp.asarray(query_positions_P)]
    if self.parallel:
      return x_q + self.attn(self.ln1(x), mask, query_positions_P) + self.mlp(self.ln2(x_q))
    x_q = x_q + self.attn(self.ln1(x), mask, query_positions_P)
    return x_q + self.mlp(self.ln2(x_q))


class Decoder(nnx.Module):
  """Transformer: tokens [B, T] -> logits [B, T, V] (float32); causal unless `cfg.causal=False`."""

  def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.embed = nnx.Embed(cfg.vocab_size, cfg.embed_dim, embedding_init=_normal(cfg.init_std), rngs=rngs)
    if cfg.position == "learned":
      self.pos_embed = nnx.Param(_normal(cfg.init_std)(rngs.params(), (cfg.max_len, cfg.embed_dim)))
    self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
    self.ln_f = nnx.LayerNorm(cfg.embed_dim, epsilon=cfg.layer_norm_eps, rngs=rngs)
    if not cfg.tie_embeddings:
      self.unembed = nnx.Linear(cfg.embed_dim, cfg.vocab_size, use_bias=False,
                                kernel_init=_normal(cfg.init_std), dtype=cfg.matmul_dtype,
                                rngs=rngs)

  def features(self, tokens_BxT, segment_ids_BxT=None, positions_P=None):
    """The final hidden states (after the last LayerNorm): `[B, T, D]` (or `[B, P, D]`)."""
    return self.ln_f(self._residual(tokens_BxT, segment_ids_BxT, positions_P))

  def hidden_states(self, tokens_BxT, segment_ids_BxT=None):
    """The residual stream after the embeddings and after each block: a list of
    `num_layers + 1` arrays `[B, T, D]` (the last one before the final LayerNorm, which
    `features` applies)."""
    out = []
    self._residual(tokens_BxT, segment_ids_BxT, None, out)
    return out

  def attention_probs(self, tokens_BxT, segment_ids_BxT=None):
    """Every block's attention weights: a list of `num_layers` arrays `[B, H, T, T]` (query,
    key), float32, each from that block's input (the residual stream of `hidden_states`)."""
    states = self.hidden_states(tokens_BxT, segment_ids_BxT)
    mask = self._mask(tokens_BxT, segment_ids_BxT)
    return [block.attn.probs(block.ln1(x), mask) for block, x in zip(self.blocks, states)]

  def _mask(self, tokens_BxT, segment_ids_BxT):
    """`[B or 1, T, T]` bool: which key each query may attend to (causal, document)."""
    t = tokens_BxT.shape[1]
    mask_BxTxT = (jnp.tril(jnp.ones((t, t), dtype=bool)) if self.cfg.causal
                  else jnp.ones((t, t), dtype=bool))[None]
    if self.cfg.doc_mask:
      if segment_ids_BxT is None:
        raise ValueError("model.doc_mask=True needs segment_ids")
      same = segment_ids_BxT[:, :, None] == segment_ids_BxT[:, None, :]
      mask_BxTxT = jnp.logical_and(mask_BxTxT, same)
    return mask_BxTxT

  def _residual(self, tokens_BxT, segment_ids_BxT, positions_P, states=None):
    cfg = self.cfg
    _, t = tokens_BxT.shape
    if t > cfg.max_len:
      raise ValueError(f"sequence length {t} exceeds model.max_len={cfg.max_len}")
    x = self.embed(tokens_BxT)
    if cfg.position == "learned":
      x = x + self.pos_embed[...][None, :t]
    mask_BxTxT = self._mask(tokens_BxT, segment_ids_BxT)
    if states is not None:
      states.append(x)
    for i, block in enumerate(self.blocks):
      last = i == len(self.blocks) - 1
      x = block(x, mask_BxTxT, positions_P if last else None)
      if states is not None:
        states.append(x)
    return x

  def __call__(self, tokens_BxT, segment_ids_BxT=None, positions_P=None):
    """Logits `[B, T, V]`, or `[B, P, V]` at the static `positions_P` only.

    `positions_P` (a static int array, e.g. the scored positions of a task)
    gives the same logits as `logits[:, positions_P]` up to float rounding
    without computing the last block's queries, MLP and the unembedding at
    the other positions.
    """
    cfg = self.cfg
    x = self.features(tokens_BxT, segment_ids_BxT, positions_P)
    if cfg.tie_embeddings and cfg.matmul_dtype is not None:  # bf16 matmul, float32 table
      dt = cfg.matmul_dtype
      logits = jnp.einsum("...d,vd->...v", x.astype(dt), self.embed.embedding[...].astype(dt))
    elif cfg.tie_embeddings:
      logits = self.embed.attend(x)
    else:
      logits = self.unembed(x)
    return logits.astype(jnp.float32)


def module_class(cfg: DecoderConfig):
  """The NNX module `cfg` builds: `Decoder`, or `lstm.BiLSTM` for `arch == "bilstm"`."""
  return lstm.BiLSTM if cfg.arch == "bilstm" else Decoder


def init(cfg: DecoderConfig, seed: int):
  """Returns (graphdef, params): the static structure and the Param pytree."""
  key = seed if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key) \
      else jax.random.key(seed)
  model = module_class(cfg)(cfg, rngs=nnx.Rngs(params=key))
  graphdef, params = nnx.split(model, nnx.Param)
  return graphdef, params


def apply(graphdef, params, tokens_BxT, segment_ids_BxT=None, positions_P=None):
  """Pure forward pass over a params pytree (see `Decoder.__call__`)."""
  return nnx.merge(graphdef, params)(tokens_BxT, segment_ids_BxT, positions_P)


def features(graphdef, params, tokens_BxT, segment_ids_BxT=None, layer=None):
  """Pure final hidden states `[B, T, D]` (the representation probes read); with `layer` the
  transformer's residual stream after `layer` blocks (0: the embeddings; no LayerNorm)."""
  model = nnx.merge(graphdef, params)
  if layer is None:
    return model.features(tokens_BxT, segment_ids_BxT)
  if not isinstance(model, Decoder):
    raise ValueError(f"layer={layer}: per-layer states are the transformer's (preset "
                     f"'encoder' / 'gpt2' / ...), not {type(model).__name__}'s")
  if not 0 <= layer <= model.cfg.num_layers:
    raise ValueError(f"layer={layer} must be in 0..{model.cfg.num_layers} (0: the embeddings, "
                     f"k: after block k)")
  return model.hidden_states(tokens_BxT, segment_ids_BxT)[layer]


def num_params(params):
  """Number of scalars in a pytree of arrays or ShapeDtypeStructs (shapes only)."""
  return sum(int(np.prod(np.shape(x), dtype=np.int64)) for x in jax.tree.leaves(params))


def attention_probs(graphdef, params, tokens_BxT, segment_ids_BxT=None):
  """Pure per-block attention weights: a list of `num_layers` arrays `[B, H, T, T]` (query,
  key) of the transformer (`Decoder.attention_probs`)."""
  model = nnx.merge(graphdef, params)
  if not isinstance(model, Decoder):
    raise ValueError(f"attention weights are the transformer's (preset 'encoder' / 'gpt2' / "
                     f"...), not {type(model).__name__}'s")
  return model.attention_probs(tokens_BxT, segment_ids_BxT)
