"""el_jax's experiments: one folder each (config.py, run.py, analysis.py, page.md, tests).

Run any of them with `python -m el_jax.experiment --config=experiments/<name>/config.py:<variant>`
(docs/usage.md, "Adding an experiment").
"""
