r"""Benchmark A/B: el_jax's einsum attention against `jax.nn.dot_product_attention`
(implementation "xla") at the benchmark's shape (tools/bench_vs_torch: configs/copy_task.py:cpu,
one 212-token string per context, 4 layers, batch 8), in one process, interleaved windows, for
the scored-positions and the all-positions step.

  python -m el_jax.experiment --config=tools/bench_attention_ab/config.py:cpu --stage=run

Writes results/bench_attention_ab/attention_ab.log (one line per kind of step: both step times
and the per-round tokens/s ratio dpa / einsum). A log, no JSON and no analysis: "What else was
tried" on docs/results/speed.md names it, and docs/bench.md discusses it (so `--stage=run`: there is
nothing to analyse). A few minutes on a 2-core CPU (AMD EPYC). Expected: no gain from
dot_product_attention (el_jax keeps the einsum).

Variants: `cpu` and `paper` (9 rounds of 20 steps), `test` (configs/copy_task.py:test, 1 round of
2 steps, seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")

SHAPE = (("data.seq_len", 1), ("data.pad_len", 207), ("data.context_len", 212),
         ("model.num_layers", 4), ("train.batch_strings", 8))


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/bench_attention_ab"  # attention_ab.log
  c.log = "attention_ab.log"  # the results, one line per kind of step
  c.config = "copy_task:cpu"  # the model's config name:variant, with `shape` applied
  c.shape = ",".join(f"{k}={v}" for k, v in SHAPE)  # overrides of that config
  c.rounds = 9  # interleaved rounds (medians reported)
  c.steps = 20  # steps per timed window
  c.warmup = 5  # untimed steps after compiling
  if variant == "test":
    c.results_dir = "runs/bench_attention_ab_test"
    c.config, c.shape = "copy_task:test", ""
    c.rounds, c.steps, c.warmup = 1, 2, 1
  return c
