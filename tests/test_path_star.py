"""Path-star graphs: generator invariants and distribution, reference files, tokens, variants, accuracy.

The reference files (shipped xz-compressed in el_jax/core/data/resources/path_star/, unpacked by
`el_jax.core.data.path_star_test_file`) were written by the reference implementation, not by el_jax.
"""
import collections
import os
import re
import types

import jax.numpy as jnp
import numpy as np
import pytest

from el_jax.core import data
from el_jax.core.data import path_star as ps
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

REF_SETS = sorted(data.PATH_STAR_TEST_SETS)  # (degree, path_len, num_nodes) of the shipped files
LINE_RE = re.compile(r"^\d+,\d+(\|\d+,\d+)*/\d+,\d+=\d+(,\d+)*$")


def _spec_of_file(path):
  m = re.match(r"deg_(\d+)_path_(\d+)_nodes_(\d+)_", os.path.basename(path))
  return ps.GraphSpec(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def _check_invariants(line, spec):
  """Independent check of one line: format, source degree, arms, fresh nodes, path."""
  assert LINE_RE.match(line), line
  edges_txt, rest = line.split("/")
  query, path_txt = rest.split("=")
  edges = [tuple(int(v) for v in e.split(",")) for e in edges_txt.split("|")]
  source, goal = (int(v) for v in query.split(","))
  path = [int(v) for v in path_txt.split(",")]
  d, l = spec.degree, spec.path_len
  assert len(edges) == d * (l - 1)
  children = collections.defaultdict(list)
  for a, b in edges:
    children[a].append(b)
  assert len(children[source]) == d  # degree of the source
  arms = []
  for first in children[source]:  # every arm is a chain of l - 1 fresh nodes
    arm, node = [first], first
    while children.get(node):
      assert len(children[node]) == 1
      node = children[node][0]
      arm.append(node)
    assert len(arm) == l - 1
    arms.append(arm)
  nodes = [source] + [v for arm in arms for v in arm]
  assert len(set(nodes)) == len(nodes) == d * (l - 1) + 1  # no node reused
  assert all(0 <= v < spec.num_nodes for v in nodes)
  assert path == [source] + next(a for a in arms if a[-1] == goal)
  assert goal != source
  return edges, source, goal, path


@pytest.mark.parametrize("d,l,n", [(2, 3, 50), (5, 3, 50), (2, 5, 50), (3, 4, 10), (1, 2, 2)])
def test_generator_invariants(d, l, n):
  spec = ps.GraphSpec(d, l, n)
  lines = ps.generate(300, d, l, n, seed=7)
  assert len(lines) == 300
  for line in lines:
    _check_invariants(line, spec)
  assert ps.generate(300, d, l, n, seed=7) == lines  # deterministic in the seed
  assert ps.generate(300, d, l, n, seed=8) != lines


def _reference_sampler(d, l, n, rng):
  """The reference generator's rejection sampler, transcribed (used only to check the distribution)."""
  source = rng.integers(n)
  goal = rng.integers(n)
  while goal == source:
    goal = rng.integers(n)
  path = [source]
  for _ in range(l - 2):
    node = rng.integers(n)
    while node in path or node == goal:
      node = rng.integers(n)
    path.append(node)
  path.append(goal)
  edges = [[path[i], path[i + 1]] for i in range(l - 1)]
  used = set()
  for _ in range(d - 1):
    node, k = source, 1
    while k < l:
      nxt = rng.integers(n)
      if nxt not in used and nxt not in path:
        edges.append([node, nxt])
        used.add(nxt)
        node = nxt
        k += 1
  order = rng.permutation(len(edges))
  return [edges[i] for i in order], path


def test_generator_matches_reference_distribution():
  """Statistics of el_jax's vectorised sampler vs the transcribed rejection sampler.

  Compared: where the decision edge (source -> path[1]) lands in the shuffled
  list, how often the goal id is below N/2, and how often an arm node id is
  below the path's middle node. Means must agree within 4 standard errors.
  """
  d, l, n, m = 3, 4, 12, 4000
  g = ps.generate_graphs(m, d, l, n, seed=3)
  rng = np.random.default_rng(11)
  ref = [_reference_sampler(d, l, n, rng) for _ in range(m)]

  def stats(edges_list, paths):
    pos = [next(i for i, e in enumerate(ed) if list(e) == [p[0], p[1]]) for ed, p in zip(edges_list, paths)]
    low_goal = [p[-1] < n / 2 for p in paths]
    arm_low = [min(b for a, b in ed if b not in p) < p[1] for ed, p in zip(edges_list, paths)]
    return np.array(pos, float), np.array(low_goal, float), np.array(arm_low, float)

  ours = stats(g.edges.tolist(), g.path.tolist())
  theirs = stats([e for e, _ in ref], [p for _, p in ref])
  for a, b in zip(ours, theirs):
    se = np.sqrt(a.var() / m + b.var() / m)
    assert abs(a.mean() - b.mean()) < 4 * se + 1e-12, (a.mean(), b.mean(), se)
  # And against the exact values: the edge position is uniform over E slots.
  e = d * (l - 1)
  assert abs(ours[0].mean() - (e - 1) / 2) < 4 * ours[0].std() / np.sqrt(m)
  counts = np.bincount(g.source, minlength=n)  # the source is uniform over the nodes
  chi2 = ((counts - m / n) ** 2 / (m / n)).sum()
  assert chi2 < n - 1 + 5 * np.sqrt(2 * (n - 1))


def test_too_few_nodes_is_an_error_up_front():
  with pytest.raises(ValueError, match=r"needs degree \* \(path_len - 1\) \+ 1 = 9 distinct nodes "
                     r"but num_nodes=8"):
    ps.generate(1, 4, 3, 8, seed=0)
  with pytest.raises(ValueError, match="path_len=1 must be an integer >= 2"):
    ps.GraphSpec(2, 1, 50)
  ps.generate(2, 4, 3, 9, seed=0)  # exactly enough nodes is fine


@pytest.mark.parametrize("key", REF_SETS, ids=lambda k: "deg_{}_path_{}_nodes_{}".format(*k))
def test_reference_file_round_trip_and_tokens(key):
  path = data.path_star_test_file(*key)
  spec = _spec_of_file(path)
  assert (spec.degree, spec.path_len, spec.num_nodes) == key
  with open(path) as f:
    lines = f.read().splitlines()
  assert len(lines) == 20_000
  graphs = ps.load(path, spec)
  assert len(graphs) == len(lines)
  for line in lines:  # parse -> format round trip, line by line
    assert ps.format_line(*ps.parse_line(line)) == line
  assert graphs.lines() == lines
  for line in lines[::50]:
    _check_invariants(line, spec)
  toks = ps.tokens(graphs, spec)
  e = spec.num_edges
  assert toks.shape == (len(lines), 3 * e + 3 + spec.path_len)
  assert (toks[:, spec.prefix_len - 1] == spec.eq_id).all()
  assert (toks[:, 3 * e - 1] == spec.slash_id).all()
  assert toks.max() < spec.vocab_size and toks.min() >= 0
  for i in range(0, len(lines), 37):  # vectorised tokens == the text tokenizer
    assert toks[i].tolist() == ps.tokenize_text(lines[i], spec)
    assert ps.tokenize_text(lines[i], spec)[:spec.prefix_len] == \
        ps.tokenize_text(lines[i].split("=")[0] + "=", spec)


def test_tokenizer_example():
  spec = ps.GraphSpec(2, 3, 50)
  line = "23,17|36,23|1,32|36,1/36,32=36,1,32"
  assert ps.tokenize_text(line, spec) == [23, 17, 50, 36, 23, 50, 1, 32, 50, 36, 1, 52, 36, 32,
                                          51, 36, 1, 32]
  assert ps.tokenize_text("1,2$", spec) == [1, 2, 53]
  with pytest.raises(ValueError, match="unexpected character 'x'"):
    ps.tokenize_text("1,x", spec)


def test_variants_teacherless_and_reverse():
  spec = ps.GraphSpec(2, 4, 20)
  g = ps.generate_graphs(10, 2, 4, 20, seed=1)
  tf = ps.tokens(g, spec, "teacher_forced")
  rv = ps.tokens(g, spec, "reverse")
  np.testing.assert_array_equal(tf[:, :spec.prefix_len], rv[:, :spec.prefix_len])
  np.testing.assert_array_equal(rv[:, spec.prefix_len:], g.path[:, ::-1])
  np.testing.assert_array_equal(ps.targets(g, "reverse"), g.path[:, ::-1])
  x, y, mask = ps.model_inputs(tf, spec, "teacher_forced")
  xl, yl, maskl = ps.model_inputs(tf, spec, "teacherless")
  np.testing.assert_array_equal(y, yl)
  np.testing.assert_array_equal(mask, maskl)
  assert mask.sum() == spec.path_len and mask.shape == (spec.seq_len - 1,)
  np.testing.assert_array_equal(y[:, mask > 0], g.path)  # targets at the mask = the path
  np.testing.assert_array_equal(x[:, :spec.prefix_len], xl[:, :spec.prefix_len])
  assert (xl[:, spec.prefix_len:] == spec.dollar_id).all()
  np.testing.assert_array_equal(x[:, spec.prefix_len:], g.path[:, :-1])
  assert ps.decision_index(spec, "teacher_forced") == 1
  assert ps.decision_index(spec, "reverse") == spec.path_len - 2
  for fn in (lambda: ps.tokens(g, spec, "backwards"), lambda: ps.decision_index(spec, "x")):
    with pytest.raises(ValueError, match=r"valid variants: \('teacher_forced', 'teacherless', "
                       r"'reverse'\)"):
      fn()


@pytest.mark.parametrize("bad,why", [
    ("1,2|3,4/1,4", "one '/' before one '='"),
    ("1,2|3,4=1,4/1,3,4", "one '/' before one '='"),
    ("1,2|3/1,4=1,3,4", "edge '3' must be 'parent,child'"),
    ("1,2|a,4/1,4=1,3,4", "'a' is not a node id"),
    ("1,2|2,4|1,3|3,5/1,4=1,3,4", r"path steps \[\(3, 4\)\] are not edges"),
    ("1,2|2,4|1,3|3,5/1,4=1,2", "path of 2 nodes"),
    ("1,2|2,4|1,3|3,50/1,4=1,2,4", "node id 50 >= num_nodes=50"),
    ("1,2|2,4|1,3/1,4=1,2,4", "3 edges"),
])
def test_malformed_line_names_file_and_line(tmp_path, bad, why):
  spec = ps.GraphSpec(2, 3, 50)
  good = "1,2|2,4|1,3|3,5/1,4=1,2,4"
  p = tmp_path / "g.txt"
  p.write_text("\n".join([good, good, bad, good]) + "\n")
  with pytest.raises(ValueError, match=rf"g\.txt:3: malformed path-star line .*{why}"):
    ps.load(str(p), spec)
  assert len(ps.load(str(p), spec, limit=2)) == 2
  with pytest.raises(FileNotFoundError, match="does not exist"):
    ps.load(str(tmp_path / "nope.txt"), spec)


def test_accuracy_of_predictions():
  g = ps.generate_graphs(20, 2, 3, 50, seed=0)
  for variant in ps.VARIANTS:
    acc = ps.accuracy(ps.targets(g, variant), g, variant)
    assert acc == {"em": 1.0, "per_position": [1.0, 1.0, 1.0]}
  wrong = g.path.copy()
  wrong[:5, 1] = -1
  acc = ps.accuracy(wrong, g)
  assert acc["em"] == 0.75 and acc["per_position"] == [1.0, 0.75, 1.0]


def _legality_by_sets(pred, g, variant):
  """Plain-Python legality: edge sets per graph, walks checked step by step."""
  dec_ok, walk_ok = [], []
  for p, edges, src, goal in zip(pred.tolist(), g.edges.tolist(), g.source.tolist(),
                                 g.goal.tolist()):
    es = {tuple(e) for e in edges}
    if variant == "reverse":
      es = {(b, a) for a, b in es}
    start = goal if variant == "reverse" else src
    ok = [(a, b) in es for a, b in zip(p[:-1], p[1:])]
    d = len(p) - 2 if variant == "reverse" else 1
    dec_ok.append(ok[d - 1])
    walk_ok.append(p[0] == start and all(ok))
  return {"decision_legal": float(np.mean(dec_ok)), "walk_legal": float(np.mean(walk_ok))}


@pytest.mark.parametrize("variant", ["teacher_forced", "reverse"])
def test_legality_of_predicted_paths(variant):
  d, l, n = 3, 4, 30
  g = ps.generate_graphs(400, d, l, n, seed=5)
  true = ps.targets(g, variant)
  assert ps.legality(true, g, variant) == {"decision_legal": 1.0, "walk_legal": 1.0}
  rng = np.random.default_rng(0)
  pred = true.copy()
  kind = rng.integers(4, size=len(g))
  for i in range(len(g)):
    # Forward-order arms: the source's other children and their chains.
    kids = {a: b for a, b in g.edges[i].tolist()}
    others = [b for a, b in g.edges[i].tolist() if a == g.source[i] and b != g.path[i, 1]]
    arm = [int(g.source[i]), others[0]]
    while arm[-1] in kids:
      arm.append(kids[arm[-1]])
    if kind[i] == 1:  # Clever Hans: a wrong arm, then follow its edges
      pred[i] = arm[::-1] if variant == "reverse" else arm
    elif kind[i] == 2:  # a legal wrong decision, then copy the goal
      walk = arm[:-1] + [int(g.goal[i])]
      pred[i] = walk[::-1] if variant == "reverse" else walk
    elif kind[i] == 3:  # junk
      pred[i] = rng.integers(n, size=l)
  got = ps.legality(pred, g, variant)
  assert got == _legality_by_sets(pred, g, variant)
  if variant == "teacher_forced":  # kinds 0-2 make legal decisions, junk almost never does
    assert abs(got["decision_legal"] - np.mean(kind < 3)) < 0.02
    assert abs(got["walk_legal"] - np.mean(kind < 2)) < 0.02
  with pytest.raises(ValueError, match="predictions have shape"):
    ps.legality(pred[:, :2], g, variant)


# ----------------------------------------------------------------------------
# Greedy decoding through the training setup, with an oracle in place of the model


def _oracle_apply(toks_NxT, spec, choose_right):
  """A 'model' that follows edges from its current input token (the Clever-Hans
  mechanism) and, at the source, takes the path's arm (`choose_right`) or another."""
  e = spec.num_edges
  true = jnp.asarray(toks_NxT)

  def apply(graphdef, params, inputs, segment_ids=None, positions=None):
    del graphdef, params, segment_ids
    parents, children = inputs[:, 0:3 * e:3], inputs[:, 1:3 * e:3]
    source = inputs[:, 3 * e]
    logits = []
    for p in np.asarray(positions).tolist():
      cur = inputs[:, p]
      if p == spec.prefix_len - 1:  # after '=': the source
        nxt = source
      else:
        follows = jnp.where(parents == cur[:, None], children, -1)
        right = true[:, p + 1]
        other = jnp.max(jnp.where(follows != right[:, None], follows, -1), axis=1)
        at_source = cur == source
        pick = {True: right, False: other,  # "half": the right arm iff the source id is even
                "half": jnp.where(source % 2 == 0, right, other)}[choose_right]
        nxt = jnp.where(at_source, pick, jnp.max(follows, axis=1))
      logits.append(jax_one_hot(nxt, spec.vocab_size))
    return jnp.stack(logits, axis=1)

  return apply


def jax_one_hot(x, v):
  return (jnp.arange(v)[None, :] == x[:, None]).astype(jnp.float32)


@pytest.mark.parametrize("choose_right", [True, False, "half"])
def test_greedy_decoding_with_oracle_model(monkeypatch, choose_right):
  from el_jax.core.tasks import path_star as tps
  spec = ps.GraphSpec(3, 4, 20)
  g = ps.generate_graphs(50, 3, 4, 20, seed=2)
  toks = ps.tokens(g, spec)
  inputs = ps.model_inputs(toks, spec)[0]
  fake = types.SimpleNamespace(apply=_oracle_apply(toks, spec, choose_right))
  monkeypatch.setattr(tps, "decoder", fake)
  greedy, tf = tps.greedy_paths(None, spec, "teacher_forced", None, jnp.asarray(inputs))
  acc_g = ps.accuracy(np.asarray(greedy), g)
  acc_t = ps.accuracy(np.asarray(tf), g)
  legal = ps.legality(np.asarray(greedy), g)
  assert legal == {"decision_legal": 1.0, "walk_legal": 1.0}  # right or wrong, it follows edges
  if choose_right is True:  # a model that solves the task: accuracy 1.0 everywhere
    assert acc_g == {"em": 1.0, "per_position": [1.0] * 4}
    assert acc_t == {"em": 1.0, "per_position": [1.0] * 4}
  elif choose_right is False:  # Clever Hans: tokens after the decision are right once it is
    assert acc_g == {"em": 0.0, "per_position": [1.0, 0.0, 0.0, 0.0]}
    assert acc_t == {"em": 0.0, "per_position": [1.0, 0.0, 1.0, 1.0]}
  else:  # some rows on track, some off: greedy and teacher forcing part after the decision
    f = float(np.mean(g.source % 2 == 0))
    assert 0.2 < f < 0.8
    assert acc_g == {"em": f, "per_position": [1.0, f, f, f]}
    assert acc_t == {"em": f, "per_position": [1.0, f, 1.0, 1.0]}


def _naive_greedy(apply, graphdef, spec, params, inputs):
  """Greedy decoding the plain way: one full pass per output token, no shortcut."""
  ctx = np.array(inputs)
  out = []
  for j in range(spec.path_len):
    lg = apply(graphdef, params, jnp.asarray(ctx), None, spec.target_positions[j:j + 1])
    out.append(np.asarray(jnp.argmax(lg[:, 0], axis=-1)))
    if j < spec.path_len - 1:
      ctx[:, spec.prefix_len + j] = out[-1]
  return np.stack(out, axis=1)


@pytest.mark.parametrize("variant", ["teacher_forced", "reverse"])
def test_greedy_paths_equal_plain_greedy_decoding_on_a_real_model(monkeypatch, variant):
  """Taking on-track rows from the teacher-forced pass changes nothing: the same tokens
  as decoding every pass, for a random decoder (off track at once) and for the same
  decoder with its first token forced right (rows on track, then diverging)."""
  from el_jax.core.models import decoder
  from el_jax.core.tasks import path_star as tps
  setup = setup_lib.make_setup(_config(**{"data.degree": 3, "data.path_len": 5, "data.num_nodes": 20,
                                      "data.variant": variant}))
  st = setup.task
  graphdef, params = decoder.init(setup.model_cfg, 3)
  inputs = st.model_inputs(st.test)
  first = ps.targets(st.test, variant)[:, 0]
  bias = jax_one_hot(jnp.asarray(first), st.spec.vocab_size) * 1e4

  def forced_first(graphdef_, params_, inputs_, segment_ids=None, positions=None):
    lg = decoder.apply(graphdef_, params_, inputs_, segment_ids, positions)
    at_first = jnp.asarray(np.asarray(positions) == st.spec.prefix_len - 1)
    return lg + bias[:, None, :] * at_first[None, :, None]

  for apply in (decoder.apply, forced_first):
    monkeypatch.setattr(tps, "decoder", types.SimpleNamespace(apply=apply))
    got, tf = tps.greedy_paths(graphdef, st.spec, variant, params, jnp.asarray(inputs))
    want = _naive_greedy(apply, graphdef, st.spec, params, inputs)
    np.testing.assert_array_equal(np.asarray(got), want)
    first_right = (np.asarray(got)[:, 0] == first).mean()
    if apply is forced_first:  # all rows start on track, and then most leave it
      assert first_right == 1.0
      assert (np.asarray(got) == ps.targets(st.test, variant)).all(axis=1).mean() < 0.5
    else:
      assert first_right < 0.5  # the random decoder is off track for most rows at once


# ----------------------------------------------------------------------------
# Training setup and end-to-end run on the `test` config


def _config(**overrides):
  return config_lib.get_config("path_star", "test", overrides)


def test_setup_batches_mark_the_decision_token():
  st = setup_lib.make_setup(_config(**{"data.degree": 3, "data.path_len": 4, "data.num_nodes": 20})).task
  b = st.batch(0, 0)
  spec = st.spec
  assert b["inputs"].shape == (16, spec.seq_len - 1)
  assert (b["loss_mask"].sum(axis=1) == spec.path_len).all()
  assert (b["mask_decision"].sum(axis=1) == 1).all()
  np.testing.assert_array_equal(b["mask_rest"] + b["mask_decision"], b["loss_mask"])
  dec = spec.prefix_len - 1 + 1  # input position whose target is path[1]
  assert (b["mask_decision"][:, dec] == 1).all()
  from el_jax.core.tasks import base
  idx = base.epoch_order(len(st.train), 0, 0)[:16]  # data_seed 0, model seed 0, epoch 0
  np.testing.assert_array_equal(b["targets"][:, dec], st.train.path[idx, 1])
  np.testing.assert_array_equal(b["targets"][:, spec.prefix_len - 1:], st.train.path[idx])
  np.testing.assert_array_equal(st.batch(0, 0)["inputs"], b["inputs"])  # deterministic
  assert not np.array_equal(st.batch(1, 0)["inputs"], b["inputs"])  # model seed reorders


@pytest.mark.all_devices  # the batch-split error names the 8 devices
def test_config_errors_are_clear():
  with pytest.raises(ValueError, match=r"needs degree \* \(path_len - 1\) \+ 1 = 16"):
    setup_lib.make_setup(_config(**{"data.degree": 5, "data.path_len": 4}))
  with pytest.raises(ValueError, match=r"unknown path-star variant 'tf'; valid variants"):
    setup_lib.make_setup(_config(**{"data.variant": "tf"}))
  with pytest.raises(ValueError, match="does not exist"):
    setup_lib.make_setup(_config(**{"data.test_file": "/nonexistent/deg_{degree}.txt"}))
  with pytest.raises(ValueError, match="train.batch_size=12 cannot be split over 8 devices"):
    setup_lib.make_setup(_config(**{"train.batch_size": 12}))
  with pytest.raises(ValueError, match="unknown path_star variant 'gpu'"):
    config_lib.get_config("path_star", "gpu")


@pytest.mark.parametrize("variant", ps.VARIANTS)
@pytest.mark.plots  # its two plots are checked
def test_train_end_to_end_on_test_config(tmp_path, variant):
  from el_jax import main
  import json
  args = ["prog", "--config=configs/path_star.py:test", f"--workdir={tmp_path}",
          f"--config.data.variant={variant}"]
  summ = main.main(args)
  keys = set(summ["aggregate"])
  for split in ("train", "valid", "test"):
    for k in ("em_all", "em_decision", "em_rest", "tok", "tf_em", "greedy_pos0", "greedy_pos2",
              "tf_pos1", "decision_legal",
              "walk_legal"):
      assert f"{split}_{k}" in keys
  assert summ["graph"]["variant"] == variant
  assert summ["graph"]["decision_index"] == 1  # l = 3: index 1 forward, l - 2 = 1 reversed
  rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  train_rows = [r for r in rows if r["kind"] == "train"]
  assert all(np.isfinite(r["ce_decision"]) and np.isfinite(r["ce_rest"]) for r in train_rows)
  assert not any(k.endswith(("_easy", "_hard")) for r in rows for k in r)  # the task's names only
  assert os.path.exists(tmp_path / "accuracy.png") and os.path.exists(tmp_path / "loss_groups.png")
  again = main.main(args)  # finished seeds are read back, not retrained
  assert again["per_seed"] == summ["per_seed"]


@pytest.mark.parametrize("how", ["reference", "pattern"])
def test_reference_test_file_through_config(how):
  ref_dir = os.path.dirname(data.path_star_test_file(5, 3, 50))
  tmpl = os.path.join(ref_dir, "deg_{degree}_path_{path_len}_nodes_{num_nodes}_test_20000.txt")
  st = setup_lib.make_setup(_config(**{"data.num_nodes": 50, "data.degree": 5,
                                   "data.test_file": tmpl if how == "pattern" else "reference",
                                   "data.num_test": 100})).task
  assert len(st.test) == 100
  assert st.test_file == data.path_star_test_file(5, 3, 50)
  with open(st.test_file) as f:
    first = f.readline().strip()
  assert st.test.lines()[0] == first


def test_reference_test_file_not_shipped_is_a_clear_error():
  with pytest.raises(ValueError, match=r"no path-star test set is shipped for degree=3, "
                     r"path_len=3, num_nodes=50; shipped: \(degree=2, path_len=3, num_nodes=50\)"):
    setup_lib.make_setup(_config(**{"data.num_nodes": 50, "data.degree": 3,
                                "data.test_file": "reference"}))
