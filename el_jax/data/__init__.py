"""Data sets for el_jax experiments."""
import os


def cache_dir(name):
  """`$EL_JAX_CACHE/<name>`, or `~/.cache/el_jax/<name>` when EL_JAX_CACHE is not set: where
  el_jax caches what it generates (label-copy examples, MLM corpora, TFDS data sets, ...)."""
  root = os.environ.get("EL_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                        "el_jax")
  return os.path.join(root, name)
