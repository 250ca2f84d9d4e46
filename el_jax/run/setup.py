"""What a run builds from its config, before any step: validation, the Setup and the Trainer.

  train_lib.validate_config(config)     # every field checked before data or model is built
  setup = Setup(config)                 # task (its data), model, loss, optimizer, mesh
  trainer = Trainer(setup)              # the jitted step (donated state), init, decode

`Trainer` refuses, in one line, a run whose parameters, optimizer state and one step's
activations cannot fit the device's memory (`estimate_memory`), before allocating anything.
The loop over steps is `el_jax.run.train`; a whole run in a workdir is `el_jax.run.job`.
"""
import copy
import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from el_jax.run import config as config_lib
from el_jax.infra import distributed
from el_jax.core import losses
from el_jax.core import optim
from el_jax.core import step as step_lib
from el_jax.core import tasks
from el_jax.core.models import decoder
from el_jax.core.models import pretrained


SEED_FIELD = "{seed}"


def pretrained_path(config, seed=None):
  """The checkpoint directory `model.pretrained` names for model seed `seed` (default: the
  config's first): a path containing "{seed}" names one checkpoint per seed (several
  independently pretrained models fine-tuned in one run, seed s from checkpoint s); any other
  path is every seed's. A brace other than "{seed}" is a ValueError."""
  path = config.model.get("pretrained", "")
  rest = path.replace(SEED_FIELD, "")
  if "{" in rest or "}" in rest:
    raise ValueError(f"model.pretrained={path!r}: the only field a path may contain is "
                     f"{SEED_FIELD} (the model seed)")
  if SEED_FIELD not in path:
    return path
  seed = int(config.seeds[0]) if seed is None else int(seed)
  return path.replace(SEED_FIELD, str(seed))


def load_pretrained(config, task, seed=None):
  """(DecoderConfig, params) of the Hugging Face GPT-2 checkpoint `config.model.pretrained`
  (of model seed `seed` where the path contains "{seed}": `pretrained_path`).

  The architecture is the checkpoint's: `model.preset` must be "gpt2" and the size fields of
  config.model (num_layers, num_heads, embed_dim, mlp_dim) must equal the checkpoint's, and
  the task's vocabulary and context must fit it; otherwise a ValueError names what differs.
  """
  m = config.model
  path = pretrained_path(config, seed)
  if m.preset != "gpt2":
    raise ValueError(f"model.pretrained={path!r} is a GPT-2 checkpoint; set model.preset='gpt2' "
                     f"(got {m.preset!r})")
  cfg, params = pretrained.load_gpt2(path)
  want = {"num_layers": m.num_layers, "num_heads": m.num_heads, "embed_dim": m.embed_dim,
          "mlp_dim": m.mlp_dim or 4 * m.embed_dim}
  differ = [f"model.{k}={v} (checkpoint {getattr(cfg, k)})" for k, v in want.items()
            if getattr(cfg, k) != v]
  if differ:
    raise ValueError(f"model.pretrained={path!r} does not match the config: " + ", ".join(differ)
                     + "; set these fields to the checkpoint's sizes")
  if cfg.vocab_size != task.vocab_size:
    raise ValueError(f"model.pretrained={path!r} has a vocabulary of {cfg.vocab_size} tokens, "
                     f"the task {task.vocab_size}; use a task tokenized for this checkpoint")
  if cfg.max_len < task.context_len:
    raise ValueError(f"model.pretrained={path!r} has {cfg.max_len} positions, fewer than the "
                     f"task's context of {task.context_len}")
  if m.dtype != cfg.dtype:
    cfg = dataclasses.replace(cfg, dtype=m.dtype)
  return cfg, params


class Setup:
  """Everything derived from a config once: the task (its data), model, loss, optimizer, mesh."""

  def __init__(self, config, validated=False):
    """`validated=True`: the caller ran `validate_config(config)` already (el_jax.run.job)."""
    if not validated:
      validate_config(config)
    self.config = config
    t = config.train
    task_cls = tasks.get_task_class(config.task)
    # Cheap objects first, so that their config errors come before any data is built. A task
    # with a model of its own (Task.own_model) computes its objective in its own step.
    own = task_cls.own_model
    self.loss_fn = None if own else losses.get_loss_from_config(config.loss)
    self.reduce_fn = None if own else losses.get_reduction_from_config(config.loss)
    self.tx, self.schedule = optim.make_optimizer(config.optim, t.num_steps)
    self.mesh = step_lib.make_mesh(config.get("num_devices", 0))
    rows, n = task_cls.rows_per_step(config), self.mesh.devices.size
    if rows % n:
      raise ValueError(f"{task_cls.describe_batch(config)} cannot be split over {n} "
                       f"devices; use a batch that is a multiple of {n}, or set num_devices")
    self.task = task_cls(config)
    self.steps_per_epoch = self.task.num_train // self.task.examples_per_step
    # None: the task's own model (Task.init_params), not a decoder.
    self.model_cfg = None if own else step_lib.model_config(config, self.task.vocab_size,
                                                            self.task.context_len)
    self.pretrained_params = None  # the first seed's checkpoint (every seed's without "{seed}")
    if config.model.get("pretrained", ""):
      self.model_cfg, self.pretrained_params = load_pretrained(config, self.task)
      self._pretrained_cfg = self.model_cfg
      self.model_cfg = step_lib.with_attention_blocks(self.model_cfg, config)
    self.scored_positions = self.task.scored_positions

  def with_config(self, config):
    """The Setup of `config`, a run that differs from this one only in what
    `el_jax.run.seeds.check_arms` lets stacked runs differ in (seeds, optimizer schedule and
    weight decay, loss hyperparameters), sharing this Setup's task data and mesh: its own
    config, loss, optimizer and schedule (the learning rate its rows log), and a shallow
    copy of the task holding its config (its plots name its loss)."""
    validate_config(config)
    view = copy.copy(self)
    view.config = config
    if self.loss_fn is not None:
      view.loss_fn = losses.get_loss_from_config(config.loss)
    view.tx, view.schedule = optim.make_optimizer(config.optim, config.train.num_steps)
    view.task = copy.copy(self.task)
    view.task.config = config
    return view

  def batch(self, seed, step):
    """The training batch of `step` for model seed `seed` (the task's)."""
    return self.task.batch(seed, step)

  def pretrained_params_for(self, seed):
    """The pretrained weights model seed `seed` starts from (None without model.pretrained):
    its own checkpoint where the path contains "{seed}", which must have the architecture of
    the first seed's (the one the model was built for)."""
    if self.pretrained_params is None:
      return None
    if pretrained_path(self.config, seed) == pretrained_path(self.config):
      return self.pretrained_params
    cfg, params = load_pretrained(self.config, self.task, seed)
    if cfg != self._pretrained_cfg:
      raise ValueError(f"model.pretrained: the checkpoint of seed {seed} "
                       f"({pretrained_path(self.config, seed)}) is {cfg}, not the architecture of "
                       f"the first seed's ({self._pretrained_cfg}); every seed's checkpoint must "
                       f"be the same model")
    return params


def make_setup(config):
  return Setup(config)


def own_init_state(task, tx, seed):
  """The initial train state of a task's own model (`Task.own_model`, `Task.init_params`)."""
  params = task.init_params(seed)
  return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}


class Trainer:
  """Jitted functions for one Setup (shared by all seeds); the `evaluator` tasks evaluate with."""

  def __init__(self, setup: Setup, score_all_positions=False):
    """`score_all_positions=True` computes the logits at every position in the
    train step (same results up to float rounding, slower; for benchmarks)."""
    self.setup = setup
    mesh = setup.mesh
    self.repl = NamedSharding(mesh, P())
    self.data_sharding = NamedSharding(mesh, P("data"))
    # Shapes only (jax.eval_shape): nothing is allocated before `check_memory` has said the
    # run fits. The graphdef is static structure, the same as that of an eager init.
    if setup.model_cfg is None:  # the task's own model (Task.own_model): no graphdef
      init_fn = functools.partial(own_init_state, setup.task, setup.tx)
      abstract = jax.eval_shape(init_fn, 0)
      self.graphdef = None
    else:
      graphdefs = []

      def init_shapes(seed):
        graphdefs.append(decoder.init(setup.model_cfg, seed)[0])
        return step_lib.init_state(setup.model_cfg, setup.tx, seed)
      abstract = jax.eval_shape(init_shapes, 0)
      self.graphdef = graphdefs[0]
      init_fn = functools.partial(step_lib.init_state, setup.model_cfg, setup.tx)
    self.state_sharding = jax.tree.map(lambda _: self.repl, abstract)
    self.abstract_state = abstract
    self.memory = check_memory(setup, abstract, mesh.devices.flat[0], mesh.devices.size)
    self._init = jax.jit(init_fn, out_shardings=self.state_sharding)
    positions = None if score_all_positions else setup.scored_positions
    step_fn = setup.task.step_fn()
    step_kw = {"positions": positions}
    if setup.config.loss.get("reduction", "mean") != "mean":  # "mean": step_lib.train_step's own
      step_kw["reduce_fn"] = setup.reduce_fn
    self.compiler_options = opts = step_lib.compiler_options(setup.config)
    self._step_fn, self._step_kw = step_fn, step_kw
    # The pure step of one seed, (state, batch) -> (state, metrics); el_jax.run.seeds maps it.
    self.pure_step = self.pure_step_with(setup.loss_fn, setup.tx)
    self.step = jax.jit(self.pure_step,
                        in_shardings=(self.state_sharding, self.data_sharding),
                        out_shardings=(self.state_sharding, self.repl), donate_argnums=0,
                        compiler_options=opts)
    # Inputs arrive sharded over `data` (`put`), params replicated.
    self.decode = jax.jit(setup.task.decode_fn(self.graphdef), compiler_options=opts)
    self.num_devices = mesh.devices.size
    self.num_processes = jax.process_count()
    if self.num_processes > 1:  # el_jax.infra.distributed: predictions replicated, readable by every process
      self.decode = jax.jit(setup.task.decode_fn(self.graphdef), out_shardings=self.repl,
                            compiler_options=opts)

  def pure_step_with(self, loss_fn, tx):
    """The pure step of this setup with another per-token loss and optimizer (el_jax.run.seeds
    builds them inside the traced step from each stacked run's hyperparameters)."""
    return functools.partial(self._step_fn, self.graphdef, loss_fn, tx, self.setup.task.groups,
                             **self._step_kw)

  def init(self, seed):
    return self._init(seed)

  def put_batch(self, batch):
    if self.num_processes > 1:  # each process puts its own rows of the global batch
      return distributed.put_rows(batch, self.data_sharding)
    return jax.device_put(batch, self.data_sharding)

  def put(self, arrays):
    """Host arrays (or a tuple of them) -> device arrays sharded over `data`."""
    if self.num_processes > 1:
      return distributed.put_rows(arrays, self.data_sharding)
    return jax.device_put(arrays, self.data_sharding)

  def evaluate(self, params, dataset):
    """The task's evaluation of `params` on `dataset` (a flat dict of floats)."""
    return self.setup.task.evaluate(self, params, dataset)


# Activations kept for the backward pass, per token and layer: K_ACTIVATIONS x embed_dim values
# (the MLP's hidden width before and after its nonlinearity, 2 x mlp_dim = 8 x embed_dim at
# the usual 4x, counted from the config's mlp_dim; the normed inputs, q, k, v, the attention
# output, residual sums and the backward pass's temporaries: 16 x embed_dim), plus
# 3 x num_heads x context for the attention scores, probabilities and their gradient; per
# scored token, the logits and their gradient (2 x vocab). Fitted on this CPU to the peak
# memory of one step of configs/copy_task.py:paper (12.6 GB measured, 13.4 GB estimated) and
# :paper_lc1 (1.6 GB measured with the compiler's own use, 1.0 GB estimated): a rough
# estimate, there to refuse what cannot fit before anything is allocated, not to plan a
# tight fit.
K_ACTIVATIONS = 24
# The bilstm (el_jax.core.models.lstm) keeps K_LSTM_ACTIVATIONS x embed_dim (H) values per token and
# layer, both directions together (each direction's input, its four gate pre-activations and
# activations, c, tanh(c) and h, the scan's backward temporaries). Fitted to XLA:CPU's memory
# analysis (temporaries, el_jax.tools.plan) of the hmm_mlm bilstm step: 34.1 to 34.7 x H per token
# and layer at H 128 / 256 / 512, 4 / 8 layers, batch 256 to 1024 (the transformer's formula
# above gave 24.8 x H at the paper's 512 x 8, 29% short).
K_LSTM_ACTIVATIONS = 35


def activation_values(m, context_len):
  """(values kept per token and layer, the K of that count): `K_LSTM_ACTIVATIONS x H` for the
  bilstm, else the transformer's count of K_ACTIVATIONS."""
  if m.arch == "bilstm":
    return K_LSTM_ACTIVATIONS * m.embed_dim, K_LSTM_ACTIVATIONS
  mlp = m.mlp_dim or 4 * m.embed_dim
  return (K_ACTIVATIONS - 8) * m.embed_dim + 2 * mlp + 3 * m.num_heads * context_len, K_ACTIVATIONS


def tree_bytes(tree):
  """Bytes of the arrays (or ShapeDtypeStructs) of a pytree."""
  return sum(int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize
             for x in jax.tree.leaves(tree))


def estimate_memory(setup, abstract_state, num_devices, platform="cpu", stacked=None):
  """{"params", "opt_state", "grads", "activations", "total"} bytes one device needs for a
  training step of `setup` (see K_ACTIVATIONS), from shapes only ("k_activations": the K
  counted per token and layer, None for a task's own model); with `train.vmap_seeds`,
  the stacked seeds' states (and, for the "vmap" step, activations) count once per seed
  (`stacked`: the number of stacked models, default the config's seeds with
  `train.vmap_seeds`, else 1; stacked runs of el_jax.run.seeds pass theirs)."""
  cfg, m = setup.config, setup.model_cfg
  task_cls = type(setup.task)
  rows = -(-task_cls.rows_per_step(cfg) // num_devices)
  ctx = setup.task.context_len
  scored = setup.scored_positions
  scored = ctx if scored is None else int(np.size(scored))
  activations = 0  # a task's own model (model_cfg None): not estimated (Task.own_model)
  k = None
  if m is not None:
    itemsize = 2 if m.dtype == "bfloat16" else 4
    per_layer, k = activation_values(m, ctx)
    activations = rows * (ctx * m.num_layers * per_layer + scored * 2 * m.vocab_size) * itemsize
  params = tree_bytes(abstract_state["params"])
  opt = tree_bytes(abstract_state["opt_state"])
  if stacked is None:
    stacked = len(cfg.seeds) if cfg.train.get("vmap_seeds", False) else 1
  impl = cfg.train.get("vmap_seeds_impl", "auto")
  if impl == "auto":  # as el_jax.run.seeds.resolve_impl
    impl = "map" if platform == "cpu" else "vmap"
  act_copies = stacked if impl == "vmap" else 1
  out = {"params": params * stacked, "opt_state": opt * stacked, "grads": params * stacked,
         "activations": activations * act_copies, "rows": rows, "context": ctx,
         "k_activations": k}
  out["total"] = out["params"] + out["opt_state"] + out["grads"] + out["activations"]
  return out


def available_memory(device):
  """(bytes, where from) a device can hold: an accelerator's `memory_stats()["bytes_limit"]`;
  on CPU the machine's available RAM (MemAvailable of /proc/meminfo, else sysconf), which
  every CPU device shares. (None, reason) when unknown."""
  if device.platform != "cpu":
    try:
      stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 -- a backend without memory stats: no check
      stats = {}
    if stats.get("bytes_limit"):
      return int(stats["bytes_limit"]), f"{device.platform} memory_stats()['bytes_limit']"
    return None, "no memory_stats()['bytes_limit']"
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024, "MemAvailable of /proc/meminfo"
  except OSError:
    pass
  try:
    return (os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
            "os.sysconf available pages")
  except (ValueError, OSError, AttributeError):
    return None, "unknown"


def _gb(n):
  for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
    if n >= size:
      return f"{n / size:.3g} {unit}"
  return f"{n / 1e3:.3g} kB"


def check_memory(setup, abstract_state, device, num_devices, stacked=None):
  """Refuses (ValueError, one line) a run whose `estimate_memory` exceeds what the devices
  hold (`available_memory`; on CPU the devices share the machine's RAM, so their sum counts),
  naming the estimate and what to lower. Returns the estimate."""
  est = estimate_memory(setup, abstract_state, num_devices, device.platform, stacked)
  have, source = available_memory(device)
  shared = device.platform == "cpu" and num_devices > 1
  need = est["total"] * (num_devices if device.platform == "cpu" else 1)
  if have is None or need <= have:
    return est
  cfg = setup.config
  big = max(("params", "opt_state", "activations"), key=est.get)
  lower = ("model.embed_dim, model.num_layers or model.mlp_dim" if big != "activations" else
           f"the batch ({type(setup.task).describe_batch(cfg)}), data.context_len or the "
           f"model's size")
  k = est["k_activations"]
  per_token = f", with about {k} x embed_dim values per token and layer" if k else ""
  each = (f"{_gb(est['total'])} on each of {num_devices} CPU devices sharing the RAM; "
          if shared else "")
  raise ValueError(
      f"this run needs about {_gb(need)} of memory ({each}estimate: params "
      f"{_gb(est['params'])} + optimizer state {_gb(est['opt_state'])} + gradients "
      f"{_gb(est['grads'])} + activations {_gb(est['activations'])} for {est['rows']} rows x "
      f"{est['context']} tokens{per_token}), more than the {_gb(have)} available "
      f"({device.platform}: {source}); lower "
      f"{lower}, or use a device with more memory")


def _not_int(v):
  return isinstance(v, bool) or not isinstance(v, (int, np.integer))


# What a config of the generic loop must have (the task may need more: Task.validate_config).
REQUIRED_BLOCKS = {
    "seeds": "the model seeds, e.g. c.seeds = (0, 1, 2)",
    "data": "the task's data fields",
    "model": "model.num_layers, num_heads, embed_dim, ...",
    "loss": "loss.name and its hyperparameters",
    "optim": "optim.name, lr, ...",
    "train": "train.num_steps, log_every, eval_every, checkpoint_every, ...",
}


REQUIRED_TRAIN_FIELDS = ("num_steps", "log_every", "checkpoint_every")


def check_required(config):
  """A ValueError naming the config file (when known) and the first missing block of
  `REQUIRED_BLOCKS` or field of `train`, before anything reads them."""
  where = config_lib.source(config)
  where = f"the config ({where})" if where else "the config"
  for name, what in REQUIRED_BLOCKS.items():
    if name not in config:
      raise ValueError(f"{where} has no {name!r} field ({what}); every config of "
                       f"config.task={config.get('task', '<absent>')!r} needs one")
  for name in REQUIRED_TRAIN_FIELDS:
    if name not in config.train:
      raise ValueError(f"{where} has no train.{name} field (an integer >= 1)")


def validate_config(config):
  """Fails early, with the allowed values, on config mistakes (before any data or model)."""
  task_cls = tasks.get_task_class(config.get("task", "<absent>"))
  check_required(config)
  seeds = config.seeds
  if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
    raise ValueError(f"config.seeds={seeds!r} must be a tuple of integers, e.g. ({seeds},)")
  if not isinstance(seeds, (tuple, list)):
    raise ValueError(f"config.seeds={seeds!r} must be a tuple of model seeds, e.g. (0,)")
  if not len(seeds):
    raise ValueError("config.seeds is empty; give at least one model seed, e.g. (0,)")
  config_lib.check_seeds(config)  # every seed field an integer in [0, 2**32)
  repeated = sorted({int(s) for s in seeds if list(seeds).count(s) > 1})
  if repeated:
    raise ValueError(f"config.seeds={tuple(int(s) for s in seeds)!r} repeats seed"
                     f"{'s' if len(repeated) > 1 else ''} {', '.join(map(str, repeated))}; "
                     f"each seed is one run (seed_<s>/ in the workdir), give distinct seeds")
  t = config.train
  for name in REQUIRED_TRAIN_FIELDS:
    lo = 0 if name == "checkpoint_every" else 1
    if _not_int(t[name]) or t[name] < lo:
      raise ValueError(f"train.{name}={t[name]!r} must be an integer >= {lo}"
                       + (" (0 = no checkpoints)" if lo == 0 else ""))
  if t.checkpoint_every == 0 and t.get("stop_at_step", 0):
    raise ValueError(f"train.stop_at_step={t.stop_at_step} stops a run to be continued from "
                     f"its checkpoint, but train.checkpoint_every=0 saves none; give "
                     f"train.checkpoint_every >= 1")
  for name, meaning in (("eval_every", "0 = only at the end"),
                        ("stop_at_step", "0 = train to train.num_steps"),
                        ("keep_checkpoints", "0 = keep every checkpoint")):
    val = t.get(name, 0)
    if _not_int(val) or val < 0:
      raise ValueError(f"train.{name}={val!r} must be an integer >= 0 ({meaning})")
  src = t.get("init_from", "")
  if src and not os.path.isdir(os.path.join(src, f"seed_{int(seeds[0])}", "checkpoints")):
    raise ValueError(f"train.init_from={src!r} is not a workdir with checkpoints of seed "
                     f"{int(seeds[0])}; give a finished run of the same model (or '' = none)")
  pre = config.model.get("pretrained", "")
  for s in (seeds if SEED_FIELD in pre else seeds[:1]) if pre else ():
    path = pretrained_path(config, s)
    if not os.path.isfile(os.path.join(path, "config.json")):
      of = f" (seed {int(s)}: {path!r})" if SEED_FIELD in pre else ""
      raise ValueError(f"model.pretrained={pre!r}{of} is not a Hugging Face GPT-2 checkpoint "
                       f"directory (config.json + model.safetensors); give one, or '' for "
                       f"random weights")
  if not isinstance(config.get("progress", True), bool):
    raise ValueError(f"progress={config.progress!r} must be True or False")
  if not isinstance(t.get("tensorboard", True), bool):
    raise ValueError(f"train.tensorboard={t.tensorboard!r} must be True or False (write "
                     f"TensorBoard events of the metrics rows, or not)")
  n = config.get("num_devices", 0)
  if _not_int(n) or n < 0:
    raise ValueError(f"num_devices={n!r} must be an integer >= 0 (0 = all local devices)")
  blocks = t.get("attention_blocks", 1)
  if _not_int(blocks) or blocks < 1:
    raise ValueError(f"train.attention_blocks={blocks!r} must be an integer >= 1 (1 = one "
                     f"attention einsum over all keys; docs/bench.md)")
  dots = t.get("cpu_dots", "xla")
  if dots not in (*step_lib.CPU_DOTS, "auto"):
    raise ValueError(f"train.cpu_dots={dots!r} must be one of {(*step_lib.CPU_DOTS, 'auto')} (the matmul "
                     f"library of the CPU backend; docs/bench.md)")
  optim.validate_config(config.optim)
  if not task_cls.own_model:  # a task with its own model checks config.model and config.loss
    losses.validate_config(config.loss)
    decoder.validate_model_config(config.model)
  validate_vmap_seeds(config)
  task_cls.validate_config(config)


VMAP_SEEDS_IMPLS = ("auto", "vmap", "map")  # el_jax.run.seeds


def validate_vmap_seeds(config):
  """One-line errors for `train.vmap_seeds` / `train.vmap_seeds_impl` and for the
  combinations the stacked program (`el_jax.run.seeds`) does not support."""
  t = config.train
  on = t.get("vmap_seeds", False)
  if not isinstance(on, bool):
    raise ValueError(f"train.vmap_seeds={on!r} must be True or False")
  impl = t.get("vmap_seeds_impl", "auto")
  if impl not in VMAP_SEEDS_IMPLS:
    raise ValueError(f"train.vmap_seeds_impl={impl!r} must be one of {VMAP_SEEDS_IMPLS}")
  if not on:
    return
  refused = stacking_refusals(config)
  if refused:
    raise ValueError(f"train.vmap_seeds=True does not support {', '.join(refused)}; or set "
                     f"train.vmap_seeds=False to train the seeds one after the other")


def stacking_refusals(config):
  """What a stacked program (el_jax.run.seeds) does not support in `config`, one item per
  field ("flatness.every=2 (set it to 0)", ...); [] when it supports it all."""
  t = config.train
  refused = []
  if flatness_every(config):
    refused.append(f"flatness.every={config.flatness.every} (set it to 0)")
  if "adversarial" in config and config.adversarial.get("enabled", False) is True:
    refused.append("adversarial.enabled=True (set it to False)")
  if config.model.get("pretrained", ""):
    refused.append(f"model.pretrained={config.model.pretrained!r} (set it to '')")
  if t.get("init_from", ""):
    refused.append(f"train.init_from={t.init_from!r} (set it to '')")
  return refused


def flatness_every(config):
  """`flatness.every` (0 when the config has no flatness block)."""
  f = config.get("flatness")
  return f.get("every", 0) if f is not None else 0
