r"""The accelerator check and its speed figures: the analysis and page sections of the JSON
that `python -m el_jax.tools.verify` writes on a GPU or TPU (the command is el_jax's own; this
folder reads what it measured).

  python -m el_jax.tools.verify --out=verify.json       # on the accelerator: about 5 minutes
  cp verify.json results/verify/verify_<device>_<date>.json
  python -m el_jax.experiment --config=tools/verify/config.py:cpu --stage=analyze
  python -m el_jax.report

The analysis (seconds, on any CPU) reads every results/verify/verify_*.json: per session the
verdict, the golden step's relative errors at each precision, stacked against sequential seeds,
el_jax.main end to end, the measured matmul ceilings, the train-step speed with its MFU, and el_jax
against PyTorch on the same device. Its sections are "Verify", "Train-step speed" and "Against
PyTorch on the same GPU" on docs/results/accelerator.md, and "On a GPU: the train step against
PyTorch" on docs/results/speed.md; without a verify file each table reads "Not yet run".
Expected on an H200: the golden step within 1e-4 at the highest precision (2.1e-07), MFU 8-18%,
el_jax 2.7x-6.8x PyTorch's eager step.

Variants: `cpu` and `paper` (the committed sessions, whatever machine analyses them), `test` (a
folder under runs/ that a test fills).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/verify"  # verify_<device>_<date>.json of each session, analysis.json
  if variant == "test":
    c.results_dir = "runs/verify_test"
  return c
