"""`python -m el_jax.report`: writes the results pages (`--check`: compares them)."""
import sys

from el_jax.report import render

if __name__ == "__main__":
  sys.exit(render.main())
