"""A grain loader over a random-access data source (a TFDS data source, say).

  from el_jax.core.data import loader, tfds_builders
  src = tfds_builders.data_source("el_jax_copy_task", config)["train"]
  ld = loader.Loader(src, batch_size=16, seed=3)  # this process's share of 16 records per step
  ld[step]              # the batch of `step` (random access)
  it = ld.iterator()    # batches of steps 0, 1, ...; it.get_state() is JSON
  it.set_state(state)   # continue where `state` was taken

Order. The pipeline is grain's `MapDataset` API over record *indices*:
`range(N).shuffle(s).batch(B, drop_remainder=True).repeat()`. An epoch is
N // B steps; grain's shuffle reshuffles each epoch with seed s + epoch (its
`ShuffleMapDataset`), and `batch` keeps epochs apart, so each epoch is a fresh
permutation whose last N mod B records are dropped. The order is a pure
function of (seed, epoch): s is a 32-bit hash of `seed` (`grain_seed`), so that
model seeds 0 and 1 do not get the shifted streams s + epoch of each other.

Processes. The global batch of a step is the same for any number of processes;
process p of P (`shard_options`, default `grain.sharding.ShardByJaxProcess`)
reads only rows [p B/P, (p+1) B/P) of it, so the processes' batches are
disjoint and together are the global batch (B must be a multiple of P).

State. `StepIterator.get_state()` is {"step": k, "grain": <grain's iterator
state>} (plain JSON); `el_jax.run.train` saves it with each checkpoint of a run
whose task iterates through a loader (`Task.data_iterator`), so a resumed run
continues with the batches an uninterrupted one would have seen.
"""
import numpy as np

from el_jax.infra import extras

# grain: el_jax's `data` extra (this module is imported only where a loader is used).
grain = extras.require("grain", "the grain loader (data.pipeline='grain')")


def grain_seed(seed):
  """A 32-bit shuffle seed for `seed` (an int or a sequence of ints): a hash, not seed itself."""
  entropy = [int(s) for s in np.atleast_1d(seed)]
  if any(s < 0 for s in entropy):
    raise ValueError(f"seed {seed!r} must be non-negative")
  return int(np.random.SeedSequence(entropy + [0x67A1]).generate_state(1, np.uint32)[0])


def stack(records):
  """A list of dict records -> one dict of arrays with a leading record axis."""
  if not records:
    raise ValueError("no records to stack")
  return {k: np.stack([np.asarray(r[k]) for r in records]) for k in records[0]}


def read(source, indices):
  """The records `indices` of `source`, stacked (`__getitems__` when the source has it)."""
  idx = [int(i) for i in indices]
  getitems = getattr(source, "__getitems__", None)
  records = getitems(idx) if getitems is not None else [source[i] for i in idx]
  return stack(list(records))


class Loader:
  """Batches of `batch_size` records of `source` per step, this process's rows of them.

  `transform`: applied to each stacked batch (a dict of arrays), e.g. the task's
  packing into model inputs. `shard_options`: a `grain.sharding.ShardOptions`
  (default: `ShardByJaxProcess`, this JAX process of all).
  """

  def __init__(self, source, batch_size, seed, *, transform=None, shard_options=None):
    n = len(source)
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
      raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1")
    if batch_size > n:
      raise ValueError(f"batch_size={batch_size} is more than the {n} records of the source")
    opts = shard_options if shard_options is not None else grain.sharding.ShardByJaxProcess()
    if batch_size % opts.shard_count:
      raise ValueError(f"batch_size={batch_size} cannot be split over {opts.shard_count} "
                       f"processes; use a multiple of {opts.shard_count}")
    self.source, self.batch_size, self.seed = source, int(batch_size), seed
    self.steps_per_epoch = n // self.batch_size
    self.shard_index, self.shard_count = opts.shard_index, opts.shard_count
    local = self.batch_size // opts.shard_count
    lo = opts.shard_index * local
    self.rows = slice(lo, lo + local)  # this process's rows of the global batch
    # Global batches of record indices (cheap), then this process's rows are read.
    self.index_dataset = (grain.MapDataset.range(n).shuffle(seed=grain_seed(seed))
                          .batch(self.batch_size, drop_remainder=True).repeat())
    ds = self.index_dataset.map(lambda idx: read(source, idx[lo:lo + local]))
    if transform is not None:
      ds = ds.map(transform)
    self.dataset = ds

  def indices(self, step):
    """Record indices of the global batch of `step` (all processes)."""
    return np.asarray(self.index_dataset[int(step)])

  def __getitem__(self, step):
    """The (transformed) batch of `step` for this process."""
    if not isinstance(step, (int, np.integer)) or step < 0:
      raise ValueError(f"step={step!r} must be an integer >= 0")
    return self.dataset[int(step)]

  def iterator(self):
    """A `StepIterator` from step 0 (`set_state` moves it)."""
    return StepIterator(self)


class StepIterator:
  """Batches of steps 0, 1, ... of a Loader, with a JSON-serialisable state.

  `step` is the step whose batch `next` returns. Reads run in the calling
  thread (grain `ReadOptions(num_threads=0)`): the records are local files or
  memory and a batch is read in well under a millisecond per record.
  """

  def __init__(self, loader: Loader):
    self.loader = loader
    opts = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    self._it = iter(loader.dataset.to_iter_dataset(read_options=opts))
    self.step = 0

  def __iter__(self):
    return self

  def __next__(self):
    batch = next(self._it)
    self.step += 1
    return batch

  def get_state(self):
    return {"step": int(self.step), "grain": self._it.get_state()}

  def set_state(self, state):
    if not isinstance(state, dict) or set(state) != {"step", "grain"}:
      raise ValueError(f"not a StepIterator state (expected keys 'step', 'grain'): {state!r}")
    self._it.set_state(state["grain"])
    self.step = int(state["step"])
