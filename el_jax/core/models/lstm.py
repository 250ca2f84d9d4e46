"""A stack of bidirectional LSTM layers for masked-LM pretraining: seed 002's HMM model.

The paper pre-trains LSTMs ("the implementation of PyTorch", App. A.3: d-hidden in
[128, ..., 1024], layers in [4, ..., 16]) on its HMM data. For a masked LM the model has to
read both sides of the masked word, so each layer is bidirectional, as PyTorch's
``nn.LSTM(bidirectional=True)``: a forward and a backward LSTM over the layer's input, their
hidden states concatenated (2H) as the next layer's input. The masked position's input is the
MASK token, so no layer sees the word it predicts.

Built from Flax's own pieces (``nnx.OptimizedLSTMCell``: one fused matmul for the four
gates, i f g o; ``nnx.RNN`` / ``nnx.Bidirectional`` with ``seq_lengths``, so the backward
LSTM starts at each sentence's last real word, not at its padding). Flax's initialisers for
the cells (LeCun-normal input, orthogonal recurrent kernels, zero biases: the same scale as
PyTorch's uniform ones, 1/sqrt(H)) and for the unembedding (an untied Linear with bias from the
2H features to the vocabulary, LeCun-normal); N(0, 1) word vectors as PyTorch's.

Chosen with ``model.preset = "bilstm"`` (el_jax.core.models.decoder): ``model.embed_dim`` is the
hidden size H (also the word-embedding width), ``model.num_layers`` the number of
bidirectional layers; the attention fields (num_heads, mlp_dim, positions) are unused. A row
holds one sentence: ``segment_ids`` > 0 at its words, a prefix of the row, 0 at the padding
(el_jax.core.data.mlm_data).
"""
import jax.numpy as jnp
from flax import nnx


class BiLSTM(nnx.Module):
  """tokens [B, T] -> logits [B, T, V] (float32), each position reading both directions."""

  def __init__(self, cfg, *, rngs: nnx.Rngs):
    self.cfg = cfg
    h = cfg.embed_dim
    # N(0, 1) word vectors, as PyTorch's nn.Embedding (cfg.init_std, the transformer's 0.02,
    # would leave every gate at its midpoint and the first steps without signal).
    self.embed = nnx.Embed(cfg.vocab_size, h, embedding_init=nnx.initializers.normal(1.0),
                           rngs=rngs)
    layers = []
    for i in range(cfg.num_layers):
      d_in = h if i == 0 else 2 * h
      cell = lambda: nnx.OptimizedLSTMCell(d_in, h, dtype=cfg.matmul_dtype, rngs=rngs)  # noqa: E731
      layers.append(nnx.Bidirectional(nnx.RNN(cell(), rngs=False),
                                      nnx.RNN(cell(), rngs=False), rngs=False))
    self.layers = nnx.List(layers)
    self.unembed = nnx.Linear(2 * h, cfg.vocab_size, use_bias=True, dtype=cfg.matmul_dtype,
                              rngs=rngs)

  def features(self, tokens_BxT, segment_ids_BxT=None, positions_P=None):
    """The last layer's [forward; backward] hidden states: `[B, T, 2H]` (or `[B, P, 2H]`)."""
    cfg = self.cfg
    if cfg.doc_mask and segment_ids_BxT is None:
      raise ValueError("model.doc_mask=True needs segment_ids")
    lengths_B = None if segment_ids_BxT is None else jnp.sum(segment_ids_BxT > 0, axis=-1)
    x = self.embed(tokens_BxT).astype(cfg.compute_dtype)
    zeros_BxH = jnp.zeros((tokens_BxT.shape[0], cfg.embed_dim), cfg.compute_dtype)
    carry = (zeros_BxH, zeros_BxH)  # (c, h): each direction starts from zero
    for layer in self.layers:
      x = layer(x, initial_carry=(carry, carry), seq_lengths=lengths_B)
    x = x.astype(jnp.float32)
    return x if positions_P is None else x[:, positions_P]

  def __call__(self, tokens_BxT, segment_ids_BxT=None, positions_P=None):
    """Logits `[B, T, V]`, or `[B, P, V]` at the static `positions_P` only."""
    return self.unembed(self.features(tokens_BxT, segment_ids_BxT, positions_P)).astype(
        jnp.float32)
