r"""The paper's Fig. 1 (m=3, d=2, V=5) and appendix figure (m=50, d=60, V=10; GD, NGD, Adam).

  .venv/bin/python experiments/ntp_convergence.py  [--out=results/ntp]

Runs configs/ntp_linear.py:fig1 and :appendix through the same
`train_and_evaluate` as the CLI, each into its own folder under --out
(metrics.jsonl, summary.json, PNGs), and collects the final numbers in
convergence.json.
"""
import argparse
import json
import os

from el_jax import runner
from el_jax.ntp import train
from el_jax import cli
from el_jax import workdir as wd


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="results/ntp")
  ap.add_argument("--variants", default="fig1,appendix")
  a = ap.parse_args(argv)
  out = {}
  for v in a.variants.split(","):
    s = train.train_and_evaluate(runner.get_config("ntp_linear", v), os.path.join(a.out, v))
    out[v] = dict(instance=s["instance"], runs=s["runs"], reg_path=s.get("reg_path"))
  wd.write_json(os.path.join(a.out, "convergence.json"), out)


if __name__ == "__main__":
  cli.script(main)
