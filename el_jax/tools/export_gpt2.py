r"""Exports a run as a Hugging Face GPT-2 checkpoint directory (`el_jax.core.models.pretrained`).

  python -m el_jax.tools.export_gpt2 --config=configs/text_lm.py:cpu \
      --export_run=runs/label_copy/text_lm --out=runs/label_copy/small_gpt2
"""
import sys

from el_jax.core.models import pretrained
from el_jax.run import cli


def _export_flags(fv):
  from absl import flags
  flags.DEFINE_string("export_run", None, "workdir of the run to export (required)", flag_values=fv)
  flags.DEFINE_string("out", None, "checkpoint directory to write (required)", flag_values=fv)
  flags.DEFINE_integer("seed", None, "model seed (default: the config's first)", flag_values=fv)
  flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)


def main(argv=None):
  r"""Exports a run as a Hugging Face GPT-2 checkpoint directory:

    python -m el_jax.tools.export_gpt2 --config=configs/text_lm.py:cpu \
        --export_run=runs/label_copy/text_lm --out=runs/label_copy/small_gpt2
  """

  @cli.guard
  def run(argv):
    config, _, fv = cli.parse(argv, extra_flags=_export_flags, require_workdir=False,
                              doc=main.__doc__)
    for name in ("export_run", "out"):
      if not fv[name].value:
        raise cli.UsageError(f"error: --{name} is required (see --help)")
    cfg, step = pretrained.export_run(config, fv.export_run, fv.out, fv.seed, fv.step)
    print(f"wrote {fv.out} ({cfg.num_layers} layers x {cfg.embed_dim}, vocabulary "
          f"{cfg.vocab_size}, {cfg.max_len} positions) from step {step} of {fv.export_run}",
          file=sys.stderr)

  return run(sys.argv if argv is None else argv)


if __name__ == "__main__":
  main()
