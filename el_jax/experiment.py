r"""Runs an experiment folder: its grid, its analysis, the pages.

  python -m el_jax.experiment --config=experiments/<name>/config.py:<variant> \
      [--config.<field>=<value> ...] [--stage=run|analyze|report|all]

An experiment is a folder `experiments/<name>/` (docs/usage.md, "Adding an experiment"):

  config.py    `get_config(variant)`: an ml_collections config (variants `test`, `cpu`,
               `paper` and the experiment's recipes, listed in `VARIANTS`); the docstring
               gives the command, its wall time and where that was measured. Every config has
               `results_dir` (where its rows and analysis.json go).
  run.py       `run(config)`: trains (or reads back) the runs the config declares, through
               `el_jax.run.grid`, and writes their rows under `config.results_dir`.
  analysis.py  `analyze(src, config) -> dict`: every comparison, paired test, Holm family, trend
               and selection the page shows, from the rows (`src`: an
               `el_jax.report.sources.Sources` of `config.results_dir`); NumPy only, no JAX.
               Optionally `plot(analysis, src, config)`: the figures drawn from the rows.
  page.md      its section of a results page (Jinja2; `A.<name>` is its analysis).
  test_<name>.py  its tests.

Stages: `run` trains; `analyze` writes `<results_dir>/analysis.json` (with `sources`, the files
it read) and the figures; `report` regenerates the pages (`python -m el_jax.report`); `all`
(the default) is run, analyze, and report when `results_dir` is the committed one
(`results/<name>`). Every stage runs in the checkout that holds the experiment (the folder above
`experiments/`), so relative paths in a config (`results/<name>`, `runs/<name>`) are that
checkout's whatever the working directory. A section whose page template does not include it
(a new experiment) is appended to the page its first line names: `{# page: <page> #}`.
"""
import importlib
import os
import sys

from absl import flags

from el_jax.infra import workdir as wd
from el_jax.report import render
from el_jax.report import sources as sources_lib
from el_jax.run import cli

STAGES = ("run", "analyze", "report", "all")
ANALYSIS = render.ANALYSIS


class ExperimentError(ValueError):
  """An experiment folder that lacks a part, or a config that lacks a field."""


def folder_of(config_path):
  """(root on sys.path, "experiments.<name>" package) of `experiments/<name>/config.py`."""
  path = os.path.abspath(os.path.expanduser(config_path.partition(":")[0]))
  folder = os.path.dirname(path)
  parent = os.path.dirname(folder)
  if not os.path.isfile(os.path.join(folder, "__init__.py")) or not os.path.isfile(
      os.path.join(parent, "__init__.py")):
    raise ExperimentError(f"{config_path}: an experiment's config is <root>/experiments/<name>/"
                          f"config.py, in folders with an __init__.py (see docs/usage.md, "
                          f"'Adding an experiment')")
  return os.path.dirname(parent), f"{os.path.basename(parent)}.{os.path.basename(folder)}"


def load_part(package, part, root):
  """The module `<package>.<part>` (run or analysis) of an experiment folder."""
  if root not in sys.path:
    sys.path.insert(0, root)
  try:
    return importlib.import_module(f"{package}.{part}")
  except ModuleNotFoundError as e:
    if e.name == f"{package}.{part}":
      raise ExperimentError(f"{package.replace('.', '/')}/ has no {part}.py") from None
    raise


def results_dir(config):
  if "results_dir" not in config:
    raise ExperimentError("an experiment's config needs a field results_dir (where its rows "
                          "and analysis.json go)")
  return os.path.expanduser(config.results_dir)


def analyze(config, package, root):
  """Runs the analysis of `package` on `config.results_dir`; writes and returns
  analysis.json's content (with `sources`: every file it read)."""
  mod = load_part(package, "analysis", root)
  out = results_dir(config)
  src = sources_lib.Sources(out, root=root)
  doc = mod.analyze(src, config)
  if not isinstance(doc, dict):
    raise ExperimentError(f"{package}.analysis.analyze returned {type(doc).__name__}, not a dict")
  doc = {**doc, "sources": src.read}
  os.makedirs(out, exist_ok=True)
  wd.write_json(os.path.join(out, ANALYSIS), doc)
  if hasattr(mod, "plot"):
    mod.plot(doc, src, config)
  return doc


def committed(config, package):
  """Whether `config.results_dir` is the folder the pages read (results/<name>)."""
  name = package.split(".")[-1]
  return os.path.normpath(results_dir(config)) == os.path.join(render.RESULTS, name)


def _flags(fv):
  flags.DEFINE_enum("stage", "all", STAGES, "run: train; analyze: write analysis.json and the "
                    "figures; report: the pages; all: the three", flag_values=fv)


def main(argv=None):
  @cli.guard
  def entry(argv):
    config, _, fv = cli.parse(argv, extra_flags=_flags, require_workdir=False, doc=__doc__)
    try:
      root, package = folder_of(fv["config"].config_filename)
    except ExperimentError as e:
      raise cli.UsageError(f"error: {e}") from None
    stage = fv.stage
    os.chdir(root)
    if stage in ("run", "all"):
      load_part(package, "run", root).run(config)
    if stage in ("analyze", "all"):
      analyze(config, package, root)
      print(f"wrote {os.path.join(results_dir(config), ANALYSIS)}", file=sys.stderr)
    if stage == "report" or (stage == "all" and committed(config, package)):
      code = render.main(["--root", root])
      if code:
        raise SystemExit(code)
  return entry(sys.argv if argv is None else argv)


if __name__ == "__main__":
  main()
