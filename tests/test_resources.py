"""Data shipped inside the package (el_jax/core/data/resources/): the checksums its README states,
the path-star test sets unpacked into the cache, and clear errors for what is not shipped."""
import fnmatch
import hashlib
import os
import re
import tomllib

import pytest

from el_jax.core import data
from el_jax.core.data import path_star as ps
from el_jax.core.data import pcfg

README = os.path.join(data.RESOURCES, "README.md")


def _sha256(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _readme():
  with open(README) as f:
    return f.read()


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("EL_JAX_CACHE", str(tmp_path / "cache"))
  return tmp_path / "cache"


def test_grammar_is_the_one_the_readme_names():
  m = re.search(r"sha256\s+([0-9a-f]{64})\s+pcfg/rule_deep_mlm\.txt", _readme())
  assert m, "the README states no sha256 for pcfg/rule_deep_mlm.txt"
  assert data.PCFG_GRAMMAR == data.resource_path("pcfg", "rule_deep_mlm.txt")
  assert _sha256(data.PCFG_GRAMMAR) == m.group(1)
  g = pcfg.PCFG.from_file(data.PCFG_GRAMMAR)
  assert g.num_nonterminals == 50  # the figure el_jax.core.data.pcfg's docstring gives


@pytest.mark.parametrize("key", sorted(data.PATH_STAR_TEST_SETS),
                         ids=lambda k: "deg_{}_path_{}_nodes_{}".format(*k))
def test_path_star_test_file_unpacks_and_parses(cache, key):
  path = data.path_star_test_file(*key)
  assert os.path.dirname(path) == str(cache / "path_star")
  assert os.path.getsize(path) == data.PATH_STAR_TEST_SETS[key]
  row = re.search(r"\| d = {}, l = {} \| [\d,]+ \| `([0-9a-f]{{64}})`".format(*key[:2]), _readme())
  assert row, f"the README has no row for {key}"
  assert _sha256(path) == row.group(1)
  graphs = ps.load(path, ps.GraphSpec(*key))
  assert len(graphs) == 20_000
  assert not [p for p in os.listdir(cache / "path_star") if p.endswith(".tmp")]
  # A second call reuses the file; a damaged (truncated) copy is unpacked again.
  mtime = os.stat(path).st_mtime_ns
  assert data.path_star_test_file(*key) == path and os.stat(path).st_mtime_ns == mtime
  with open(path, "r+b") as f:
    f.truncate(100)
  assert data.path_star_test_file(*key) == path
  assert _sha256(path) == row.group(1)


def test_unknown_path_star_combination_is_a_clear_error(cache):
  with pytest.raises(ValueError, match=r"no path-star test set is shipped for degree=3, "
                     r"path_len=3, num_nodes=50; shipped: \(degree=2, path_len=3, num_nodes=50\), "
                     r"\(degree=2, path_len=5, num_nodes=50\), \(degree=5, path_len=3, "
                     r"num_nodes=50\)"):
    data.path_star_test_file(3, 3, 50)
  assert not os.path.exists(cache)  # nothing written


def test_missing_resource_is_named():
  with pytest.raises(FileNotFoundError, match=r"'pcfg/nope\.txt' is not shipped with el_jax"):
    data.resource_path("pcfg", "nope.txt")


def test_resources_are_package_data():
  """pyproject.toml ships every file under resources/ (a wheel would lack the others)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(root, "pyproject.toml"), "rb") as f:
    globs = tomllib.load(f)["tool"]["setuptools"]["package-data"]["el_jax.core.data"]
  pkg = os.path.dirname(data.RESOURCES)
  files = [os.path.relpath(os.path.join(d, n), pkg).replace(os.sep, "/")
           for d, _, names in os.walk(data.RESOURCES) for n in names]
  assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)
