r"""Results pages generated from the committed JSON: one Markdown page per paper.

  python -m el_jax.report            # writes docs/results/*.md
  python -m el_jax.report --check    # exit 1, one line per page that differs from the JSON

Each page `docs/results/<page>.md` is its template `docs/results/templates/<page>.md` (the
hand-written prose: setting, reading of the result, "Reproduced at CPU size") with every
placeholder filled from the JSON under `results/` (each experiment's folder is named after
its script: `results/<script>/` for `experiments/<script>.py`). `docs/results/README.md`,
the index, is composed from the pages' headings. The prose types no number that comes from
a result; it names the number instead:

  {{ number: <file>:<path> | <op> | ... }}
      One value of results/<file> (`text:` is the same, for strings). <path> walks the JSON:
      `.key`, `["key with spaces"]`, `[3]` (list index), `[1:4]` (slice), `[*]` (every
      element), `[label="CE k=1"]` (the one list element whose `label` equals that; numbers
      unquoted; `a.b` looks into nested objects), `[?seed<=5]` (every element passing the
      test: = != < <= > >= ^= (starts with)), `[?vs_ce]` (every element that has the key).
      After `[*]`, `[?...]` or a slice, a `.key` applies to each element and `[*]` flattens;
      an index, select or filter applies to the list as a whole. The ops run left to right:
      reducers (`mean`, `min`, `max`, `sum`, `len`, `abs`, `x100`, `minutes`, `hours`,
      `giga`, `tera`), then one format: `f0`..`f9`, `+f3` (signed), `e1`, `g3`, `p` (2 significant
      digits, for p-values), `int` (1,234), `pct1` (60.0%), `x2` (1.24x), `mr3` (mean (min,
      max) of a {mean, min, max}, through el_jax.report.stats.format_mean_range), `ci3` ([+lo, +hi]),
      `seeds` (2-11), `text`. A float needs a format. A list given `text`, `p`, `int` or a
      number format (`f3`, `+f3`, ...) is each element so formatted, joined by " / ".
  {{ table: <name> [<arg> ...] }}
      A table composed by the function registered as <name> below (it reads the JSON itself).
  {{ image: <path under results/> }}
      The PNG, embedded with a link relative to the page (../../results/<path>); it must exist.
  {{ paper: <key> }}
      A number of the paper with its source (table, figure or section of the seed text), from
      PAPER below; `| value` gives the number alone, `| source` the source alone.

A placeholder that does not resolve (missing file, missing key, a float without a format,
an unknown table) is an error naming the page, the placeholder and the JSON file. Besides
`.json` files a source may be a log whose last JSON line (`{...}`, optionally after one
word: `flatness_bench {...}`) holds the numbers (results/flatness_bench/bench.log,
results/ntp_bench/bench.txt). Sections whose results may be absent (the paper-size plan,
the two paper-size steps) render one line "Not yet run" instead of failing. Every number
format is fixed and keys are taken in the JSON's order or sorted, so the pages are a pure
function of the committed files (tests/test_report.py regenerates and compares them).

This module imports only the standard library and el_jax.report.stats (numpy): no JAX.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

from el_jax.infra import provenance
from el_jax.report import stats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
RESULTS = "results"
DOCS = os.path.join("docs", "results")
TEMPLATES = os.path.join(DOCS, "templates")
PAGES = ("seed000_equal_learning", "seed001_baselines", "seed002_flatness",
         "seed003_linear_ntp", "speed", "accelerator")
INDEX = "README.md"
COMMAND = "python -m el_jax.report"


class ReportError(Exception):
  """A page that cannot be generated: the message names the page, placeholder and file."""


# ----------------------------------------------------------------------------
# The papers' numbers, copied from the seed texts with their source. Strings keep the
# paper's own precision; tests/test_report.py checks them against the copies some
# experiment scripts wrote into their JSON.

from el_jax.report.papers import PAPER  # noqa: E402


def paper(key):
  if key not in PAPER:
    raise KeyError(f"no paper number {key!r} in el_jax.report.PAPER")
  return PAPER[key]


# ----------------------------------------------------------------------------
# Reading the results


class Results:
  """The JSON under <root>/results, read once per file; remembers which files a page read."""

  def __init__(self, root=ROOT):
    self.root = root
    self._cache = {}
    self.read = set()       # every file read since `read` was last reset (a page's sources)
    self.last_read = set()  # the files read by the current placeholder (for error messages)
    self.ran_on_from = None  # set by a table: the files whose `ran_on` its line reports

  def path(self, rel):
    return os.path.join(self.root, RESULTS, rel)

  def exists(self, rel):
    return os.path.exists(self.path(rel))

  def load(self, rel):
    if rel not in self._cache:
      path = self.path(rel)
      if not os.path.isfile(path):
        raise ReportError(f"{RESULTS}/{rel} does not exist")
      with open(path) as f:
        text = f.read()
      if rel.endswith(".json"):
        try:
          self._cache[rel] = json.loads(text)
        except ValueError as e:
          raise ReportError(f"{RESULTS}/{rel} is not valid JSON ({e})") from None
      else:
        self._cache[rel] = _json_line(text, f"{RESULTS}/{rel}")
    self.read.add(rel)
    self.last_read.add(rel)
    return self._cache[rel]

  def files(self, folder, ext=".json"):
    """The files under results/<folder> ending in `ext`, sorted (empty if the folder is absent)."""
    top = self.path(folder)
    out = []
    for dirpath, _, names in os.walk(top):
      for n in names:
        if n.endswith(ext):
          out.append(os.path.relpath(os.path.join(dirpath, n), self.path("")))
    return sorted(p.replace(os.sep, "/") for p in out)


def _json_line(text, name):
  """The last line of a log that is a JSON object, optionally after one leading word."""
  for line in reversed(text.splitlines()):
    s = line.strip()
    m = re.match(r"^(?:[A-Za-z_][\w.]*\s+)?(\{.*\})$", s)
    if m:
      try:
        return json.loads(m.group(1))
      except ValueError:
        continue
  raise ReportError(f"{name} has no JSON line")


# ----------------------------------------------------------------------------
# The path language of {{ number: file:path | ops }}

_SEG = re.compile(r"""
    \.(?P<name>[A-Za-z0-9_\-]+)
  | \[\s*(?P<star>\*)\s*\]
  | \[\s*(?P<slice>-?\d*:-?\d*)\s*\]
  | \[\s*(?P<index>-?\d+)\s*\]
  | \[\s*"(?P<key>(?:[^"\\]|\\.)*)"\s*\]
  | \[\s*(?P<filter>\?)?\s*(?P<fkey>[A-Za-z0-9_\-.]+)\s*(?P<op>==|!=|<=|>=|\^=|=|<|>)\s*
        (?:"(?P<fqval>(?:[^"\\]|\\.)*)"|(?P<fval>[^\]]*?))\s*\]
  | \[\s*\?\s*(?P<has>[A-Za-z0-9_\-.]+)\s*\]
""", re.X)


def parse_path(path):
  """"a.b[2]" -> [("key", "a"), ("key", "b"), ("index", 2)]; a ValueError names what is wrong."""
  segs, i, path = [], 0, path.strip()
  if path and path[0] not in ".[":
    path = "." + path
  while i < len(path):
    m = _SEG.match(path, i)
    if not m:
      raise ValueError(f"cannot read the path at {path[i:]!r}")
    g = m.groupdict()
    if g["name"] is not None:
      segs.append(("key", g["name"]))
    elif g["star"]:
      segs.append(("star", None))
    elif g["slice"] is not None:
      a, b = g["slice"].split(":")
      segs.append(("slice", (int(a) if a else None, int(b) if b else None)))
    elif g["index"] is not None:
      segs.append(("index", int(g["index"])))
    elif g["key"] is not None:
      segs.append(("key", json.loads(f'"{g["key"]}"')))
    elif g["has"] is not None:
      segs.append(("filter", (g["has"], "has", None)))
    else:
      raw = g["fqval"] if g["fqval"] is not None else g["fval"].strip()
      val = json.loads(f'"{raw}"') if g["fqval"] is not None else _literal(raw)
      op = "=" if g["op"] == "==" else g["op"]
      segs.append(("filter" if g["filter"] else "select", (g["fkey"], op, val)))
    i = m.end()
  return segs


def _literal(s):
  for conv in (int, float):
    try:
      return conv(s)
    except ValueError:
      pass
  return {"true": True, "false": False, "null": None}.get(s, s)


_OPS = {"has": lambda a, b: True, "^=": lambda a, b: isinstance(a, str) and a.startswith(b),
        "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _show(segs):
  out = []
  for kind, v in segs:
    if kind == "key":
      out.append(f".{v}" if re.fullmatch(r"[A-Za-z0-9_\-]+", v) else f'["{v}"]')
    elif kind == "index":
      out.append(f"[{v}]")
    elif kind == "star":
      out.append("[*]")
    elif kind == "slice":
      out.append(f"[{'' if v[0] is None else v[0]}:{'' if v[1] is None else v[1]}]")
    else:
      k, op, val = v
      if op == "has":
        out.append(f"[?{k}]")
      else:
        out.append(f"[{'?' if kind == 'filter' else ''}{k}{op}{json.dumps(val)}]")
  return "".join(out) or "the top level"


def walk(data, segs, where):
  """Applies the path segments to `data`; `where` names the file in errors.

  `[*]`, `[?...]` and slices give several values; after them a `.key` applies to each
  value, `[*]` flattens one level of each, and an index, slice, select or filter applies to
  the list of values as a whole."""
  multi = False
  cur = data
  for n, seg in enumerate(segs):
    at = _show(segs[:n])
    kind = seg[0]
    if multi and kind == "key":
      cur = [_step(x, seg, where, at) for x in cur]
    elif multi and kind == "star":
      cur = [y for x in cur for y in _step(x, seg, where, at)]
    else:
      cur = _step(cur, seg, where, at)
      if kind in ("star", "filter", "slice"):
        multi = True
      elif kind in ("select", "index"):
        multi = False
  return cur, multi


def _field(item, dotted):
  """item["a"]["b"] for "a.b", preferring the longest key that exists ("data.context_len")."""
  if not dotted:
    return item
  if not isinstance(item, dict):
    return _MISSING
  parts = dotted.split(".")
  for i in range(len(parts), 0, -1):
    k = ".".join(parts[:i])
    if k in item:
      got = _field(item[k], ".".join(parts[i:]))
      if got is not _MISSING:
        return got
  return _MISSING


_MISSING = object()


def _step(cur, seg, where, at):
  kind, v = seg
  if kind == "key":
    if isinstance(cur, dict) and v in cur:
      return cur[v]
    if isinstance(cur, dict):
      keys = ", ".join(map(repr, list(cur)[:15])) + (", ..." if len(cur) > 15 else "")
      raise ReportError(f"key {v!r} not found in {where} at {at} (keys there: {keys})")
    raise ReportError(f"key {v!r} not found in {where}: {at} is a {type(cur).__name__}, "
                      f"not an object")
  if kind == "index":
    if isinstance(cur, list) and -len(cur) <= v < len(cur):
      return cur[v]
    if isinstance(cur, dict) and str(v) in cur:
      return cur[str(v)]
    raise ReportError(f"index [{v}] not found in {where} at {at}")
  if kind == "slice":
    if not isinstance(cur, list):
      raise ReportError(f"slice in {where}: {at} is not a list")
    return cur[v[0]:v[1]]
  if kind == "star":
    if isinstance(cur, list):
      return list(cur)
    if isinstance(cur, dict):
      return list(cur.values())
    raise ReportError(f"[*] in {where}: {at} is not a list or an object")
  key, op, val = v
  if not isinstance(cur, list):
    raise ReportError(f"[{key}{op}...] in {where}: {at} is not a list")
  try:
    hits = [x for x in cur if _field(x, key) is not _MISSING and _OPS[op](_field(x, key), val)]
  except TypeError:
    raise ReportError(f"[{key}{op}{val!r}] in {where} at {at}: cannot compare") from None
  if kind == "filter":
    return hits
  if len(hits) != 1:
    have = sorted({json.dumps(_field(x, key)) for x in cur if _field(x, key) is not _MISSING})
    raise ReportError(f"[{key}{op}{json.dumps(val)}] in {where} at {at} matches {len(hits)} "
                      f"elements, not one ({key} values there: {', '.join(have[:20])})")
  return hits[0]


# ----------------------------------------------------------------------------
# Formats


def f(x, d=3):
  return "n/a" if x is None else f"{x:.{d}f}"


def sf(x, d=3):
  return f"{x:+.{d}f}"


def pval(p):
  return f"{p:.2g}"


def mr(s, d=3):
  """"0.408 (0.212, 0.576)": mean (min, max), through el_jax.report.stats.format_mean_range."""
  return stats.format_mean_range(s, digits=d)


def ci(c, d=3):
  return f"[{c[0]:+.{d}f}, {c[1]:+.{d}f}]"


def seeds(xs):
  """[2, 3, ..., 11] -> "2-11"; [0, 2] -> "0, 2"."""
  xs = [int(x) for x in xs]
  if len(xs) > 2 and xs == list(range(xs[0], xs[0] + len(xs))):
    return f"{xs[0]}-{xs[-1]}"
  return ", ".join(map(str, xs))


def _n_min(c):
  """The smaller group of a comparison dict (`n` for a paired one)."""
  return min(c["n_a"], c["n_b"]) if "n_a" in c else c["n"]


def _floor(c, m=1):
  """The smallest p the comparison's design can give (el_jax.report.stats.p_floor), Holm over m."""
  if "n_a" in c:
    return stats.p_floor("unpaired", c["n_a"], c["n_b"], m=m)
  return stats.p_floor("paired", c["n"], m=m)


def _design(c):
  return f"{c['n_a']} vs {c['n_b']}" if "n_a" in c else f"{c['n']} pairs"


def p_note(c, key="p_value", m=1):
  """A comparison's p, with "(floor of 3 vs 3)" beside it where it sits at the smallest
  value its design can give (Holm over m tests: m times that)."""
  p = c[key]
  fl = _floor(c, m)
  if stats.at_floor(p, fl):
    what = _design(c) + (f", Holm over {m}" if m > 1 else "")
    return f"{pval(p)} (floor of {what})"
  return pval(p)


def ci_cell(c, d=3, scale=1):
  """A comparison's bootstrap interval, or why none is shown (3 or fewer seeds)."""
  if c.get("ci95") is None or _n_min(c) < stats.MIN_CI_N:
    return f"none at n = {_n_min(c)}"
  lo, hi = (scale * x for x in c["ci95"])
  return f"[{lo:+.{d}f}, {hi:+.{d}f}]"


def cmp_cell(c, d=3, holm=True, m=None):
  """"+0.280 [+0.194, +0.369], p = 1.1e-05 (Holm 0.00013)" from a stats.compare dict; at 3
  or fewer seeds no interval, and a p at its design's floor says so (Holm over `m`)."""
  if _n_min(c) < stats.MIN_CI_N:
    out = f"{sf(c['diff'], d)}, p = {p_note(c)}"
  else:
    out = f"{sf(c['diff'], d)} {ci(c['ci95'], d)}, p = {p_note(c)}"
  if holm and "p_holm" in c:
    out += f" (Holm {p_note(c, 'p_holm', m) if m else pval(c['p_holm'])})"
  return out


def sig(x, n=3):
  """n significant digits, without an exponent for numbers >= 10**(n-1): 1234 -> "1234"."""
  return f"{x:.0f}" if abs(x) >= 10 ** (n - 1) else f"{x:.{n}g}"


def pct(x, d=1):
  return f"{100 * x:.{d}f}%"


def _each(v, fn):
  """`fn` of a number, or of each element of a list (`100 * [a, b]` would repeat the list)."""
  return [fn(x) for x in v] if isinstance(v, list) else fn(v)


def _mean_of(xs):
  xs = [float(x) for x in xs]
  return math.fsum(xs) / len(xs)


_REDUCERS = {
    "mean": lambda v: _mean_of(v), "min": min, "max": max, "sum": lambda v: math.fsum(v),
    "len": len, "abs": lambda v: _each(v, abs), "x100": lambda v: _each(v, lambda x: 100 * x),
    "minutes": lambda v: _each(v, lambda x: x / 60), "hours": lambda v: _each(v, lambda x: x / 3600),
    "giga": lambda v: _each(v, lambda x: x / 1e9), "tera": lambda v: _each(v, lambda x: x / 1e12),
}


def apply_ops(value, ops, where):
  fmt = None
  for op in ops:
    if fmt is not None:
      raise ReportError(f"the format {fmt!r} must be the last op, not before {op!r}")
    if op in _REDUCERS:
      try:
        value = _REDUCERS[op](value)
      except (TypeError, ValueError, ZeroDivisionError) as e:
        raise ReportError(f"cannot apply {op!r} to the value of {where} ({e})") from None
    else:
      fmt = op
  return format_value(value, fmt, where)


def format_value(v, fmt, where):
  if isinstance(v, list) and fmt is not None and (
      fmt in ("text", "p", "int") or re.fullmatch(r"\+?[fegx]\d", fmt)):
    return " / ".join(format_value(x, fmt, where) for x in v)  # a list: each, joined
  try:
    if fmt is None:
      if isinstance(v, bool) or isinstance(v, int) or isinstance(v, str):
        return str(v)
      if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
      raise ReportError(f"the value of {where} ({type(v).__name__}) needs a format "
                        f"(f3, p, mr3, ...)")
    if fmt == "text":
      return str(v)
    if fmt == "p":
      return pval(v)
    if fmt == "int":
      return f"{int(round(v)):,}"
    if fmt == "seeds":
      return seeds(v)
    m = re.fullmatch(r"(\+?)([fegx])(\d)", fmt)
    if m:
      sign, kind, d = m.group(1), m.group(2), int(m.group(3))
      if kind == "x":
        return f"{v:{sign}.{d}f}x"
      return f"{v:{sign}.{d}{kind}}"
    m = re.fullmatch(r"(mr|ci|pct)(\d)", fmt)
    if m:
      return {"mr": mr, "ci": ci, "pct": pct}[m.group(1)](v, int(m.group(2)))
  except (TypeError, ValueError, KeyError, IndexError) as e:
    if isinstance(e, ReportError):
      raise
    raise ReportError(f"format {fmt!r} does not apply to the value of {where} "
                      f"({type(v).__name__}: {e})") from None
  raise ReportError(f"unknown format or op {fmt!r}")


# ----------------------------------------------------------------------------
# Tables: each a function of the Results, registered by name


TABLES = {}


def table(name):
  def register(fn):
    TABLES[name] = fn
    return fn
  return register


def md(header, rows, align=None):
  """A Markdown table; cells are strings."""
  out = ["| " + " | ".join(header) + " |",
         "|" + "|".join(align or ["---"] * len(header)) + "|"]
  for r in rows:
    if len(r) != len(header):
      raise ValueError(f"row {r} has {len(r)} cells, header {len(header)}")
    out.append("| " + " | ".join(r) + " |")
  return "\n".join(out)


def _runs_by(rows, key):
  return {r[key]: r for r in rows}


# --- seed 000: the demo --------------------------------------------------------------

DEMO = "demo/summary.json"


@table("demo_table")
def _demo_table(R):
  rows = []
  for row in R.load(DEMO)["rows"]:
    agg = row["aggregate"]
    for split in ("train", "valid", "test"):
      for group in ("easy", "hard"):
        rows.append([f"`{row['label']}`", split, group, mr(agg[f"{split}_em_{group}"]),
                     mr(agg[f"{split}_cl_{group}"]), f(agg[f"{split}_em_{group}"]["std"])])
  return md(["run", "split", "group", "EM mean (min, max)", "CL mean (min, max)", "EM std"],
            rows)


@table("demo_runs")
def _demo_runs(R):
  rows = [[f"`{row['label']}`", ", ".join(f"`{k}={v}`" for k, v in row["overrides"].items()),
           seeds(row["seeds"])] for row in R.load(DEMO)["rows"]]
  return md(["run", "overrides of `configs/copy_task.py:cpu`", "model seeds"], rows)


@table("demo_comparisons")
def _demo_comparisons(R):
  rows = []
  for metric, comps in R.load(DEMO)["comparisons"].items():
    for c in comps:
      rows.append([f"{c['a']} vs {c['b']}", f"`{metric}`", f"{f(c['mean_a'])} vs {f(c['mean_b'])}",
                   sf(c["diff"]), ci_cell(c), p_note(c), p_note(c, "p_holm", len(comps)),
                   f"{c['n_a']} vs {c['n_b']}"])
  return md(["comparison", "metric", "means", "difference", "bootstrap 95%",
             "permutation p", "Holm p", "seeds"], rows)


@table("demo_paper")
def _demo_paper(R):
  d = {row["label"]: row["aggregate"] for row in R.load(DEMO)["rows"]}
  rows = [
      ["CE, test CL (all strings)", f(d["ce"]["test_cl_all"]["mean"]),
       paper("s000.copy.ce_test_cl")[0], paper("s000.copy.ce_test_cl")[1]],
      ["CE, test CL (hard strings)", f(d["ce"]["test_cl_hard"]["mean"]),
       paper("s000.copy.ce_test_cl")[0], paper("s000.copy.ce_test_cl")[1]],
      ["E-loss + warmup, test EM (hard strings)", f(d["e1_warmup"]["test_em_hard"]["mean"])
       + " (E1, lam 1)", paper("s000.copy.e2_test")[0], paper("s000.copy.e2_test")[1]],
      ["E-loss + warmup, test EM (easy strings)", f(d["e1_warmup"]["test_em_easy"]["mean"])
       + " (E1, lam 1)", paper("s000.copy.e2_test")[0], paper("s000.copy.e2_test")[1]],
  ]
  return md(["quantity", "ours (L_c = 1, L_p = 50, 2 x 128)", "paper", "paper's source and "
             "setting"], rows)


# --- seed 000: the sweep that chose the demo's setting --------------------------------

SWEEP = ("copy_task_cpu_sweep/scan.json", "copy_task_cpu_sweep/scan2.json",
         "copy_task_cpu_sweep/scan3.json")


@table("sweep_table")
def _sweep_table(R):
  rows = []
  for rel in SWEEP:
    for r in R.load(rel)["rows"]:
      ctx = r["overrides"]["data.context_len"]
      m = r["aggregate"]
      rows.append((-ctx, [f"{ctx} ({ctx // 55})", f"`{r['loss']}`", f(m["train_em_hard"]["mean"]),
                          mr(m["valid_em_hard"]), mr(m["test_em_hard"]), seeds(r["seeds"]),
                          rel.split("/")[-1]]))
  rows = [r for _, r in sorted(rows, key=lambda t: t[0])]  # stable: JSON order within a context
  return md(["context (strings per context)", "run", "train EM hard", "valid EM hard, "
             "mean (min, max)", "test EM hard, mean (min, max)", "seeds", "file"], rows)


def _selection(R, prefix, loss):
  """The candidates of selection.json (`<prefix>candidates`, `<prefix>chosen_run`), best first."""
  s = R.load("copy_task_cpu_sweep/selection.json")
  cand = sorted(s[f"{prefix}candidates"].items(), key=lambda kv: -kv[1])
  rows = [[f"`{k}`" + (" (chosen)" if k == s[f"{prefix}chosen_run"] else ""), f(v)]
          for k, v in cand]
  return md([f"{loss} run at context {s['context_len']}", f"mean `{s['metric']}`, seeds "
             f"{seeds(s['seeds'])}"], rows)


@table("sweep_selection")
def _sweep_selection(R):
  return _selection(R, "", "E1")


@table("sweep_selection_ce")
def _sweep_selection_ce(R):
  return _selection(R, "ce_", "CE")


# --- seed 000: copy-task suite (Figure 1, Table 3) -----------------------------------

SUITE = "copy_task_suite"


def _suite_vs_ce(doc):
  """{run label: its comparison with its CE run} of a copy_task_suite grid file."""
  return {c["a"]: c for c in doc["comparisons"].get("test_em_hard", [])}


@table("fig1_context")
def _fig1_context(R):
  doc = R.load(f"{SUITE}/fig1_context.json")
  rows, vs_ce = doc["rows"], _suite_vs_ce(doc)
  by = _runs_by(rows, "label")
  out = []
  for r in rows:
    if not r["label"].startswith("CE "):
      continue
    k = r["label"].split("k=")[1]
    e = by[f"E1+warmup k={k}"]
    ctx = r["overrides"]["data.context_len"]
    out.append([f"{k} ({ctx})", mr(r["aggregate"]["test_em_hard"]),
                f(r["aggregate"]["train_em_hard"]["mean"]), mr(e["aggregate"]["test_em_hard"]),
                f(e["aggregate"]["train_em_hard"]["mean"]), cmp_cell(vs_ce[e["label"]], m=len(vs_ce)),
                seeds(r["seeds"])])
  return md(["strings per context (context)", "CE: test EM hard", "CE: train EM hard",
             "E1 + warmup: test EM hard", "E1 + warmup: train EM hard", "E1 + warmup vs CE",
             "seeds"], out)


@table("fig1_width")
def _fig1_width(R):
  rows = R.load(f"{SUITE}/fig1_width.json")["rows"]
  by = _runs_by(rows, "label")
  out = []
  for r in rows:
    if not r["label"].startswith("CE "):
      continue
    rest = r["label"][len("CE "):]
    e = by[f"E1+warmup {rest}"]
    ctx = r["overrides"]["data.context_len"]
    out.append([f"{ctx // 55} ({ctx})", str(r["overrides"]["model.embed_dim"]),
                mr(r["aggregate"]["test_em_hard"]), f(r["aggregate"]["train_em_hard"]["mean"]),
                mr(e["aggregate"]["test_em_hard"]), f(e["aggregate"]["train_em_hard"]["mean"]),
                seeds(r["seeds"])])
  out.sort(key=lambda row: (int(row[1]), int(row[0].split()[0])))
  return md(["strings per context (context)", "width", "CE: test EM hard", "CE: train EM hard",
             "E1 + warmup: test EM hard", "E1 + warmup: train EM hard", "seeds"], out)


@table("table3")
def _table3(R):
  doc = R.load(f"{SUITE}/table3.json")
  vs_ce = _suite_vs_ce(doc)
  out = []
  for r in doc["rows"]:
    m = r["aggregate"]
    key = f"s000.t3.{r['label']}"
    pp = PAPER[key][0] if key in PAPER else "-"
    out.append([r["label"], pp, mr(m["test_cl_easy"]), mr(m["valid_em_hard"]),
                mr(m["test_em_hard"]), f(m["train_em_hard"]["mean"]),
                cmp_cell(vs_ce[r["label"]], m=len(vs_ce)) if r["label"] in vs_ce else "-"])
  return md(["run", "paper: easy-test CL, L_c = 5 (seed 000, Table 3)", "test CL easy",
             "valid EM hard", "test EM hard", "train EM hard", "vs CE (test EM hard)"], out)


# --- seed 000: path-star Table 1 -------------------------------------------------------

PS = "path_star_table1/table1.json"
PS_BEFORE = "path_star_table1/table1_before_redesign.json"
PS_LONG = "path_star_table1/long/table1.json"


@table("path_star_table1")
def _path_star_table1(R):
  d = R.load(PS)
  runs = {r["label"]: r["run"] for r in d["rows"]}
  comps = d["comparisons"].get("test_em_all", [])
  out = []
  for r in d["rows"]:
    a = r["aggregate"]
    key = f"s000.t1.{r['graph']}.{r['run']}"
    pp = PAPER[key][0] if key in PAPER else "-"
    comp = "; ".join(f"vs {runs[c['b']]}: {cmp_cell(c, m=len(comps))}" for c in comps
                     if c["a"] == r["label"]) or "-"
    out.append([r["graph"], r["run"], mr(a["test_em_all"]), f(a["test_em_decision"]["mean"]),
                f(a["test_decision_legal"]["mean"], 4), f(a["valid_em_all"]["mean"]),
                f(a["train_em_all"]["mean"]), pp, comp])
  return md(["graph", "run", "test EM, mean (min, max)", "decision (test)",
             "legal decision (test)", "valid EM", "train EM",
             "paper: test accuracy (seed 000, Table 1)", "comparison (test EM)"], out)


@table("path_star_train_ce")
def _path_star_train_ce(R, rel=PS):
  out = []
  for r in R.load(rel)["rows"]:
    ce = r["train_ce"]
    rest = ce.get("rest", ce.get("other_tokens"))
    out.append([r["graph"], r["run"], f(ce["decision"]["end_minus_500"]),
                f(ce["decision"]["end"]), f(rest["end_minus_500"], 4), f(rest["end"], 4),
                f"{ce['decision']['end'] / rest['end']:.0f}"])
  return md(["graph", "run", "decision token: 500 steps before the end", "at the end",
             "later tokens: 500 steps before the end", "at the end", "ratio at the end"], out)


@table("path_star_before_after")
def _path_star_before_after(R):
  now = {(r["graph"], r["run"]): r for r in R.load(PS)["rows"]}
  out = []
  for b in R.load(PS_BEFORE):
    if b["stage"] != "main":
      continue
    n = now[(b["graph"], b["label"])]
    pairs = list(zip(b["per_seed_test_em"], n["per_seed"]["test_em_all"]))
    same = sum(x == y for x, y in pairs)
    move = max(abs(x - y) for x, y in pairs)
    out.append([b["graph"], b["label"], f(b["test_em"]["mean"]),
                f(n["aggregate"]["test_em_all"]["mean"]),
                f"{same} of {len(pairs)}", f(move, 4)])
  return md(["graph", "run", "test EM before the redesign", "now", "per-seed test EM identical",
             "largest per-seed move"], out)


@table("path_star_controls")
def _path_star_controls(R):
  out = []
  for r in R.load(PS_BEFORE):
    if r["stage"] != "controls":
      continue
    ce = r["train_ce"]["decision"]
    out.append([r["graph"], r["label"], mr(r["test_em"]), f(r["train_em"]["mean"]),
                f(r["test"]["decision_legal"]["mean"], 4), f"{f(ce['end_minus_500'], 2)} -> "
                f"{f(ce['end'], 2)}", seeds(r["seeds"])])
  return md(["graph", "run (CE)", "test EM, mean (min, max)", "train EM", "legal decision (test)",
             "decision-token training CE, 500 steps before the end -> end", "seeds"], out)


@table("path_star_long")
def _path_star_long(R):
  out = []
  for r in R.load(PS_LONG)["rows"]:
    ce, a = r["train_ce"], r["aggregate"]
    out.append([r["graph"], r["run"], str(r["overrides"]["train.num_steps"]),
                mr(a["test_em_all"]), f(a["train_em_all"]["mean"]),
                f"{f(ce['decision']['end_minus_500'], 3)} -> "
                f"{f(ce['decision']['end'], 3)}", f"{ce['other_tokens']['end']:.2g}",
                seeds(r["seeds"])])
  return md(["graph", "run", "steps", "test EM, mean (min, max)", "train EM",
             "decision-token training CE, 500 steps before the end -> end",
             "later tokens' training CE at the end", "seeds"], out)


# --- seed 000: scale trends (experiments/scale_trends.py) ------------------------------

ST_METHODS = (("ce", "CE"), ("ce_warmup", "CE + warmup"), ("e1_warmup", "E1 + warmup"))
ST_PAIRS = (("e1_warmup", "ce"), ("e1_warmup", "ce_warmup"), ("ce_warmup", "ce"))


def _scale_doc(R, task):
  rel = f"scale_trends/{task}.json"
  if not R.exists(rel):
    return None, _not_yet_run(f"{RESULTS}/{rel}",
                              f"python experiments/scale_trends.py --task={task}")
  doc = R.load(rel)
  if not doc["trend"]:
    return None, (f"*No point finished yet* (`python experiments/scale_trends.py --task={task}`"
                  f" goes on from the runs that did).")
  return doc, None


@table("scale_trend")
def _scale_trend(R, task):
  """Per scale point: each method's test metric at its chosen setting, and the comparisons."""
  doc, missing = _scale_doc(R, task)
  if missing:
    return missing
  metric = doc["test_metric"]
  rows = {r["label"]: r for r in doc["rows"]}
  out = []
  for e in doc["trend"]:
    p = e["point"]
    cells = [f"{p} ({e['x']:,})"]
    cells += [mr(rows[f"{p} {m}"]["aggregate"][metric]) for m, _ in ST_METHODS]
    cells += [cmp_cell(e[f"{a}_vs_{b}"], m=len(doc["trend"]) * (1 if (a, b) == ST_PAIRS[0] else 2))
              for a, b in ST_PAIRS]
    cells.append(seeds(rows[f"{p} e1_warmup"]["seeds"]))
    out.append(cells)
  names = dict(ST_METHODS)
  return md(["point (x)"] + [f"{n}: `{metric}`" for _, n in ST_METHODS]
            + [f"{names[a]} vs {names[b]}" for a, b in ST_PAIRS] + ["test seeds"], out)


@table("scale_trend_choice")
def _scale_trend_choice(R, task):
  """Per scale point and method: every candidate's validation score, the chosen one in bold
  (the scores are the tuning runs', so the line under it says where those ran)."""
  doc, missing = _scale_doc(R, task)
  if missing:
    return missing
  tune = f"scale_trends/{task}_tune.json"
  R.load(tune)
  R.ran_on_from = {tune}
  out = []
  for e in doc["trend"]:
    for m, name in ST_METHODS:
      sel = doc["selection"][e["point"]][m]
      cands = ", ".join((f"**{c}: {f(v)}**" if c == sel["chosen"] else f"{c}: {f(v)}")
                        for c, v in sel["scores"].items())
      out.append([e["point"], name, cands])
  return md(["point", "method", f"candidates: mean `{doc['select_metric']}` over tuning "
             f"seed(s) {seeds(doc['tune_seeds'])} (chosen in bold)"], out)


@table("scale_trend_fit")
def _scale_trend_fit(R, task, metric):
  """Per scale point: each method's mean of another per-seed metric (e.g. the training fit)."""
  doc, missing = _scale_doc(R, task)
  if missing:
    return missing
  rows = {r["label"]: r for r in doc["rows"]}
  out = [[e["point"]] + [f(rows[f"{e['point']} {m}"]["aggregate"][metric]["mean"])
                         for m, _ in ST_METHODS] for e in doc["trend"]]
  return md(["point"] + [f"{n}: mean `{metric}`" for _, n in ST_METHODS], out)


# --- seed 002: convergence to the exact optimum (experiments/mlm_convergence.py) ---------


@table("mlm_convergence")
def _mlm_convergence(R, language):
  """Per run: size, sentences seen, the valid / train / test gap to the exact optimum and KL."""
  rel = f"mlm_convergence/{language}.json"
  if not R.exists(rel):
    return _not_yet_run(f"{RESULTS}/{rel}",
                        f"python experiments/mlm_convergence.py --language={language}")
  doc = R.load(rel)
  out = []
  for row in doc["rows"]:
    h, cfg = row["headline"], row["config"]
    agg = row["aggregate"]
    gap = (mr(agg["valid_gap"]) if len(row["seeds"]) > 1 else f(h["valid_gap"]))
    out.append([row["label"], f"{h['num_params']:,}", seeds(row["seeds"]),
                f"{cfg['train']['num_steps']:,} x {cfg['train']['batch_size']} "
                f"({h['epochs']:.2g} epochs of {cfg['data']['num_train']:,})",
                gap, f(h["valid_kl"]), f(h["train_gap"]), f(h["test_gap"]),
                f(h["optimal_loss"]), f(row["unigram"]["valid_gap"]),
                "yes" if h["converged"] else "no"])
  return md(["run", "parameters", "seeds", "steps x batch (sentences)", "valid gap",
             "valid KL", "train gap", "test gap", "optimum (test)", "unigram valid gap",
             f"within {doc['converged_within']:g}"], out)


# --- seed 000: label copy ----------------------------------------------------------

LC = "label_copy/table.json"


@table("label_copy_table")
def _label_copy_table(R):
  d = R.load(LC)
  out = []
  for r in d["rows"]:
    a = r["aggregate"]
    key = f"s000.t2.{r['text']}.{r['loss']}"
    pp = PAPER[key][0] if (key in PAPER and r["start"] == "pretrained") else "-"
    out.append([r["text"], r["start"], f"`{r['loss']}`", mr(a["test_em_all"]),
                mr(a["test_em_easy"]), mr(a["test_em_hard"]), pp])
  return md(["text", "start", "loss", "test all", "test easy", "test hard",
             "paper: accuracy, pretrained GPT-2 of unstated size (seed 000, Table 2)"], out)


@table("label_copy_comparisons")
def _label_copy_comparisons(R):
  d = R.load(LC)
  rows = {r["label"]: r for r in d["rows"]}
  by = {(c["a"], c["b"], metric): c for metric, comps in d["comparisons"].items() for c in comps}
  out = []
  for a, b in dict.fromkeys((a, b) for a, b, _ in by):
    for metric in ("test_em_all", "test_em_hard"):
      x, r = by[(a, b, metric)], rows[a]
      out.append([r["text"], r["start"], f"`{metric}`", f"{f(x['mean_a'])} vs {f(x['mean_b'])}",
                  sf(x["diff"]), ci_cell(x), p_note(x), p_note(x, "p_holm", len(d["comparisons"][metric])),
                  f"{x['n_a']} vs {x['n_b']} fine-tuning seeds of one pre-trained model"
                  if r["start"] == "pretrained" else f"{x['n_a']} vs {x['n_b']} model seeds"])
  return md(["text", "start", "metric", "E1 + warmup vs CE", "difference", "bootstrap 95%",
             "permutation p", "Holm p (over the metric's comparisons)", "over"], out)


# --- seed 001: baseline losses -----------------------------------------------------

LB = "loss_baselines"


def _setting(overrides):
  """"gamma=1.0, ...": a grid point's loss settings (`loss.focal.gamma` shown as `gamma`;
  the reweighting block's fields as `reweight.strategy`)."""
  name = overrides.get("loss.name")
  items = [f"{k.split('.', 1)[1].removeprefix(f'{name}.')}={v}" for k, v in overrides.items()
           if k != "loss.name"]
  return ", ".join(items) or "-"


@table("baselines_grid")
def _baselines_grid(R):
  t = R.load(f"{LB}/table.json")
  sel = R.load(f"{LB}/select.json")["rows"]
  by_loss = {}
  for r in sel:
    by_loss.setdefault(r["loss"], []).append(r)
  out = []
  for loss in t["grid"]:
    chosen = t["chosen"][loss]
    cells = []
    for r in by_loss.get(loss, []):
      setting = _setting(r["point"])
      s = (f"{'(no hyperparameter)' if setting == '-' else setting}: "
           f"{f(r['aggregate']['valid_em_hard']['mean'])}")
      cells.append(f"**{s}**" if r["point"] == chosen else s)
    out.append([f"`{loss}`", "; ".join(cells), _setting(chosen)])
  return md(["loss", f"valid EM hard (mean over seeds {seeds(sel[0]['seeds'])}) at each grid "
             "point, in the grid's order; chosen in bold", "chosen"], out)


def _baseline_rows(doc, digits=3):
  """The rows of a grid document (test.json, label_copy.json) with their comparisons of the
  families `vs_ce` and `vs_ce_warmup`."""
  comps = {(fam, c["a"]): c for fam, cs in doc["comparisons"].items() for c in cs}
  out = []
  for r in doc["rows"]:
    a = r["aggregate"]
    vs_ce, vs_ce_warmup = comps.get(("vs_ce", r["label"])), comps.get(("vs_ce_warmup", r["label"]))
    fam = {k: len(v) for k, v in doc["comparisons"].items()}
    out.append([f"`{r['label']}`", _setting(r["point"]), "yes" if r["warmup"] else "no",
                mr(a["test_em_easy"], digits), mr(a["test_em_hard"], digits),
                cmp_cell(vs_ce, m=fam["vs_ce"]) if vs_ce else "reference",
                cmp_cell(vs_ce_warmup, m=fam["vs_ce_warmup"]) if vs_ce_warmup else
                ("reference" if r["label"] == "ce" and r["warmup"] else "-")])
  return md(["loss", "setting", "warmup", "test EM easy", "test EM hard",
             "hard EM minus CE without warmup", "hard EM minus CE + warmup"], out)


@table("baselines_budget")
def _baselines_budget(R):
  """"3 to 5": the fewest and most validation candidates of any loss but CE in the grid."""
  n = {}
  for r in R.load(f"{LB}/select.json")["rows"]:
    n[r["loss"]] = n.get(r["loss"], 0) + 1
  k = [v for loss, v in n.items() if loss != "ce"]
  return f"{min(k)} to {max(k)}"


@table("baselines_copy")
def _baselines_copy(R):
  return _baseline_rows(R.load(f"{LB}/test.json"))


@table("baselines_label_copy")
def _baselines_label_copy(R):
  return _baseline_rows(R.load(f"{LB}/label_copy.json"))


@table("baselines_label_copy_grid")
def _baselines_label_copy_grid(R):
  by = {}
  for r in R.load(f"{LB}/label_copy_grid.json")["rows"]:
    by.setdefault(r["loss"], []).append(r)
  out = []
  for loss, rs in by.items():
    vals = [(_setting(r["point"]), f(r["aggregate"]["valid_em_hard"]["mean"])) for r in rs]
    out.append([f"`{loss}`", "; ".join(f"{s}: {v}" for s, v in vals), seeds(rs[0]["seeds"])])
  return md(["loss", "label copy, valid EM hard (mean over seeds) per setting, in the grid's "
             "order", "seeds"], out)


@table("baselines_compute")
def _baselines_compute(R):
  sel, test, lc = (R.load(f"{LB}/{n}.json")["rows"] for n in ("select", "test", "label_copy"))
  rows = [["validation grid (`--stage=select`)", str(len(sel)),
           f"{math.fsum(r['seconds'] for r in sel) / 60:.0f}"],
          ["copy task, chosen settings (`--stage=test`)", str(len(test)),
           f"{math.fsum(r['seconds'] for r in test) / 60:.0f}"],
          ["label copy, chosen settings (`--stage=label_copy`)", str(len(lc)),
           f"{math.fsum(r['seconds'] for r in lc) / 60:.0f}"]]
  return md(["stage", "runs", "minutes (sum of the runs' seconds)"], rows)


# --- seed 002: flatness of the copy-task runs ---------------------------------------

FC = "flatness_copy_task/copy_task.json"


@table("flatness_copy_trajectory")
def _flatness_copy_trajectory(R):
  d = R.load(FC)["results"]
  runs = list(d)
  seed = sorted(d[runs[0]]["per_seed"])[0]
  series = {run: {p["step"]: p for p in d[run]["per_seed"][seed]["flatness"]} for run in runs}
  steps = sorted(set().union(*[set(s) for s in series.values()]))
  out = []
  for st in steps:
    row = [str(st)]
    for run in runs:
      p = series[run].get(st)
      row += ([f"{sig(p['hessian_trace'])} +- {sig(p['hessian_trace_stderr'], 2)}",
               sig(p["fisher_trace"]), sig(p["top_eigenvalue"])] if p else ["-"] * 3)
    out.append(row)
  head = ["step"]
  for run in runs:
    head += [f"`{run}`: Tr(H) +- stderr", f"`{run}`: Tr(F)", f"`{run}`: top eigenvalue"]
  return md(head, out)


@table("flatness_copy_summary")
def _flatness_copy_summary(R):
  d = R.load(FC)["results"]
  out = []
  for run, r in d.items():
    for seed, s in r["per_seed"].items():
      post = [p["hessian_trace"] for p in s["flatness"] if p["step"] > s["converged_step"]]
      out.append([f"`{run}`", seed, str(s["converged_step"]),
                  f"{s['mean_after_convergence']['hessian_trace']:.1f} ({min(post):.1f}, "
                  f"{max(post):.1f})", f"{s['final']['hessian_trace']:.1f}",
                  f"{s['final_train']['ce']:.2g}", f(s["final_train"]["margin_mean"], 2),
                  f(s["final_eval"]["test_em_hard"], 2)])
  return md(["run", "seed", "training set fitted at step", "Tr(H) after that: mean (min, max)",
             "Tr(H) at the end", "training CE at the end", "mean margin at the end",
             "test EM hard"], out)


# --- seed 002: MLM flatness (Figures 1/3, 2, 5) -------------------------------------

MLM = "mlm_flatness"
# The optimizer that continues after the AdamW pre-training (experiments/mlm_flatness.py
# --continue_with): its file's name, its point key prefix and its name in the tables.
_CONT = {"sgd": ("training_{}.json", "sgd", "SGD"),
         "adamw": ("training_adamw_{}.json", "adamw_cont", "AdamW")}


def _mlm_cont(R, language, optimizer):
  """(the training figure's JSON for `optimizer`, its key prefix, its display name).
  `language` is "pcfg" / "hmm" (the file `_CONT` names), or a JSON path under
  results/mlm_flatness/ (e.g. "sharp_bilstm_6k_sgd/training_hmm_sharp.json")."""
  if optimizer not in _CONT:
    raise ValueError(f"unknown continuation {optimizer!r}; allowed: {sorted(_CONT)}")
  path, key, shown = _CONT[optimizer]
  rel = language if language.endswith(".json") else path.format(language)
  return R.load(f"{MLM}/{rel}"), key, shown


@table("mlm_training")
def _mlm_training(R, language, optimizer="sgd"):
  d, key, shown = _mlm_cont(R, language, optimizer)
  out = []
  several = len({p.get("seed", 0) for p in d["points"]}) > 1  # --seeds: a row per model seed
  tasks = list(d["points"][0]["probe"])  # --tasks: a probe column each
  for p in d["points"]:
    x = p[f"{key}_step"]
    step = f"{x} (seed {p['seed']})" if several else str(x)
    out.append([step, f(p["valid_mlm_loss"], 4), f(p["valid_gap"], 4),
                f"{p['trace_b1']:.1f} ({p['trace_b1_std']:.1f})",
                f"{p['trace_hutchinson']:.1f} ({p['trace_hutchinson_stderr']:.1f})"]
               + [_acc_cell(p["probe"][task]) for task in tasks])
  return md([f"{shown} step", "valid MLM loss", "gap to optimum", "Tr(H) B.1 (std, 5 reps)",
             "Tr(H) Hutchinson (stderr)"]
            + [f"task {task} probe test acc % (std, 5 seeds)" for task in tasks], out)


def mlm_paired(d, key):
  """Before / after on the same units for a Figure 1 / 3 file (`d`, its points' step key
  `key`): {quantity: el_jax.report.stats.paired_compare + p_holm over the family}, quantities
  "trace_b1", "probe <task>", "fine_tune <task>", and the units' name.

  With several model seeds (`comparison.over` = "model seeds") a unit is a pre-trained
  model, measured at its first and last checkpoint (its Tr(H) B.1 mean over repetitions, its
  probe / fine-tuning mean over seeds). With one model a unit is a Tr(H) repetition (the
  same fixed input set at both checkpoints) or a probe / fine-tuning seed (the same seed at
  both). Computed here from the committed per-point values, so the page does not depend on
  which comparison the experiment's JSON stored."""
  pts = d["points"]
  over_models = d.get("comparison", {}).get("over") == "model seeds"
  first, last = min(p[key] for p in pts), max(p[key] for p in pts)
  if over_models:
    seeds_ = sorted({p["seed"] for p in pts})
    at = {(p["seed"], p[key]): p for p in pts}
    a = [at[(s, first)] for s in seeds_]
    b = [at[(s, last)] for s in seeds_]
    series = {"trace_b1": ([p["trace_b1"] for p in a], [p["trace_b1"] for p in b])}
    for task in a[0]["probe"]:
      series[f"probe {task}"] = ([p["probe"][task]["test_acc_mean"] for p in a],
                                 [p["probe"][task]["test_acc_mean"] for p in b])
    if all("fine_tune" in p for p in a + b):
      for task in a[0]["fine_tune"]:
        series[f"fine_tune {task}"] = ([p["fine_tune"][task]["test_acc_mean"] for p in a],
                                       [p["fine_tune"][task]["test_acc_mean"] for p in b])
    units = {k: "model seeds" for k in series}
  else:
    a = next(p for p in pts if p[key] == first)
    b = next(p for p in pts if p[key] == last)
    series = {"trace_b1": (a["trace_b1_reps"], b["trace_b1_reps"])}
    units = {"trace_b1": "repetitions (same inputs)"}
    for task in a["probe"]:
      series[f"probe {task}"] = (a["probe"][task]["test_acc"], b["probe"][task]["test_acc"])
      units[f"probe {task}"] = "probe seeds of one model"
    if "fine_tune" in a and "fine_tune" in b:
      for task in a["fine_tune"]:
        series[f"fine_tune {task}"] = (a["fine_tune"][task]["test_acc"],
                                       b["fine_tune"][task]["test_acc"])
        units[f"fine_tune {task}"] = "fine-tuning seeds of one model"
  out = {k: {**stats.paired_compare(after, before), "over": units[k]}
         for k, (before, after) in series.items()}
  for c, q in zip(out.values(), stats.holm([c["p_value"] for c in out.values()])):
    c["p_holm"] = q
  return {"x": [first, last], "tests": out}


@table("mlm_training_change")
def _mlm_training_change(R, language, optimizer="sgd"):
  d, key, shown = _mlm_cont(R, language, optimizer)
  pair = mlm_paired(d, f"{key}_step")
  m = len(pair["tests"])
  rows = []
  for name, c in pair["tests"].items():
    what, _, task = name.partition(" ")
    scale, dg = (1, 1) if what == "trace_b1" else (100, 2)
    label = {"trace_b1": "Tr(H) B.1", "probe": f"task {task} probe (points)",
             "fine_tune": f"task {task} fine-tuned (points)"}[what]
    rows.append([label, f"{scale * c['mean_b']:.{dg}f} -> {scale * c['mean_a']:.{dg}f}",
                 f"{scale * c['diff']:+.{dg}f}", f"{c['n_up']} up, {c['n_down']} down",
                 ci_cell(c, dg, scale), p_note(c), p_note(c, "p_holm", m),
                 f"{c['n']} {c['over']}"])
  x = pair["x"]
  return md([f"last vs first checkpoint ({shown} steps {x[0]} -> {x[1]})", "change",
             "difference", "units", "bootstrap 95% over the pairs", "paired sign-flip p",
             "Holm p (over the table)", "pairs"], rows)


@table("mlm_paired")
def _mlm_paired_sentence(R, language, optimizer, quantity, scale="1"):
  """One before / after test as a phrase, e.g. `{{ table: mlm_paired hmm adamw trace_b1 }}`
  gives "+19.8 (3 of 3 up; paired sign-flip p = 0.25 (the floor of 3 pairs))"; quantity
  `trace_b1`, `probe:<task>` or `fine_tune:<task>`; `scale` 100 for points."""
  d, key, _ = _mlm_cont(R, language, optimizer)
  c = mlm_paired(d, f"{key}_step")["tests"][quantity.replace(":", " ")]
  k = float(scale)
  dg = 1 if k == 1 else 2
  note = p_note(c).replace(" (floor", ", the floor").rstrip(")")
  return f"{k * c['diff']:+.{dg}f} ({c['n_up']} of {c['n']} up; paired sign-flip p = {note})"


def _holm(c, m=None):
  """A comparison's Holm-adjusted p ("-" where its file has none; the floor noted beside it
  when the family's size m is given)."""
  if "p_holm" not in c:
    return "-"
  return p_note(c, "p_holm", m) if m else pval(c["p_holm"])


def _mlm_units(c):
  """What an mlm_flatness comparison's samples are: (Tr(H), probe)."""
  if c.get("over") == "model seeds":
    return "model seeds", "model seeds"
  return "repetitions", "probe seeds"


@table("mlm_pilot")
def _mlm_pilot(R, language, optimizer="sgd"):
  d, key, shown = _mlm_cont(R, language, optimizer)
  rows = [[lr + (" (chosen)" if float(lr) == d[f"{key}_lr"] else ""), f(p["valid_mlm_loss"], 4),
           sf(p["change"], 4)] for lr, p in d["pilot"].items()]
  return md([f"{shown} lr", f"valid MLM loss after {d['args']['pilot_steps']} steps",
             f"change from the AdamW run's {f(d['pilot_start_valid_loss'], 4)}"], rows)


def _sizes_by_models(d):
  """Figures 2 / 5 files of several model seeds: {size: [point of each seed]} in --sizes
  order, or None for a one-model file (points keyed by size alone)."""
  if len(d.get("seeds", [0])) < 2:
    return None
  out = {}
  for p in d["points"]:
    out.setdefault(p["size"], []).append(p)
  return out


def _spread(xs, d, scale=1):
  """"mean (std)" over models, std with ddof 1."""
  xs = [scale * x for x in xs]
  return f"{statistics.fmean(xs):.{d}f} ({statistics.stdev(xs):.{d}f})"


def _grown(d, size):
  return size + (f" grown into {d['embedded_into']}" if d.get("embedded_into") and
                 size != d["embedded_into"] else "")


def _mlm_sizes_models(d, by):
  """_mlm_sizes for several model seeds: one row per size, mean (std over the models)."""
  tasks = list(d["points"][0]["probe"])
  rows = []
  for size, pts in by.items():
    p0 = pts[0]
    rows.append([_grown(d, size), f"{p0.get('num_params_embedded', p0['num_params']):,}",
                 str(p0["step"]),
                 f"{_spread([p['valid_mlm_loss'] for p in pts], 4)} / "
                 f"{statistics.fmean(p['valid_gap'] for p in pts):.4f}",
                 _spread([p["trace_b1"] for p in pts], 1),
                 _spread([p["trace_hutchinson"] for p in pts], 1)]
                + [_spread([p["probe"][t]["test_acc_mean"] for p in pts], 2, 100)
                   for t in tasks])
  n = len(d["seeds"])
  return md(["size (d_model / heads / layers / MLP)", "parameters", "training steps",
             f"valid MLM loss (std) / gap, {n} models", "Tr(H) B.1 (std over models)",
             "Tr(H) Hutchinson (std over models)"]
            + [f"task-{t} probe % (std over models)" for t in tasks], rows)


@table("mlm_sizes")
def _mlm_sizes(R, rel):
  d = R.load(f"{MLM}/{rel}")
  by = _sizes_by_models(d)
  if by:
    return _mlm_sizes_models(d, by)
  out = []
  for p in d["points"]:
    (task, pr), = p["probe"].items()
    size = p["size"] + (f" grown into {d['embedded_into']}" if d.get("embedded_into") and
                        p["size"] != d["embedded_into"] else "")
    out.append([size, f"{p.get('num_params_embedded', p['num_params']):,}",
                f"{f(p['valid_mlm_loss'], 4)} ({f(p['valid_gap'], 4)})",
                f"{p['trace_b1']:.1f} ({p['trace_b1_std']:.1f})",
                f"{p['trace_hutchinson']:.1f} ({p['trace_hutchinson_stderr']:.1f})",
                f"{100 * pr['test_acc_mean']:.2f} ({100 * pr['test_acc_std']:.2f})"])
  (task, _), = d["points"][0]["probe"].items()
  return md(["size (d_model / heads / layers / MLP)", "parameters", "valid MLM loss (gap)",
             "Tr(H) B.1 (std, 5 reps)", "Tr(H) Hutchinson (stderr)",
             f"task-{task} probe % (std, 5 seeds)"], out)


def _mlm_sizes_change_models(c):
  """_mlm_sizes_change for several model seeds: every size against the first over the
  models; Holm over the table's Tr(H) and probe tests, the valid loss outside it."""
  m = c["holm_family"]
  names = {"valid_mlm_loss": ("valid MLM loss (nats)", 1, 4),
           "trace_b1": ("Tr(H) B.1", 1, 1), "trace_hutchinson": ("Tr(H) Hutchinson", 1, 1)}
  rows = []
  for size, qs in c["vs_first"].items():
    for q, t in qs.items():
      name, k, dg = names.get(q, (f"task-{q.split()[-1]} probe (points)", 100, 2))
      rows.append([f"{size} vs {c['sizes'][0]}", name,
                   f"{k * t['mean_b']:.{dg}f} -> {k * t['mean_a']:.{dg}f}",
                   f"{k * t['diff']:+.{dg}f}", p_note(t),
                   _holm(t, m) if "p_holm" in t else "- (not in the family)",
                   f"{t['n_a']} vs {t['n_b']} models"])
  return md(["sizes", "quantity", "change (mean over models)", "difference", "permutation p",
             f"Holm p (over {m})", "over"], rows)


@table("mlm_sizes_change")
def _mlm_sizes_change(R, rel):
  d = R.load(f"{MLM}/{rel}")
  c = d["comparison"]
  if "vs_first" in c:
    return _mlm_sizes_change_models(c)
  (task, pr), = c["probe"].items()
  t = c["trace_b1_change"]
  rows = [["Tr(H) B.1", f"{t['mean_b']:.1f} -> {t['mean_a']:.1f}", f"{t['diff']:+.1f}",
           p_note(t), _holm(t, 2), f"{t['n_a']} vs {t['n_b']} repetitions"],
          [f"task-{task} probe (points)", f"{100 * pr['mean_b']:.2f} -> {100 * pr['mean_a']:.2f}",
           f"{100 * pr['diff']:+.2f}", p_note(pr), _holm(pr, 2),
           f"{pr['n_a']} vs {pr['n_b']} probe seeds"]]
  return md([f"{c['x'][1]} vs {c['x'][0]}", "change", "difference", "permutation p",
             "Holm p (over the table)", "over"], rows)


def _direction(diff, p, otherwise):
  """A claim's word decided by its test: "higher" / "lower" (the sign of `diff`) only at
  p < 0.05, else `otherwise` ("not told apart")."""
  return ("higher" if diff > 0 else "lower") if p < 0.05 else otherwise


@table("mlm_sizes_claim")
def _mlm_sizes_claim(R, rel, size, quantity):
  """One size-against-the-first test of a several-model Figures 2 / 5 file as a phrase whose
  word is decided by its test: "higher (+1.23 points, p = 0.0022, Holm 0.0087)", "lower ...",
  or "not told apart ..." at (Holm) p >= 0.05; `quantity` valid_mlm_loss, trace_b1,
  trace_hutchinson or probe:<task> (in points)."""
  comp = R.load(f"{MLM}/{rel}")["comparison"]
  c = comp["vs_first"][size][quantity.replace(":", " ")]
  k, unit, dg = ((100, " points", 2) if quantity.startswith("probe") else
                 (1, " nats", 4) if quantity == "valid_mlm_loss" else (1, "", 1))
  p = c.get("p_holm", c["p_value"])
  word = _direction(c["diff"], p, "not told apart")
  holm = f", Holm {p_note(c, 'p_holm', comp['holm_family'])}" if "p_holm" in c else ""
  return f"{word} ({k * c['diff']:+.{dg}f}{unit}, p = {p_note(c)}{holm})"


def _acc_cell(r):
  """"12.34 (0.56)": a probe / fine-tuning result's test accuracy %, mean (std over seeds)."""
  return f"{100 * r['test_acc_mean']:.2f} ({100 * r['test_acc_std']:.2f})"


def _chosen(r):
  """The probe's hyperparameters chosen on valid ("lr 0.001, wd 0"), "-" if not recorded."""
  c = r.get("chosen")
  if not c:
    return "-"
  return (f"{'whitened' if c.get('whiten') else 'standardised'}, lr {c['lr']:g}, "
          f"wd {c['weight_decay']:g}")


@table("mlm_sanity")
def _mlm_sanity(R, rel):
  """The sanity rows of an mlm_flatness file's probe (and fine-tuning) table (issue 34), on the
  same test split and with the same protocol: majority class, (HMM) the block alone, the Bayes
  classifier, the lookup table's probe, (PCFG, where recorded) the words alone, each random
  init's probe, then the trained models'
  (the first and last point of each model seed, or each size); with each probe's
  hyperparameters chosen on valid and its features' numerical rank."""
  d = R.load(f"{MLM}/{rel}")
  if "sanity" not in d:  # written before issue 34: its probe table has no sanity rows
    return ("*No sanity rows* (majority class, Bayes, lookup table, random init: "
            f"`results/{MLM}/{rel}` was written before `el_jax.run.mlm_measure.Measurer.sanity` "
            "existed; re-running its command adds them).")
  return "\n\n".join(_mlm_sanity_task(d, task, s) for task, s in d["sanity"].items())


def _mlm_sanity_task(d, task, s):
  """_mlm_sanity's table for one downstream task (`s`: its sanity entry)."""
  bayes = ("Bayes: posterior of the hidden state (forward-backward)" if d["language"] == "hmm"
           else "Bayes: the inside algorithm (the label is its argmax)")

  def probe_row(name, r):
    rank = f"{r['feature_rank']} of {r['num_features']}" if "feature_rank" in r else "-"
    return [name, _acc_cell(r), _chosen(r), rank]
  rows = [["majority class", f"{100 * s['majority']:.2f}", "-", "-"]]
  if "block_majority" in s:
    rows.append(["the block alone (majority class of the sentence's block)",
                 f"{100 * s['block_majority']:.2f}", "-", "-"])
  rows += [[bayes, f"{100 * s['bayes']:.2f}", "-", "-"],
           probe_row("lookup table (exact conditionals) probe", s["lookup_table"])]
  if "words" in s:
    rows.append(probe_row("the words alone (one-hot word at each position) probe", s["words"]))
  sized = d["figure"] in ("size", "embedded")
  by = _sizes_by_models(d) if sized else None
  if by:  # one row per size: mean (std over its models), the settings chosen per model
    inits = {size: [s["random_init"][f"{size} seed {p['seed']}"] for p in pts]
             for size, pts in by.items()}
    # A size stopped early ("128/2/4/512@1000") has its architecture's inits: one row for them
    # all, named by the architecture, where every such size's inits probe the same.
    by_arch = {}
    for size, rs in inits.items():
      by_arch.setdefault(size.split("@")[0], []).append([r["test_acc_mean"] for r in rs])
    shared = {a: len(v) > 1 and all(x == v[0] for x in v) for a, v in by_arch.items()}
    shown = set()
    for size, pts in by.items():
      arch = size.split("@")[0]
      init_rows = () if arch in shown else (
          (f"random init (size {arch if shared[arch] else size}), {len(pts)} models",
           inits[size]),)
      if shared[arch]:
        shown.add(arch)
      for name, rs in init_rows + ((f"trained, size {size}, {len(pts)} models",
                                    [p["probe"][task] for p in pts]),):
        rows.append([name + " probe", _spread([r["test_acc_mean"] for r in rs], 2, 100),
                     "chosen on valid per model",
                     f"{statistics.fmean(r['feature_rank'] for r in rs):.0f} of "
                     f"{rs[0]['num_features']}"])
  else:
    for k, r in s["random_init"].items():
      rows.append(probe_row(f"random init ({'size ' if sized else 'model seed '}{k}) probe", r))
  if sized:
    if not by:
      for p in d["points"]:
        rows.append(probe_row(f"trained, size {p['size']} probe", p["probe"][task]))
  else:
    # training: the continuation's steps; pretrained: the end of the AdamW pre-training
    key = ("step" if d["figure"] == "pretrained"
           else f"{_CONT[d.get('continued_with', 'sgd')][1]}_step")
    steps = sorted({p[key] for p in d["points"]})
    for p in d["points"]:
      if p[key] in (steps[0], steps[-1]):
        rows.append(probe_row(f"trained (model seed {p['seed']}, step {p[key]}) probe",
                              p["probe"][task]))
  for k, r in s.get("fine_tune_random_init", {}).items():
    rows.append([f"random init (model seed {k}) fine-tuned", _acc_cell(r), "-", "-"])
  if not sized:
    for p in d["points"]:
      if "fine_tune" in p:
        rows.append([f"trained (model seed {p['seed']}, step {p[key]}) fine-tuned",
                     _acc_cell(p["fine_tune"][task]), "-", "-"])
  name = f"task-{task}" if d["language"] == "hmm" else f"task {task}"
  return md([f"{name}, {s['num_test']} test examples", "test acc % (std over seeds)",
             "probe settings (chosen on valid)", "feature rank (of width)"], rows)


def _adamw_steps(d):
  """The AdamW pre-training's steps of a training figure file (its `adamw` row), where its
  step-0 points were measured."""
  (row,) = [r for r in d["rows"] if r.get("phase") == "adamw"]
  return row["config"]["train"]["num_steps"]


def pcfg_budget(short, long_, task="C"):
  """The PCFG encoders of two pre-training budgets, seed by seed (issue 34): `short` a training
  figure file (its step-0 points: the AdamW run's end), `long_` a pretrained figure file of the
  same seeds and probe protocol. Returns ({seed: (gap_short, probe_short, gap_long, probe_long,
  random_init)}, the long budget's probe against the short one's (paired sign flip over the
  seeds), the random init's against the long budget's (the same))."""
  first = {p["seed"]: p for p in short["points"] if p.get("sgd_step", 0) == 0}
  last = {p["seed"]: p for p in long_["points"]}
  seeds = sorted(set(first) & set(last))
  inits = long_["sanity"][task]["random_init"]
  rows = {s: (first[s]["valid_gap"], first[s]["probe"][task]["test_acc_mean"],
              last[s]["valid_gap"], last[s]["probe"][task]["test_acc_mean"],
              inits[str(s)]["test_acc_mean"]) for s in seeds}
  longer = stats.paired_compare([r[3] for r in rows.values()], [r[1] for r in rows.values()])
  to_init = stats.paired_compare([r[4] for r in rows.values()], [r[3] for r in rows.values()])
  return rows, longer, to_init


def _pcfg_budget_files(R, short, long_, task):
  """pcfg_budget of two mlm_flatness files, with the two budgets' steps."""
  a, b = R.load(f"{MLM}/{short}"), R.load(f"{MLM}/{long_}")
  return (*pcfg_budget(a, b, task), _adamw_steps(a), b["config"]["train"]["num_steps"])


@table("pcfg_probe_by_budget")
def _pcfg_probe_by_budget(R, short, long_, task="C"):
  """pcfg_budget as a table: per seed the valid gap and task probe at both budgets and the
  random init's probe, then the paired tests."""
  rows, longer, to_init, na, nb = _pcfg_budget_files(R, short, long_, task)
  out = [[str(s), f(r[0], 3), f"{100 * r[1]:.2f}", f(r[2], 3), f"{100 * r[3]:.2f}",
          f"{100 * r[4]:.2f}"] for s, r in rows.items()]
  table_ = md(["model seed", f"valid gap, {na} steps", f"task {task} probe %, {na} steps",
               f"valid gap, {nb} steps", f"task {task} probe %, {nb} steps",
               "random init probe %"], out)
  tests = md(["comparison", "difference (points)", "p (paired sign flip)", "over"],
             [[f"{nb} steps - {na} steps", f"{100 * longer['diff']:+.2f}", p_note(longer),
               f"{longer['n']} models ({longer['n_up']} up)"],
              [f"random init - {nb} steps", f"{100 * to_init['diff']:+.2f}", p_note(to_init),
               f"{to_init['n']} models ({to_init['n_up']} with the init above)"]])
  return table_ + "\n\n" + tests


@table("pcfg_budget_sentence")
def _pcfg_budget_sentence(R, short, long_, task="C"):
  """pcfg_budget's reading, its words decided by the numbers: whether the longer budget's
  probe is above or below the shorter's in how many models, and where the random init is."""
  rows, longer, _, na, nb = _pcfg_budget_files(R, short, long_, task)
  gaps = [r[0] for r in rows.values()], [r[2] for r in rows.values()]
  n = longer["n"]
  word = "lower" if longer["diff"] < 0 else "higher"
  count = longer["n_down"] if longer["diff"] < 0 else longer["n_up"]
  above = sum(r[3] > r[4] for r in rows.values())
  return (f"With {nb} steps the valid gap falls from {statistics.fmean(gaps[0]):.3f} to "
          f"{statistics.fmean(gaps[1]):.3f} nats (means over the {n} models), and the task-{task} "
          f"probe is {word}, by {100 * abs(longer['diff']):.2f} points ({count} of {n} models; "
          f"paired sign flip p = {p_note(longer)}); {above} of {n} models probe above their "
          f"random init at {nb} steps.")


def pcfg_masking(one, bert):
  """Two pretrained figure files of the same seeds, probe protocol and tasks that differ in the
  pre-training's masking (`one`: one MASK per sentence; `bert`: BERT masking) or, for
  `pcfg_steps`, in its steps, seed by seed (issue 34). Returns {quantity: (one-mask values,
  BERT values, random inits or None, the BERT models against the one-mask ones (paired by
  model seed: the same init and data order, a sign flip))} for "valid gap" and each task's
  probe. Both files must hold the same random inits (the masking does not change the
  initialisation): a mismatch is an error."""
  a = {p["seed"]: p for p in one["points"]}
  b = {p["seed"]: p for p in bert["points"]}
  seeds = sorted(set(a) & set(b))
  if len(seeds) < 2:
    raise ValueError(f"pcfg_masking needs >= 2 model seeds in both files, got {seeds}")
  out = {"valid gap": ([a[s]["valid_gap"] for s in seeds], [b[s]["valid_gap"] for s in seeds],
                       None)}
  for task, row in one["sanity"].items():
    inits = [row["random_init"][str(s)]["test_acc_mean"] for s in seeds]
    other = [bert["sanity"][task]["random_init"][str(s)]["test_acc_mean"] for s in seeds]
    if any(abs(u - v) > 1e-6 for u, v in zip(inits, other)):
      raise ValueError(f"task {task}: the two files' random inits differ ({inits} vs {other}): "
                       f"not the same models' initialisations")
    out[f"task {task}"] = ([a[s]["probe"][task]["test_acc_mean"] for s in seeds],
                           [b[s]["probe"][task]["test_acc_mean"] for s in seeds], inits)
  return {q: (x, y, i, stats.paired_compare(y, x)) for q, (x, y, i) in out.items()}, seeds


def _pcfg_masking_files(R, one, bert):
  return pcfg_masking(R.load(f"{MLM}/{one}"), R.load(f"{MLM}/{bert}"))


def _above(xs, inits):
  return sum(x > i for x, i in zip(xs, inits))


def _paired_pcfg_table(rows_, seeds, la, lb):
  """pcfg_masking's rows as a table, the two files named `la` and `lb`: per task their probes
  (mean (std) over the models), the random inits, how many models of each probe above their
  own init, and `lb` - `la` paired by model seed; the valid gap first (equal loss?)."""
  n = len(seeds)
  out = []
  for q, (x, y, inits, c) in rows_.items():
    k, d = (1, 3) if inits is None else (100, 2)
    out.append([q + (" (nats)" if inits is None else " probe %"), _spread(x, d, k),
                _spread(y, d, k), "-" if inits is None else _spread(inits, d, k),
                "-" if inits is None else f"{_above(x, inits)} of {n}",
                "-" if inits is None else f"{_above(y, inits)} of {n}",
                f"{k * c['diff']:+.{d}f}", p_note(c), f"{c['n_up']} up, {c['n_down']} down"])
  return md(["quantity", f"{la} (mean (std))", f"{lb} (mean (std))", "random init",
             f"{la} above its init", f"{lb} above its init", f"{lb} - {la}",
             "p (paired by model seed, sign flip)", "models"], out)


@table("pcfg_masking")
def _pcfg_masking(R, one, bert):
  """pcfg_masking as a table (`_paired_pcfg_table`): one mask against BERT masking."""
  rows_, seeds = _pcfg_masking_files(R, one, bert)
  return _paired_pcfg_table(rows_, seeds, "one mask", "BERT masking")


@table("pcfg_steps")
def _pcfg_steps(R, short, long_):
  """Two pretrained figure files of the same recipe, seeds and probes at two pre-training
  budgets (train.num_steps), paired by model seed as pcfg_masking pairs two maskings: the
  same initialisations (checked), so the longer run's models against the shorter's."""
  a, b = R.load(f"{MLM}/{short}"), R.load(f"{MLM}/{long_}")
  rows_, seeds = pcfg_masking(a, b)
  na, nb = a["config"]["train"]["num_steps"], b["config"]["train"]["num_steps"]
  if na == nb:
    raise ValueError(f"pcfg_steps: both files pre-trained {na} steps")
  return _paired_pcfg_table(rows_, seeds, f"{na} steps", f"{nb} steps")


@table("pcfg_masking_sentence")
def _pcfg_masking_sentence(R, one, bert):
  """pcfg_masking's reading per task, its words decided by the numbers: how many BERT-masked
  and one-mask models probe above their random inits, and by how much on average."""
  rows_, seeds = _pcfg_masking_files(R, one, bert)
  n, parts = len(seeds), []
  for q, (x, y, inits, _) in rows_.items():
    if inits is None:
      continue
    dy = 100 * statistics.fmean(a - b for a, b in zip(y, inits))
    dx = 100 * statistics.fmean(a - b for a, b in zip(x, inits))
    parts.append(f"{q}: BERT-masked models above their random init in {_above(y, inits)} of "
                 f"{n} ({dy:+.2f} points on average), one-mask models in {_above(x, inits)} of "
                 f"{n} ({dx:+.2f})")
  return "; ".join(parts) + "."


@table("mlm_vs_random_init")
def _mlm_vs_random_init(R, rel):
  """The trained models' probe against their random inits (comparison.vs_random_init)."""
  d = R.load(f"{MLM}/{rel}")
  rows = []
  tests = {"unpaired" if "n_a" in c else "paired"
           for c in d["comparison"]["vs_random_init"].values()}
  for task, c in d["comparison"]["vs_random_init"].items():
    rows.append([f"task {task} probe: trained - random init",
                 f"{100 * c['mean_b']:.2f} -> {100 * c['mean_a']:.2f}", f"{100 * c['diff']:+.2f}",
                 p_note(c), f"{c['trained_above_random_in']} of {len(c['keys'])}",
                 f"{_design(c)}: {c['over']}"])
  p_head = {frozenset({"paired"}): "p (pairs: sign flip)",
            frozenset({"unpaired"}): "p (permutation over probe seeds)"}.get(
                frozenset(tests), "p (pairs: sign flip; one model: permutation)")
  return md(["comparison", "random init -> trained", "difference", p_head,
             "trained above its random init in", "over"], rows)


@table("probe_layers")
def _probe_layers(R, language):
  """experiments/probe_layers.py: per layer, the trained models' probe against their random
  inits (mean over the model seeds, paired sign flip) and the features' numerical rank."""
  rel = f"probe_layers/{language}.json"
  if not R.exists(rel):
    return _not_yet_run(f"{RESULTS}/{rel}", f"python experiments/probe_layers.py "
                        f"--language={language} ...")
  d = R.load(rel)
  rows = []
  for layer, r in d["layers"].items():
    for t in d["tasks"]:
      c = d["comparison"][layer][t]

      def rank(kind):
        ranks = [v[t]["feature_rank"] for v in r[kind].values()]
        return f"{sum(ranks) / len(ranks):.0f}"
      name = "final (after the last LayerNorm)" if layer == "final" else (
          "0 (embeddings)" if layer == "0" else f"after block {layer}")
      rows.append([name, t, f"{100 * c['mean_a']:.2f}", f"{100 * c['mean_b']:.2f}",
                   f"{100 * c['diff']:+.2f}", f"{c['trained_above_random_in']} of {len(c['keys'])}",
                   p_note(c),
                   f"{rank('trained')} / {rank('random_init')} of "
                   f"{next(iter(r['trained'].values()))[t]['num_features']}"])
  return md(["layer", "task", "trained probe %", "random init probe %", "difference (points)",
             "trained above its init in", "p (pairs: sign flip)",
             "feature rank, trained / random init"], rows)


# --- seed 002: adversarial pretraining (Tables 1-2) ---------------------------------

ADV = "adversarial_pretraining/table.json"  # the PCFG's (the paper's language); the tables
# take another file of experiments/adversarial_pretraining.py as their argument (e.g. the HMM's)


def _adv_tasks(d):
  """The probe tasks of an adversarial table file ("A", "B" in files written before --tasks)
  and how a task is named on the page."""
  tasks = d.get("tasks", ["A", "B"])
  hmm = d.get("language", "pcfg") == "hmm"
  return tasks, (lambda t: f"task-{t}" if hmm else f"task {t}")


@table("adversarial_sanity")
def _adversarial_sanity(R, rel=ADV):
  """Tables 1-2's sanity rows (issue 34): per task the majority class, the Bayes classifier
  (PCFG: the inside algorithm's argmax is the label, so 1; HMM: the hidden state's posterior),
  on the HMM the block alone, and the probe on the random init of every model seed, beside the
  lookup table's and the trained models' probes in the table above."""
  d = R.load(rel)
  if "sanity" not in d:
    return ("*No sanity rows* (majority class, Bayes, random init: "
            f"`results/{rel}` was written before `el_jax.run.mlm_measure.Measurer.sanity` existed; "
            "re-running its command adds them).")
  _, name = _adv_tasks(d)
  bayes = ("Bayes (posterior of the hidden state)" if d.get("language") == "hmm"
           else "Bayes (the inside algorithm)")
  rows = []
  for task, s in d["sanity"].items():
    rows.append([f"{name(task)}: majority class", f"{100 * s['majority']:.2f}", "-"])
    if "block_majority" in s:
      rows.append([f"{name(task)}: the block alone (its majority state)",
                   f"{100 * s['block_majority']:.2f}", "-"])
    rows.append([f"{name(task)}: {bayes}", f"{100 * s['bayes']:.2f}", "-"])
    for k, r in s["random_init"].items():
      rows.append([f"{name(task)}: random init (model seed {k}) probe", _acc_cell(r),
                   _chosen(r)])
  return md(["row", "test acc % (std over seeds)", "probe settings (chosen on valid)"], rows)


def adversarial_vs_random(d):
  """{(arm, task): `stats.vs_random_init`} of an adversarial table file: each arm's pre-trained
  models' probe against the probe on their own seeds' random initialisations (the sanity
  rows; several models: a sign flip over the pairs), Holm over every arm and task."""
  out = {(arm, t): c for arm in ("adamw", "adamw_matched", "adversarial")
         for t, c in stats.vs_random_init(d["models"][arm]["seeds"], d["sanity"]).items()}
  for c, q in zip(out.values(), stats.holm([c["p_value"] for c in out.values()])):
    c["p_holm"] = q
  return out


@table("adversarial_vs_random_init")
def _adversarial_vs_random_init(R, rel=ADV):
  """Every arm's probe against its models' random inits (`adversarial_vs_random`): a trained
  model's probe is evidence about what pre-training learned only where it beats this."""
  d = R.load(rel)
  if "sanity" not in d:
    return f"*No random-init rows in `results/{rel}`.*"
  _, name_of = _adv_tasks(d)
  names = {"adamw": "AdamW, final", "adamw_matched": "AdamW at equal loss",
           "adversarial": "adversarial"}
  cs = adversarial_vs_random(d)
  rows = [[names[arm], name_of(t), f"{100 * c['mean_b']:.2f} -> {100 * c['mean_a']:.2f}",
           f"{100 * c['diff']:+.2f}", f"{c['trained_above_random_in']} of {len(c['keys'])}",
           p_note(c),
           p_note(c, "p_holm", len(cs))] for (arm, t), c in cs.items()]
  return md(["arm", "task", "random init -> trained probe %", "difference (points)",
             "trained above its random init in", "p (pairs: sign flip)",
             f"Holm p (over the {len(cs)})"], rows)


@table("adversarial_table")
def _adversarial_table(R, rel=ADV):
  """One row per pre-trained model (arm, model seed), then each arm's mean (std) over its
  models; the lookup table and (PCFG) the paper's rows."""
  d = R.load(rel)
  tasks, name_of = _adv_tasks(d)
  m = d["models"]
  arms = {"adamw": "AdamW, final", "adamw_matched": "AdamW at equal loss",
          "adversarial": f"adversarial (weight {d['adversarial']['weight']:g})"}
  out = []

  def probe(r, t):
    x = r["probe"][t]
    return f"{100 * x['test_acc_mean']:.2f} +- {100 * x['test_acc_std']:.2f}"
  for k, name in arms.items():
    for seed, x in m[k]["seeds"].items():
      out.append([f"{name}, seed {seed} (step {x['step']})",
                  f"{f(x['valid_mlm_loss'])} ({f(x['valid_gap'])})",
                  *[probe(x, t) for t in tasks],
                  f"{x['trace_b1']:.0f} +- {x['trace_b1_std']:.0f}",
                  f"{x['trace_hutchinson']:.0f} +- {x['trace_hutchinson_stderr']:.0f}"])
  n = len(d["seeds"])
  for k, name in arms.items():
    a = m[k]["mean"]

    def ms(key, scale=1, dg=2):
      sd = a[key]["std"]
      return (f"{scale * a[key]['mean']:.{dg}f}" +
              (f" ({scale * sd:.{dg}f})" if sd is not None else ""))
    out.append([f"**{name}: mean (std) over {n} models**",
                f"{f(a['valid_mlm_loss']['mean'])} ({f(a['valid_gap']['mean'])})",
                *[ms(f"probe_{t}", 100) for t in tasks], ms("trace_b1", dg=0),
                ms("trace_hutchinson", dg=0)])
  x = d["lookup_table"]
  out.append(["lookup table", f"{f(x['valid_mlm_loss'])} (optimum)",
              *[probe(x, t) for t in tasks], "-", "-"])
  if d.get("language", "pcfg") == "pcfg":  # the paper's Table 1 is on its PCFG
    for k, label in (("adamw", "paper (235M BERT): AdamW"), ("adversarial", "paper: adversarial"),
                     ("lookup", "paper: lookup table")):
      t2 = PAPER.get(f"s002.t2.{k}.trace")
      out.append([label, PAPER[f"s002.t1.{k}.loss"][0], PAPER[f"s002.t1.{k}.A"][0],
                  PAPER[f"s002.t1.{k}.B"][0], t2[0] if t2 else "-", "-"])
  heads = [f"{name_of(t)} %" for t in tasks]
  heads[0] = heads[0] + " (+- std over probe seeds)"
  return md(["model", "valid MLM loss (gap)", *heads,
             "Tr(H) B.1 (+- std over reps)", "Tr(H) Hutchinson (+- stderr)"], out)


@table("adversarial_comparisons")
def _adversarial_comparisons(R, rel=ADV):
  """Adversarial vs the final AdamW model and vs its checkpoint at equal loss: over the model
  seeds (paired by seed, sign flip) when several ran, else over one pair's probe seeds."""
  doc = R.load(rel)
  tasks, name_of = _adv_tasks(doc)
  d = doc["comparisons"]
  keys = [f"probe_{t}" for t in tasks] + ["trace_b1"]
  m = len(d) * len(keys)  # the Holm family: every p-value of the table
  out = []
  for name, c in d.items():
    ref = "AdamW at equal loss" if name.endswith("matched") else "final AdamW"
    for k in keys:
      x = c[k]
      s = 100 if k.startswith("probe") else 1
      dg = 1 if k.startswith("probe") else 0
      paired = x.get("test") == "paired sign flip"
      units = (f"{x['n_up']} up, {x['n_down']} down" if paired else f"{x['n_a']} vs {x['n_b']}")
      out.append([f"adversarial vs {ref}",
                  name_of(k[6:]) if k.startswith("probe_") else "Tr(H) B.1",
                  f"{s * x['diff']:+.{dg}f}", units, ci_cell(x, dg, s), p_note(x), _holm(x, m),
                  c.get("over", "probe seeds / Tr(H) repetitions of one pair of models")])
    out.append([f"adversarial vs {ref}", "valid MLM loss", sf(c["valid_mlm_loss_diff"]), "-",
                "-", "-", "-", "-"])
  return md(["comparison", "quantity", "difference (points for probes)", "models / units",
             "bootstrap 95%", "p (paired: sign flip; else permutation)",
             "Holm p (over the table)", "over"], out)


@table("adversarial_pilot")
def _adversarial_pilot(R, rel=ADV):
  p = R.load(rel)["pilot"]
  rows = [[f"{t['weight']:g}" + (" (chosen)" if t["weight"] == p["chosen_weight"] else ""),
           f(t["valid_mlm_loss"], 4), sf(t["minus_normal"]), "yes" if t["within_tol"] else "no"]
          for t in p["trials"].values()]
  return md(["weight", f"valid MLM loss at step {p['steps']} (mean over the model seeds)",
             "minus the normal run's "
             f"({f(p['normal_valid_mlm_loss'], 4)})", f"within {p['tol']:g} nats"], rows)


# --- seed 002: Dyck language, Theorem 6.1 -------------------------------------------

DYCK = "dyck_flatness/dyck_flatness.json"


@table("dyck_constructions")
def _dyck_constructions(R):
  d = R.load(DYCK)
  out = []
  for c in d["constructions"]:
    if c["name"] == "count":
      ds = c["downstream"]
      out.append([f"count ({c['width']} neurons)", f"{c['loss']:.1e}",
                  f"{c['trace']:.4g} (exact)", f"{ds['8']['mean']:.0e} / {ds['32']['mean']:.0e}",
                  str(stays_below(ds, 0.01)), "-"])
    else:
      ds = c["downstream_mean"]
      hu = [f"{s['trace_hutchinson']:.3g} +- {s['trace_hutchinson_stderr']:.2g}"
            for s in c["seeds"] if "trace_hutchinson" in s]
      out.append([f"random features, m = {c['width']} ({len(c['seeds'])} draws)",
                  f"<= {c['loss_max']:.1e}",
                  f"{c['trace_mean']:.3g} ({c['trace_min']:.3g}, {c['trace_max']:.3g})",
                  f"{ds['8']:.3f} / {ds['32']:.4f}", str(max(stays_below(s["downstream"], 0.01)
                                                           for s in c["seeds"])),
                  "; ".join(hu) or "-"])
  return md(["solution", "pre-training loss", "Tr(H): mean (min, max) over draws",
             "downstream error, n = 8 / 32",
             "examples from which the error stays below 1% (worst draw)",
             "Hutchinson check (first draw)"], out)


@table("dyck_training")
def _dyck_training(R):
  d = R.load(DYCK)["training"]
  out = []
  for name, t in d.items():
    for p in t["summary"]:
      out.append([f"SGD, label noise {t['label_noise']:g}", str(p["step"]),
                  f"{p['loss']['mean']:.1e}",
                  f"{p['trace']['mean']:.3g} ({p['trace']['min']:.3g}, {p['trace']['max']:.3g})",
                  f"{p['downstream_8']['mean']:.3f}", f"{p['downstream_32']['mean']:.4f}"])
  return md(["training", "step", "loss (mean over seeds)", "Tr(H): mean (min, max) over seeds",
             "downstream error, n = 8", "n = 32"], out)


# --- seed 003: linear next-token prediction ---------------------------------------

NTP = "ntp_convergence/convergence.json"  # a grid (el_jax.run.grid): one row per variant


def _ntp_rows(R):
  """{variant: its row} of convergence.json."""
  return {r["label"]: r for r in R.load(NTP)["rows"]}


@table("ntp_instances")
def _ntp_instances(R):
  d = _ntp_rows(R)
  out = []
  for name, x in d.items():
    i = x["instance"]
    out.append([name, f"{i['m']} / {i['d']} / {i['V']} / {i['mean_support']:g}",
                f(i["entropy"], 4), str(i["dim_F"]), "yes" if i["compatible"] else "no",
                "yes" if i["separable"] else "no", f(i["norm_W_mm"]), f(i["margin"], 4),
                f"{i['svm_solve_time_s']:.3f}"])
  return md(["instance", "m / d / V / mean |S_j|", "entropy H", "dim F", "compatible",
             "separable", "||W_mm||", "margin", "NTP-SVM solve s"], out)


@table("ntp_runs")
def _ntp_runs(R):
  d = _ntp_rows(R)
  out = []
  for name, x in d.items():
    for opt, r in x["runs"].items():
      out.append([name, opt.upper(), f"{r['lr']:g}", f"{r['steps']:,}", f"{r['gap']:.1e}",
                  f(r["norm"], 2), f(r["cos_mm"]), f(r["cos_diff"]), f(r["dist_f"])])
  return md(["instance", "optimizer", "lr", "steps", "CE - H", "||W_k||", "cos(W_k, W_mm)",
             "cos(W_k - W*, W_mm)", "||P_F(W_k) - W*||"], out)


@table("ntp_reg_path")
def _ntp_reg_path(R):
  d = _ntp_rows(R)
  out = []
  for name, x in d.items():
    p = x["reg_path"]
    for i, b in enumerate(p["B"]):
      out.append([name, f"{b:g}", f"{p['gap'][i]:.1e}", f(p["norm"][i], 2), f(p["cos_mm"][i]),
                  f(p["dist_f"][i])])
  return md(["instance", "B (norm bound)", "CE - H", "||W_B||", "cos(W_B, W_mm)",
             "||P_F(W_B) - W*||"], out)


@table("ntp_separability")
def _ntp_separability(R):
  d = R.load("ntp_separability/separability.json")
  sups = sorted({r["support"] for r in d["rows"]})
  ratios = sorted({r["d_over_m"] for r in d["rows"]})
  cell = {(r["support"], r["d_over_m"]): r for r in d["rows"]}
  out = []
  for s in sups:
    out.append([f"|S_j| = {s}"] + [
        f"{cell[s, q]['separable']:.2f} / {cell[s, q]['compatible']:.2f}" if (s, q) in cell
        else "-" for q in ratios])
  return md(["d / m"] + [f"{q:g}" for q in ratios], out)


@table("ntp_text")
def _ntp_text(R):
  d = R.load("ntp_text/text.json")
  out = []
  for n, b in d["by_n"].items():
    for g in b["gd"]:
      out.append([n, str(b["m"]), f(b["entropy"]), f"{b['mean_support']:.1f} (min "
                  f"{b['min_support']})", str(b["min_d_separable_and_compatible"]), str(g["d"]),
                  f"{g['gap']:.3f}", f(g["cos_mm"], 2), f"{g['norm_W_star']:.0f}",
                  f"{g['norm_W_mm']:.0f}"])
  return md(["context length", "contexts m", "entropy H", "mean support (min)",
             "smallest d compatible and separable", "GD at d", "CE - H after GD", "cos(W_k, W_mm)",
             "||W*||", "||W_mm||"], out)


@table("ntp_text_sweep")
def _ntp_text_sweep(R):
  d = R.load("ntp_text/text.json")
  ds = [s["d"] for s in next(iter(d["by_n"].values()))["sweep"]]
  out = []
  for n, b in d["by_n"].items():
    cells = {s["d"]: s for s in b["sweep"]}
    out.append([n] + ["C+S" if cells[x]["compatible"] and cells[x]["separable"] else
                      "C" if cells[x]["compatible"] else "S" if cells[x]["separable"] else "-"
                      for x in ds])
  return md(["context length \\ d"] + [str(x) for x in ds], out)


# --- speed ----------------------------------------------------------------------

_SIDES = {"el_jax": "scored positions, `cpu_dots=xla` (default)",
          "el_jax_eigen": "scored positions, `cpu_dots=eigen`",
          "el_jax_all_positions": "all positions (equal work), `xla`",
          "el_jax_eigen_all_positions": "all positions, `eigen`"}


def _side_label(side):
  """A bench_vs_torch el_jax side in words: positions, `train.cpu_dots`, and the host malloc
  (`_glibc_malloc`: glibc's defaults, as before el_jax.infra.hostmem; files from before it
  recorded no malloc and ran with glibc's)."""
  if side in _SIDES:
    return _SIDES[side]
  rest = side[len("el_jax"):]
  allpos = rest.endswith("_all_positions")
  rest = rest[:-len("_all_positions")] if allpos else rest
  glibc = rest.endswith("_glibc_malloc")
  rest = rest[:-len("_glibc_malloc")] if glibc else rest
  dev = re.search(r"_(\d+)dev$", rest)
  rest = rest[:dev.start()] if dev else rest
  blocks = re.search(r"_blocks(\d+)$", rest)
  rest = rest[:blocks.start()] if blocks else rest
  dots = rest.lstrip("_") or "xla"
  return (f"{'all positions (equal work)' if allpos else 'scored positions'}, `cpu_dots={dots}`"
          + (f", `attention_blocks={blocks.group(1)}`" if blocks else "")
          + (f", {dev.group(1)} CPU devices" if dev else "")
          + (", glibc's malloc (as before)" if glibc else ""))


@table("bench_vs_torch")
def _bench_vs_torch(R, rel):
  d = R.load(rel)
  res, ratio = d["results"], d["ratio_tokens_per_s"]
  torches = [k for k in res if k.startswith("torch")]
  sides = [k for k in res if k.startswith("el_jax")]
  # the committed order of the four original sides first, then any others as they ran
  sides = [k for k in _SIDES if k in res] + [k for k in sides if k not in _SIDES]
  out = []
  for side in sides:
    r = res[side]
    row = [_side_label(side), f(r["step_ms_median"], 1), pct(r["mfu"])]
    for t in torches:
      x = ratio[f"{side}/{t}"]
      row.append(f"{x['median']:.2f} ({x['min']:.2f}..{x['max']:.2f})")
    out.append(row)
  head = ["el_jax side", "step ms (median)", "MFU"] + [
      f"/ {t.replace('_', ' ')} ({f(res[t]['step_ms_median'], 1)} ms, MFU {pct(res[t]['mfu'])})"
      for t in torches]
  return md(head, out)


def _cpu_kind(d):
  """(key, label) of the CPU a bench_vs_torch file ran on: its `ran_on` CPU model and vector
  width, or "not recorded" with the machine fields the file does have."""
  ro = d.get("ran_on")
  if ro and ro.get("cpu"):
    flags = ro.get("cpu_flags", [])
    wide = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    extra = [x for x in ("avx512_bf16", "avx512_vnni", "amx_bf16") if x in flags]
    ident = ro.get("cpu_id", "")  # family / model: recorded since the Zen 5 run
    return ((ro["cpu"], tuple(sorted(flags)), ident),
            f"{ro['cpu']}" + (f" ({ident})" if ident else "") + f", {wide}"
            + (f" (+{', '.join(extra)})" if extra else "") + f", {d.get('cpu_count', '?')} cores")
  return (None, id(d)), (f"not recorded ({d.get('machine', '?')}, {d.get('cpu_count', '?')} "
                         f"cores; matmul peak {d['matmul_peak_flops'] / 1e9:.0f} GFLOP/s)")


@table("bench_cpu_kinds")
def _bench_cpu_kinds(R, *rels):
  """One row per CPU kind measured (the last of the files given for a kind): the best el_jax
  side against the faster torch side, scored positions and equal work, and the targets."""
  rows = {}
  for rel in rels:
    d = R.load(rel)
    key, label = _cpu_kind(d)
    rows[key] = (label, rel, d)
  out = []
  for label, rel, d in rows.values():
    t = d["targets"]
    cells = []
    for name in ("scored positions vs best torch", "all positions (equal work) vs best torch"):
      x = t.get(name)
      cells.append("-" if x is None else
                   f"{x['ratio']:.2f} (`{x['el_jax']}`; {'met' if x['met'] else '**missed**'}, "
                   f"target {x['target']:g})")
    torch = next(iter(t.values()))["torch"]
    load = "{:.1f} -> {:.1f}".format(d["loadavg_start"][0], d["loadavg_end"][0])
    if "loadavg_before_setup" in d:  # other processes' load, before this run's workers
      load = f"{d['loadavg_before_setup'][0]:.1f} before; {load} while timing"
    out.append([label, f"`{rel.split('/')[-1]}`", f"{d['rounds']} x {d['steps_per_window']}",
                load, f"{d['matmul_peak_flops'] / 1e9:.0f}",
                f"`{torch}` {f(d['results'][torch]['step_ms_median'], 1)} ms "
                f"(MFU {pct(d['results'][torch]['mfu'])})"] + cells)
  return md(["CPU", "file", "rounds x steps", "load average", "matmul peak GFLOP/s",
             "faster torch side", "best el_jax / torch, scored positions",
             "best el_jax / torch, equal work"], out)


@table("bench_targets")
def _bench_targets(R, rel):
  """The issue's targets: the best el_jax side against the faster torch side (and, where the
  file records it, the default step's ratio: `train.cpu_dots="xla"`, one attention einsum)."""
  d = R.load(rel)
  ts = d["targets"]
  default = any("default_ratio" in t for t in ts.values())
  rows = [[name, f"`{t['el_jax']}` / `{t['torch']}`", f"{t['ratio']:.2f}", f"{t['target']:g}",
           "met" if t["met"] else "**missed**"]
          + ([f"{t['default_ratio']:.2f}" if "default_ratio" in t else "-"] if default else [])
          for name, t in ts.items()]
  return md(["target", "sides", "ratio of tokens/s (median over rounds)", "target", ""]
            + (["the default step's ratio"] if default else []), rows)


@table("bench_ab")
def _bench_ab(R, rel, reference="el_jax"):
  """Every el_jax side against `reference` (same positions), from the per-round ratios."""
  d = R.load(rel)
  ratio = d["ratio_tokens_per_s"]
  out = []
  for key, x in ratio.items():
    a, b = key.split("/")
    if a not in (reference, f"{reference}_all_positions") or b.startswith("torch"):
      continue
    if a.endswith("_all_positions") != b.endswith("_all_positions"):
      continue
    # ratio = a / b; report b relative to a
    out.append([f"`{b}`", f"`{a}`", f"{1 / x['median']:.2f}",
                f"{1 / x['max']:.2f}..{1 / x['min']:.2f}",
                f(d["results"][b]["step_ms_median"], 1)])
  return md(["side", "against", "tokens/s ratio (median over rounds)", "rounds' range",
             "step ms (median)"], out)


@table("flatness_bench")
def _flatness_bench(R):
  d = R.load("flatness_bench/bench.log")
  out = []
  for key in ("x1", "x8"):
    x = d[key]
    fl = x["flops_over_grad"]
    rows = [("one Hutchinson probe (v^T H v)", x["probe_over_grad"], fl["probe"], None),
            ("probe in a batch of 8", x["batched_probe_over_grad_by_probes"]["8"], fl["probes_8"],
             1.5),
            ("probe in a batch of 32", x["batched_probe_over_grad_by_probes"]["32"],
             fl["probes_32"], 1.5),
            ("probe in 8, per-layer (HVP)", x["per_layer_probe_over_grad"],
             fl["probes_per_layer_8"], None),
            ("one Fisher draw (single)", x["fisher_draw_over_grad"], fl["fisher_draw"], 1.3),
            ("one Fisher draw (per-example)", x["fisher_draw_per_example_over_grad"],
             fl["fisher_draw_per_example"], None)]
    for name, t, fx, target in rows:
      out.append([f"{x['contexts']} x 55", f(x["grad_ms"], 1), name, f"{t:.2f}x", f"{fx:.2f}x",
                  f"<= {target:g}x" if target else "-"])
  return md(["batch (contexts x tokens)", "gradient ms", "estimator", "time over a gradient",
             "XLA FLOPs over a gradient's", "target"], out)


@table("ntp_bench")
def _ntp_bench(R):
  d = R.load("ntp_bench/bench.txt")
  out = []
  for r in d["scaling"]:
    old = r.get("old")
    out.append([str(r["m"]), str(r["V"]), str(r["d"]), f"{r['n_dual']:,}", r["method"],
                f(r["total_s"], 2), str(r["iterations"]) if r["iterations"] else "-",
                f"{old['total_s']:.2f}" if old else "-",
                f"{old['speedup']:.1f}x" if old else "-"])
  return md(["m", "V", "d", "dual variables", "method", "seconds", "iterations",
             "earlier first-order solver, seconds", "speed-up"], out)


# --- the accelerator: verify and the device queue --------------------------------------

ACCEL = "verify"  # results/verify/verify_<device>_<date>.json (python -m el_jax.tools.verify)
QUEUE = "device_queue"  # results/device_queue/<job>.json (experiments/device_queue.py collect)


def _verify_files(R):
  return [r for r in R.files(ACCEL) if os.path.basename(r).startswith("verify_")]


def _device(v):
  ro = (v.get("parts", {}).get("env") or {}).get("ran_on") or {}
  return f"{ro.get('device_kind', '?')} (jax {ro.get('jax', '?')})"


def _session(rel):
  return os.path.splitext(os.path.basename(rel))[0].removeprefix("verify_")


@table("accelerator_checks")
def _accelerator_checks(R):
  files = _verify_files(R)
  if not files:
    return _not_yet_run(f"{RESULTS}/{ACCEL}/verify_*.json", "python -m el_jax.tools.verify")
  out = []
  for rel in files:
    v = R.load(rel)
    parts = v["parts"]
    g, sd, mn = parts.get("golden", {}), parts.get("seeds", {}), parts.get("main", {})
    pk = parts.get("env", {}).get("peak_flops", {})
    ran = "" if {"seeds", "main"} & set(parts) else " (env and golden only: `--preflight`)"
    out.append([_session(rel), _device(v), ("passed" if v.get("ok") else "**FAILED**") + ran,
                f"{g['max_rel_err_highest']:.1e}" if "max_rel_err_highest" in g else "-",
                f"{max(g['rel_err']['default'].values()):.1e}" if "rel_err" in g else "-",
                f"{max(g['rel_err']['bfloat16'].values()):.1e}" if "rel_err" in g else "-",
                (f"{sd['max_rel_err_metrics']:.1e} / {sd['max_rel_err_params']:.1e} ({sd['impl']})"
                 if "max_rel_err_metrics" in sd else "-"),
                "yes" if mn.get("ok") else "no" if mn else "not run",
                " / ".join(f"{pk[k] / 1e12:.0f}" for k in ("bfloat16", "float32",
                                                         "float32_highest") if k in pk) or "-"])
  return md(["session", "device", "verify", "golden step, highest precision (rel err, must be "
             "<= 1e-4)", "default precision", "bf16", "stacked vs sequential seeds (metrics / "
             "params rel err)", "el_jax.main end to end", "matmul TFLOP/s bf16 / fp32 (TF32) / "
             "fp32 highest"], out)


@table("accelerator_throughput")
def _accelerator_throughput(R):
  files = _verify_files(R)
  if not files:
    return _not_yet_run(f"{RESULTS}/{ACCEL}/verify_*.json", "python -m el_jax.tools.verify")
  out = []
  for rel in files:
    v = R.load(rel)
    th = v["parts"].get("throughput", {})
    for r in th.get("rows", []):
      mfu = r.get("mfu")
      out.append([_device(v), f"`{r['model']}`", r["dtype"],
                  "all (equal work)" if r["all_positions"] else "scored (as trained)",
                  f(r["step_s"] * 1e3, 2), f"{r['tokens_per_s'] / 1e6:.2f}",
                  f"{r['flops_per_step'] / 1e9:.0f}",
                  pct(mfu) if mfu is not None and mfu == mfu else "-"])
    for r in th.get("seeds", []):
      out.append([_device(v), f"`{r['model']}`, {r['seeds']} seeds", "float32",
                  f"{r['mode']} (scored)", f(r["step_s"] * 1e3, 2),
                  f"{r['seed_steps_per_s']:.0f} seed-steps/s", "-", "-"])
  return md(["device", "model", "dtype", "positions", "ms per step (median)",
             "M tokens/s", "GFLOP per step", "MFU"], out)


@table("accelerator_vs_torch")
def _accelerator_vs_torch(R):
  files = _verify_files(R)
  rows = []
  for rel in files:
    v = R.load(rel)
    to = v["parts"].get("torch", {})
    tor = {(t["model"], t["dtype"]): t for t in to.get("rows", [])}
    for c in v.get("vs_torch", []):
      t = tor[(c["model"], c["dtype"])]
      rows.append([_device(v), f"`{c['model']}`", c["dtype"],
                   "all (equal work)" if c["equal_work"] else "scored (as trained)",
                   f(c["el_jax_step_s"] * 1e3, 2), f(c["torch_step_s"] * 1e3, 2),
                   pct(t["mfu"]) if t.get("mfu") is not None else "-", f"{c['speedup']:.2f}x"])
  if not rows:
    return _not_yet_run(f"{RESULTS}/{ACCEL}/verify_*.json (its torch part)",
                        "python -m el_jax.tools.verify")
  return md(["device", "model", "dtype", "el_jax positions", "el_jax ms per step",
             "PyTorch ms per step", "PyTorch MFU (equal work)", "el_jax speed-up"], rows)


def _queue_files(R):
  return [r for r in R.files(QUEUE) if not os.path.basename(r).endswith("_test.json")]


def _arm_cell(over):
  keep = {k: v for k, v in over.items() if k.startswith(("loss.", "optim."))}
  return ", ".join(f"{k}={v}" for k, v in keep.items()) or "-"


@table("device_queue")
def _device_queue(R):
  files = _queue_files(R)
  if not files:
    return _not_yet_run(f"{RESULTS}/{QUEUE}/<job>.json",
                        "python experiments/device_queue.py collect <returned files>")
  out = []
  for rel in files:
    d = R.load(rel)
    for arm, a in d["arms"].items():
      vals = [v[d["metric"]] for _, v in sorted(a["seeds"].items(), key=lambda kv: int(kv[0]))]
      agg = a["aggregate"]
      out.append([d["job"], arm, _arm_cell(a["overrides"]), f"`{d['metric']}`",
                  f"{a['n']} of {len(d['seeds_wanted'])}",
                  ", ".join(f"{x:.3f}" for x in vals),
                  mr(agg) if a["n"] > 1 else f(agg["mean"]),
                  ", ".join(a["devices"]), d.get("paper", {}).get(arm, "-")])
  return md(["job", "arm", "setting", "metric", "seeds so far", "per seed (seed order)",
             "mean (min, max)", "device", "paper"], out)


@table("device_queue_tests")
def _device_queue_tests(R):
  out = []
  for rel in _queue_files(R):
    d = R.load(rel)
    cs = d.get("comparisons", [])
    ns = {arm: a["n"] for arm, a in d["arms"].items()}
    if not cs:
      out.append([d["job"], "-", "no test yet: " + ", ".join(f"{k} n = {n}" for k, n in ns.items())
                  + " (a test needs >= 3 independently trained models per arm)", "-", "-"])
    for c in cs:
      floor = " (the floor of this design)" if c["p_value"] <= c["p_floor"] * (1 + 1e-9) else ""
      out.append([d["job"], f"{c['a']} - {c['b']}",
                  f"{sf(c['diff'])} {ci(c['ci95'])}", f"{pval(c['p_value'])}{floor}",
                  f"{pval(c['p_floor'])}; Holm {pval(c['p_holm'])}"])
  if not out:
    return _not_yet_run(f"{RESULTS}/{QUEUE}/<job>.json",
                        "python experiments/device_queue.py collect <returned files>")
  return md(["job", "comparison", "difference of means [bootstrap 95%]",
             "two-sided permutation p over model seeds", "smallest p possible; Holm"], out)


def _not_yet_run(what, command):
  return f"*Not yet run* (`{what}` is absent; `{command}` writes it)."


def _hours(x):
  return f"{x:.3g}"


def _bytes(x):
  for unit, s in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
    if x >= s:
      return f"{x / s:.2f} {unit}"
  return f"{x:.0f} B"


@table("plan_paper")
def _plan_paper(R):
  rel = "plan_paper/plan.json"
  if not R.exists(rel):
    return _not_yet_run(f"{RESULTS}/{rel}", "python experiments/plan_paper.py")
  d = R.load(rel)
  chips = list(d["chips"])
  out = []
  for label, p in d["runs"].items():
    b = p["bytes_per_device"]
    row = [f"`{label}`", f"{p['params'] / 1e6:.2f}M",
           f"{p['rows_per_step']:,} x {p['model']['context_len']:,} = {p['tokens_per_step']:,}",
           f"{p['flops_per_step']:.3g}", f(p["flops_per_step"] / p["flops_6nd"], 2),
           f"{_bytes(b['peak_estimate'])}", f"{p['num_steps']:,} x {p['num_seeds']}"]
    row += [_hours(p["chips"][c]["hours_all_seeds"]) for c in chips]
    row += [_hours(p["chips"][c]["hours_all_seeds_bf16"]) for c in chips
            if d["chips"][c]["bf16"] != d["chips"][c]["f32"]]
    out.append(row)
  head = ["config", "params", "rows x tokens per step", "FLOPs/step (XLA)", "XLA / 6ND",
          "peak bytes per device", "steps x seeds"]
  head += [f"{d['chips'][c]['name']} hours" for c in chips]
  head += [f"{d['chips'][c]['name']} hours, bf16" for c in chips
           if d["chips"][c]["bf16"] != d["chips"][c]["f32"]]
  peaks = "; ".join(f"{c['name']} {c['f32'] / 1e12:g} ({c['f32_as']}) / {c['bf16'] / 1e12:g} "
                    f"(bf16) TFLOP/s" for c in d["chips"].values())
  note = (f"\n\n`{d['command'].strip()}` on {d['machine']} (JAX {d['jax']}): {d['num_devices']} "
          f"devices, MFU {d['mfu']:g}; hours of the whole run (every seed), on "
          f"{d['num_devices']} chips. Dense peaks: {peaks}.")
  return md(head, out) + note


@table("paper_two_steps")
def _paper_two_steps(R):
  rel = "paper_two_steps/two_steps.json"
  if not R.exists(rel):
    return _not_yet_run(f"{RESULTS}/{rel}", "python experiments/paper_two_steps.py")
  d = R.load(rel)
  out = []
  for label, r in d["runs"].items():
    if "steps" not in r or len(r["steps"]) < 2:
      out.append([f"`{label}`", r["status"]] + ["-"] * 7)
      continue
    s1, s2 = r["steps"][0], r["steps"][1]
    out.append([f"`{label}`", r["status"], f"{r['params'] / 1e6:.2f}M",
                f"{r['rows_per_step']} x {r['context_len']:,}", f(r["data_s"], 2),
                f(r["trainer_s"], 2), f"{f(s1['seconds'], 2)} / {f(s2['seconds'], 2)}",
                f"{f(s1['loss'], 3)} / {f(s2['loss'], 3)}",
                f"{s1['grad_norm']:.3g} / {s2['grad_norm']:.3g}"])
  return md(["config", "status", "params", "rows x tokens", "data s", "trainer s",
             "step 1 s (with compile) / step 2 s", "loss, step 1 / 2", "grad norm, step 1 / 2"],
            out) + f"\n\nMachine: {d['machine']}; {d['rows']} rows per step, one CPU device."


# --- claims generated from the JSON with their conditions (issue 34) --------------------
# A sentence that says "met", "improves", "exceeds" or "needs n examples" is written here
# from the numbers and the condition that makes it true, so it cannot disagree with them.


@table("p_at")
def _p_at(R, rel, path, key="p_value", m="1"):
  """`{{ table: p_at <file> <path to a comparison> [p_value|p_holm] [m] }}`: the comparison's
  p with its design's floor noted beside it where it sits there (Holm over m)."""
  c, _ = walk(R.load(rel), parse_path(path), f"{RESULTS}/{rel}")
  return p_note(c, key, int(m))


def stays_below(curve, level):
  """The smallest n from which the mean error stays <= level at every larger n measured
  (None if the largest n is above it); `curve` {n (str or int): {"mean": ...} or float}."""
  pts = sorted((int(n), v["mean"] if isinstance(v, dict) else v) for n, v in curve.items())
  out = None
  for n, e in reversed(pts):
    if e > level:
      break
    out = n
  return out


def first_below(curve, level):
  pts = sorted((int(n), v["mean"] if isinstance(v, dict) else v) for n, v in curve.items())
  return next((n for n, e in pts if e <= level), None)


@table("dyck_samples")
def _dyck_samples(R):
  """The count solution's and the random features' sample need, stays-below definition."""
  d = R.load(DYCK)
  count = next(c for c in d["constructions"] if c["name"] == "count")
  rf = [s for c in d["constructions"] if c["name"] != "count" for s in c["seeds"]]
  cn, c1 = stays_below(count["downstream"], 0.01), first_below(count["downstream"], 0.01)
  ns = [stays_below(s["downstream"], 0.01) for s in rf]
  above = [n for n, v in sorted(count["downstream"].items(), key=lambda kv: int(kv[0]))
           if int(n) > c1 and v["mean"] > 0.01]
  out = (f"the count solution's mean error stays below 1% from n = {cn} examples on, the "
         f"random-feature solutions' from n = {min(ns)} to {max(ns)} (each of their "
         f"{len(ns)} draws, {len(ns) // d['args']['rf_seeds']} widths)")
  if above:
    out += (f"; the count solution first reaches it at n = {c1}, but its error at n = "
            + ", ".join(f"{n} is {count['downstream'][n]['mean']:.4f}" for n in above)
            + f" (the mean over {d['args']['ds_draws']} draws of the downstream sample)")
  return out


def _bench_ratio(x):
  return x["batched_probe_over_grad_by_probes"]["8"], x["fisher_draw_over_grad"]


@table("flatness_bench_verdict")
def _flatness_bench_verdict(R, form="long"):
  """The flatness-cost targets at both batches, and the gradient's speed behind each ratio
  (`short`: one clause per target, for the "Reproduced" line)."""
  d = R.load("flatness_bench/bench.log")
  if form == "short":
    out = []
    for t, i, lim in (("probe", 0, 1.5), ("Fisher", 1, 1.3)):
      met = [_bench_ratio(d[k])[i] <= lim for k in ("x1", "x8")]
      where = {(True, True): "met at both batches", (False, False): "**missed** at both",
               (False, True): "**missed** at the training batch, met only at the 8x batch",
               (True, False): "met at the training batch, **missed** at the 8x batch"}
      out.append(f"the {t} target (<= {lim:g}x) is {where[tuple(met)]}")
    return "; ".join(out)
  parts, ok = [], []
  for key, name in (("x1", "the training batch"), ("x8", "the 8x batch")):
    x = d[key]
    probe, fisher = _bench_ratio(x)
    gfs = x["grad_gflop"] / x["grad_ms"] * 1e3
    pm, fm = probe <= 1.5, fisher <= 1.3
    ok += [pm, fm]
    parts.append(f"at {name} ({x['contexts']} x 55; gradient {x['grad_ms']:.1f} ms, "
                 f"{gfs:.0f} GFLOP/s) a probe in a batch of 8 costs {probe:.2f}x a gradient "
                 f"(target <= 1.5x: {'met' if pm else 'missed'}) and a Fisher draw "
                 f"{fisher:.2f}x (<= 1.3x: {'met' if fm else 'missed'})")
  x1, x8 = d["x1"], d["x8"]
  flops, time = x8["grad_gflop"] / x1["grad_gflop"], x8["grad_ms"] / x1["grad_ms"]
  verdict = ("both targets met at both batches" if all(ok) else
             "**not met**: " + ", ".join(
                 f"the {t} target at {b}" for (t, b), good in zip(
                     (("probe", "the training batch"), ("Fisher", "the training batch"),
                      ("probe", "the 8x batch"), ("Fisher", "the 8x batch")), ok) if not good)
             + " missed")
  return (("; ".join(parts) + ". ").capitalize()[:1] + ("; ".join(parts) + ". ")[1:]
          + f"The 8x batch's gradient took {time:.1f}x the time of the training batch's for "
          f"{flops:.1f}x its FLOPs, so its ratios are taken over an unusually slow gradient "
          f"rather than showing a cheaper probe. Verdict: {verdict}.")


@table("b1_vs_hutchinson")
def _b1_vs_hutchinson(R, rel, index="0"):
  """B.1 against Hutchinson at one point, with both uncertainties: a difference in standard
  errors, and a ratio only where Hutchinson's estimate is 2 standard errors above 0."""
  p = R.load(f"{MLM}/{rel}")["points"][int(index)]
  b1, n = p["trace_b1"], len(p["trace_b1_reps"])
  se_b1 = p["trace_b1_std"] / math.sqrt(n)
  h, se_h = p["trace_hutchinson"], p["trace_hutchinson_stderr"]
  z = (b1 - h) / math.sqrt(se_b1 ** 2 + se_h ** 2)
  out = (f"B.1 {b1:.1f} (std {p['trace_b1_std']:.1f} over {n} repetitions) against Hutchinson "
         f"{h:.1f} +- {se_h:.1f} (stderr): a difference of {b1 - h:+.1f}, {abs(z):.1f} combined "
         f"standard errors")
  if h - 2 * se_h > 0:
    out += f", a ratio of {b1 / h:.2f}"
  else:
    out += (", and no ratio: Hutchinson's estimate is within two of its standard errors of "
            "zero")
  return out


@table("fig1_width_claim")
def _fig1_width_claim(R, label, width):
  """Width 128 (Figure 1's context runs, the width runs' seeds) against `width`, with the
  test and what it can say: "higher" or "lower" only at p < 0.05."""
  ctx = {r["label"]: r for r in R.load(f"{SUITE}/fig1_context.json")["rows"]}[f"{label} k=1"]
  wide = {r["label"]: r for r in R.load(f"{SUITE}/fig1_width.json")["rows"]}[
      f"{label} k=1 d={width}"]
  s_ = wide["seeds"]
  narrow = [ctx["per_seed"]["test_em_hard"][ctx["seeds"].index(x)] for x in s_]
  c = stats.compare(wide["per_seed"]["test_em_hard"], narrow)
  word = _direction(c["diff"], c["p_value"], "not distinguishable")
  return (f"{f(c['mean_b'])} at width 128 (seeds {seeds(s_)}) and {f(c['mean_a'])} at "
          f"{width}: {word} ({sf(c['diff'])}, p = {p_note(c)})")


_GAPS = (("valid_gap", "valid gap"), ("train_gap", "train gap"), ("test_gap", "test gap"),
         ("valid_kl", "valid KL"))


def _extrapolations(R):
  """The two-point power law of mlm_convergence's extrapolation, for each gap definition."""
  d = R.load("mlm_convergence/pcfg.json")
  e = d["extrapolation"]
  rows = {r["label"]: r for r in d["rows"]}
  a, b = rows[e["runs"][0]], rows[e["runs"][1]]
  sa, sb = e["steps"]
  out = []
  for key, name in _GAPS:
    ga, gb = a["headline"][key], b["headline"][key]
    expo = math.log(gb / ga) / math.log(sb / sa)
    steps = sb * (e["target"] / gb) ** (1 / expo)
    out.append({"name": name, "key": key, "gaps": [ga, gb], "exponent": expo, "steps": steps,
                "hours": steps * b["seconds"] / sb / 3600})
  return e, a, b, out


@table("mlm_extrapolation")
def _mlm_extrapolation(R):
  e, a, b, rows = _extrapolations(R)
  out = [[name["name"] + (" (the JSON's)" if name["key"] == "valid_gap" else ""),
          f"{name['gaps'][0]:.3f} -> {name['gaps'][1]:.3f}", f"{name['exponent']:.2f}",
          f"{name['steps']:,.0f}", f"{name['hours']:.0f}"] for name in rows]
  return md([f"gap definition ({a['label']} -> {b['label']}, seed {seeds(b['seeds'])})",
             "gap (nats)", "exponent", f"steps to {e['target']:g}", "hours"], out)


@table("mlm_extrapolation_hours")
def _mlm_extrapolation_hours(R):
  _, _, _, rows = _extrapolations(R)
  hs = [r["hours"] for r in rows]
  return f"{min(hs):.0f} to {max(hs):.0f} h"


@table("scale_trend_budget")
def _scale_trend_budget(R, task):
  """Each method's number of tuning candidates at every point, and whether they are equal."""
  doc, missing = _scale_doc(R, task)
  if missing:
    return missing
  n = {m: len(doc["candidates"][m]) for m, _ in ST_METHODS}
  names = dict(ST_METHODS)
  listed = ", ".join(f"{names[m]} {k}" for m, k in n.items())
  if len(set(n.values())) == 1:
    return f"{listed} candidates per point: equal tuning budgets"
  return (f"{listed} candidates per point: **unequal tuning budgets** (the primary "
          f"comparison, E1 + warmup against CE, gives E1 + warmup {n['e1_warmup']} and CE "
          f"{n['ce']})")


@table("scale_trend_slope")
def _scale_trend_slope(R, *tasks):
  """The trend test fixed in issue 34 (el_jax.report.stats.trend_slope) on the committed points: the
  slope of E1 + warmup - CE per doubling of the scale axis; post hoc unless the file's
  `trend_test` says its test runs came after the test was fixed."""
  out = []
  for task in tasks:
    doc, missing = _scale_doc(R, task)
    if missing:
      out.append([task] + ["-"] * 5 + [missing])
      continue
    metric = doc["test_metric"]
    if len(doc["trend"]) < stats.TREND_MIN_POINTS:  # a design part-way through its points
      out.append([f"`{task}` (`{metric}`)", " / ".join(e["point"] for e in doc["trend"])]
                 + ["-"] * 4 + [f"{len(doc['trend'])} of {len(doc['test_seeds'])} points "
                                f"finished; the test needs {stats.TREND_MIN_POINTS}"])
      continue
    rows = {r["label"]: r for r in doc["rows"]}
    xs = [e["x"] for e in doc["trend"]]
    a = [rows[f"{e['point']} e1_warmup"]["per_seed"][metric] for e in doc["trend"]]
    b = [rows[f"{e['point']} ce"]["per_seed"][metric] for e in doc["trend"]]
    t = stats.trend_slope(xs, a, b)
    k = math.log(2)
    read = t["n_seeds_min"] >= stats.MIN_CI_N
    why = []
    if t["n_seeds_min"] < 5:
      why.append(f"{t['n_seeds_min']} test seeds at some point (fewer than the 5 fixed)")
    n = {m: len(doc["candidates"][m]) for m, _ in ST_METHODS}
    if n["e1_warmup"] != n["ce"]:
      why.append(f"unequal tuning ({n['e1_warmup']} vs {n['ce']} candidates)")
    if task == "label_copy":  # the design: one pretrained small GPT-2 per point
      why.append("seeds are fine-tuning seeds of one pretrained model per point")
    fixed = (doc.get("trend_test") or {}).get("fixed_before_test_runs", False)
    if not fixed:
      why.append("test fixed after these runs")
    out.append([f"`{task}` (`{metric}`)", " / ".join(e["point"] for e in doc["trend"]),
                " / ".join(sf(x) for x in t["diffs"]), sf(k * t["slope"]),
                f"[{k * t['ci95'][0]:+.3f}, {k * t['ci95'][1]:+.3f}]" if read
                else f"none ({t['n_seeds_min']} seeds at some point)",
                ({1: "rises", -1: "falls", 0: "undecided (0 inside)"}[t["sign"]]
                 + ("" if fixed else ", post hoc")) if read else "not read",
                "; ".join(why) or "nothing: fixed before its test runs, its conditions met"])
  return md(["task", "points", "E1 + warmup - CE", "slope per doubling", "bootstrap 95% over "
             "seeds", "reading", "what it cannot support"], out)


# --- where the numbers were computed -------------------------------------------------

XM = "cross_machine/cross_machine.json"


@table("cross_machine_pairs")
def _cross_machine_pairs(R, minimum="0"):
  """Committed rows of the same config and seed in two files, largest per-seed difference."""
  d = R.load(XM)
  out = []
  for p in d["pairs"]:
    if p["max_abs_diff"] < float(minimum):
      continue
    at = p["at"]
    where = (f"`{at['metric']}` seed {at['seed']}: {f(at['a'], 4)} vs {f(at['b'], 4)}"
             if at else "-")
    out.append([f"`{p['a']['file']}` {p['a']['label']}", f"`{p['b']['file']}` {p['b']['label']}",
                seeds(p["seeds"]), f"{p['values_identical']} of {p['values_compared']}",
                f(p["max_abs_diff"], 4), where])
  return md(["row", "same config in", "shared seeds", "per-seed values identical",
             "largest difference", "where"], out)


@table("cross_machine_reruns")
def _cross_machine_reruns(R):
  d = R.load(XM)
  out = []
  for r in d["reruns"]:
    ro = r["ran_on"] or {}
    for m in r["matches"]:
      out.append([f"`{r['workdir']}` (seed {seeds(r['seeds'])})",
                  f"{ro.get('cpu', '?')}, "
                  f"{'AVX-512' if 'avx512f' in ro.get('cpu_flags', []) else 'no AVX-512'}",
                  f"`{m['file']}` {m['label']}",
                  "bit for bit" if m["reproduced"] else f"differs by up to {f(m['max_abs_diff'], 4)}"])
  return md(["run made here", "CPU", "committed row", "this machine's numbers"], out)


@table("machines")
def _machines(R):
  """Per committed grid file: how many rows record where they ran (`ran_on`)."""
  d = R.load(XM)
  out = []
  for name, x in d["files"].items():
    out.append([f"`{name}`", str(x["rows"]), str(x["rows_with_ran_on"]),
                ", ".join(x["machines"]) or "not recorded (trained before el_jax.infra.provenance)",
                x["last_commit"] or "-"])
  return md(["results file", "rows", "rows with `ran_on`", "machines recorded",
             "last commit touching the file (a schema conversion counts)"], out)


# ----------------------------------------------------------------------------
# Pages

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.S)


def _split_ops(s):
  """"a["x|y"] | mean | f3" -> ["a[\"x|y\"]", "mean", "f3"] (| inside quotes is kept)."""
  parts, cur, q = [], [], False
  for ch in s:
    if ch == '"':
      q = not q
    if ch == "|" and not q:
      parts.append("".join(cur).strip())
      cur = []
    else:
      cur.append(ch)
  parts.append("".join(cur).strip())
  return parts


def _split_args(s):
  """A table placeholder's words, split on spaces outside [...] (a path argument may hold
  `[a="E1+warmup k=1"]`)."""
  out, cur, depth = [], [], 0
  for ch in s:
    depth += (ch == "[") - (ch == "]")
    if ch.isspace() and depth == 0:
      if cur:
        out.append("".join(cur))
        cur = []
    else:
      cur.append(ch)
  if cur:
    out.append("".join(cur))
  return out


def fill(R, text, page):
  """The template `text` with every placeholder replaced; a ReportError names the page."""
  def one(m):
    raw = " ".join(m.group(1).split())
    R.last_read = set()
    try:
      return _fill_one(R, raw)
    except ReportError as e:
      raise ReportError(f"{DOCS}/{page}.md: placeholder {{{{ {raw} }}}}: {e}") from None
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as e:
      raise ReportError(f"{DOCS}/{page}.md: placeholder {{{{ {raw} }}}}: {type(e).__name__}: "
                        f"{e}") from None
  return _PLACEHOLDER.sub(one, text)


def fill_one(R, raw):
  """One placeholder's text (`raw` without the braces); a ReportError names it."""
  raw = " ".join(raw.split())
  R.last_read = set()
  try:
    return _fill_one(R, raw)
  except ReportError as e:
    raise ReportError(f"placeholder {{{{ {raw} }}}}: {e}") from None
  except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as e:
    raise ReportError(f"placeholder {{{{ {raw} }}}}: {type(e).__name__}: {e}") from None


def _fill_one(R, raw):
  kind, sep, rest = raw.partition(":")
  kind, rest = kind.strip(), rest.strip()
  if not sep:
    raise ReportError("expected '<kind>: ...' (number, text, table, image, paper)")
  if kind in ("number", "text"):
    spec, *ops = _split_ops(rest)
    rel, sep, path = spec.partition(":")
    rel = rel.strip()
    if not sep:
      raise ReportError("expected '<file under results/>:<path>'")
    data = R.load(rel)
    try:
      segs = parse_path(path)
    except ValueError as e:
      raise ReportError(f"in {RESULTS}/{rel}: {e}") from None
    value, _ = walk(data, segs, f"{RESULTS}/{rel}")
    return apply_ops(value, ops or (["text"] if kind == "text" else []),
                     f"{RESULTS}/{rel}:{path.strip()}")
  if kind == "table":
    name, *args = _split_args(rest)
    if name not in TABLES:
      raise ReportError(f"no table {name!r} (tables: {', '.join(sorted(TABLES))})")
    R.ran_on_from = None  # a table may name the files its numbers ran in (else: all it read)
    try:
      out = TABLES[name](R, *args)
      # A Markdown table says where its numbers ran; an inline value (p_at, ...) does not.
      is_table = out.lstrip().startswith("|")
      return (out + "\n\n" + ran_on_line(R, R.ran_on_from or R.last_read) if is_table
              else out)
    except ReportError:
      raise
    except (KeyError, IndexError, TypeError, ValueError) as e:
      files = ", ".join(f"{RESULTS}/{x}" for x in sorted(R.last_read)) or "no file"
      raise ReportError(f"table {name!r} failed on {files}: {type(e).__name__}: {e}") from None
  if kind == "image":
    rel = rest
    if not R.exists(rel):
      raise ReportError(f"image {RESULTS}/{rel} does not exist")
    return f"![{rel}](../../{RESULTS}/{rel})"
  if kind == "paper":
    key, *ops = _split_ops(rest)
    if key not in PAPER:
      raise ReportError(f"no paper number {key!r} in el_jax.report.PAPER")
    value, source = PAPER[key]
    if ops == ["value"]:
      return value
    if ops == ["source"]:
      return source
    if ops:
      raise ReportError(f"paper placeholders take '| value' or '| source', not {ops}")
    return f"{value} ({source})"
  raise ReportError(f"unknown placeholder kind {kind!r} (number, text, table, image, paper)")


UNRECORDED = ("not recorded: a CPU of the development machines (results from before el_jax "
              "recorded where each run ran; the CHANGELOG's machine notes name them)")


def _ran_on_records(obj, depth=0):
  """Every `ran_on` record (el_jax.infra.provenance) inside a results file."""
  if depth > 8:
    return []
  if isinstance(obj, dict):
    out = [obj["ran_on"]] if isinstance(obj.get("ran_on"), dict) else []
    return out + [r for k, v in obj.items() if k != "ran_on"
                  for r in _ran_on_records(v, depth + 1)]
  if isinstance(obj, list):
    return [r for v in obj for r in _ran_on_records(v, depth + 1)]
  return []


def ran_on_line(R, files):
  """"*Ran on: ...*" under a table: the devices recorded in the files it read (each
  distinct `el_jax.infra.provenance.describe`), and UNRECORDED for a file that records none."""
  seen = []
  for rel in sorted(files):
    data = R.load(rel)
    recs = _ran_on_records(data)
    rows = data.get("rows") if isinstance(data, dict) else None
    # A file of result rows some of which record no machine (rows kept from before it was
    # recorded) names that too.
    partly = isinstance(rows, list) and any(isinstance(r, dict) and "ran_on" not in r
                                            for r in rows)
    for d in [provenance.describe(r) for r in recs] + ([UNRECORDED] if partly or not recs
                                                       else []):
      if d not in seen:
        seen.append(d)
  return "*Ran on: " + "; ".join(seen) + ".*" if seen else ""


def render_page(page, root=ROOT, R=None):
  """(Markdown of docs/results/<page>.md, sorted files it read) from the template and JSON."""
  tpl = os.path.join(root, TEMPLATES, f"{page}.md")
  if not os.path.isfile(tpl):
    raise ReportError(f"{DOCS}/{page}.md: its template {TEMPLATES}/{page}.md does not exist")
  with open(tpl) as fh:
    text = fh.read()
  R = R or Results(root)
  R.read = set()
  R.last_read = set()
  body = fill(R, text, page)
  head = (f"<!-- Generated by `{COMMAND}` from {TEMPLATES}/{page}.md and the JSON under "
          f"{RESULTS}/. Edit the template, not this file. -->\n\n")
  sources = sorted(R.read)
  foot = (f"\n---\n\nGenerated by `{COMMAND}` from the template `{TEMPLATES}/{page}.md` and "
          "these results: " + ", ".join(f"`{RESULTS}/{s}`" for s in sources) + ".\n")
  return head + body.rstrip("\n") + "\n" + foot, sources


def _anchor(heading):
  """GitHub's anchor of a heading."""
  h = heading.strip().lower()
  h = re.sub(r"[^\w\- ]", "", h)
  return h.replace(" ", "-")


def render_index(pages):
  """docs/results/README.md: each page with its title and its sections."""
  out = ["<!-- Generated by `" + COMMAND + "`. -->", "", "# Results", "",
         "One page per paper, generated from the committed JSON under `results/` by `"
         + COMMAND + "` (`--check` compares instead of writing; `tests/test_report.py` fails "
         "when a committed page differs from what the JSON gives). Every table and number on "
         "these pages is read from a results file; the prose around them is written by hand in "
         "`docs/results/templates/`. The figures are the experiments' own PNGs.", ""]
  for page in PAGES:
    text = pages[f"{page}.md"]
    title = next(l[2:].strip() for l in text.splitlines() if l.startswith("# "))
    out.append(f"## [{title}]({page}.md)")
    out.append("")
    for l in text.splitlines():
      if l.startswith("## "):
        out.append(f"- [{l[3:].strip()}]({page}.md#{_anchor(l[3:])})")
    out.append("")
  return "\n".join(out).rstrip("\n") + "\n"


def render_all(root=ROOT):
  """{file name under docs/results: text} for every page and the index."""
  R = Results(root)
  pages = {}
  for page in PAGES:
    pages[f"{page}.md"], _ = render_page(page, root, R)
  pages[INDEX] = render_index(pages)
  return pages


# The README's index table (paper item -> command -> page -> headline -> reproduced), from
# docs/results/templates/_readme_index.md, between these markers of the repository's README.
README = "README.md"
README_INDEX = "_readme_index"
INDEX_BEGIN = "<!-- BEGIN index: generated by `python -m el_jax.report`; edit el_jax/report.py, not this table -->"
INDEX_END = "<!-- END index -->"


def readme_with_index(root=ROOT, R=None):
  """The README's text with its index table filled from the JSON (ReportError if the
  README lacks the markers)."""
  path = os.path.join(root, README)
  with open(path) as fh:
    text = fh.read()
  if text.count(INDEX_BEGIN) != 1 or text.count(INDEX_END) != 1:
    raise ReportError(f"{README}: expected one line {INDEX_BEGIN!r} and one {INDEX_END!r} around "
                      f"the index table")
  with open(os.path.join(root, TEMPLATES, f"{README_INDEX}.md")) as fh:
    tpl = fh.read()
  table = fill(R or Results(root), tpl, README_INDEX).strip("\n")
  head, rest = text.split(INDEX_BEGIN)
  _, tail = rest.split(INDEX_END)
  return head + INDEX_BEGIN + "\n" + table + "\n" + INDEX_END + tail


def differing(pages, out_dir):
  """The file names whose text in `out_dir` differs from `pages` (or is missing)."""
  bad = []
  for name, text in pages.items():
    path = os.path.join(out_dir, name)
    try:
      with open(path) as fh:
        same = fh.read() == text
    except OSError:
      same = False
    if not same:
      bad.append(name)
  return bad


def write(pages, out_dir):
  os.makedirs(out_dir, exist_ok=True)
  for name, text in pages.items():
    tmp = os.path.join(out_dir, f".{name}.tmp")
    with open(tmp, "w") as fh:
      fh.write(text)
    os.replace(tmp, os.path.join(out_dir, name))


def main(argv=None):
  ap = argparse.ArgumentParser(prog="python -m el_jax.report",
                               description=__doc__.split("\n")[0])
  ap.add_argument("--check", action="store_true",
                  help="compare the pages with docs/results/ instead of writing them; exit 1 "
                  "with one line per page that differs")
  ap.add_argument("--root", default=ROOT, help="repository root (results/ and the templates)")
  ap.add_argument("--out", default=None, help="folder to write to (default <root>/docs/results)")
  args = ap.parse_args(argv)
  out_dir = args.out or os.path.join(args.root, DOCS)
  try:
    pages = render_all(args.root)
    readme = readme_with_index(args.root)
  except ReportError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.check:
    bad = [os.path.relpath(os.path.join(out_dir, n), args.root) for n in differing(pages, out_dir)]
    bad += [README] if differing({README: readme}, args.root) else []
    for shown in bad:
      print(f"{shown} differs from what the JSON under results/ gives; "
            f"run `{COMMAND}` and commit the pages", file=sys.stderr)
    return 1 if bad else 0
  write(pages, out_dir)
  write({README: readme}, args.root)
  print(f"wrote {len(pages)} pages to {out_dir} and the index of {README}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
