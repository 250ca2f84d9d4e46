r"""el_jax's generated data sets as TensorFlow Datasets builders (array_record, no TensorFlow).

  python -m el_jax.core.data.tfds_builders --name=el_jax_copy_task --variant=cpu [--data_dir=DIR]
  python -m el_jax.core.data.tfds_builders --name=el_jax_path_star --variant=cpu \
      --test_file=reference  # the shipped reference test set (el_jax.core.data.path_star_test_file)

  import tensorflow_datasets as tfds
  import el_jax.core.data.tfds_builders  # registers the builders below with TFDS
  src = tfds.data_source("el_jax_copy_task/<config name the command printed>")
  src["train"][0]  # {"tokens": int32 [S], "easy": bool}

Builders (one BuilderConfig per set of generator parameters; its name spells them out,
so two parameter sets never share a directory):

  el_jax_copy_task  the padded-shifted copy task (`el_jax.core.data.copy_task.make_splits`):
                    splits train / valid / test; features tokens int32 [S], easy bool.
  el_jax_path_star  path-star graphs G(d, l) (`el_jax.core.data.path_star.generate_graphs`, the
                    seed streams of `el_jax.core.tasks.path_star`: train 0, valid 2, test 1);
                    with `test_file` the test split is the graphs of that reference-format
                    file instead (its first `num_test`, 0 = all), and the config name carries
                    the file's SHA-256 prefix. Features edges int32 [E, 2] (parent, child),
                    source, goal int32, path int32 [l].
  el_jax_pcfg       PCFG sentences of `el_jax.core.data.mlm_data` (same seed streams and chunks,
  el_jax_hmm        so the same sentences as `mlm_data.build`): tokens int32 [T] (PAD =
                    V + 1 after the sentence), length int32, mask_pos int32 (the fixed
                    evaluation mask; for train the stream [data_seed, 0, 1] that
                    `mlm_data.train_eval_split` uses), HMM also states int32 [T] (-1 at padding).
                    The exact conditionals are not stored (they are [T, V] floats per
                    sentence; `mlm_data.conditionals` computes them from the tokens).

Records keep the generator's order (`disable_shuffling`): record i of a split is row i of
the generator's arrays (tests/test_tfds.py checks every field against the generators).
Files are written in the `array_record` format, which TFDS reads through
`tfds.data_source` / `builder.as_data_source()` without TensorFlow. The data directory is
`data_dir` if given, else `$EL_JAX_CACHE/tfds`, else `~/.cache/el_jax/tfds`.
"""
import argparse
import ast
import dataclasses
import fcntl
import hashlib
import os
import sys

import numpy as np

from el_jax.run import config as config_lib
from el_jax.core import data
from el_jax.infra import extras
from el_jax.core.data import copy_task
from el_jax.core.data import mlm_data
from el_jax.core.data import path_star

# TFDS: el_jax's `data` extra (this module is imported only where a TFDS data set is used).
tfds = extras.require("tensorflow_datasets", "el_jax's TFDS data sets (data.pipeline='grain')")

VERSION = "1.0.0"
# Run as `python -m el_jax.core.data.tfds_builders` this file is `__main__`: its classes are then
# not registered with TFDS, and `main` runs from the imported module (registered once).
_SKIP = __name__ == "__main__"


def default_data_dir():
  """`$EL_JAX_CACHE/tfds`, or `~/.cache/el_jax/tfds` when EL_JAX_CACHE is not set."""
  return data.cache_dir("tfds")


def _num(x):
  """A float or int as a config-name fragment (0.8 -> 0.8, 1e-05 -> 1e-05)."""
  return repr(float(x)) if isinstance(x, float) else str(int(x))


def _sha12(path):
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()[:12]


class _ArrayRecordBuilder:
  """Mixin: array_record files (readable without TensorFlow) under el_jax's data dir."""

  def __init__(self, *, data_dir=None, file_format=None, **kwargs):
    if file_format not in (None, "array_record", tfds.core.FileFormat.ARRAY_RECORD):
      raise ValueError(f"file_format={file_format!r}: el_jax's builders write only "
                       f"'array_record' (other formats need TensorFlow to read)")
    super().__init__(data_dir=os.path.expanduser(data_dir or default_data_dir()),
                     file_format="array_record",
                     **kwargs)

  def _make_info(self, features, description):
    return tfds.core.DatasetInfo(builder=self, description=description,
                                 features=tfds.features.FeaturesDict(features),
                                 disable_shuffling=True)  # record i = generator row i


def _int_tensor(shape):
  return tfds.features.Tensor(shape=shape, dtype=np.int32)


# ----------------------------------------------------------------------------
# Copy task


@dataclasses.dataclass
class CopyTaskConfig(tfds.core.BuilderConfig):
  """Parameters of `copy_task.make_splits` (defaults: the `test` variant's data fields)."""
  seq_len: int = 2
  pad_len: int = 4
  p_easy: float = 0.8
  num_letters: int = 26
  num_train: int = 64
  num_valid: int = 24
  num_test: int = 48
  data_seed: int = 0

  @classmethod
  def make(cls, **params):
    """A config named after its parameters (e.g. lc2_lp4_pe0.8_nl26_n64-24-48_s0)."""
    if "p_easy" in params:
      params["p_easy"] = float(params["p_easy"])  # 1 and 1.0: one name
    p = dataclasses.asdict(cls(name="tmp", **params))
    name = (f"lc{p['seq_len']}_lp{p['pad_len']}_pe{_num(p['p_easy'])}_nl{p['num_letters']}"
            f"_n{p['num_train']}-{p['num_valid']}-{p['num_test']}_s{p['data_seed']}")
    return cls(name=name, version=VERSION, **params)

  @classmethod
  def from_el_jax(cls, config):
    """The builder config of an el_jax copy-task config (its `data` fields)."""
    d = config.data
    return cls.make(seq_len=d.seq_len, pad_len=d.pad_len, p_easy=float(d.p_easy),
                    num_letters=d.num_letters, num_train=d.num_train, num_valid=d.num_valid,
                    num_test=d.num_test, data_seed=d.data_seed)

  def spec(self):
    return copy_task.CopyTaskSpec(seq_len=self.seq_len, pad_len=self.pad_len,
                                  p_easy=self.p_easy, num_letters=self.num_letters)


class ElJaxCopyTask(_ArrayRecordBuilder, tfds.core.GeneratorBasedBuilder,
                    skip_registration=_SKIP):
  """The padded-shifted copy task's train / valid / test strings (`el_jax.core.data.copy_task`)."""

  VERSION = tfds.core.Version(VERSION)
  BUILDER_CONFIGS = [CopyTaskConfig.make()]

  def _info(self):
    s = self.builder_config.spec().string_len
    return self._make_info({"tokens": _int_tensor((s,)),
                            "easy": tfds.features.Tensor(shape=(), dtype=np.bool_)},
                           "Padded-shifted copy task strings (el_jax.core.data.copy_task).")

  def _split_generators(self, dl_manager):
    c = self.builder_config
    splits = copy_task.make_splits(c.spec(), num_train=c.num_train, num_valid=c.num_valid,
                                   num_test=c.num_test, seed=c.data_seed)
    return {name: self._generate_examples(ds) for name, ds in splits.items()}

  def _generate_examples(self, ds):
    for i in range(len(ds)):
      yield i, {"tokens": ds.tokens[i], "easy": bool(ds.easy[i])}


# ----------------------------------------------------------------------------
# Path-star graphs


@dataclasses.dataclass
class PathStarConfig(tfds.core.BuilderConfig):
  """G(degree, path_len) graphs (defaults: the `test` variant of configs/path_star.py).

  test_file: a reference-format file (`path_star.load`) for the test split ("" = generate
  `num_test` graphs from stream 1; with a file, 0 = all its graphs).
  """
  degree: int = 2
  path_len: int = 3
  num_nodes: int = 12
  num_train: int = 64
  num_valid: int = 24
  num_test: int = 40
  data_seed: int = 0
  test_file: str = ""

  @classmethod
  def make(cls, **params):
    p = dataclasses.asdict(cls(name="tmp", **params))
    path_star.check_sizes(p["degree"], p["path_len"], p["num_nodes"])
    name = (f"d{p['degree']}_l{p['path_len']}_nn{p['num_nodes']}"
            f"_n{p['num_train']}-{p['num_valid']}-{p['num_test']}_s{p['data_seed']}")
    if p["test_file"]:
      if not os.path.isfile(p["test_file"]):
        raise FileNotFoundError(f"path-star test_file {p['test_file']!r} does not exist")
      name += f"_file{_sha12(p['test_file'])}"
    return cls(name=name, version=VERSION, **params)

  @classmethod
  def from_el_jax(cls, config):
    """The builder config of an el_jax path-star config (`data.test_file` resolved)."""
    d = config.data
    spec = path_star.graph_spec(config)
    return cls.make(degree=d.degree, path_len=d.path_len, num_nodes=d.num_nodes,
                    num_train=d.num_train, num_valid=d.num_valid, num_test=d.num_test,
                    data_seed=d.data_seed,
                    test_file=os.path.abspath(path_star.resolve_test_file(config, spec) or "")
                    if d.test_file else "")

  def spec(self):
    return path_star.GraphSpec(self.degree, self.path_len, self.num_nodes)


# Seed streams of el_jax.core.tasks.path_star (train 0, valid 2, generated test 1).
PATH_STAR_STREAMS = {"train": 0, "valid": 2, "test": 1}


def path_star_splits(c: PathStarConfig):
  """{split: path_star.Graphs} of a builder config, as `el_jax.core.tasks.path_star` draws them."""
  spec = c.spec()
  out = {}
  for name, stream in PATH_STAR_STREAMS.items():
    if name == "test" and c.test_file:
      out[name] = path_star.load(c.test_file, spec, limit=c.num_test or None)
    else:
      out[name] = path_star.generate_graphs(getattr(c, f"num_{name}"), c.degree, c.path_len,
                                            c.num_nodes, seed=[c.data_seed, stream])
  return out


class ElJaxPathStar(_ArrayRecordBuilder, tfds.core.GeneratorBasedBuilder,
                    skip_registration=_SKIP):
  """Path-star graphs G(d, l) (`el_jax.core.data.path_star`), optionally with a reference test file."""

  VERSION = tfds.core.Version(VERSION)
  BUILDER_CONFIGS = [PathStarConfig.make()]

  def _info(self):
    spec = self.builder_config.spec()
    return self._make_info({"edges": _int_tensor((spec.num_edges, 2)),
                            "source": _int_tensor(()), "goal": _int_tensor(()),
                            "path": _int_tensor((spec.path_len,))},
                           "Path-star graphs (el_jax.core.data.path_star; Bachmann & Nagarajan 2024).")

  def _split_generators(self, dl_manager):
    return {name: self._generate_examples(g)
            for name, g in path_star_splits(self.builder_config).items()}

  def _generate_examples(self, g):
    for i in range(len(g)):
      yield i, {"edges": g.edges[i], "source": g.source[i], "goal": g.goal[i],
                "path": g.path[i]}


# ----------------------------------------------------------------------------
# PCFG / HMM sentences (el_jax.core.data.mlm_data)


@dataclasses.dataclass
class PCFGConfig(tfds.core.BuilderConfig):
  """Sentences of the grammar file `grammar` (defaults: the `test` sizes of configs/pcfg_mlm.py)."""
  grammar: str = ""
  max_len_tokens: int = 16
  num_train: int = 512
  num_valid: int = 64
  num_test: int = 64
  data_seed: int = 0

  @classmethod
  def make(cls, **params):
    p = dataclasses.asdict(cls(name="tmp", **params))
    if not p["grammar"] or not os.path.isfile(p["grammar"]):
      raise FileNotFoundError(f"grammar={p['grammar']!r}: no such file (the paper's grammar "
                              f"is rule_deep_mlm.txt, shipped as el_jax.core.data.PCFG_GRAMMAR)")
    name = (f"g{_sha12(p['grammar'])}_t{p['max_len_tokens']}"
            f"_n{p['num_train']}-{p['num_valid']}-{p['num_test']}_s{p['data_seed']}")
    return cls(name=name, version=VERSION, **params)

  @classmethod
  def from_el_jax(cls, config):
    d = config.data
    return cls.make(grammar=os.path.abspath(mlm_data.grammar_path(d)),
                    max_len_tokens=d.max_len_tokens, num_train=d.num_train,
                    num_valid=d.num_valid, num_test=d.num_test, data_seed=d.data_seed)

  def data_fields(self):
    """The `config.data` fields `el_jax.core.data.mlm_data` reads."""
    import ml_collections
    return ml_collections.ConfigDict({
        "language": "pcfg", "grammar": self.grammar, "max_len_tokens": self.max_len_tokens,
        "num_train": self.num_train, "num_valid": self.num_valid, "num_test": self.num_test,
        "data_seed": self.data_seed})


@dataclasses.dataclass
class HMMConfig(tfds.core.BuilderConfig):
  """Sentences of the random block-diagonal HMM (defaults: sizes of the `test` variant)."""
  num_states: int = 100
  vocab_size: int = 200
  num_blocks: int = 5
  hmm_seed: int = 0
  length: int = 16
  max_len_tokens: int = 16
  num_train: int = 512
  num_valid: int = 64
  num_test: int = 64
  data_seed: int = 0

  @classmethod
  def make(cls, **params):
    p = dataclasses.asdict(cls(name="tmp", **params))
    name = (f"k{p['num_states']}_v{p['vocab_size']}_b{p['num_blocks']}_hs{p['hmm_seed']}"
            f"_len{p['length']}_t{p['max_len_tokens']}"
            f"_n{p['num_train']}-{p['num_valid']}-{p['num_test']}_s{p['data_seed']}")
    return cls(name=name, version=VERSION, **params)

  @classmethod
  def from_el_jax(cls, config):
    d = config.data
    if any(d.get(k, 0.0) for k in ("trans_concentration", "emit_concentration")):
      raise ValueError("the TFDS HMM builder draws the default (Uniform) HMM only; "
                       "data.trans_concentration / data.emit_concentration must be 0")
    return cls.make(**{k: int(d[k]) for k in (
        "num_states", "vocab_size", "num_blocks", "hmm_seed", "length", "max_len_tokens",
        "num_train", "num_valid", "num_test", "data_seed")})

  def data_fields(self):
    import ml_collections
    return ml_collections.ConfigDict({"language": "hmm", **{
        k: getattr(self, k) for k in ("num_states", "vocab_size", "num_blocks", "hmm_seed",
                                      "length", "max_len_tokens", "num_train", "num_valid",
                                      "num_test", "data_seed")}})


def mlm_splits(c):
  """{split: {field: array}} of a PCFG / HMM builder config, drawn as `mlm_data.build` draws
  them (same seed streams and chunks), without the conditionals."""
  d = c.data_fields()
  lang = mlm_data.language(d)
  out = {}
  for name in mlm_data.SPLITS:
    stream = mlm_data.STREAMS[name]
    tokens, lengths, states = mlm_data._sample(d, lang, int(d[f"num_{name}"]),
                                               [d.data_seed, stream])
    fields = {"tokens": tokens, "length": lengths,
              "mask_pos": mlm_data.fixed_mask_positions(lengths, [d.data_seed, stream, 1])}
    if states is not None:
      fields["states"] = states
    out[name] = fields
  return out


class _MLMBuilder(_ArrayRecordBuilder):

  def _info(self):
    t = self.builder_config.max_len_tokens
    features = {"tokens": _int_tensor((t,)), "length": _int_tensor(()),
                "mask_pos": _int_tensor(())}
    if self._STATES:
      features["states"] = _int_tensor((t,))
    return self._make_info(features, self._DESCRIPTION)

  def _split_generators(self, dl_manager):
    return {name: self._generate_examples(f) for name, f in mlm_splits(self.builder_config).items()}

  def _generate_examples(self, fields):
    for i in range(len(fields["tokens"])):
      yield i, {k: v[i] for k, v in fields.items()}


class ElJaxPcfg(_MLMBuilder, tfds.core.GeneratorBasedBuilder,
                skip_registration=_SKIP):
  """PCFG sentences of `el_jax.core.data.mlm_data` (tokens, length, fixed mask position)."""

  VERSION = tfds.core.Version(VERSION)
  _STATES = False
  _DESCRIPTION = "PCFG sentences (el_jax.core.data.pcfg / mlm_data), PAD-padded."
  # No default config: it needs the grammar file (PCFGConfig.make(grammar=...)).
  BUILDER_CONFIGS = [PCFGConfig(name="needs_a_grammar", version=VERSION)]


class ElJaxHmm(_MLMBuilder, tfds.core.GeneratorBasedBuilder,
               skip_registration=_SKIP):
  """HMM sentences of `el_jax.core.data.mlm_data` (tokens, length, fixed mask position, states)."""

  VERSION = tfds.core.Version(VERSION)
  _STATES = True
  _DESCRIPTION = "Random block-diagonal HMM sentences (el_jax.core.data.hmm / mlm_data)."
  BUILDER_CONFIGS = [HMMConfig.make()]


# ----------------------------------------------------------------------------
# Entry points

# builder name -> (builder class, its BuilderConfig class, the el_jax config it mirrors)
BUILDERS = {
    "el_jax_copy_task": (ElJaxCopyTask, CopyTaskConfig, "copy_task"),
    "el_jax_path_star": (ElJaxPathStar, PathStarConfig, "path_star"),
    "el_jax_pcfg": (ElJaxPcfg, PCFGConfig, "pcfg_mlm"),
    "el_jax_hmm": (ElJaxHmm, HMMConfig, "hmm_mlm"),
}


def builder(name, config, data_dir=None):
  """The TFDS builder `name` (a key of BUILDERS) for a BuilderConfig or an el_jax config."""
  if name not in BUILDERS:
    raise ValueError(f"unknown el_jax TFDS builder {name!r}; known: {sorted(BUILDERS)}")
  cls, cfg_cls, _ = BUILDERS[name]
  if not isinstance(config, tfds.core.BuilderConfig):
    config = cfg_cls.from_el_jax(config)
  if not isinstance(config, cfg_cls):
    raise ValueError(f"{name} takes a {cfg_cls.__name__}, got {type(config).__name__}")
  # TFDS refuses a config object named like a registered one: pass the registered one's name.
  registered = {c.name: c for c in cls.BUILDER_CONFIGS}
  if config.name in registered:
    if registered[config.name] != config:
      raise ValueError(f"{name}: config {config.name!r} differs from the registered one of "
                       f"that name; give it another name")
    config = config.name
  return cls(config=config, data_dir=data_dir)


def prepare(name, config, data_dir=None):
  """Builds (if not built yet) and returns the builder: `builder(...)` + download_and_prepare."""
  b = builder(name, config, data_dir)
  tfds.display_progress_bar(False)  # TFDS's own bars (three per split); one line is printed instead
  if b.is_prepared():
    return b
  # Processes sharing the data dir (several JAX processes of a host, test workers) build it
  # once: the others wait on the lock and then find it prepared.
  root = os.path.expanduser(data_dir or default_data_dir())
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, f".{name}.lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
    b = builder(name, config, data_dir)  # a fresh look at the data dir
    if not b.is_prepared():
      print(f"tfds_builders: building {name}/{b.builder_config.name} in {b.data_dir}",
            file=sys.stderr)
      b.download_and_prepare()
  return b


def data_source(name, config, data_dir=None):
  """{split: random-access source of dict records} of the data set, built first if needed."""
  return prepare(name, config, data_dir).as_data_source()


def _value(text):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def main(argv=None):
  parser = argparse.ArgumentParser(
      prog="python -m el_jax.core.data.tfds_builders",
      description="Builds one of el_jax's data sets as a TFDS data set (array_record) and "
                  "prints how to read it.")
  parser.add_argument("--name", required=True, choices=sorted(BUILDERS), help="builder")
  parser.add_argument("--variant", default="test",
                      help="variant of the el_jax config the builder mirrors (configs/<x>.py), "
                           "whose data fields set the builder config (default test)")
  parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                      help="override a config field, e.g. --set data.num_train=1000 (repeatable)")
  parser.add_argument("--test_file", default=None,
                      help="el_jax_path_star: reference-format test file (data.test_file pattern)")
  parser.add_argument("--data_dir", default=None,
                      help=f"TFDS data dir (default {default_data_dir()})")
  args = parser.parse_args(argv)
  overrides = {}
  for item in args.set:
    if "=" not in item:
      parser.error(f"--set {item!r}: expected FIELD=VALUE, e.g. data.num_train=1000")
    k, v = item.split("=", 1)
    overrides[k] = _value(v)
  if args.test_file is not None:
    if args.name != "el_jax_path_star":
      parser.error("--test_file is only for --name=el_jax_path_star")
    overrides["data.test_file"] = args.test_file
  try:
    config = config_lib.get_config(BUILDERS[args.name][2], args.variant, overrides)
    b = prepare(args.name, config, args.data_dir)
  except (ValueError, KeyError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  full = f"{args.name}/{b.builder_config.name}"
  sizes = ", ".join(f"{k} {v.num_examples}" for k, v in sorted(b.info.splits.items()))
  print(f"built {full} ({sizes}) in {b.data_dir}")
  print(f"read it: import el_jax.core.data.tfds_builders, tensorflow_datasets as tfds; "
        f"src = tfds.data_source({full!r}, data_dir={args.data_dir or default_data_dir()!r})")


if __name__ == "__main__":
  from el_jax.core.data import tfds_builders  # this file under its package name: TFDS registers it there
  tfds_builders.main()
