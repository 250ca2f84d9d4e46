"""The task interface of `el_jax.run.train`, and the pieces every task shares.

A task is one module with a subclass of `Task` and one config file; it is
registered under `config.task` in `el_jax.core.tasks.REGISTRY` (or at run time with
`el_jax.core.tasks.register`). The generic loop (`el_jax.run.train`) builds the model,
the optimizer and the mesh, and asks the task for everything else through the
members below; it never names a task, a task's config field or a metric group.

Batches (`Task.batch`) are dicts of host arrays with a leading batch axis
(`Task.rows_per_step(config)` rows, sharded over the `data` mesh axis):

  inputs       int32 [B, T]   model input tokens
  targets      int32 [B, T]   next-token targets
  segment_ids  int32 [B, T]   document ids inside a packed row (attention mask)
  loss_mask    float32 [B, T] 1 where the loss is taken
  mask_<g>     float32 [B, T] for each group g of `Task.groups`: the loss
               positions of that group (the groups partition `loss_mask`)

The train step logs `loss_<g>`, `ce_<g>` and `n_<g>` per group; evaluations
return flat dicts whose keys are `<metric>_<g>` for group-wise metrics (plus
`_all`), so metrics.jsonl and summary.json read the same for every task.
"""
import abc
import functools
from typing import Any, Callable, ClassVar, Mapping

import jax
import numpy as np

from el_jax.infra import progress
from el_jax.core import step as step_lib

# Splits every task provides, in the order they are evaluated and reported.
SPLITS = ("train", "valid", "test")


class Task(abc.ABC):
  """One supervised sequence task trained by `el_jax.run.job.train_and_evaluate`.

  Constructed once per config (`Task(config)`): it generates or loads its
  fixed datasets then. Class-level members may be read before that, for
  validation and device planning.
  """

  # --- class-level declarations ----------------------------------------------

  #: Named metric groups of the loss positions, e.g. ("easy", "hard"); each
  #: batch carries one `mask_<g>` per group, and they partition `loss_mask`.
  groups: ClassVar[tuple[str, ...]] = ()

  #: Config fields (dotted) of this task that may change when a workdir is
  #: resumed or read back, because they do not change what a finished seed
  #: computed (evaluation batch sizes, say). The loop adds its own
  #: (`el_jax.run.job.RESUMABLE_FIELDS`).
  resumable_fields: ClassVar[frozenset[str]] = frozenset()

  @classmethod
  @abc.abstractmethod
  def rows_per_step(cls, config) -> int:
    """Rows of one training batch (what is sharded over devices), from the config alone."""

  @classmethod
  def describe_batch(cls, config) -> str:
    """How the config sets the batch, for error messages (e.g. "train.batch_size=12")."""
    return f"{cls.rows_per_step(config)} rows per batch"

  @classmethod
  def validate_config(cls, config) -> None:
    """Raises ValueError, naming the field and the allowed values, for a bad config.

    Called before any data or model is built; the default checks nothing.
    """

  @classmethod
  def single_process_reason(cls, config) -> str:
    """Why `config` must run in one process ("" = it may run in several; el_jax.infra.distributed)."""
    return ""

  @classmethod
  def abstract_batch_spec(cls, config) -> dict:
    """What a training batch of `config` looks like, without building any data (el_jax.tools.plan):
    {"vocab_size", "context_len", "rows" (`rows_per_step`), "scored_positions" (the static
    int32 positions of `scored_positions`, or None)}; equal to what the built task reports.
    The default refuses: a task that supports planning overrides it."""
    raise ValueError(f"task {cls.__name__} does not give its batch shapes from the config alone "
                     f"(Task.abstract_batch_spec), so el_jax.tools.plan cannot plan it")

  # --- the step ------------------------------------------------------------------

  def step_fn(self) -> Callable:
    """The pure train step the loop jits, with the signature of `el_jax.core.step.train_step`
    (default: that function; the MLM task's adversarial pretraining supplies another)."""
    return step_lib.train_step

  # --- a model of the task's own ------------------------------------------------

  #: False (the default): the model is the decoder of `config.model`
  #: (`el_jax.core.models.decoder`), trained on the per-token loss of `config.loss`
  #: (`el_jax.core.losses`). True: the task brings its own model and objective (the Dyck task):
  #: its `validate_config` checks `config.model` and `config.loss`, `init_params` gives the
  #: parameters, and its `step_fn` computes the objective (the loop passes it graphdef=None
  #: and loss_fn=None, and `decode_fn` graphdef=None); its batches hold what that step reads
  #: (still rows_per_step rows, sharded over `data`). What only the decoder has is not
  #: offered (the task's `validate_config` refuses it): `model.pretrained`, the flatness
  #: hook (`flatness.every`), el_jax.tools.plan, and an activation term in the memory check.
  own_model: ClassVar[bool] = False

  def init_params(self, seed):
    """With `own_model`: the initial parameters (a pytree of arrays) of model seed `seed`.
    Traceable (the loop calls it under jax.eval_shape and jax.jit, `seed` traced), and the
    same numbers under jit as eagerly."""
    raise NotImplementedError(f"{type(self).__name__} trains the decoder of config.model "
                              f"(own_model=False), not a model of its own")

  # --- data --------------------------------------------------------------------

  config: Any

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    """Token vocabulary of the model."""

  @property
  @abc.abstractmethod
  def context_len(self) -> int:
    """Tokens per row (the model's maximum length)."""

  @property
  @abc.abstractmethod
  def num_train(self) -> int:
    """Training examples (rows of the training set); fixes `steps_per_epoch`."""

  @property
  @abc.abstractmethod
  def examples_per_step(self) -> int:
    """Training examples consumed by one step (an epoch is num_train // this)."""

  @abc.abstractmethod
  def splits(self) -> Mapping[str, Any]:
    """{split: dataset} for every split in `SPLITS` (train, valid, test), disjoint
    draws fixed by the data seed. Datasets are the task's own types."""

  def eval_sets(self) -> tuple[tuple[str, Any], ...]:
    """(split, dataset) pairs evaluated at every evaluation (default: all splits)."""
    s = self.splits()
    return tuple((name, s[name]) for name in SPLITS)

  @abc.abstractmethod
  def batch(self, seed: int, step: int) -> dict:
    """The training batch of `step` for model seed `seed` (see the module docstring).

    Must be a deterministic function of (data seed, model seed, step), so that
    a resumed run sees the batches an uninterrupted one would.
    """

  def data_iterator(self, seed: int):
    """None (the default): the loop takes its batches from `batch`. A task may instead
    return an iterator over the batches of steps 0, 1, ... for model seed `seed` with
    `get_state()` (JSON-serialisable), `set_state(state)` and `step` (the step of the batch
    `next` returns), e.g. `el_jax.core.data.loader.StepIterator`; the loop then saves its state
    with every checkpoint and restores it on resume. Its batches are global host batches,
    as those of `batch`.
    """
    return None

  @property
  def scored_positions(self) -> np.ndarray | None:
    """Static positions outside which every loss / group mask is zero (None = all).

    The train step computes logits and losses only there.
    """
    return None

  # --- evaluation ----------------------------------------------------------------

  @abc.abstractmethod
  def decode_fn(self, graphdef) -> Callable:
    """f(params, *device_arrays) -> predictions; the loop jits it (`Evaluator.decode`)."""

  @abc.abstractmethod
  def evaluate(self, evaluator, params, dataset) -> dict:
    """Metrics of `params` on `dataset` as a flat {name: float} dict.

    `evaluator` gives the jitted `decode` and `map_padded` (batched calls over
    the mesh). Group-wise metrics are named `<metric>_<group>`.
    """

  # --- reporting -------------------------------------------------------------------

  def summary_fields(self) -> dict:
    """Task-specific entries of summary.json (default none)."""
    return {}

  def write_plots(self, rows, workdir) -> None:
    """Figures from the metrics rows of a finished run (default none)."""


# ----------------------------------------------------------------------------
# Shared pieces


def check_int(section, fields, name, lo, hint=""):
  """ValueError "<section>.<name>=<v> must be an integer >= <lo><hint>" unless the config
  field `fields[name]` is an integer (not a bool) of at least `lo`."""
  v = fields.get(name)
  if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
    raise ValueError(f"{section}.{name}={v!r} must be an integer >= {lo}{hint}")


def order_seed(data_seed, seed):
  """The seed of the training-example order of (data seed, model seed): one stream per pair."""
  return 100_003 * data_seed + seed


def epoch_order(num_examples, seed, epoch):
  """A permutation of the examples for `epoch`, deterministic in (seed, epoch); built once
  per (num_examples, seed, epoch) and kept (read-only) while the epoch's steps use it."""
  return _epoch_order(int(num_examples), int(seed), int(epoch))


# Enough for two epochs of each of 32 stacked seeds (a seed's steps cross an epoch boundary
# one epoch at a time), so a permutation is built once per epoch, never once per step: one
# of 200k path-star graphs costs about 2 ms, one of 4M MLM sentences about 110 ms, against
# a few ms per step on an accelerator (`python -m el_jax.tools.bench --host`).
@functools.lru_cache(maxsize=64)
def _epoch_order(num_examples, seed, epoch):
  order = np.random.default_rng([seed, 2, epoch]).permutation(num_examples)
  order.flags.writeable = False
  return order


def step_indices(num_examples, per_step, data_seed, seed, step):
  """Indices of the training examples of `step` (each epoch a fresh permutation)."""
  steps_per_epoch = num_examples // per_step
  epoch, i = divmod(step, steps_per_epoch)
  order = epoch_order(num_examples, order_seed(data_seed, seed), epoch)
  return order[i * per_step:(i + 1) * per_step]


# `data.pipeline` of the tasks that offer it (copy task, path-star): where training batches
# come from. "memory": the in-memory arrays in the order of `step_indices` (the default);
# "grain": the task's TFDS data set (`el_jax.core.data.tfds_builders`, array_record files under
# $EL_JAX_CACHE/tfds, built on first use) read by a grain loader (`el_jax.core.data.loader`:
# grain's per-epoch shuffle, another order than "memory"), whose iterator state the loop
# saves with each checkpoint (`Task.data_iterator`).
PIPELINES = ("memory", "grain")


def data_pipeline(config):
  """`config.data.pipeline` ("memory" when absent); a ValueError names a value not in PIPELINES."""
  p = config.data.get("pipeline", "memory")
  if p not in PIPELINES:
    raise ValueError(f"data.pipeline={p!r} is not one of {PIPELINES} ('memory': in-memory "
                     f"arrays, 'grain': TFDS files read by a grain loader)")
  return p


def grain_loader(task, source, transform, seed):
  """The grain loader (`el_jax.core.data.loader.Loader`) of model seed `seed` over the training
  data source: `task.examples_per_step` records per step, the global batch (NoSharding: the
  loop puts each process's rows of it on that process's devices), `transform` applied to the
  stacked records."""
  from el_jax.core.data import loader  # heavy, optional: grain (data.pipeline="grain" only)
  return loader.Loader(source, task.examples_per_step,
                       seed=order_seed(task.config.data.data_seed, seed), transform=transform,
                       shard_options=loader.grain.sharding.NoSharding())


def map_padded(fn, arrays, per_call, multiple, sharding=None):
  """Applies `fn` to consecutive chunks of `arrays` (same leading size N) and
  concatenates its outputs, trimmed to N rows.

  Each call gets exactly `per_call` rows (rounded up to a multiple of
  `multiple`, e.g. whole contexts per device); the last chunk is padded with
  copies of its first row, whose outputs are dropped. `fn(*chunk)` returns an
  array or a tuple of arrays with a leading per-row axis. With `sharding`,
  the chunk is put on the devices first. Calls that take longer than a
  couple of seconds in all report their progress (`el_jax.infra.progress`).
  """
  n = arrays[0].shape[0]
  per_call = -(-max(per_call, 1) // multiple) * multiple
  outs = []
  starts = range(0, n, per_call)
  # A long evaluation reports progress (el_jax.infra.progress: labelled by the loop).
  for lo in progress.iterate(starts, total=len(starts), unit="batch"):
    chunk = [a[lo:lo + per_call] for a in arrays]
    m = chunk[0].shape[0]
    if m < per_call:
      chunk = [np.concatenate([c, np.repeat(c[:1], per_call - m, axis=0)]) for c in chunk]
    if sharding is not None:
      chunk = jax.device_put(chunk, sharding)
    out = fn(*chunk)
    single = not isinstance(out, tuple)
    outs.append(tuple(np.asarray(o)[:m] for o in ((out,) if single else out)))
  cat = tuple(np.concatenate([o[i] for o in outs]) for i in range(len(outs[0])))
  return cat[0] if single else cat


def group_masks(loss_mask, group_of_position):
  """{f"mask_{g}": loss_mask * (group == g)} from a {group: float mask} dict."""
  return {f"mask_{g}": loss_mask * m for g, m in group_of_position.items()}


class BatchSizeRows:
  """`rows_per_step` / `describe_batch` of a task whose training batch is `train.batch_size`
  rows (mix in before `Task`: `class MyTask(base.BatchSizeRows, base.Task)`)."""

  @classmethod
  def rows_per_step(cls, config):
    return config.train.batch_size

  @classmethod
  def describe_batch(cls, config):
    return f"train.batch_size={config.train.batch_size}"
