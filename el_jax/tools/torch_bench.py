"""The PyTorch side of a speed comparison: el_jax's model and batch as Hugging Face models.

  from el_jax.tools import torch_bench
  torch_bench.time_steps(shape, "bfloat16", steps=50, rounds=5)   # {"step_s", "device", ...}

`shape` is what `el_jax.tools.verify.model_shape` records of an el_jax setup: preset ("gpt_neox" ->
GPTNeoXForCausalLM: rotary, parallel residual, untied; "gpt2" -> GPT2LMHeadModel: learned
positions, sequential residual, tied), layers, heads, widths, vocabulary, context, rows per
step, LayerNorm epsilon, MLP activation, learning rate and clipping. The step is the usual
PyTorch one: logits of every position, float32 cross-entropy over all of them, backward,
`clip_grad_norm_`, AdamW (fused on CUDA), `zero_grad(set_to_none=True)`, SDPA attention, no
dropout. Precision is matched to JAX's defaults: float32 with TF32 matmuls allowed (JAX's
default matmul precision on NVIDIA GPUs), or bf16 autocast around the forward pass with
float32 weights (el_jax's `model.dtype="bfloat16"`). Time: CUDA-synchronised wall time of
`steps` steps, the median of `rounds` windows after `warmup` steps.

`mode` (`MODES`) is how PyTorch runs the forward pass and the loss: "eager" (op by op from
Python), "compile" (`torch.compile`: TorchInductor's fused kernels for the forward and, through
AOTAutograd, the backward) or "reduce-overhead" (`torch.compile(mode="reduce-overhead")`: the
same, replayed as CUDA graphs, which removes the launch cost of every kernel; CUDA only). The
optimizer step is PyTorch's fused AdamW in every mode. A compiled mode's first warm-up step
compiles: its seconds are `compile_s` (with the remaining warm-up steps it is the cost of
compiling, not timed in `step_s`).

This module never imports JAX (`el_jax.tools.verify` runs it in a process of its own, so the two
frameworks never share the accelerator's memory); torch and transformers are imported on
use. tools/bench_vs_torch/ is the CPU comparison with its own virtualenv.
"""
import time

MODES = ("eager", "compile", "reduce-overhead")


def mode_refusal(mode, device_type):
  """Why `mode` cannot run on `device_type` ("cpu" / "cuda"), or None."""
  if mode not in MODES:
    return f"mode {mode!r} is not one of {MODES}"
  if mode == "reduce-overhead" and device_type != "cuda":
    return "CUDA graphs (mode='reduce-overhead') need a CUDA device"
  return None


def available():
  """True if torch and transformers import in this Python."""
  try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
  except ImportError:
    return False
  return True


def versions():
  import torch
  import transformers
  return {"torch": torch.__version__, "transformers": transformers.__version__,
          "cuda": torch.version.cuda,
          "device_name": (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")}


def build(shape):
  """The Hugging Face causal LM of `shape` (float32 weights, train mode, no dropout)."""
  import transformers
  act = {"gelu_tanh": "gelu_pytorch_tanh", "gelu_exact": "gelu"}[shape.get("activation",
                                                                             "gelu_tanh")]
  eps = float(shape.get("layer_norm_eps", 1e-6))
  if shape["preset"] == "gpt_neox":
    cfg = transformers.GPTNeoXConfig(
        vocab_size=shape["vocab"], hidden_size=shape["embed_dim"],
        num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
        intermediate_size=shape["mlp_dim"], hidden_act=act,
        max_position_embeddings=max(2048, shape["seq"]),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 1.0},
        use_parallel_residual=True, tie_word_embeddings=False, hidden_dropout=0.0,
        attention_dropout=0.0, layer_norm_eps=eps, use_cache=False)
    cfg._attn_implementation = "sdpa"
    model = transformers.GPTNeoXForCausalLM(cfg)
  elif shape["preset"] == "gpt2":
    cfg = transformers.GPT2Config(
        vocab_size=shape["vocab"], n_positions=shape["seq"], bos_token_id=None,
        eos_token_id=None,
        n_embd=shape["embed_dim"], n_layer=shape["num_layers"], n_head=shape["num_heads"],
        n_inner=shape["mlp_dim"], activation_function=("gelu_new" if act != "gelu" else "gelu"),
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=eps,
        tie_word_embeddings=True, use_cache=False)
    cfg._attn_implementation = "sdpa"
    model = transformers.GPT2LMHeadModel(cfg)
  else:
    raise ValueError(f"torch_bench: preset {shape['preset']!r} has no PyTorch model here "
                     f"(gpt_neox, gpt2)")
  model.train()
  return model


def time_steps(shape, dtype, steps=50, rounds=5, warmup=10, device=None, mode="eager"):
  """{"step_s" (median), "step_s_rounds", "device", "num_params", "dtype", "tf32", "mode",
  "compile_s"} of the training step of `shape` in `dtype` ("float32" with TF32 matmuls, or
  "bfloat16" autocast), run as `mode` (module docstring; ValueError where it cannot run)."""
  import numpy as np
  import torch
  dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
  cuda = dev.type == "cuda"
  why = mode_refusal(mode, dev.type)
  if why:
    raise ValueError(f"torch_bench: {why}")
  if cuda:
    torch.backends.cuda.matmul.allow_tf32 = True  # JAX's default precision for float32 dots
    torch.backends.cudnn.allow_tf32 = True
  torch.manual_seed(0)
  model = build(shape).to(dev)
  opt = torch.optim.AdamW(model.parameters(), lr=float(shape.get("lr", 1e-4)),
                          betas=(0.9, 0.999), eps=1e-8,
                          weight_decay=float(shape.get("weight_decay", 0.0)),
                          fused=cuda)
  clip = float(shape.get("grad_clip") or 1e30)
  b, t, v = shape["batch"], shape["seq"], shape["vocab"]
  rng = np.random.default_rng(0)
  batches = []
  for _ in range(4):
    x = torch.from_numpy(rng.integers(0, v, size=(b, t + 1), dtype=np.int64)).to(dev)
    batches.append((x[:, :-1].contiguous(), x[:, 1:].contiguous()))
  bf16 = dtype == "bfloat16"

  def forward_loss(x, y):
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
      logits = model(input_ids=x).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, v), y.reshape(-1))

  if mode != "eager":
    forward_loss = torch.compile(forward_loss, mode=None if mode == "compile" else mode)

  def step(x, y):
    loss = forward_loss(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss

  def sync():
    if cuda:
      torch.cuda.synchronize()

  t0 = time.perf_counter()
  loss = step(*batches[0])  # a compiled mode compiles here
  sync()
  compile_s = time.perf_counter() - t0
  for i in range(1, max(warmup, 1)):
    loss = step(*batches[i % len(batches)])
  sync()
  times = []
  for _ in range(rounds):
    sync()
    t0 = time.perf_counter()
    for i in range(steps):
      loss = step(*batches[i % len(batches)])
    sync()
    times.append((time.perf_counter() - t0) / steps)
  if not bool(torch.isfinite(loss)):
    raise FloatingPointError(f"torch_bench: non-finite loss {float(loss)}")
  times_sorted = sorted(times)
  return {"step_s": times_sorted[len(times) // 2], "step_s_rounds": times,
          "device": str(dev), "num_params": sum(p.numel() for p in model.parameters()),
          "tf32": bool(cuda), "attention": "sdpa", "tokens_per_step": b * t, "mode": mode,
          "compile_s": compile_s if mode != "eager" else None}
