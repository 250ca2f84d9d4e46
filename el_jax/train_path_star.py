"""Path-star training setup (seed 000 section 5.1, Table 1) for `el_jax.train`.

`config.task = "path_star"` makes `el_jax.train.train_and_evaluate` use
`PathStarSetup`: one example per row (no packing), the loss on the l path
tokens only, and evaluation by greedy decoding of the whole path. The train
loop, checkpoints, metrics and flatness hook are those of `el_jax.train`.

Logged groups: `loss_hard` / `ce_hard` is the loss on the *decision token*
(the first node after the source, in output order: index 1, or l - 2 for the
reverse variant), `loss_easy` / `ce_easy` that on the other path tokens; with
teacher forcing the "Clever Hans" cheat drives the easy loss to zero while the
decision token stays near log(d).

Evaluation metrics per split (`train` is the first `train.eval_train_graphs`
training graphs, `test` the test set):
  em            exact match of the whole path under greedy decoding (the paper's accuracy)
  tok           mean per-token accuracy under greedy decoding
  decision_legal, walk_legal
                whether the greedy decision is a legal step, and the greedy path a
                legal walk, in the graph (`path_star.legality`)
  greedy_pos<j> accuracy of output token j under greedy decoding
  tf_pos<j>     accuracy of output token j given the true earlier tokens (teacher forced)
  tf_em         all tokens right under teacher forcing
"""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from el_jax import losses
from el_jax import optim
from el_jax import train
from el_jax.data import copy_task
from el_jax.data import path_star
from el_jax.models import decoder


def graph_spec(config):
  d = config.data
  return path_star.GraphSpec(d.degree, d.path_len, d.num_nodes)


@functools.lru_cache(maxsize=4)
def _train_graphs(spec, num_train, seed):
  return path_star.generate_graphs(num_train, spec.degree, spec.path_len, spec.num_nodes,
                                   seed=[seed, 0])


@functools.lru_cache(maxsize=4)
def _test_graphs(spec, num_test, seed, test_file):
  if test_file:
    return path_star.load(test_file, spec, limit=num_test or None)
  return path_star.generate_graphs(num_test, spec.degree, spec.path_len, spec.num_nodes,
                                   seed=[seed, 1])


def resolve_test_file(config, spec):
  """`data.test_file` with `{degree}`, `{path_len}`, `{num_nodes}` filled in ("" = generate)."""
  f = config.data.test_file
  if not f:
    return ""
  return f.format(degree=spec.degree, path_len=spec.path_len, num_nodes=spec.num_nodes)


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


class PathStarSetup:
  """Data, shapes, model, optimizer and mesh of a path-star config (see `train.Setup`)."""

  def __init__(self, config):
    self.config = config
    d, t = config.data, config.train
    self.spec = spec = graph_spec(config)
    path_star.check_variant(d.variant)
    self.variant = d.variant
    self.k = 1  # graphs per context: no packing
    if t.num_steps < 1:
      raise ValueError(f"train.num_steps={t.num_steps} must be >= 1")
    if d.num_train < t.batch_size:
      raise ValueError(f"data.num_train={d.num_train} < train.batch_size={t.batch_size}")
    self.train = _train_graphs(spec, d.num_train, d.data_seed)
    self.test_file = resolve_test_file(config, spec)
    self.test = _test_graphs(spec, d.num_test, d.data_seed, self.test_file)
    n_eval = min(t.eval_train_graphs, d.num_train)
    self.train_eval = self.train.subset(slice(0, n_eval))
    self.steps_per_epoch = d.num_train // t.batch_size
    self.model_cfg = train.model_config(config, spec.vocab_size, spec.seq_len - 1)
    self.loss_fn = losses.get_loss_from_config(config.loss)
    self.tx, self.schedule = optim.make_optimizer(config.optim, t.num_steps)
    self.mesh = train.make_mesh(config.get("num_devices", 0))
    n = self.mesh.devices.size
    if t.batch_size % n:
      raise ValueError(f"train.batch_size={t.batch_size} cannot be split over {n} devices; "
                       f"use a multiple of {n} (or set num_devices)")
    toks = path_star.tokens(self.train, spec, self.variant)
    self.inputs, self.targets, self.loss_mask_T = path_star.model_inputs(toks, spec, self.variant)
    self.scored_positions = spec.target_positions.astype(np.int32)
    self.decision_T = np.zeros_like(self.loss_mask_T)
    self.decision_T[self.scored_positions[path_star.decision_index(spec, self.variant)]] = 1.0
    self._eval_inputs = {}

  def batch(self, seed, step):
    """The training batch of `step`: a deterministic function of (data seed, model seed, step)."""
    epoch, i = divmod(step, self.steps_per_epoch)
    order = copy_task.epoch_order(len(self.train), 100_003 * self.config.data.data_seed + seed,
                                  epoch)
    bs = self.config.train.batch_size
    idx = order[i * bs:(i + 1) * bs]
    mask = np.broadcast_to(self.loss_mask_T, (bs, self.loss_mask_T.size))
    hard = mask * self.decision_T
    return {
        "inputs": self.inputs[idx],
        "targets": self.targets[idx],
        "loss_mask": mask.copy(),
        "easy_mask": mask - hard,
        "hard_mask": hard,
        "segment_ids": np.zeros_like(self.inputs[idx]),
    }

  def eval_sets(self):
    return (("train", self.train_eval), ("test", self.test))

  def decode_fn(self, graphdef):
    return functools.partial(greedy_paths, graphdef, self.spec, self.variant)

  def model_inputs(self, graphs):
    key = id(graphs)
    if key not in self._eval_inputs:
      toks = path_star.tokens(graphs, self.spec, self.variant)
      self._eval_inputs[key] = (graphs, path_star.model_inputs(toks, self.spec, self.variant)[0])
    return self._eval_inputs[key][1]

  def evaluate(self, trainer, params, graphs):
    """Greedy exact match, per-token and per-position accuracy (module docstring)."""
    inputs = self.model_inputs(graphs)
    n = inputs.shape[0]
    ndev = self.mesh.devices.size
    per_call = max(self.config.train.eval_batch_size, 1)
    per_call = -(-per_call // ndev) * ndev
    greedy, tf = [], []
    for lo in range(0, n, per_call):
      x = inputs[lo:lo + per_call]
      m = x.shape[0]
      if m < per_call:  # pad the last call with copies, excluded from the metrics
        x = np.concatenate([x, np.repeat(x[:1], per_call - m, axis=0)])
      g, t = trainer.decode(params, jax.device_put(x, trainer.data_sharding))
      greedy.append(np.asarray(g)[:m])
      tf.append(np.asarray(t)[:m])
    acc_g = path_star.accuracy(np.concatenate(greedy), graphs, self.variant)
    acc_t = path_star.accuracy(np.concatenate(tf), graphs, self.variant)
    out = {"em": acc_g["em"], "tok": float(np.mean(acc_g["per_position"])), "tf_em": acc_t["em"],
           **path_star.legality(np.concatenate(greedy), graphs, self.variant)}
    for j, (a, b) in enumerate(zip(acc_g["per_position"], acc_t["per_position"])):
      out[f"greedy_pos{j}"] = float(a)
      out[f"tf_pos{j}"] = float(b)
    out["n"] = n
    return out

  def summary_fields(self):
    s = self.spec
    return {"graph": {"degree": s.degree, "path_len": s.path_len, "num_nodes": s.num_nodes,
                      "variant": self.variant, "test_file": self.test_file,
                      "decision_index": path_star.decision_index(s, self.variant)}}

  def write_plots(self, rows, workdir):
    from el_jax import plots
    plots.plot_loss_groups({self.config.loss.name: rows}, os.path.join(workdir, "loss_groups.png"),
                           key="ce", group_names={"easy": "other path tokens",
                                                  "hard": "decision token"})
    plots.plot_path_accuracy(rows, self.spec.path_len, os.path.join(workdir, "accuracy.png"))
