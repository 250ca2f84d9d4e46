r"""el_jax's train step against Hugging Face GPT-NeoX on PyTorch CPU, same shape.

  .venv/bin/python experiments/bench_vs_torch.py [--steps=20] [--rounds=7] \
      [--impls=eager,sdpa] [--config=configs/copy_task.py:cpu --config.x=...]

Without --config the shape is the issue's: configs/copy_task.py:cpu with
L_c=1, L_p=207 (one 212-token string per context), 4 layers x 128 wide,
4 heads, MLP 512, vocab 29, batch 8 x 212 tokens, AdamW + global-norm
clipping 1.0.

torch is not a dependency of el_jax: the PyTorch side runs in its own venv,
`.venv-torch` in the repository root, created here on first use with
`pip install torch==2.13.0 transformers` (the CPU wheel; the script refuses a
CUDA build). Each side runs in a worker process that compiles / warms up
once and then times windows of `--steps` steps on command; the parent
alternates the windows (el_jax, torch eager, torch sdpa, then the reverse
order, `--rounds` times), so that load from other processes hits both
sides alike, and reports the medians and the per-round ratio
el_jax tokens/s / torch tokens/s. Figures go to
results/bench/bench_vs_torch.json.

The PyTorch step: logits = GPTNeoXForCausalLM(inputs), CE over all
positions, backward, clip_grad_norm_(1.0), AdamW.step, zero_grad. The el_jax
step is `el_jax.train.Trainer.step` as trained (masked loss, plus its logging
metrics: per-group losses and CE, margin statistics, grad/update/param norms).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

# el_jax is imported only by the el_jax side and the parent: the torch worker runs in
# .venv-torch, which has neither el_jax nor jax.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_VENV = os.path.join(ROOT, ".venv-torch")
TORCH_PY = os.path.join(TORCH_VENV, "bin", "python")
TORCH_REQ = ["torch==2.13.0", "transformers"]
OUT = os.path.join(ROOT, "results", "bench", "bench_vs_torch.json")
DEFAULT_CONFIG = [
    "--config=configs/copy_task.py:cpu", "--config.data.seq_len=1", "--config.data.pad_len=207",
    "--config.data.context_len=212", "--config.model.num_layers=4",
    "--config.train.batch_strings=8",
]
TAG = "@@"  # prefix of protocol lines on a worker's stdout


# ----------------------------------------------------------------------------
# Workers: set up, then answer "run N" with the mean seconds per step of N steps.


def _serve(info, run):
  print(TAG + json.dumps(info), flush=True)
  for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
      return
    print(TAG + json.dumps({"sec": run(int(cmd[1]))}), flush=True)


def el_jax_worker(config_args, warmup, all_positions, cpu_dots, cpu_devices=1, extra_dots=None):
  import jax
  jax.config.update("jax_num_cpu_devices", cpu_devices)
  from el_jax import bench, cli, train
  from el_jax.models import decoder
  train.CPU_DOTS.update(extra_dots or {})
  config, _ = cli.parse(["bench_vs_torch"] + config_args, require_workdir=False)
  config.train.cpu_dots = cpu_dots
  t0 = time.perf_counter()
  runner = bench.StepRunner(config, warmup, score_all_positions=all_positions)
  m = runner.setup.model_cfg
  info = {"side": _side(cpu_dots, all_positions, cpu_devices), "jax": jax.__version__,
          "device": str(jax.devices()[0]), "cpu_dots": cpu_dots,
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
  _serve(info, runner)


def _side(cpu_dots, all_positions, cpu_devices=1):
  return "el_jax" + ("" if cpu_dots == "xla" else f"_{cpu_dots}") + (
      f"_{cpu_devices}dev" if cpu_devices > 1 else "") + (
      "_all_positions" if all_positions else "")


def torch_worker(shape, attn, warmup, lr, clip, threads):
  import numpy as np
  import torch
  import transformers
  if torch.version.cuda is not None:
    raise SystemExit(f"{TORCH_VENV} has a CUDA build of torch ({torch.__version__}); "
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
  _serve(info, run)


# ----------------------------------------------------------------------------
# Parent


def ensure_torch_venv():
  if os.path.exists(TORCH_PY):
    ok = subprocess.run([TORCH_PY, "-c", "import torch, transformers"],
                        capture_output=True).returncode == 0
    if ok:
      return
  print(f"creating {TORCH_VENV} with {' '.join(TORCH_REQ)} ...", file=sys.stderr)
  base = getattr(sys, "_base_executable", sys.executable)
  subprocess.run([base, "-m", "venv", TORCH_VENV], check=True)
  subprocess.run([TORCH_PY, "-m", "pip", "install", "--quiet", *TORCH_REQ], check=True)
  out = subprocess.run([TORCH_PY, "-c", "import torch; print(torch.version.cuda)"],
                       capture_output=True, text=True, check=True).stdout.strip()
  if out != "None":
    raise SystemExit(f"pip installed a CUDA build of torch (cuda {out}) in {TORCH_VENV}; "
                     f"install the CPU wheel there by hand (pip install torch==2.13.0+cpu)")


class Worker:

  def __init__(self, argv, env=None):
    self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, cwd=ROOT, env=env)
    self.info = self._read()

  def _read(self):
    for line in self.proc.stdout:
      if line.startswith(TAG):
        return json.loads(line[len(TAG):])
    raise RuntimeError(f"worker {self.proc.args} exited with {self.proc.wait()}")

  def run(self, steps):
    self.proc.stdin.write(f"run {steps}\n")
    self.proc.stdin.flush()
    return self._read()["sec"]

  def close(self):
    try:
      self.proc.stdin.write("quit\n")
      self.proc.stdin.close()
    except BrokenPipeError:
      pass
    self.proc.wait()


def _median(xs):
  xs = sorted(xs)
  n = len(xs)
  return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--worker", choices=["el_jax", "torch"], help=argparse.SUPPRESS)
  p.add_argument("--shape", help=argparse.SUPPRESS)
  p.add_argument("--attn", default="eager", help=argparse.SUPPRESS)
  p.add_argument("--all_positions", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--cpu_dots", default="xla,eigen",
                 help="el_jax sides: train.cpu_dots values timed (comma-separated)")
  p.add_argument("--extra_cpu_dots", default="{}",
                 help='JSON {"name": {XLA debug option: value}}: more compiler-option sets '
                      'for the el_jax sides, timed when named in --cpu_dots (A/B of XLA '
                      'options without editing train.CPU_DOTS)')
  p.add_argument("--cpu_devices", default="1",
                 help="el_jax sides: numbers of host CPU devices (jax_num_cpu_devices) the "
                      "batch is sharded over, data-parallel (comma-separated)")
  p.add_argument("--steps", type=int, default=20, help="steps per timed window")
  p.add_argument("--rounds", type=int, default=7, help="alternating rounds (medians reported)")
  p.add_argument("--warmup", type=int, default=5, help="untimed steps after setup")
  p.add_argument("--impls", default="eager,sdpa", help="HF attention implementations")
  p.add_argument("--all_positions_too", action=argparse.BooleanOptionalAction, default=True,
                 help="also time el_jax computing logits at every position, as torch does")
  p.add_argument("--threads", default=str(os.cpu_count()),
                 help="torch intra-op threads; a comma-separated list times each")
  p.add_argument("--out", default=OUT)
  args, config_args = p.parse_known_args(argv)
  config_args = config_args or DEFAULT_CONFIG
  dots = [d for d in args.cpu_dots.split(",") if d]
  try:
    extra = json.loads(args.extra_cpu_dots)
  except ValueError:
    extra = None
  if not isinstance(extra, dict) or not all(isinstance(v, dict) for v in extra.values()):
    raise SystemExit(f"error: --extra_cpu_dots={args.extra_cpu_dots!r} must be a JSON object "
                     "of objects, e.g. '{\"vec512\": {\"xla_cpu_prefer_vector_width\": 512}}'")
  if args.worker == "el_jax":
    return el_jax_worker(config_args, args.warmup, args.all_positions, dots[0],
                         int(args.cpu_devices), extra)
  if args.worker == "torch":
    s = json.loads(args.shape)
    return torch_worker(s, args.attn, args.warmup, s["lr"], s["clip"], int(args.threads))

  ensure_torch_venv()
  me = os.path.abspath(__file__)
  common = [f"--warmup={args.warmup}", f"--extra_cpu_dots={args.extra_cpu_dots}"]
  from el_jax import train
  bad = [d for d in dots if d not in train.CPU_DOTS and d not in extra]
  if not dots or bad:
    raise SystemExit(f"error: --cpu_dots={args.cpu_dots!r}: give some of "
                     f"{list(train.CPU_DOTS) + list(extra)}")
  jax_w = Worker([sys.executable, me, "--worker=el_jax", f"--cpu_dots={dots[0]}", *common,
                  *config_args])
  shape = dict(jax_w.info["shape"])
  from el_jax import cli
  config, _ = cli.parse(["bench_vs_torch"] + config_args, require_workdir=False)
  if config.optim.name != "adamw" or config.optim.weight_decay or config.optim.warmup_steps:
    print("note: the torch side always uses AdamW with constant lr, no weight decay",
          file=sys.stderr)
  shape.update(lr=float(config.optim.lr), clip=float(config.optim.grad_clip or 1e30))
  workers = {jax_w.info["side"]: jax_w}
  ndevs = [int(n) for n in args.cpu_devices.split(",") if n]
  if not ndevs or min(ndevs) < 1:
    raise SystemExit(f"error: --cpu_devices={args.cpu_devices!r}: give positive integers")
  for n in ndevs:
    for d in dots:
      for allpos in ((False, True) if args.all_positions_too else (False,)):
        if _side(d, allpos, n) not in workers:
          workers[_side(d, allpos, n)] = Worker(
              [sys.executable, me, "--worker=el_jax", f"--cpu_dots={d}", f"--cpu_devices={n}",
               *common, *config_args] + (["--all_positions"] if allpos else []))
  threads = [int(n) for n in args.threads.split(",") if n]
  for n in threads:
    for impl in [s for s in args.impls.split(",") if s]:
      name = f"torch_{impl}" + (f"_t{n}" if len(threads) > 1 else "")
      try:
        workers[name] = Worker(
            [TORCH_PY, me, "--worker=torch", f"--attn={impl}", f"--shape={json.dumps(shape)}",
             f"--threads={n}", *common])
      except RuntimeError as e:
        print(f"skipping attention implementation {impl!r}: {e}", file=sys.stderr)
  for name, w in workers.items():
    print(f"{name}: {json.dumps(w.info)}", file=sys.stderr)
  load0 = os.getloadavg()
  times = {name: [] for name in workers}
  names = list(workers)
  for r in range(args.rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
      times[name].append(workers[name].run(args.steps))
    print(f"round {r}: " + "  ".join(f"{n} {1e3 * times[n][-1]:.1f} ms" for n in names),
          file=sys.stderr)
  load1 = os.getloadavg()
  for w in workers.values():
    w.close()

  tokens = jax_w.info["tokens_per_step"]
  summary = {}
  for name in names:
    med = _median(times[name])
    summary[name] = {"step_ms_median": 1e3 * med, "tokens_per_s": tokens / med,
                     "step_ms_windows": [1e3 * t for t in times[name]]}
  # MFU: model FLOPs per second over the measured matmul peak. The FLOPs are XLA's count of
  # el_jax's step (cost analysis); torch does the all-positions work, so it gets the FLOPs
  # of el_jax's all-positions step (its own count where that side was timed).
  peak = max(w.info["matmul_peak_flops"] for n, w in workers.items() if n.startswith("el_jax"))
  jax_sides = [n for n in names if n.startswith("el_jax")]
  all_flops = next((workers[n].info["flops_per_step"] for n in jax_sides
                    if n.endswith("_all_positions")), float("nan"))
  for name in names:
    flops = workers[name].info.get("flops_per_step", all_flops)
    summary[name]["flops_per_step"] = flops
    summary[name]["mfu"] = flops / (summary[name]["step_ms_median"] / 1e3) / peak
  ratios = {}
  for a in jax_sides:
    for name in names:
      if name == a or name in jax_sides and jax_sides.index(name) < jax_sides.index(a):
        continue
      per_round = [t / j for t, j in zip(times[name], times[a])]
      ratios[f"{a}/{name}"] = {"median": _median(per_round), "min": min(per_round),
                               "max": max(per_round),
                               "of_medians": summary[a]["tokens_per_s"]
                               / summary[name]["tokens_per_s"]}
  torch_sides = [n for n in names if n.startswith("torch")]
  targets = {}
  for label, want, allpos in (("scored positions vs best torch", 1.3, False),
                              ("all positions (equal work) vs best torch", 1.0, True)):
    cands = [n for n in jax_sides if n.endswith("_all_positions") == allpos]
    if not cands or not torch_sides:
      continue
    best = max(cands, key=lambda n: summary[n]["tokens_per_s"])
    rival = max(torch_sides, key=lambda n: summary[n]["tokens_per_s"])
    got = ratios[f"{best}/{rival}"]["median"]
    targets[label] = {"el_jax": best, "torch": rival, "ratio": got, "target": want,
                      "met": got >= want}
  result = {
      "command": " ".join([os.path.relpath(me, ROOT)] + sys.argv[1:]),
      "config_args": config_args, "shape": shape, "steps_per_window": args.steps,
      "rounds": args.rounds, "cpu_count": os.cpu_count(), "machine": platform.machine(),
      "loadavg_start": load0, "loadavg_end": load1,
      "workers": {n: w.info for n, w in workers.items()},
      "results": summary, "ratio_tokens_per_s": ratios, "matmul_peak_flops": peak,
      "targets": targets,
  }
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  from el_jax import workdir as wd
  wd.write_json(args.out, result)
  print(f"shape: {shape['num_layers']} layers x {shape['embed_dim']} wide, "
        f"{shape['num_heads']} heads, MLP {shape['mlp_dim']}, vocab {shape['vocab']}, "
        f"batch {shape['batch']} x {shape['seq']} tokens; {args.rounds} alternating rounds "
        f"of {args.steps} steps; load average {load0[0]:.1f} -> {load1[0]:.1f}")
  print(f"matmul peak (2048^2 f32 through jnp, best of XLA's and Eigen's matmuls, best "
        f"worker): {peak / 1e9:.1f} GFLOP/s")
  for name in names:
    s = summary[name]
    print(f"{name:30s} step_ms={s['step_ms_median']:8.2f} tokens_per_s={s['tokens_per_s']:9.1f}"
          f" GFLOP/step={s['flops_per_step'] / 1e9:6.3f} MFU={100 * s['mfu']:5.1f}%")
  for key, r in ratios.items():
    print(f"ratio {key} (tokens/s) = {r['median']:.3f} (per-round median; rounds "
          f"{r['min']:.3f}..{r['max']:.3f})")
  for label, t in targets.items():
    print(f"target {label}: {t['el_jax']} / {t['torch']} = {t['ratio']:.3f}, wanted >= "
          f"{t['target']}: {'met' if t['met'] else 'MISSED'}")
  print(f"wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
  if "--worker=torch" in sys.argv:
    main(sys.argv[1:])
  else:
    from el_jax import cli
    cli.script(main)
