r"""el_jax's train step against Hugging Face GPT-NeoX on PyTorch on a CPU, same shape: the
issue's targets (el_jax at least 1.3x the faster PyTorch side's tokens/s with scored positions,
at least 1.0x doing the same work).

  python -m el_jax.experiment --config=tools/bench_vs_torch/config.py:cpu \
      --config.out=bench_vs_torch_<cpu>.json
  python -m el_jax.experiment --config=tools/bench_vs_torch/config.py:cpu_devices_ab   # A/Bs
  python -m el_jax.experiment --config=tools/bench_vs_torch/config.py:ynn_fusion_ab
  # the two lines of JAX, one after the other in one session (about 6 minutes each):
  for py in .venv/bin/python .venv312/bin/python; do $py -m el_jax.experiment \
      --config=tools/bench_vs_torch/config.py:cpu --config.cpu_dots=xla \
      --config.attention_blocks=1,3 --config.malloc=tuned \
      --config.out=bench_vs_torch_<cpu>_jax<line>.json; done

The shape is the issue's: configs/copy_task.py:cpu with L_c=1, L_p=207 (one 212-token string per
context), 4 layers x 128 wide, 4 heads, MLP 512, vocab 29, batch 8 x 212 tokens, AdamW +
global-norm clipping 1.0 (`model_config`). Each side runs in a worker process
(tools/bench_vs_torch/run.py; PyTorch in `.venv-torch`, made on first use). Writes
results/bench_vs_torch/<out>; the analysis reads the files listed in `files` (the per-CPU table:
`cpu_kinds`; the A/B tables: `ab_files`), and its sections are "Train step against PyTorch, per
CPU kind" to "What else was tried" on docs/results/speed.md. A new CPU kind's run: add its file
to `files` and `cpu_kinds`, and a section to page.md. About 15 minutes on a 2-core CPU (the
machine was not recorded; the first run also builds .venv-torch); the `test` variant about 3
minutes on a loaded 2-core AMD EPYC. Expected on an AMD EPYC Zen 5: both targets met (scored
positions 1.83x with `attention_blocks=3`, equal work 1.44x); on the Intel Xeons both missed.

Variants: `cpu` (the per-CPU command: XLA's and Eigen's matmuls, 1 and 3 attention blocks,
el_jax's and glibc's malloc, torch eager and SDPA on 2 threads, 7 rounds of 20 steps), `paper`
(the same: a CPU benchmark has no paper size), `cpu_devices_ab` and `ynn_fusion_ab` (the A/Bs
of "What else was tried"), `test` (configs/copy_task.py:test, el_jax's sides only, 1 round of 2
steps, under runs/; no PyTorch needed).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test", "cpu_devices_ab", "ynn_fusion_ab")

MODEL = ("--config=configs/copy_task.py:cpu --config.data.seq_len=1 --config.data.pad_len=207 "
         "--config.data.context_len=212 --config.model.num_layers=4 "
         "--config.train.batch_strings=8")
YNN = ('{"ynn_eltwise":{"xla_cpu_experimental_ynn_fusion_type":"LIBRARY_FUSION_TYPE_DOT,'
       'LIBRARY_FUSION_TYPE_ELTWISE"},"ynn_eltwise_reduce":{"xla_cpu_experimental_ynn_fusion_'
       'type":"LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE,LIBRARY_FUSION_TYPE_REDUCE"}}')
# The committed runs the page shows: the first two from before el_jax recorded the CPU, then one
# per CPU kind (the Zen 5's run before its last one too), the Zen 3's under both lines of JAX,
# then the A/Bs.
FILES = ("bench_vs_torch.json", "bench_vs_torch_slow_machine.json", "bench_vs_torch_zen4.json",
         "bench_vs_torch_xeon_emr.json", "bench_vs_torch_xeon_clx.json",
         "bench_vs_torch_zen5.json", "bench_vs_torch_zen5_run1.json",
         "bench_vs_torch_zen3_jax010.json", "bench_vs_torch_zen3_jax012.json",
         "cpu_devices_ab.json", "ynn_fusion_ab.json")
# One session, one CPU, one file per line of JAX (the lock's, jax 0.10.2, first; then jax
# 0.12.1): the command of the two lines above, under .venv, then under .venv312.
JAX_LINE_FILES = ("bench_vs_torch_zen3_jax010.json", "bench_vs_torch_zen3_jax012.json")
# The per-CPU table: one run per CPU kind, under the lock's line of JAX.
CPU_KINDS = FILES[:6] + JAX_LINE_FILES[:1]
AB_FILES = ("cpu_devices_ab.json", "ynn_fusion_ab.json")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/bench_vs_torch"  # every run's JSON (and log), analysis.json
  c.out = "bench_vs_torch.json"  # this run's file under results_dir
  c.model_config = MODEL  # el_jax's config flags: the model, batch and optimizer benched
  c.steps = 20  # steps per timed window
  c.rounds = 7  # alternating rounds (medians reported)
  c.warmup = 5  # untimed steps after setup
  c.cpu_dots = "xla,eigen"  # el_jax sides: train.cpu_dots values (comma-separated)
  c.extra_cpu_dots = "{}"  # JSON {name: {XLA debug option: value}}: more cpu_dots sets to time
  c.attention_blocks = "1,3"  # el_jax sides: train.attention_blocks values
  c.cpu_devices = "1"  # el_jax sides: host CPU devices the batch is sharded over
  c.malloc = "tuned,glibc"  # el_jax sides: el_jax.infra.hostmem's malloc, glibc's own (before)
  c.all_positions_too = True  # also time el_jax at every position (PyTorch's work)
  c.impls = "eager,sdpa"  # PyTorch attention implementations ("" : el_jax's sides only)
  c.threads = "2"  # PyTorch intra-op threads (comma-separated: each timed)
  c.files = FILES  # the analysis: the runs the page shows
  c.cpu_kinds = CPU_KINDS  # the analysis: the per-CPU table's runs (the last of a kind counts)
  c.ab_files = AB_FILES  # the analysis: the A/B runs (each el_jax side against the default)
  c.jax_line_files = JAX_LINE_FILES  # the analysis: one session's runs under each line of JAX
  if variant == "cpu_devices_ab":
    c.out, c.impls, c.cpu_devices = "cpu_devices_ab.json", "sdpa", "1,2"
    c.attention_blocks, c.malloc = "1", "tuned"
  elif variant == "ynn_fusion_ab":
    c.out, c.impls = "ynn_fusion_ab.json", "sdpa"
    c.cpu_dots, c.extra_cpu_dots = "xla,ynn_eltwise,ynn_eltwise_reduce", YNN
    c.attention_blocks, c.malloc = "1", "tuned"
  elif variant == "test":
    c.results_dir = "runs/bench_vs_torch_test"
    c.model_config = "--config=configs/copy_task.py:test"
    c.steps, c.rounds, c.warmup = 2, 1, 1
    c.cpu_dots, c.attention_blocks, c.malloc, c.impls = "xla", "1", "tuned", ""
    c.files = c.cpu_kinds = ("bench_vs_torch.json",)
    c.ab_files = c.jax_line_files = ()
  return c
