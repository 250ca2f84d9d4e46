"""Path-star graphs (seed 000 section 5.1, Table 1) as a `Task` of `el_jax.run.train`.

One graph per row (no packing); the loss is on the l path tokens only.

Splits: `train` (generated, data seed stream 0; evaluated on its first
`train.eval_train_graphs` graphs), `valid` (generated, stream 2, disjoint
draws from the training distribution, for choosing hyperparameters) and
`test` (the reference implementation's file `data.test_file`, or generated
from stream 1 when it is empty). With `data.pipeline="grain"` they are read from the TFDS
data set `el_jax_path_star` and the training batches come from a grain loader
(`base.PIPELINES`).

Metric groups: `decision` (the first node after the source, in output order:
index 1, or l - 2 for the reverse variant: it needs the goal's parent) and
`rest` (the other path tokens). With teacher forcing the "Clever Hans" cheat
drives the loss on `rest` to zero while `decision` stays near log(d).

Evaluation metrics per split:
  em_all        exact match of the whole path under greedy decoding (the paper's accuracy)
  em_decision   the decision token right under greedy decoding
  em_rest       every other path token right under greedy decoding
  tok           mean per-token accuracy under greedy decoding
  decision_legal, walk_legal
                whether the greedy decision is a legal step, and the greedy path a
                legal walk, in the graph (`path_star.legality`)
  greedy_pos<j> accuracy of output token j under greedy decoding
  tf_pos<j>     accuracy of output token j given the true earlier tokens (teacher forced)
  tf_em         all tokens right under teacher forcing
  n_all         graphs evaluated
"""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from el_jax.core.data import path_star
from el_jax.core.models import decoder
from el_jax.core.tasks import base


@functools.lru_cache(maxsize=4)
def _generated(spec, num, seed, stream):
  return path_star.generate_graphs(num, spec.degree, spec.path_len, spec.num_nodes,
                                   seed=[seed, stream])


@functools.lru_cache(maxsize=4)
def _test_graphs(spec, num_test, seed, test_file):
  if test_file:
    return path_star.load(test_file, spec, limit=num_test or None)
  return _generated(spec, num_test, seed, 1)


def greedy_paths(graphdef, spec, variant, params, inputs_NxT):
  """(greedy [n, l], teacher_forced [n, l]) predictions of the output tokens.

  Teacher forced: one pass on the true inputs. Greedy: pass j predicts output
  token j from inputs that carry the model's own tokens 0..j-1 (teacherless
  inputs stay `$`, so there greedy = teacher forced). A row whose greedy tokens
  0..j-1 are all correct has exactly the true inputs up to the position read,
  so (the model being causal) its greedy token j *is* its teacher-forced token
  j: it is taken from there, and pass j runs only if some row went off track
  (`lax.cond`), e.g. never for a model that solves the task.
  """
  pos = spec.target_positions
  logits = decoder.apply(graphdef, params, inputs_NxT, None, pos)
  tf = jnp.argmax(logits, axis=-1).astype(inputs_NxT.dtype)
  if variant == "teacherless":
    return tf, tf
  ctx = inputs_NxT
  preds = [tf[:, 0]]  # nothing of the output is in the input yet
  on_track = jnp.ones(tf.shape[0], bool)
  for j in range(1, spec.path_len):
    slot = spec.prefix_len + j - 1  # input position that holds output token j - 1
    on_track = on_track & (preds[-1] == inputs_NxT[:, slot])
    ctx = ctx.at[:, slot].set(preds[-1])

    def recompute(ctx=ctx, j=j):
      lg = decoder.apply(graphdef, params, ctx, None, pos[j:j + 1])
      return jnp.argmax(lg[:, 0], axis=-1).astype(ctx.dtype)

    p = jax.lax.cond(jnp.all(on_track), lambda j=j: tf[:, j], recompute)
    preds.append(jnp.where(on_track, tf[:, j], p))
  return jnp.stack(preds, axis=1), tf


def _tfds_graphs(config):
  """(train, valid, test Graphs, the train data source) of the TFDS data set of `config`."""
  # Heavy, optional: TFDS and grain, for data.pipeline="grain" only.
  from el_jax.core.data import loader
  from el_jax.core.data import tfds_builders
  src = tfds_builders.data_source("el_jax_path_star", config)

  def graphs(name):
    r = loader.read(src[name], range(len(src[name])))
    return path_star.Graphs(r["edges"], r["source"], r["goal"], r["path"])
  return graphs("train"), graphs("valid"), graphs("test"), src["train"]


class PathStarTask(base.BatchSizeRows, base.Task):
  """Path-star graphs G(d, l): the loss on the path, greedy decoding of the whole path."""

  groups = ("decision", "rest")
  resumable_fields = frozenset({"train.eval_batch_size", "train.eval_train_graphs"})

  @classmethod
  def validate_config(cls, config):
    d, t = config.data, config.train
    path_star.check_variant(d.variant)
    path_star.graph_spec(config)  # checks degree / path_len / num_nodes
    if t.batch_size < 1:
      raise ValueError(f"train.batch_size={t.batch_size} must be >= 1")
    if d.num_train < t.batch_size:
      raise ValueError(f"data.num_train={d.num_train} < train.batch_size={t.batch_size}")
    for name, lo in (("num_train", 1), ("num_valid", 1), ("num_test", 0),
                     ("eval_train_graphs", 1)):
      base.check_int("data" if name in d else "train", d if name in d else t, name, lo,
                     " (0 = every graph of data.test_file)" if name == "num_test" else "")
    if t.eval_batch_size < 1:
      raise ValueError(f"train.eval_batch_size={t.eval_batch_size} must be >= 1")
    if not d.test_file and d.num_test < 1:
      raise ValueError("data.num_test=0 means every graph of data.test_file, but no "
                       "data.test_file is set; give data.num_test >= 1 to generate test graphs")
    if d.test_file:
      path = path_star.resolve_test_file(config, path_star.graph_spec(config))
      if not os.path.isfile(path):
        raise ValueError(f"data.test_file: {path!r} does not exist (from the pattern "
                         f"{d.test_file!r})")
    base.data_pipeline(config)

  def __init__(self, config):
    self.config = config
    d, t = config.data, config.train
    self.spec = spec = path_star.graph_spec(config)
    self.variant = d.variant
    self.test_file = path_star.resolve_test_file(config, spec)
    self._loaders = {}
    if base.data_pipeline(config) == "grain":  # the TFDS data set el_jax_path_star
      self.train, self.valid, self.test, self._train_source = _tfds_graphs(config)
    else:
      self.train = _generated(spec, d.num_train, d.data_seed, 0)
      self.valid = _generated(spec, d.num_valid, d.data_seed, 2)
      self.test = _test_graphs(spec, d.num_test, d.data_seed, self.test_file)
    self.train_eval = self.train.subset(slice(0, min(t.eval_train_graphs, d.num_train)))
    toks = path_star.tokens(self.train, spec, self.variant)
    self.inputs, self.targets, self.loss_mask_T = path_star.model_inputs(toks, spec, self.variant)
    self._scored = spec.target_positions.astype(np.int32)
    self.decision_T = np.zeros_like(self.loss_mask_T)
    self.decision_T[self._scored[path_star.decision_index(spec, self.variant)]] = 1.0
    self._eval_inputs = {}

  # --- data ------------------------------------------------------------------

  @property
  def vocab_size(self):
    return self.spec.vocab_size

  @property
  def context_len(self):
    return self.spec.seq_len - 1

  @property
  def num_train(self):
    return len(self.train)

  @property
  def examples_per_step(self):
    return self.config.train.batch_size

  def splits(self):
    return {"train": self.train, "valid": self.valid, "test": self.test}

  def eval_sets(self):
    return (("train", self.train_eval), ("valid", self.valid), ("test", self.test))

  @property
  def scored_positions(self):
    return self._scored

  def batch(self, seed, step):
    if base.data_pipeline(self.config) == "grain":
      return self._loader(seed)[step]
    bs = self.examples_per_step
    idx = base.step_indices(self.num_train, bs, self.config.data.data_seed, seed, step)
    return self.make_batch(self.inputs[idx], self.targets[idx])

  def make_batch(self, inputs, targets):
    """The batch dict of rows of model inputs and targets."""
    mask = np.broadcast_to(self.loss_mask_T, (inputs.shape[0], self.loss_mask_T.size)).copy()
    return {
        "inputs": inputs,
        "targets": targets,
        "loss_mask": mask,
        **base.group_masks(mask, {"decision": self.decision_T, "rest": 1.0 - self.decision_T}),
        "segment_ids": np.zeros_like(inputs),
    }

  def _graphs_batch(self, rec):
    """The batch dict of stacked TFDS records (data.pipeline="grain")."""
    graphs = path_star.Graphs(rec["edges"], rec["source"], rec["goal"], rec["path"])
    toks = path_star.tokens(graphs, self.spec, self.variant)
    inputs, targets, _ = path_star.model_inputs(toks, self.spec, self.variant)
    return self.make_batch(inputs, targets)

  def _loader(self, seed):
    """The grain loader of model seed `seed` (data.pipeline="grain"; `base.grain_loader`)."""
    if seed not in self._loaders:
      self._loaders[seed] = base.grain_loader(self, self._train_source, self._graphs_batch, seed)
    return self._loaders[seed]

  def data_iterator(self, seed):
    """data.pipeline="grain": the grain iterator of `seed` (`base.Task.data_iterator`)."""
    return self._loader(seed).iterator() if base.data_pipeline(self.config) == "grain" else None

  # --- evaluation ------------------------------------------------------------

  def decode_fn(self, graphdef):
    return functools.partial(greedy_paths, graphdef, self.spec, self.variant)

  def model_inputs(self, graphs):
    key = id(graphs)
    if key not in self._eval_inputs:
      toks = path_star.tokens(graphs, self.spec, self.variant)
      self._eval_inputs[key] = (graphs, path_star.model_inputs(toks, self.spec, self.variant)[0])
    return self._eval_inputs[key][1]

  def evaluate(self, evaluator, params, graphs):
    """Greedy exact match, per-group, per-token and per-position accuracy (module docstring)."""
    inputs = self.model_inputs(graphs)
    greedy, tf = base.map_padded(lambda x: evaluator.decode(params, evaluator.put(x)), (inputs,),
                                 self.config.train.eval_batch_size, evaluator.num_devices)
    acc_g = path_star.accuracy(greedy, graphs, self.variant)
    acc_t = path_star.accuracy(tf, graphs, self.variant)
    right = greedy == path_star.targets(graphs, self.variant)
    dec = path_star.decision_index(self.spec, self.variant)
    rest = np.arange(self.spec.path_len) != dec
    out = {"em_all": acc_g["em"], "em_decision": float(right[:, dec].mean()),
           "em_rest": float(right[:, rest].all(axis=1).mean()),
           "tok": float(np.mean(acc_g["per_position"])), "tf_em": acc_t["em"],
           **path_star.legality(greedy, graphs, self.variant)}
    for j, (a, b) in enumerate(zip(acc_g["per_position"], acc_t["per_position"])):
      out[f"greedy_pos{j}"] = float(a)
      out[f"tf_pos{j}"] = float(b)
    out["n_all"] = len(graphs)
    return out

  # --- reporting -------------------------------------------------------------

  def summary_fields(self):
    s = self.spec
    return {"graph": {"degree": s.degree, "path_len": s.path_len, "num_nodes": s.num_nodes,
                      "variant": self.variant, "test_file": self.test_file,
                      "decision_index": path_star.decision_index(s, self.variant)}}

  def write_plots(self, rows, workdir):
    from el_jax.infra import plots  # matplotlib only when training for real
    plots.plot_loss_groups({self.config.loss.name: rows}, os.path.join(workdir, "loss_groups.png"),
                           key="ce", groups=self.groups,
                           group_names={"rest": "other path tokens", "decision": "decision token"})
    plots.plot_path_accuracy(rows, self.spec.path_len, os.path.join(workdir, "accuracy.png"))

  # --- planning (el_jax.tools.plan) --------------------------------------------------

  @classmethod
  def abstract_batch_spec(cls, config):
    """The batch's shapes from the config alone (`base.Task.abstract_batch_spec`)."""
    spec = path_star.graph_spec(config)
    return {"vocab_size": spec.vocab_size, "context_len": spec.seq_len - 1,
            "rows": cls.rows_per_step(config),
            "scored_positions": spec.target_positions.astype(np.int32)}
