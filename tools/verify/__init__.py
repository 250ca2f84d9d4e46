"""What the accelerators el_jax was lent measured with `python -m el_jax.tools.verify`."""
