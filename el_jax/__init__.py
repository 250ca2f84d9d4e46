"""el_jax: how the loss and the optimizer choose among solutions that fit the data."""

__version__ = "0.1.0"
