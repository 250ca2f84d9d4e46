"""Data sets for el_jax experiments.

Where data live:
  shipped   files that come with the package, under el_jax/core/data/resources/ (their origin and
            SHA-256 in its README.md): the paper's PCFG grammar (`PCFG_GRAMMAR`) and the
            reference implementation's path-star test sets, stored xz-compressed
            (`path_star_test_file` returns an uncompressed copy).
  cache     what el_jax generates or unpacks, under `cache_dir(name)`: `$EL_JAX_CACHE/<name>`,
            or `~/.cache/el_jax/<name>` when EL_JAX_CACHE is not set.
Nothing is read from outside the package and the cache unless a config names a file.
"""
import lzma
import os
from el_jax.infra import workdir  # temp file, fsync, os.replace: never a torn file

RESOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources")

# (degree, path_len, num_nodes) of the shipped path-star test sets (20,000 graphs each), with
# the size in bytes of each uncompressed file.
PATH_STAR_TEST_SETS = {(2, 3, 50): 728_163, (2, 5, 50): 1_288_635, (5, 3, 50): 1_399_458}
_PATH_STAR_NAME = "deg_{}_path_{}_nodes_{}_test_20000.txt"


def cache_dir(name):
  """`$EL_JAX_CACHE/<name>`, or `~/.cache/el_jax/<name>` when EL_JAX_CACHE is not set: where
  el_jax caches what it generates (label-copy examples, MLM corpora, TFDS data sets, ...)."""
  root = os.environ.get("EL_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                        "el_jax")
  return os.path.join(root, name)


def resource_path(*parts):
  """Absolute path of a file shipped with el_jax, `el_jax/core/data/resources/<parts...>`."""
  path = os.path.join(RESOURCES, *parts)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{os.path.join(*parts)!r} is not shipped with el_jax (looked for "
                            f"{path}; see {os.path.join(RESOURCES, 'README.md')})")
  return path


# The paper's grammar (seed paper 002; Liuhong99/implicitbiasmlmcode, pcfg/rule_deep_mlm.txt).
PCFG_GRAMMAR = os.path.join(RESOURCES, "pcfg", "rule_deep_mlm.txt")


def path_star_test_file(degree, path_len, num_nodes):
  """Path of the reference implementation's test set for G(degree, path_len) over num_nodes
  node ids, uncompressed (20,000 graphs, one per line; `el_jax.core.data.path_star.load` reads it).

  The shipped `.xz` is unpacked once into `cache_dir("path_star")` (`workdir.atomic_open`:
  temporary file, then `os.replace`); a cached copy of the wrong size is unpacked again.
  ValueError, naming the shipped sets, for any other (degree, path_len, num_nodes).
  """
  key = (degree, path_len, num_nodes)
  if key not in PATH_STAR_TEST_SETS:
    shipped = ", ".join(f"(degree={d}, path_len={l}, num_nodes={n})"
                        for d, l, n in PATH_STAR_TEST_SETS)
    raise ValueError(f"no path-star test set is shipped for degree={degree}, "
                     f"path_len={path_len}, num_nodes={num_nodes}; shipped: {shipped} "
                     f"(or generate the test graphs: data.test_file=\"\")")
  name = _PATH_STAR_NAME.format(*key)
  src = resource_path("path_star", name + ".xz")
  out_dir = cache_dir("path_star")
  out = os.path.join(out_dir, name)
  if os.path.isfile(out) and os.path.getsize(out) == PATH_STAR_TEST_SETS[key]:
    return out
  with workdir.atomic_open(out, binary=True) as f, lzma.open(src, "rb") as z:
    while chunk := z.read(1 << 20):
      f.write(chunk)
  return out
