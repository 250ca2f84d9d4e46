r"""Path-star graphs (Bachmann & Nagarajan 2024; seed 000 section 5.1).

A graph G(d, l) has a source node with d arms of l - 1 nodes each; one arm
ends in the goal. Given the shuffled edge list, the source and the goal, the
model must output the path `source, ..., goal` (l nodes). Teacher forcing
lets a model learn the "Clever Hans" cheat: every path node after the first
decision follows from its predecessor by looking up the one edge leaving it,
so the loss on those tokens goes to zero while the decision token (the first
node after the source, which needs planning back from the goal) stays at
chance, 1/d.

Text format of the reference implementation (one graph per line, as in its
test sets, shipped in el_jax/core/data/resources/path_star/; `el_jax.core.data.path_star_test_file`):

  23,17|36,23|1,32|36,1/36,32=36,1,32
  edges as parent,child joined by `|`, then `/source,goal=`, then the path.

Tokens (the reference's numeral tokenizer): node i -> i, `|` -> N,
`=` -> N+1, `/` -> N+2, `$` -> N+3, commas dropped; vocabulary N+4. The
prefix (edges, `/`, source, goal, `=`) has 3E+3 tokens for E = d(l-1) edges;
the full sequence adds the l path tokens. Only the path tokens are trained
on and scored.

Variants (`VARIANTS`):
  teacher_forced  inputs at the path positions are the true path tokens;
  teacherless     those inputs are `$` (the model must plan the whole path);
  reverse         the target path is written goal first (goal, ..., source).
"""
import dataclasses
import os

import numpy as np

from el_jax.core import data

VARIANTS = ("teacher_forced", "teacherless", "reverse")


@dataclasses.dataclass(frozen=True)
class GraphSpec:
  """G(degree, path_len) over node ids [0, num_nodes)."""
  degree: int
  path_len: int
  num_nodes: int

  def __post_init__(self):
    check_sizes(self.degree, self.path_len, self.num_nodes)

  @property
  def num_edges(self) -> int:
    return self.degree * (self.path_len - 1)

  @property
  def prefix_len(self) -> int:
    """Tokens up to and including `=`: 2 per edge, E - 1 `|`, `/`, source, goal, `=`."""
    return 3 * self.num_edges + 3

  @property
  def seq_len(self) -> int:
    """Tokens of a whole example: prefix and path."""
    return self.prefix_len + self.path_len

  @property
  def pipe_id(self) -> int:
    return self.num_nodes

  @property
  def eq_id(self) -> int:
    return self.num_nodes + 1

  @property
  def slash_id(self) -> int:
    return self.num_nodes + 2

  @property
  def dollar_id(self) -> int:
    return self.num_nodes + 3

  @property
  def vocab_size(self) -> int:
    return self.num_nodes + 4

  @property
  def target_positions(self) -> np.ndarray:
    """Input positions whose next token is a path token (prefix_len - 1 ... seq_len - 2)."""
    return np.arange(self.prefix_len - 1, self.seq_len - 1)


def check_sizes(degree, path_len, num_nodes):
  for name, v, lo in (("degree", degree, 1), ("path_len", path_len, 2), ("num_nodes", num_nodes, 2)):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
      raise ValueError(f"{name}={v!r} must be an integer >= {lo}")
  need = degree * (path_len - 1) + 1
  if need > num_nodes:
    raise ValueError(
        f"G(degree={degree}, path_len={path_len}) needs degree * (path_len - 1) + 1 = {need} "
        f"distinct nodes but num_nodes={num_nodes}; raise num_nodes to at least {need} "
        f"(the reference generator would loop forever here)")


@dataclasses.dataclass(frozen=True)
class Graphs:
  """A set of graphs as arrays: edges [n, E, 2] (parent, child), source [n], goal [n], path [n, l]."""
  edges: np.ndarray
  source: np.ndarray
  goal: np.ndarray
  path: np.ndarray

  def __len__(self):
    return self.path.shape[0]

  def subset(self, idx):
    return Graphs(self.edges[idx], self.source[idx], self.goal[idx], self.path[idx])

  def lines(self):
    return [format_line(e, s, g, p) for e, s, g, p in
            zip(self.edges.tolist(), self.source.tolist(), self.goal.tolist(), self.path.tolist())]


def generate_graphs(num_graphs, degree, path_len, num_nodes, seed) -> Graphs:
  """`num_graphs` graphs G(degree, path_len) with the reference generator's distribution.

  The reference draws the source, then the goal (!= source), then l - 2
  distinct intermediate path nodes, then the (d - 1)(l - 1) arm nodes, each
  uniformly among the nodes not used yet (by rejection sampling), chains each
  arm out from the source, and shuffles the edge list. Those draws are the
  first d(l - 1) + 1 entries of a uniformly random permutation of the nodes,
  which is how this function takes them (vectorised, deterministic in `seed`).
  """
  check_sizes(degree, path_len, num_nodes)
  if not isinstance(num_graphs, (int, np.integer)) or num_graphs < 0:
    raise ValueError(f"num_graphs={num_graphs!r} must be an integer >= 0")
  rng = np.random.default_rng(seed)
  n, l, d = int(num_graphs), path_len, degree
  need = d * (l - 1) + 1
  # First `need` entries of a random permutation per row (argsort of uniform keys).
  nodes = np.argsort(rng.random((n, num_nodes)), axis=1)[:, :need].astype(np.int32)
  source, goal = nodes[:, 0], nodes[:, 1]
  path = np.concatenate([source[:, None], nodes[:, 2:l], goal[:, None]], axis=1)
  arms = nodes[:, l:].reshape(n, d - 1, l - 1)
  chains = [path] + [np.concatenate([source[:, None], arms[:, a]], axis=1) for a in range(d - 1)]
  edges = np.concatenate([np.stack([c[:, :-1], c[:, 1:]], axis=-1) for c in chains], axis=1)
  order = np.argsort(rng.random((n, edges.shape[1])), axis=1)
  edges = np.take_along_axis(edges, order[:, :, None], axis=1)
  return Graphs(edges=edges, source=source.copy(), goal=goal.copy(), path=path)


def generate(num_graphs, degree, path_len, num_nodes, seed):
  """Lines in the reference text format (see module docstring)."""
  return generate_graphs(num_graphs, degree, path_len, num_nodes, seed).lines()


def format_line(edges, source, goal, path) -> str:
  return ("|".join(f"{a},{b}" for a, b in edges) + f"/{source},{goal}="
          + ",".join(str(v) for v in path))


def _ints(text, what):
  parts = text.split(",")
  out = []
  for p in parts:
    if not p.isdigit():
      raise ValueError(f"{what} {text!r}: {p!r} is not a node id (a non-negative integer)")
    out.append(int(p))
  return out


def parse_line(line):
  """`(edges, source, goal, path)` of one line; ValueError says what is malformed.

  edges: list of (parent, child) tuples in file order; path: list of ints.
  """
  s = line.strip()
  if s.count("/") != 1 or s.count("=") != 1 or s.index("/") > s.index("="):
    raise ValueError(f"expected 'edges/source,goal=path' with one '/' before one '=', got {s!r}")
  edge_txt, rest = s.split("/")
  query_txt, path_txt = rest.split("=")
  if not edge_txt:
    raise ValueError("empty edge list")
  edges = []
  for e in edge_txt.split("|"):
    pair = _ints(e, "edge")
    if len(pair) != 2:
      raise ValueError(f"edge {e!r} must be 'parent,child'")
    edges.append(tuple(pair))
  query = _ints(query_txt, "query")
  if len(query) != 2:
    raise ValueError(f"query {query_txt!r} must be 'source,goal'")
  path = _ints(path_txt, "path")
  source, goal = query
  return edges, source, goal, path


def check_graph(edges, source, goal, path, spec: GraphSpec):
  """Raises ValueError if a parsed graph is not a G(d, l) over [0, N) with `path` its answer."""
  d, l, n = spec.degree, spec.path_len, spec.num_nodes
  if len(edges) != spec.num_edges:
    raise ValueError(f"{len(edges)} edges, G({d},{l}) has d(l-1) = {spec.num_edges}")
  if len(path) != l:
    raise ValueError(f"path of {len(path)} nodes, G({d},{l}) has l = {l}")
  ids = [v for e in edges for v in e] + [source, goal] + list(path)
  if max(ids) >= n:
    raise ValueError(f"node id {max(ids)} >= num_nodes={n}")
  if path[0] != source or path[-1] != goal:
    raise ValueError(f"path {path} does not run from source {source} to goal {goal}")
  es = set(edges)
  missing = [(a, b) for a, b in zip(path[:-1], path[1:]) if (a, b) not in es]
  if missing:
    raise ValueError(f"path steps {missing} are not edges of the graph")
  out_deg = sum(1 for a, _ in edges if a == source)
  if out_deg != d:
    raise ValueError(f"source {source} has {out_deg} out-edges, G({d},{l}) needs {d}")


def parse_lines(lines, spec: GraphSpec, name="<lines>", check=True) -> Graphs:
  """Parses lines into arrays; errors name `name` and the 1-based line number."""
  e_all, s_all, g_all, p_all = [], [], [], []
  for i, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      edges, source, goal, path = parse_line(line)
      if check:
        check_graph(edges, source, goal, path, spec)
    except ValueError as err:
      raise ValueError(f"{name}:{i}: malformed path-star line for G({spec.degree},"
                       f"{spec.path_len}) over {spec.num_nodes} nodes: {err}") from None
    e_all.append(edges)
    s_all.append(source)
    g_all.append(goal)
    p_all.append(path)
  if not p_all:
    raise ValueError(f"{name}: no graphs (empty file?)")
  return Graphs(edges=np.asarray(e_all, np.int32), source=np.asarray(s_all, np.int32),
                goal=np.asarray(g_all, np.int32), path=np.asarray(p_all, np.int32))


def load(path, spec: GraphSpec, limit=None) -> Graphs:
  """Reads a file in the reference format (every line checked against `spec`)."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"path-star file {path!r} does not exist")
  with open(path) as f:
    lines = f.read().splitlines()
  if limit is not None:
    graphs = sum(1 for line in lines if line.strip())
    if graphs < limit:
      raise ValueError(f"{path} has {graphs} graphs, fewer than the {limit} asked for "
                       f"(data.num_test); ask for at most {graphs}, or 0 for all of them")
    lines = lines[:limit]
  return parse_lines(lines, spec, name=path)


# ----------------------------------------------------------------------------
# Tokens


def check_variant(variant):
  if variant not in VARIANTS:
    raise ValueError(f"unknown path-star variant {variant!r}; valid variants: {VARIANTS}")


def tokenize_text(line, spec: GraphSpec):
  """The reference tokenizer on raw text: node ids and `|=/$`, commas dropped."""
  special = {"|": spec.pipe_id, "=": spec.eq_id, "/": spec.slash_id, "$": spec.dollar_id}
  out, num = [], ""
  for ch in line.strip():
    if ch.isdigit():
      num += ch
      continue
    if num:
      out.append(int(num))
      num = ""
    if ch in special:
      out.append(special[ch])
    elif ch != ",":
      raise ValueError(f"unexpected character {ch!r} in {line!r}; allowed: digits , | = / $")
  if num:
    out.append(int(num))
  return out


def tokens(graphs: Graphs, spec: GraphSpec, variant="teacher_forced") -> np.ndarray:
  """Token sequences [n, prefix_len + l]: prefix, then the target path (reversed for `reverse`).

  Equal to `tokenize_text` of each line (of the reversed-path line for `reverse`).
  """
  check_variant(variant)
  n, e = graphs.edges.shape[:2]
  pipe = np.full((n, e, 1), spec.pipe_id, np.int32)
  edge_toks = np.concatenate([graphs.edges, pipe], axis=2).reshape(n, 3 * e)[:, :-1]
  query = np.stack([np.full(n, spec.slash_id), graphs.source, graphs.goal,
                    np.full(n, spec.eq_id)], axis=1)
  path = graphs.path[:, ::-1] if variant == "reverse" else graphs.path
  return np.concatenate([edge_toks, query, path], axis=1).astype(np.int32)


def targets(graphs: Graphs, variant="teacher_forced") -> np.ndarray:
  """The path tokens the model must output [n, l], in output order."""
  check_variant(variant)
  return graphs.path[:, ::-1] if variant == "reverse" else graphs.path


def model_inputs(toks_NxT, spec: GraphSpec, variant="teacher_forced"):
  """(inputs [n, T-1], targets [n, T-1], loss mask [T-1]) for next-token training.

  The loss mask selects the positions whose target is a path token; for
  `teacherless` the inputs at the path positions are `$`.
  """
  check_variant(variant)
  inputs = toks_NxT[:, :-1].copy()
  if variant == "teacherless":
    inputs[:, spec.prefix_len:] = spec.dollar_id
  mask = np.zeros(spec.seq_len - 1, np.float32)
  mask[spec.target_positions] = 1.0
  return inputs, toks_NxT[:, 1:].copy(), mask


def decision_index(spec: GraphSpec, variant="teacher_forced") -> int:
  """Index, in output order, of the first node after the source (the arm choice)."""
  return _decision_index(spec.path_len, variant)


def _decision_index(path_len, variant):
  check_variant(variant)
  return path_len - 2 if variant == "reverse" else 1


def legality(pred_NxL, graphs: Graphs, variant="teacher_forced"):
  """Whether predicted paths are legal walks in their graphs (whatever their accuracy).

  decision_legal  the decision token is a legal step from the output token before it
                  (a child of the source; for `reverse`, a parent of the node before it)
  walk_legal      the output starts at the right endpoint (source; goal for `reverse`)
                  and every step follows an edge (reversed for `reverse`)
  A model that guesses among the source's children has decision_legal = 1; one
  that follows edges after its guess (the Clever-Hans cheat) also has walk_legal = 1.
  """
  true = targets(graphs, variant)
  pred = np.asarray(pred_NxL)
  if pred.shape != true.shape:
    raise ValueError(f"predictions have shape {pred.shape}, targets {true.shape}")
  parent, child = graphs.edges[:, :, 0], graphs.edges[:, :, 1]
  if variant == "reverse":
    parent, child = child, parent

  def is_edge(a_N, b_N):
    return ((parent == a_N[:, None]) & (child == b_N[:, None])).any(axis=1)

  steps = np.stack([is_edge(pred[:, j], pred[:, j + 1]) for j in range(pred.shape[1] - 1)],
                   axis=1)
  dec = _decision_index(pred.shape[1], variant)
  walk = (pred[:, 0] == true[:, 0]) & steps.all(axis=1)
  return {"decision_legal": float(steps[:, dec - 1].mean()), "walk_legal": float(walk.mean())}


def accuracy(pred_NxL, graphs: Graphs, variant="teacher_forced"):
  """Exact match of the whole path and per-position accuracy of predictions in output order."""
  true = targets(graphs, variant)
  if pred_NxL.shape != true.shape:
    raise ValueError(f"predictions have shape {pred_NxL.shape}, targets {true.shape}")
  correct = np.asarray(pred_NxL) == true
  return {"em": float(correct.all(axis=1).mean()), "per_position": correct.mean(axis=0).tolist()}


# ----------------------------------------------------------------------------
# From a config (el_jax.core.tasks.path_star, el_jax.core.data.tfds_builders)


def graph_spec(config):
  """The GraphSpec of a path-star config (`data.degree`, `data.path_len`, `data.num_nodes`)."""
  d = config.data
  return GraphSpec(d.degree, d.path_len, d.num_nodes)


def resolve_test_file(config, spec):
  """`data.test_file` with `{degree}`, `{path_len}`, `{num_nodes}` filled in ("" = generate;
  "reference" = the reference implementation's test set shipped with el_jax)."""
  f = config.data.test_file
  if not f:
    return ""
  if f == "reference":
    return data.path_star_test_file(spec.degree, spec.path_len, spec.num_nodes)
  try:
    return f.format(degree=spec.degree, path_len=spec.path_len, num_nodes=spec.num_nodes)
  except (KeyError, IndexError, ValueError) as e:
    raise ValueError(f"data.test_file={f!r} is not a valid pattern ({type(e).__name__}: {e}); "
                     f"the placeholders allowed are {{degree}}, {{path_len}}, {{num_nodes}}") from None
