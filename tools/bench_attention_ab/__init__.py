"""el_jax's einsum attention against `jax.nn.dot_product_attention`: an A/B of the train step."""
