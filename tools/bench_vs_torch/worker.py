"""A side of the benchmark, in a process of its own: sets up once, then answers "run N" on
stdin with the mean seconds per step of N steps, on stdout after a tag (`TAG`).

  <python> tools/bench_vs_torch/worker.py '<spec as JSON>'

`spec["side"]` is "el_jax" (run with el_jax's Python) or "torch" (run with .venv-torch's
Python, which has neither el_jax nor JAX: this file imports only the standard library at its
top). The spec is written by tools/bench_vs_torch/run.py; this is its protocol, not a command
for people.
"""
import json
import os
import sys
import time

TAG = "@@"  # prefix of protocol lines on a worker's stdout


def serve(info, run):
  print(TAG + json.dumps(info), flush=True)
  for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
      return
    print(TAG + json.dumps({"sec": run(int(cmd[1]))}), flush=True)


def side_name(cpu_dots, all_positions, cpu_devices=1, malloc="tuned", attention_blocks=1):
  return "el_jax" + ("" if cpu_dots == "xla" else f"_{cpu_dots}") + (
      f"_blocks{attention_blocks}" if attention_blocks > 1 else "") + (
      f"_{cpu_devices}dev" if cpu_devices > 1 else "") + (
      "_glibc_malloc" if malloc == "glibc" else "") + (
      "_all_positions" if all_positions else "")


def el_jax_worker(config_args, warmup, all_positions, cpu_dots, cpu_devices=1, extra_dots=None,
                  attention_blocks=1):
  import jax
  jax.config.update("jax_num_cpu_devices", cpu_devices)
  from el_jax.tools import bench
  from el_jax.run import cli
  from el_jax.infra import hostmem
  from el_jax.core import step as step_lib
  from el_jax.core.models import decoder
  step_lib.CPU_DOTS.update(extra_dots or {})
  config, _ = cli.parse(["bench_vs_torch"] + config_args, require_workdir=False)
  config.train.cpu_dots = cpu_dots
  config.train.attention_blocks = attention_blocks
  t0 = time.perf_counter()
  runner = bench.StepRunner(config, warmup, score_all_positions=all_positions)
  m = runner.setup.model_cfg
  malloc = hostmem.state()
  info = {"side": side_name(cpu_dots, all_positions, cpu_devices,
                            "glibc" if os.environ.get("EL_JAX_MALLOC") == "glibc" else "tuned",
                            attention_blocks),
          "jax": jax.__version__, "device": str(jax.devices()[0]), "cpu_dots": cpu_dots,
          # what "auto" stands for on this CPU (step_lib.CPU_KINDS), and its XLA options
          "cpu_dots_resolved": step_lib.cpu_dots(config),
          "cpu_kind": step_lib.cpu_kind()["kind"],
          "attention_blocks": m.attention_blocks,
          "compiler_options": runner.trainer.compiler_options, "malloc": malloc,
          "num_devices": runner.setup.mesh.devices.size,
          "num_params": decoder.num_params(runner.state["params"]),
          "tokens_per_step": runner.tokens, "setup_s": time.perf_counter() - t0,
          # XLA counts the FLOPs of one device's program: times the devices for the step.
          "flops_per_step": runner.flops() * runner.setup.mesh.devices.size,
          "matmul_peak_flops": bench.matmul_peak(),
          "xla_flags": os.environ.get("XLA_FLAGS", ""),
          "shape": {"num_layers": m.num_layers, "embed_dim": m.embed_dim,
                    "num_heads": m.num_heads, "mlp_dim": m.mlp_dim, "vocab": m.vocab_size,
                    "batch": runner.rows,
                    "seq": config.data.context_len}}
  serve(info, runner)


def torch_worker(shape, attn, warmup, lr, clip, threads, venv="the torch environment"):
  import numpy as np
  import torch
  import transformers
  if torch.version.cuda is not None:
    raise SystemExit(f"{venv} has a CUDA build of torch ({torch.__version__}); "
                     f"remove it and rerun to get the CPU wheel")
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  cfg = transformers.GPTNeoXConfig(
      vocab_size=shape["vocab"], hidden_size=shape["embed_dim"],
      num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
      intermediate_size=shape["mlp_dim"], hidden_act="gelu_pytorch_tanh",
      max_position_embeddings=max(2048, shape["seq"]),
      rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                       "partial_rotary_factor": 1.0},
      use_parallel_residual=True, tie_word_embeddings=False, hidden_dropout=0.0,
      attention_dropout=0.0, layer_norm_eps=1e-6, use_cache=False)
  cfg._attn_implementation = attn
  model = transformers.GPTNeoXForCausalLM(cfg)
  model.train()
  assert model.config._attn_implementation == attn, model.config._attn_implementation
  opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                          weight_decay=0.0)
  rng = np.random.default_rng(0)
  b, t, v = shape["batch"], shape["seq"], shape["vocab"]
  batches = []
  for _ in range(8):
    x = torch.from_numpy(rng.integers(0, v, size=(b, t + 1), dtype=np.int64))
    batches.append((x[:, :-1].contiguous(), x[:, 1:].contiguous()))
  state = {"i": 0}

  def step(x, y):
    logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v).float(), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss

  def run(n):
    t0 = time.perf_counter()
    for _ in range(n):
      loss = step(*batches[state["i"] % len(batches)])
      state["i"] += 1
    float(loss.detach())
    return (time.perf_counter() - t0) / n

  t0 = time.perf_counter()
  run(max(warmup, 1))
  info = {"side": f"torch_{attn}", "torch": torch.__version__,
          "transformers": transformers.__version__, "threads": torch.get_num_threads(),
          "num_params": sum(p.numel() for p in model.parameters()),
          "tokens_per_step": b * t, "setup_s": time.perf_counter() - t0,
          "mkldnn": torch.backends.mkldnn.is_available()}
  serve(info, run)


if __name__ == "__main__":
  spec = json.loads(sys.argv[1])
  if spec["side"] == "el_jax":
    el_jax_worker(spec["config_args"], spec["warmup"], spec["all_positions"], spec["cpu_dots"],
                  spec["cpu_devices"], spec["extra_dots"], spec["attention_blocks"])
  else:
    s = spec["shape"]
    torch_worker(s, spec["attn"], spec["warmup"], s["lr"], s["clip"], spec["threads"],
                 spec.get("venv", "the torch environment"))
