r"""The LM-sampled language of seed paper 002: sentences of a decoder restricted to its top-K tokens.

  from el_jax.core.data import lm_language
  lang = lm_language.language(config.data)           # LMLanguage: generator + top-K vocabulary
  tokens = lang.sample(1000, seed=[0, 1])            # [1000, n] int32 terminal ids 0..K-1
  cond = lang.mlm_conditionals(tokens, positions)    # [1000, K] exact p(x_i = . | x_-i)
  lang.mlm_optimum(tokens, positions)                # mean entropy: the optimal MLM loss there

The paper (Sec. 3.1, App. A.1): "We use the 125M OPT model to generate the training
dataset ... select only from the top-2000 tokens in the vocabulary. Starting from the bos
token, we sample every token of the sentence from the predicted autoregressive LM
probability. The sentence length is restricted to 24", and the MLM conditionals come
from the joint probability, p(x) = prod_i p_LM(x_i | bos, x_<i). Here:

  generator  any decoder el_jax loads: a Hugging Face GPT-2 checkpoint directory
             (`el_jax.core.models.pretrained.load_gpt2`; `export_run` writes el_jax runs in that
             layout, e.g. the small GPT-2 of experiments/label_copy/), or "tiny-random",
             a random tiny GPT-2 made in memory (`tiny_random_gpt2`, for tests). el_jax
             cannot load OPT (another architecture and checkpoint format); the released
             GPT-2 124M is the nearest model it loads.
  top-K      the set R of K generator ids the language may use (terminal j is generator
             id `vocab_ids[j]`). The paper's "top-2000 most frequent tokens in the OPT
             vocabulary" does not say frequent in what. OPT's ids follow its fairseq
             dictionary, which (as RoBERTa's: "." = 4, " the" = 5, "," = 6) lists tokens
             by their count in the corpus it was built on, so its "top-2000 most
             frequent" is most likely ids 0..1999 (`top_k_by="id"`). GPT-2's
             ids are in BPE merge order (256 byte symbols first), not by frequency, and its
             training corpus is not available here, so the default (`top_k_by="generator"`)
             measures the frequency in the generator's own language: the expected count of
             each token per position in `top_k_samples` unrestricted sentences of the same
             length from bos (the sum of the sampled sentences' next-token distributions,
             not of the drawn tokens: less noise). Ranked by that frequency, ties by id;
             the bos token is never in R (it starts every sentence). Terminal ids follow
             the rank (terminal 0 = the most frequent).
  sampling   x_i ~ p_R(. | bos, x_<i) = softmax of the generator's logits over R (the
             logits outside R are dropped, the rest renormalised: "process the logit ...
             to select only from the top-2000 tokens"), for i = 1..n, n = `length`.
             Jitted, in batches of `sample_batch` rows with a key / value cache (one forward step
             per token), by the inverse CDF of p_R with one uniform per token; row r of a
             stream with seed s draws from the key fold_in(key(s), r), so the corpus does
             not depend on the batch size (up to float rounding of the logits).
  exact      p(x_i = v | x_-i) = p_R(x with x_i = v) / sum_w p_R(x with x_i = w), v in R,
             with log p_R(x) = sum_j log p_R(x_j | bos, x_<j); the terms j < i are the same
             for every v and cancel. So the conditional at one masked position costs K
             forward passes of n tokens (bos, x_1..x_{n-1}, with v at position i; the
             logits restricted to R, i.e. a [D, K] unembedding), computed in jitted
             chunks of `cond_batch` candidate sentences. Every position of a sentence
             (`mlm_conditionals_batch`, the lookup-table features) costs n * K passes.
             The MLM task scores one fixed masked position per sentence, so it needs K
             passes per evaluated sentence. The generator's matmuls run at float32
             precision ("highest": on GPUs JAX would otherwise use TF32).
  optimum    the optimal MLM loss on a set of (sentence, masked position) pairs is the
             mean entropy of these conditionals (`mlm_optimum`); the MLM task reports it
             as `true_entropy`, with gap = mlm_loss - true_entropy and the exact
             kl = KL(p || q), as for the PCFG and the HMM.

Cost, in generator forward-pass tokens (N sentences, K, n): sampling N * n; the top-K
frequencies top_k_samples * n (with the full vocabulary's unembedding); the conditionals
at one masked position per sentence N * K * n. At the paper's K = 2000, n = 24: 48,000
tokens per evaluated sentence, ~8.3 TFLOP with GPT-2 124M (~173 MFLOP per token with the
K-column unembedding; 85M non-embedding parameters), so the 30,000 sentences the
paper-size MLM run evaluates (valid, test, 10,000 training sentences) cost ~2.5e17 FLOP:
~2 h on one H100 at float32 precision (67 TFLOP/s peak, half of it used), ~2 months on
the 2-core CPU this was written on. Measured there (CPU seconds, a random GPT-2 of the
small GPT-2's shape: 2 x 128, 50,257 tokens, K = 200, n = 24): 0.10 s per evaluated
sentence (4,800 forward tokens), 1.3 ms per sampled sentence, 25 s for the frequencies
of 1,024 free sentences.

Corpus (`build`): train / valid / test sentences of `data.length` tokens in the MLM
task's layout (`el_jax.core.data.mlm_data`: terminals 0..K-1, MASK = K, PAD = K + 1, rows of
`data.max_len_tokens`), seed streams [data_seed, 0 / 1 / 2], the fixed evaluation masks
of `mlm_data.fixed_mask_positions`, and the exact conditionals at those masks only (the
splits' `cond_mask` [N, K]; `cond`, every position, is not computed: it would cost n
times more). Cached under `data.cache_dir` as mlm_data caches the PCFG / HMM corpora
(atomic .npz, named by a hash of everything that fixes the content: the generator's
file hashes, K, the ranking, the vocabulary itself, n, T, sizes, seed), and so are the
training sentences' conditionals of `train_eval_split` and the generator's token
frequencies (`token_frequency`).

Downstream (`glue_task`): the paper's QNLI and SST-2 for this language come from TFDS
(`glue/qnli`, `glue/sst2`) when they are prepared in the TFDS data dir in the
array_record format, which TFDS reads without TensorFlow; otherwise a one-line error
names the dataset and the `tfds build` command. Nothing is downloaded here.
"""
import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
import time
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from el_jax.core import data
from el_jax.infra import extras
from el_jax.core.data import downstream
from el_jax.core.data import gpt2_bpe
from el_jax.core.data import mlm_data
from el_jax.core.models import decoder
from el_jax.core.models import pretrained
from el_jax.infra import progress
from el_jax.infra import workdir as wd

TINY_RANDOM = "tiny-random"  # data.generator: the random tiny GPT-2 of `tiny_random_gpt2`
TOP_K_BY = ("generator", "id")
FORMAT_VERSION = 1  # bump when the content of a cache file changes for the same key
PRECISION = "highest"  # matmul precision of every generator computation (float32)
# The data fields of data.language="lm" (configs/lm_mlm.py comments each one).
FIELDS = ("generator", "top_k", "top_k_by", "top_k_samples", "top_k_seed", "length", "bos_id",
          "sample_batch", "cond_batch")


# ----------------------------------------------------------------------------
# The random tiny GPT-2 (tests; `data.generator="tiny-random"`)


def tiny_random_gpt2(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, seed=0,
                     logit_scale=0.35):
  """(Hugging Face config.json dict, {tensor name: float32 array}) of a random GPT-2.

  Weights are drawn large enough (embeddings N(0, logit_scale^2), projections N(0, 0.3^2),
  LayerNorm scales 1 + N(0, 0.3^2)) that every layer matters and the next-token
  distributions are far from uniform: a language with structure for an MLM to learn.
  Deterministic in `seed`; `save_gpt2` / `write_tiny_random_gpt2` store it as a
  checkpoint directory that `load_gpt2` reads.
  """
  rng = np.random.default_rng(seed)
  w = lambda *s: rng.normal(0.0, 0.3, s).astype(np.float32)  # noqa: E731
  d, m = n_embd, 4 * n_embd
  t = {"wte.weight": rng.normal(0.0, logit_scale, (vocab_size, d)).astype(np.float32),
       "wpe.weight": rng.normal(0.0, 0.5, (n_positions, d)).astype(np.float32),
       "ln_f.weight": 1 + w(d), "ln_f.bias": w(d)}
  for i in range(n_layer):
    t |= {f"h.{i}.ln_1.weight": 1 + w(d), f"h.{i}.ln_1.bias": w(d),
          f"h.{i}.attn.c_attn.weight": w(d, 3 * d), f"h.{i}.attn.c_attn.bias": w(3 * d),
          f"h.{i}.attn.c_proj.weight": w(d, d), f"h.{i}.attn.c_proj.bias": w(d),
          f"h.{i}.ln_2.weight": 1 + w(d), f"h.{i}.ln_2.bias": w(d),
          f"h.{i}.mlp.c_fc.weight": w(d, m), f"h.{i}.mlp.c_fc.bias": w(m),
          f"h.{i}.mlp.c_proj.weight": w(m, d), f"h.{i}.mlp.c_proj.bias": w(d)}
  hf = {"model_type": "gpt2", "vocab_size": vocab_size, "n_positions": n_positions,
        "n_embd": n_embd, "n_layer": n_layer, "n_head": n_head, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5}
  return hf, t


def write_tiny_random_gpt2(path, **kwargs):
  """Writes `tiny_random_gpt2(**kwargs)` as a Hugging Face GPT-2 directory; returns `path`."""
  hf, tensors = tiny_random_gpt2(**kwargs)
  cfg = pretrained.config_from_hf(hf)
  pretrained.save_gpt2(path, cfg, pretrained.params_from_hf(cfg, tensors))
  return path


# ----------------------------------------------------------------------------
# Config checks and the generator


def _is_int(v):
  return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _generator_dir_error(path):
  return (f"data.generator={path!r} is not a Hugging Face GPT-2 checkpoint directory "
          f"(config.json + model.safetensors); allowed: such a directory (e.g. one written by "
          f"`python -m el_jax.tools.export_gpt2 --export_run=...`, or the released GPT-2's two "
          f"files), or {TINY_RANDOM!r} (a random tiny GPT-2 made in memory)")


def generator_header(generator):
  """(vocab_size, n_positions) of `data.generator` from its config.json alone (no weights)."""
  if generator == TINY_RANDOM:
    hf, _ = tiny_random_gpt2()
  else:
    path = os.path.expanduser(generator)
    if not all(os.path.isfile(os.path.join(path, n))
               for n in (pretrained.CONFIG_NAME, pretrained.WEIGHTS_NAME)):
      raise ValueError(_generator_dir_error(generator))
    hf = wd.read_json(os.path.join(path, pretrained.CONFIG_NAME), what="a GPT-2 config")
    try:
      pretrained.config_from_hf(hf)
    except ValueError as e:
      raise ValueError(f"data.generator={generator!r}: {e}") from None
  hf = pretrained.canonical_config(hf)
  return (int(hf.get("vocab_size", pretrained.HF_DEFAULTS["vocab_size"])),
          int(hf.get("n_positions", pretrained.HF_DEFAULTS["n_positions"])))


def check_data_config(d):
  """ValueError naming the `data.*` field of the LM language and what is allowed.

  Reads the generator's config.json (not its weights). `data.generator=""` passes here
  (a paper-size config is planned without a checkpoint: `el_jax.tools.plan`) and is refused
  when the language is built.
  """
  for name in FIELDS:
    if name not in d:
      raise ValueError(f"data.{name} is missing; data.language='lm' needs data.{name} "
                       f"(see configs/lm_mlm.py)")
  if not isinstance(d.generator, str):
    raise ValueError(f"data.generator={d.generator!r} must be a string (a checkpoint "
                     f"directory or {TINY_RANDOM!r})")
  if d.top_k_by not in TOP_K_BY:
    raise ValueError(f"data.top_k_by={d.top_k_by!r}; allowed: {TOP_K_BY}")
  for name, lo, hint in (("top_k", 2, " (K: the tokens the language may use)"),
                         ("length", 2, " (tokens per sentence: an MLM needs a context)"),
                         ("top_k_samples", 1, ""), ("top_k_seed", 0, ""),
                         ("bos_id", -1, " (-1 = the generator's last id)"),
                         ("sample_batch", 1, ""), ("cond_batch", 1, "")):
    if not _is_int(d[name]) or d[name] < lo:
      raise ValueError(f"data.{name}={d[name]!r} must be an integer >= {lo}{hint}")
  if d.length > d.max_len_tokens:
    raise ValueError(f"data.length={d.length} (LM sentence length) must be <= "
                     f"data.max_len_tokens={d.max_len_tokens}")
  if d.generator:
    vocab, positions = generator_header(d.generator)
    _check_against_generator(d, vocab, positions)


def _check_against_generator(d, vocab, positions):
  if d.bos_id >= vocab:
    raise ValueError(f"data.bos_id={d.bos_id} is outside the generator's vocabulary of {vocab} "
                     f"tokens; allowed: 0..{vocab - 1}, or -1 (its last id)")
  if d.top_k > vocab - 1:
    raise ValueError(f"data.top_k={d.top_k} is larger than the generator's vocabulary less its "
                     f"bos token ({vocab} - 1 = {vocab - 1}); allowed: 2..{vocab - 1}")
  if d.length > positions:
    raise ValueError(f"data.length={d.length} exceeds the generator's {positions} positions; "
                     f"allowed: 2..{positions}")


def load_generator(generator):
  """(DecoderConfig, params, fingerprint) of `data.generator`: a GPT-2 directory
  (`pretrained.load_gpt2`) or "tiny-random". The fingerprint (SHA-256 of config.json and
  model.safetensors, or of the random tensors) names the generator in cache keys."""
  if not generator:
    raise ValueError("data.generator is empty; give a Hugging Face GPT-2 checkpoint directory, "
                     "e.g. --config.data.generator=/path/to/gpt2 (the released GPT-2: "
                     "`huggingface-cli download gpt2 config.json model.safetensors --local-dir "
                     f"gpt2`), or {TINY_RANDOM!r}")
  if generator == TINY_RANDOM:
    hf, tensors = tiny_random_gpt2()
    cfg = pretrained.config_from_hf(hf)
    h = hashlib.sha256(json.dumps(hf, sort_keys=True).encode())
    for name in sorted(tensors):
      h.update(name.encode())
      h.update(tensors[name].tobytes())
    return cfg, pretrained.params_from_hf(cfg, tensors), h.hexdigest()
  path = os.path.expanduser(generator)
  generator_header(generator)  # one-line error for a missing or foreign directory
  cfg, params = pretrained.load_gpt2(path)
  fp = hashlib.sha256("".join(mlm_data._file_sha256(os.path.join(path, n)) for n in
                              (pretrained.CONFIG_NAME, pretrained.WEIGHTS_NAME)).encode())
  return cfg, params, fp.hexdigest()


# ----------------------------------------------------------------------------
# The generator's computations (jitted; pure functions of the params)


def _restricted_logits(model, h, ids_R):
  """[..., R] float32 logits of the hidden states h [..., D] at the generator ids `ids_R`."""
  if model.cfg.tie_embeddings:
    w = jnp.take(model.embed.embedding[...], ids_R, axis=0).T  # [D, R]
  else:
    w = jnp.take(model.unembed.kernel[...], ids_R, axis=1)
  return jnp.dot(h, w.astype(h.dtype)).astype(jnp.float32)


def _step(model, tok_B, t, cache):
  """One position of every row with a key / value cache: (final hidden [B, D], new cache).

  `tok_B` is the input at position `t` (traced scalar); `cache` holds per layer the keys and
  values [B, T, H, K] of positions < t. The same network as `Decoder.__call__`.
  """
  cfg = model.cfg
  b = tok_B.shape[0]
  dt = cfg.compute_dtype
  x = model.embed(tok_B[:, None])  # [B, 1, D]
  if cfg.position == "learned":
    x = x + jax.lax.dynamic_slice_in_dim(model.pos_embed[...], t, 1, axis=0)[None]
  tmax = cache[0][0].shape[1]
  mask = jnp.broadcast_to((jnp.arange(tmax) <= t)[None, None, :], (b, 1, tmax))
  pos = jnp.reshape(t, (1,))
  new = []
  for blk, (ck, cv) in zip(model.blocks, cache):
    attn = blk.attn
    qkv = attn.qkv(blk.ln1(x)).astype(dt).reshape(b, 1, 3, cfg.num_heads, cfg.head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if cfg.position == "rotary":
      q, k = decoder.rotary(q, pos, cfg.rotary_base), decoder.rotary(k, pos, cfg.rotary_base)
    ck = jax.lax.dynamic_update_slice_in_dim(ck, k.astype(ck.dtype), t, axis=1)
    cv = jax.lax.dynamic_update_slice_in_dim(cv, v.astype(cv.dtype), t, axis=1)
    a = attn.out(attn.attend(q, ck, cv, mask).reshape(b, 1, cfg.embed_dim))
    if blk.parallel:
      x = x + a + blk.mlp(blk.ln2(x))
    else:
      x = x + a
      x = x + blk.mlp(blk.ln2(x))
    new.append((ck, cv))
  return model.ln_f(x)[:, 0], new


def _inverse_cdf(p_BxR, u_B):
  """[B] the index j with cdf(j - 1) <= u * total < cdf(j) of each row of p, in two levels
  (blocks of ~sqrt(R) entries, then inside the chosen block): a cumulative sum over 50k
  entries per row is slow on a CPU and loses float32 precision."""
  b, r = p_BxR.shape
  s = int(math.ceil(math.sqrt(r)))
  nb = -(-r // s)
  pp = jnp.pad(p_BxR, ((0, 0), (0, nb * s - r))).reshape(b, nb, s)
  cb = jnp.cumsum(jnp.sum(pp, axis=-1), axis=-1)  # [B, nb]
  target = u_B * cb[:, -1]
  blk = jnp.minimum(jnp.sum(cb < target[:, None], axis=-1), nb - 1)
  before = jnp.where(blk > 0, jnp.take_along_axis(cb, jnp.maximum(blk - 1, 0)[:, None],
                                                  axis=-1)[:, 0], 0.0)
  inner = jnp.take_along_axis(pp, blk[:, None, None], axis=1)[:, 0]  # [B, s]
  ci = jnp.cumsum(inner, axis=-1) + before[:, None]
  j = jnp.minimum(jnp.sum(ci < target[:, None], axis=-1), s - 1)
  return jnp.minimum(blk * s + j, r - 1)


def _sample_rows(graphdef, length, bos, accumulate, params, ids_R, key, rows_B):
  """([B, length] indices into ids_R, [R] summed next-token probabilities or None).

  Row r draws step t by the inverse CDF of p_R with one uniform from the key
  fold_in(fold_in(key, r), t) (one random number per token: over a 50k vocabulary Gumbel
  noise per entry costs more than the forward step).
  """
  model = nnx.merge(graphdef, params)
  cfg = model.cfg
  b, r = rows_B.shape[0], ids_R.shape[0]
  keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(rows_B)
  shape = (b, length, cfg.num_heads, cfg.head_dim)
  cache = [(jnp.zeros(shape, cfg.compute_dtype), jnp.zeros(shape, cfg.compute_dtype))
           for _ in range(cfg.num_layers)]

  def body(carry, t):
    tok, cache, acc = carry
    h, cache = _step(model, tok, t, cache)
    p = jax.nn.softmax(_restricted_logits(model, h, ids_R), axis=-1)  # [B, R]
    u = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, t)))(keys)  # [B]
    j = _inverse_cdf(p, u)
    if accumulate:
      acc = acc + jnp.sum(p, axis=0)
    return (jnp.take(ids_R, j), cache, acc), j

  init = (jnp.full((b,), bos, jnp.int32), cache, jnp.zeros((r,), jnp.float32))
  (_, _, acc), js = jax.lax.scan(body, init, jnp.arange(length))
  return js.T.astype(jnp.int32), (acc if accumulate else None)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _sample_jit(graphdef, length, bos, accumulate, params, ids_R, key, rows_B):
  """`_sample_rows` compiled once per generator architecture, shape and setting."""
  return _sample_rows(graphdef, length, bos, accumulate, params, ids_R, key, rows_B)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _candidate_scores(graphdef, bos, params, ids_R, toks_CxN, pos_C, cand_C):
  """[C] sum_{j >= pos} log p_R(x_j | bos, x_<j) of each row's sentence with x_pos = cand.

  One forward pass of n tokens (bos, x_1..x_{n-1}) per row; the logits restricted to R.
  """
  model = nnx.merge(graphdef, params)
  c, n = toks_CxN.shape
  at = jnp.arange(n)[None, :]
  seq = jnp.where(at == pos_C[:, None], cand_C[:, None], toks_CxN)  # terminal ids [C, n]
  gen = jnp.take(ids_R, seq)
  inp = jnp.concatenate([jnp.full((c, 1), bos, gen.dtype), gen[:, :-1]], axis=1)
  h = model.features(inp, jnp.ones_like(inp) if model.cfg.doc_mask else None)  # [C, n, D]
  logp = jax.nn.log_softmax(_restricted_logits(model, h, ids_R), axis=-1)  # [C, n, R]
  lp = jnp.take_along_axis(logp, seq[..., None], axis=-1)[..., 0]
  return jnp.sum(jnp.where(at >= pos_C[:, None], lp, 0.0), axis=1)


def _graphdef(cfg):
  """The decoder's static structure (no parameters materialised); equal graphdefs share the
  compiled functions above."""
  return nnx.split(nnx.eval_shape(lambda: decoder.Decoder(cfg, rngs=nnx.Rngs(0))), nnx.Param)[0]


def _key(seed):
  """The PRNG key of a seed or a list of seeds (folded in order)."""
  k = jax.random.key(0)
  for s in np.atleast_1d(np.asarray(seed, np.int64)).tolist():
    if not 0 <= s < 2 ** 32:
      raise ValueError(f"seed {s} must be in [0, 2**32)")
    k = jax.random.fold_in(k, s)
  return k


# ----------------------------------------------------------------------------
# The language


def entropy(p_NxK):
  """[N] float64 entropies (nats) of the rows of p."""
  p = np.asarray(p_NxK, np.float64)
  pos = p > 0
  return -np.where(pos, p * np.log(np.where(pos, p, 1.0)), 0.0).sum(axis=-1)


class LMLanguage:
  """A decoder restricted to K of its tokens, as a language with exact MLM conditionals.

  Args:
    cfg, params: the generator (a causal `DecoderConfig` and its params State).
    vocab_ids: [K] distinct generator ids of the terminals (terminal j = vocab_ids[j]).
    length: n, tokens per sentence (the generator needs n positions).
    bos_id: the generator id every sentence starts from (not in vocab_ids).
    sample_batch: sentences per jitted sampling call.
    cond_batch: candidate sentences per jitted forward pass of the conditionals.
    source, fingerprint: the generator's name and hash (for cache keys and reports).
    frequency: [V] the generator's token frequencies the vocabulary was ranked by, or None.
  """

  def __init__(self, cfg, params, vocab_ids, length, bos_id, sample_batch=1024, cond_batch=512,
               source="", fingerprint="", frequency=None):
    if not cfg.causal:
      raise ValueError("the generator must be a causal decoder (a left-to-right LM)")
    ids = np.asarray(vocab_ids, np.int64)
    if ids.ndim != 1 or len(np.unique(ids)) != len(ids) or len(ids) < 2:
      raise ValueError(f"vocab_ids must be >= 2 distinct ids, got shape {ids.shape}")
    if ids.min() < 0 or ids.max() >= cfg.vocab_size or bos_id in ids:
      raise ValueError(f"vocab_ids must be ids in 0..{cfg.vocab_size - 1} without bos "
                       f"{bos_id}")
    if not 2 <= length <= cfg.max_len:
      raise ValueError(f"length={length}; allowed: 2..{cfg.max_len} (the generator's positions)")
    self.cfg, self.params = cfg, params
    self.vocab_ids = ids.astype(np.int32)
    self.length, self.bos_id = int(length), int(bos_id)
    self.sample_batch, self.cond_batch = int(sample_batch), int(cond_batch)
    self.source, self.fingerprint, self.frequency = source, fingerprint, frequency
    self._graphdef = _graphdef(cfg)
    self._ids = jnp.asarray(self.vocab_ids)

  @property
  def vocab_size(self):
    """K: the terminals."""
    return len(self.vocab_ids)

  @property
  def generator_vocab_size(self):
    return self.cfg.vocab_size

  def coverage(self):
    """The share of the unrestricted generator's tokens that fall in the vocabulary (None
    unless it was ranked by the generator's frequencies)."""
    if self.frequency is None:
      return None
    return float(self.frequency[self.vocab_ids].sum() / self.frequency.sum())

  # --- sampling --------------------------------------------------------------

  def sample(self, num, seed):
    """[num, n] int32 terminal ids of `num` sentences drawn from p_R, deterministic in `seed`
    (an int or a list of ints; row r uses the key fold_in(key(seed), r))."""
    if not _is_int(num) or num < 0:
      raise ValueError(f"num={num!r} must be an integer >= 0")
    key = _key(seed)
    b = max(1, min(self.sample_batch, num))
    out = np.empty((num, self.length), np.int32)
    with jax.default_matmul_precision(PRECISION), progress.Bar(
        num, progress.current_label("lm_language") + ": sampling", unit="sentence",
        delay_s=progress.PHASE_DELAY_S) as bar:
      for lo in range(0, num, b):
        rows = jnp.arange(lo, lo + b, dtype=jnp.uint32)
        js, _ = _sample_jit(self._graphdef, self.length, self.bos_id, False, self.params,
                            self._ids, key, rows)
        out[lo:lo + b] = np.asarray(js)[:min(b, num - lo)]
        bar.update(min(b, num - lo))
    return out

  # --- exact conditionals --------------------------------------------------------

  def _check_tokens(self, tokens, positions=None):
    tok = np.asarray(tokens)
    if tok.ndim != 2 or tok.shape[1] != self.length:
      raise ValueError(f"tokens must be [N, n={self.length}], got shape {tok.shape}")
    if tok.size and (not np.issubdtype(tok.dtype, np.integer) or tok.min() < 0
                     or tok.max() >= self.vocab_size):
      raise ValueError(f"tokens must be terminal ids 0..{self.vocab_size - 1}")
    if positions is None:
      return tok.astype(np.int32), None
    pos = np.asarray(positions)
    if pos.shape != (tok.shape[0],) or (pos.size and (pos.min() < 0 or pos.max() >= self.length)):
      raise ValueError(f"positions must be [N={tok.shape[0]}] ints in 0..{self.length - 1}")
    return tok.astype(np.int32), pos.astype(np.int32)

  def candidate_log_probs(self, tokens, positions):
    """[N, K] float64: log p_R(x with x_i = v) - log p_R(x_<i), v over the terminals.

    K forward passes of n tokens per row, in jitted chunks of `cond_batch` passes.
    """
    tok, pos = self._check_tokens(tokens, positions)
    n, k = tok.shape[0], self.vocab_size
    total = n * k
    c = max(1, min(self.cond_batch, total))
    out = np.empty(total, np.float64)
    cand_all = np.tile(np.arange(k, dtype=np.int32), n)
    sent_all = np.repeat(np.arange(n), k)
    with jax.default_matmul_precision(PRECISION), progress.Bar(
        total, progress.current_label("lm_language") + ": exact conditionals",
        unit="pass", delay_s=progress.PHASE_DELAY_S) as bar:
      for lo in range(0, total, c):
        hi = min(lo + c, total)
        idx = np.arange(lo, lo + c) % max(total, 1)  # the last chunk padded with real rows
        s = sent_all[idx]
        scores = _candidate_scores(self._graphdef, self.bos_id, self.params, self._ids, tok[s],
                                   pos[s], cand_all[idx])
        out[lo:hi] = np.asarray(scores, np.float64)[:hi - lo]
        bar.update(hi - lo)
    return out.reshape(n, k)

  def mlm_conditionals(self, tokens, positions):
    """[N, K] float64 exact p(x_i = . | x_-i) at position `positions[r]` of sentence r."""
    s = self.candidate_log_probs(tokens, positions)
    s = np.exp(s - s.max(axis=1, keepdims=True))
    return s / s.sum(axis=1, keepdims=True)

  def mlm_conditionals_batch(self, tokens_NxN):
    """[N, n, K] the conditionals at every position (n * K forward passes per sentence), the
    interface of the PCFG / HMM (`downstream.lookup_table_features`)."""
    tok, _ = self._check_tokens(np.atleast_2d(tokens_NxN))
    n = tok.shape[0]
    pos = np.tile(np.arange(self.length, dtype=np.int32), n)
    cond = self.mlm_conditionals(np.repeat(tok, self.length, axis=0), pos)
    return cond.reshape(n, self.length, self.vocab_size)

  def mlm_optimum(self, tokens, positions, weights=None):
    """The optimal MLM loss on these (sentence, masked position) pairs: the (weighted) mean
    entropy of the exact conditionals, in nats (= the expected cross-entropy of the
    conditionals against the masked token drawn from them)."""
    ent = entropy(self.mlm_conditionals(tokens, positions))
    if weights is None:
      return float(ent.mean())
    w = np.asarray(weights, np.float64)
    return float((w * ent).sum() / w.sum())

  def log_prob_batch(self, tokens):
    """[N] float64 log p_R(x) of whole sentences (one forward pass each)."""
    tok, _ = self._check_tokens(tokens)
    zero = np.zeros(tok.shape[0], np.int32)
    with jax.default_matmul_precision(PRECISION):
      # Position 0 "masked" with its own token: the sum over every position.
      return np.asarray(_candidate_scores(self._graphdef, self.bos_id, self.params, self._ids,
                                          tok, zero, tok[:, 0]), np.float64)


def token_frequency(cfg, params, bos_id, length, samples=4096, seed=0, batch=1024):
  """[V] float64: the expected count of each token per position in the free generator's
  sentences of `length` tokens from `bos_id`, estimated from `samples` of them (the sum of
  their next-token distributions; seed [seed, 3]). Costs samples * length forward tokens
  with the full vocabulary's unembedding."""
  v = cfg.vocab_size
  graphdef = _graphdef(cfg)
  all_ids = jnp.arange(v, dtype=jnp.int32)
  key = _key([seed, 3])
  b = max(1, min(batch, samples))
  freq = np.zeros(v, np.float64)
  with jax.default_matmul_precision(PRECISION):
    for lo in range(0, samples, b):
      rows = jnp.arange(lo, min(lo + b, samples), dtype=jnp.uint32)  # only real rows count
      _, acc = _sample_jit(graphdef, length, bos_id, True, params, all_ids, key, rows)
      freq += np.asarray(acc, np.float64)
  return freq / (samples * length)


def top_k_vocab(cfg, params, k, by, bos_id, length, samples=4096, seed=0, batch=1024,
                frequency=None):
  """(vocab_ids [k] int32, frequency [V] float64 or None): the generator's top-k tokens.

  by="generator": ranked by `frequency` (default: `token_frequency(...)`; the module
  docstring); by="id": the k smallest ids. The bos token is left out either way; ties go
  to the smaller id.
  """
  if by not in TOP_K_BY:
    raise ValueError(f"top_k_by={by!r}; allowed: {TOP_K_BY}")
  v = cfg.vocab_size
  if not 2 <= k <= v - 1:
    raise ValueError(f"top_k={k}; allowed: 2..{v - 1} (the generator's vocabulary less bos)")
  if by == "id":
    ids = np.array([i for i in range(k + 1) if i != bos_id][:k], np.int32)
    return ids, None
  freq = (token_frequency(cfg, params, bos_id, length, samples, seed, batch)
          if frequency is None else np.asarray(frequency, np.float64))
  rank = np.lexsort((np.arange(v), -freq))  # by frequency, then by id
  ids = rank[rank != bos_id][:k].astype(np.int32)
  return ids, freq


def resolve_bos(bos_id, vocab_size):
  """`data.bos_id`, with -1 read as the generator's last id (GPT-2's <|endoftext|>)."""
  return vocab_size - 1 if bos_id == -1 else int(bos_id)


def language(d):
  """The LMLanguage of `config.data` (data.language="lm"): loads the generator, ranks its
  vocabulary (`top_k_vocab`) and checks everything against it (one-line ValueErrors)."""
  check_data_config(d)
  cfg, params, fp = load_generator(d.generator)
  _check_against_generator(d, cfg.vocab_size, cfg.max_len)
  bos = resolve_bos(d.bos_id, cfg.vocab_size)
  freq = None
  if d.top_k_by == "generator":  # cached: the free sampler runs the full unembedding
    key = {"format": FORMAT_VERSION, "generator_sha256": fp, "bos_id": bos,
           "length": int(d.length), "top_k_samples": int(d.top_k_samples),
           "top_k_seed": int(d.top_k_seed)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    cache_dir = os.path.expanduser(d.get("cache_dir", "") or mlm_data.default_cache_dir())
    freq = _cached(os.path.join(cache_dir, f"lm_frequency_{digest}.npz"), key, lambda: {
        "frequency": token_frequency(cfg, params, bos, int(d.length), int(d.top_k_samples),
                                     int(d.top_k_seed), int(d.sample_batch))},
        f"the generator's token frequencies ({int(d.top_k_samples)} free sentences of "
        f"{int(d.length)} tokens)")["frequency"]
  ids, freq = top_k_vocab(cfg, params, int(d.top_k), d.top_k_by, bos, int(d.length),
                          frequency=freq)
  return LMLanguage(cfg, params, ids, int(d.length), bos, int(d.sample_batch), int(d.cond_batch),
                    source=d.generator, fingerprint=fp, frequency=freq)


# ----------------------------------------------------------------------------
# The MLM corpus (el_jax.core.data.mlm_data's layout)


@dataclasses.dataclass(frozen=True)
class LMSplit(mlm_data.Split):
  """An `mlm_data.Split` whose exact conditionals are stored at the fixed masks only:
  `cond_mask` [N, K] float32 (`cond`, every position, is None: n times the cost)."""
  cond_mask: np.ndarray | None = None

  def subset(self, idx):
    pick = lambda a: None if a is None else a[idx]  # noqa: E731
    return LMSplit(self.tokens[idx], self.lengths[idx], pick(self.mask_pos), None,
                   pick(self.states), pick(self.cond_mask))

  @property
  def cond_at_mask(self):
    return self.cond_mask


def cache_key(d, lang):
  """The fields that fix an LM corpus's content (a JSON-able dict)."""
  key = {"format": FORMAT_VERSION, "language": "lm", "generator_sha256": lang.fingerprint,
         "top_k": int(d.top_k), "top_k_by": d.top_k_by, "length": int(d.length),
         "bos_id": lang.bos_id, "max_len_tokens": int(d.max_len_tokens),
         "num_train": int(d.num_train), "num_valid": int(d.num_valid),
         "num_test": int(d.num_test), "data_seed": int(d.data_seed),
         "vocab_sha256": hashlib.sha256(lang.vocab_ids.tobytes()).hexdigest()}
  if d.top_k_by == "generator":
    key.update(top_k_samples=int(d.top_k_samples), top_k_seed=int(d.top_k_seed))
  return key


def cache_path(d, key):
  """`<cache dir>/lm_<hash of key>.npz` (the cache dir of the PCFG / HMM corpora)."""
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
  cache_dir = os.path.expanduser(d.get("cache_dir", "") or mlm_data.default_cache_dir())
  return os.path.join(cache_dir, f"lm_{digest}.npz")


_LOAD_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def _save(path, key, arrays):
  with wd.atomic_open(path, binary=True) as f:
    np.savez(f, key=np.array(json.dumps(key, sort_keys=True)), **arrays)


def _load(path, key):
  with np.load(path, allow_pickle=False) as z:
    stored = json.loads(str(z["key"][()]))
    if stored != key:
      raise ValueError(f"it holds another corpus ({stored})")
    return {k: z[k] for k in z.files if k != "key"}


def _cached(path, key, make, what):
  """The arrays of `make()`, read from `path` if it holds `key` (else made and saved)."""
  if os.path.exists(path):
    try:
      return _load(path, key)
    except _LOAD_ERRORS as e:
      msg = " ".join(str(e).split()) or type(e).__name__
      print(f"warning: LM data cache {path} is damaged ({type(e).__name__}: {msg}); "
            f"rebuilding it", file=sys.stderr)
  t0 = time.perf_counter()
  print(f"lm_language: building {what} -> {path}", file=sys.stderr)
  arrays = make()
  _save(path, key, arrays)
  print(f"lm_language: built {what} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
  return arrays


def _conditionals_at(lang, tokens, mask_pos):
  """[N, K] float32 conditionals at the masks, checked finite."""
  cond = lang.mlm_conditionals(tokens, mask_pos).astype(np.float32)
  if not np.isfinite(cond).all():
    raise RuntimeError("non-finite exact conditionals: the generator's logits overflow")
  return cond


def _padded(tokens, t, pad):
  out = np.full((tokens.shape[0], t), pad, np.int32)
  out[:, :tokens.shape[1]] = tokens
  return out


def build(d, lang):
  """The `mlm_data.Corpus` of `config.data` (data.language="lm"), from the cache or built:
  train / valid / test sentences (`LMSplit`s), valid and test with the fixed evaluation
  masks and their exact conditionals (K forward passes per sentence)."""
  key = cache_key(d, lang)
  path = cache_path(d, key)
  k, n, t = lang.vocab_size, lang.length, int(d.max_len_tokens)
  sizes = {s: int(d[f"num_{s}"]) for s in mlm_data.SPLITS}
  cost = (sizes["valid"] + sizes["test"]) * k

  def make():
    out = {"vocab_ids": lang.vocab_ids}
    for name in mlm_data.SPLITS:
      stream = mlm_data.STREAMS[name]
      with progress.label(f"lm_language: the {name} split"):
        tokens = lang.sample(sizes[name], [d.data_seed, stream])
        out[f"{name}_tokens"] = tokens.astype(np.int16 if k + 2 < 2 ** 15 else np.int32)
        if name != "train":
          mask_pos = mlm_data.fixed_mask_positions(np.full(sizes[name], n),
                                                   [d.data_seed, stream, 1])
          out[f"{name}_mask_pos"] = mask_pos
          out[f"{name}_cond_mask"] = _conditionals_at(lang, tokens, mask_pos)
    return out

  built = not os.path.exists(path)
  t0 = time.perf_counter()
  arrays = _cached(path, key, make, f"the LM corpus (train {sizes['train']}, valid "
                   f"{sizes['valid']}, test {sizes['test']} sentences of {n} tokens, K={k}; "
                   f"{cost:,} forward passes of {n} tokens for the exact conditionals)")
  if not np.array_equal(arrays["vocab_ids"], lang.vocab_ids):
    raise ValueError(f"{path} holds another vocabulary; remove it")
  splits = {}
  for name in mlm_data.SPLITS:
    tok = np.asarray(arrays[f"{name}_tokens"], np.int32)
    if tok.shape != (sizes[name], n):
      raise ValueError(f"{path}: {name} has shape {tok.shape}, expected {(sizes[name], n)}")
    mp = arrays.get(f"{name}_mask_pos")
    cm = arrays.get(f"{name}_cond_mask")
    splits[name] = LMSplit(_padded(tok, t, k + 1), np.full(sizes[name], n, np.int32),
                           None if mp is None else np.asarray(mp, np.int32), None, None, cm)
  return mlm_data.Corpus("lm", k, t, splits, key, path,
                         time.perf_counter() - t0 if built else None)


def train_eval_split(corpus, lang, num, data_seed):
  """The first `num` training sentences with fixed masks (seed [data_seed, 0, 1], as
  `mlm_data.train_eval_split`) and their exact conditionals, cached beside the corpus."""
  s = corpus.train.subset(slice(0, min(num, len(corpus.train))))
  mask_pos = mlm_data.fixed_mask_positions(s.lengths, [data_seed, 0, 1])
  key = {**corpus.key, "train_eval": len(s), "train_eval_seed": int(data_seed)}
  path = corpus.path[:-len(".npz")] + f"_train{len(s)}.npz"
  tok = s.tokens[:, :lang.length]
  arrays = _cached(path, key, lambda: {"cond_mask": _conditionals_at(lang, tok, mask_pos)},
                   f"the exact conditionals of {len(s)} training sentences")
  return dataclasses.replace(s, mask_pos=mask_pos, cond_mask=arrays["cond_mask"])


# ----------------------------------------------------------------------------
# Downstream: GLUE QNLI / SST-2 from TFDS


GLUE_TASKS = {"qnli": ("question", "sentence"), "sst2": ("sentence",)}


def tfds_data_dir(data_dir=None):
  """`data_dir`, else $TFDS_DATA_DIR, else ~/tensorflow_datasets (TFDS's own default)."""
  return os.path.expanduser(data_dir or os.environ.get("TFDS_DATA_DIR")
                            or os.path.join("~", "tensorflow_datasets"))


def glue_dir(name, data_dir=None):
  """The prepared `glue/<name>` version folder in the TFDS data dir; ValueError (one line,
  naming the data set and the command that prepares it) if there is none."""
  if name not in GLUE_TASKS:
    raise ValueError(f"GLUE task {name!r}; allowed: {tuple(GLUE_TASKS)} (the paper's tasks "
                     f"for the OPT-generated language)")
  root = tfds_data_dir(data_dir)
  base = os.path.join(root, "glue", name)
  versions = sorted((v for v in (os.listdir(base) if os.path.isdir(base) else ())
                     if os.path.isfile(os.path.join(base, v, "dataset_info.json"))),
                    key=lambda v: tuple(int(x) if x.isdigit() else 0 for x in v.split(".")))
  fix = (f"prepare it with `tfds build glue/{name} --data_dir={root} "
         f"--file_format=array_record` (needs TensorFlow and the network once; el_jax reads "
         f"the array_record files without TensorFlow)")
  if not versions:
    raise ValueError(f"TFDS data set glue/{name} is not in the TFDS data dir {root}; {fix}")
  path = os.path.join(base, versions[-1])
  info = wd.read_json(os.path.join(path, "dataset_info.json"), what="TFDS dataset info")
  fmt = info.get("fileFormat", "tfrecord")
  if fmt != "array_record":
    raise ValueError(f"TFDS data set glue/{name} in {path} is stored as {fmt}, which needs "
                     f"TensorFlow to read; {fix}")
  return path


def _text(x):
  return x.decode("utf-8") if isinstance(x, bytes) else str(x)


def glue_task(lang, name, seq_len=None, data_dir=None, num_valid=2000, seed=0):
  """GLUE `name` ("qnli" | "sst2") in the LM language's tokens, as `downstream.DownstreamData`.

  Text: " " + sentence (QNLI: " " + question + " " + sentence), GPT-2 BPE tokens (the
  generator must have GPT-2's 50,257-token vocabulary), mapped to terminals; tokens outside
  the top-K are dropped (the language has no unknown token), the rest cut to `seq_len`
  (default the sentence length n), padded with PAD = K + 1. Examples with no token left
  are dropped. Splits (GLUE's test labels are hidden): train = GLUE train less
  `num_valid` examples drawn with `seed` (valid); test = GLUE validation.
  """
  path = glue_dir(name, data_dir)
  if lang.generator_vocab_size != gpt2_bpe.VOCAB_SIZE:
    raise ValueError(f"GLUE text is GPT-2 BPE: the generator needs GPT-2's "
                     f"{gpt2_bpe.VOCAB_SIZE}-token vocabulary, not {lang.generator_vocab_size}")
  seq_len = lang.length if seq_len is None else int(seq_len)
  # Heavy and optional (el_jax's `data` extra): TFDS only when a GLUE task is read.
  tfds = extras.require("tensorflow_datasets", f"reading the GLUE task {name!r}")
  builder = tfds.builder_from_directory(path)
  src = builder.as_data_source()
  for split in ("train", "validation"):
    if split not in src:
      raise ValueError(f"TFDS data set glue/{name} in {path} has no {split!r} split")
  to_terminal = np.full(lang.generator_vocab_size, -1, np.int64)
  to_terminal[lang.vocab_ids] = np.arange(lang.vocab_size)
  fields = GLUE_TASKS[name]

  def read(split):
    ds = src[split]
    rows = [ds[i] for i in range(len(ds))]
    rows.sort(key=lambda r: int(r.get("idx", 0)))  # GLUE's order, not the shuffled files'
    texts = [" " + " ".join(_text(r[f]) for f in fields) for r in rows]
    ids = gpt2_bpe.encode_batch(texts, vocab_size=gpt2_bpe.VOCAB_SIZE)
    sents, labels, kept, total = [], [], 0, 0
    for r, s in zip(rows, ids):
      term = to_terminal[np.asarray(s, np.int64)]
      total += len(term)
      term = term[term >= 0]
      kept += len(term)
      if len(term):
        sents.append(term[:seq_len])
        labels.append(int(r["label"]))
    return sents, np.asarray(labels, np.int32), kept / max(total, 1)

  train_s, train_y, cov = read("train")
  test_s, test_y, _ = read("validation")
  if len(train_s) <= num_valid:
    raise ValueError(f"glue/{name} has {len(train_s)} usable training examples, not more "
                     f"than num_valid={num_valid}")
  perm = np.random.default_rng(downstream.split_seed(seed, f"glue_{name}")).permutation(len(train_s))
  va, tr = perm[:num_valid], perm[num_valid:]
  pad = lang.vocab_size + 1

  def split_of(sents, labels, idx):
    tok, seg, lengths = downstream.pad_sentences([sents[i] for i in idx], seq_len, pad)
    return downstream.Split(tok, seg, lengths, labels[idx])

  names = builder.info.features["label"].names
  print(f"lm_language: glue/{name}: {len(train_s)} train / {len(test_s)} validation examples; "
        f"{cov:.1%} of their GPT-2 tokens are in the top-{lang.vocab_size} (the rest dropped)",
        file=sys.stderr)
  return downstream.DownstreamData(
      name=f"glue_{name}", train=split_of(train_s, train_y, tr),
      valid=split_of(train_s, train_y, va),
      test=split_of(test_s, test_y, np.arange(len(test_s))), num_classes=len(names),
      class_names=tuple(names), vocab_size=lang.vocab_size, seq_len=seq_len)
