"""el_jax's train step against Hugging Face GPT-NeoX on PyTorch, on a CPU, same shape."""
