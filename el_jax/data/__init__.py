"""Data sets for el_jax experiments."""
