"""el_jax's number formats: the Jinja2 filters of the results pages (`el_jax.report.render`).

Every number on a page goes through one of these, so a format is fixed in one place:

  f(x, d=3)        0.473          ("n/a" for None)
  sf(x, d=3)       +0.280         signed
  p(x)             1.1e-05        two significant digits (p-values)
  mr(s, d=3)       0.408 (0.212, 0.576)   mean (min, max) of a {mean, min, max}
  ci(c, d=3)       [+0.194, +0.369]       an interval [lo, hi]
  seeds(xs)        2-11           a run of seeds; "0, 2" otherwise
  thousands(x)     1,234          an integer with thousands separators
  pct(x, d=1)      60.0%          a fraction as a percentage
  ratio(x, d=2)    1.24x          a speed ratio
  e(x, d=1), g(x, d=3)            Python's e / g formats
  sig(x, n=3)      n significant digits, no exponent for numbers >= 10**(n-1)
  p_note(c)        a comparison's p, "(floor of 3 vs 3)" beside it at its design's floor
  ci_cell(c)       a comparison's interval, or "none at n = 3"
  cmp_cell(c)      "+0.280 [+0.194, +0.369], p = 1.1e-05 (Holm 0.00013)"
  ran_on(xs)       "*Ran on: ...; ....*" under a table (the machines its numbers ran on)

A list given to `f`, `sf`, `p`, `e`, `g`, `thousands` or `ratio` is each element so
formatted, joined by " / ".
"""
from el_jax.report import stats


def _each(fn):
  """`fn` of a number, or of each element of a list, joined by " / "."""
  def apply(x, *args, **kwargs):
    if isinstance(x, (list, tuple)):
      return " / ".join(fn(v, *args, **kwargs) for v in x)
    return fn(x, *args, **kwargs)
  apply.__name__ = fn.__name__
  apply.__doc__ = fn.__doc__
  return apply


@_each
def f(x, d=3):
  return "n/a" if x is None else f"{x:.{d}f}"


@_each
def sf(x, d=3):
  return f"{x:+.{d}f}"


@_each
def p(x):
  return f"{x:.2g}"


@_each
def e(x, d=1):
  return f"{x:.{d}e}"


@_each
def g(x, d=3):
  return f"{x:.{d}g}"


@_each
def thousands(x):
  return f"{int(round(x)):,}"


@_each
def ratio(x, d=2):
  return f"{x:.{d}f}x"


def pct(x, d=1):
  return f"{100 * x:.{d}f}%"


def sig(x, n=3):
  """n significant digits, without an exponent for numbers >= 10**(n-1): 1234 -> "1234"."""
  return f"{x:.0f}" if abs(x) >= 10 ** (n - 1) else f"{x:.{n}g}"


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
  """The smallest p the comparison's design can give (`stats.p_floor`), Holm over m."""
  if "n_a" in c:
    return stats.p_floor("unpaired", c["n_a"], c["n_b"], m=m)
  return stats.p_floor("paired", c["n"], m=m)


def _design(c):
  return f"{c['n_a']} vs {c['n_b']}" if "n_a" in c else f"{c['n']} pairs"


def p_note(c, key="p_value", m=1):
  """A comparison's p, with "(floor of 3 vs 3)" beside it where it sits at the smallest
  value its design can give (Holm over m tests: m times that)."""
  value = c[key]
  if stats.at_floor(value, _floor(c, m)):
    what = _design(c) + (f", Holm over {m}" if m > 1 else "")
    return f"{p(value)} (floor of {what})"
  return p(value)


def ci_cell(c, d=3, scale=1):
  """A comparison's bootstrap interval, or why none is shown (3 or fewer seeds)."""
  if c.get("ci95") is None or _n_min(c) < stats.MIN_CI_N:
    return f"none at n = {_n_min(c)}"
  lo, hi = (scale * x for x in c["ci95"])
  return f"[{lo:+.{d}f}, {hi:+.{d}f}]"


def cmp_cell(c, d=3, holm=True, m=None):
  """"+0.280 [+0.194, +0.369], p = 1.1e-05 (Holm 0.00013)" from a `stats.compare` dict; at 3
  or fewer seeds no interval, and a p at its design's floor says so (Holm over `m`)."""
  if _n_min(c) < stats.MIN_CI_N:
    out = f"{sf(c['diff'], d)}, p = {p_note(c)}"
  else:
    out = f"{sf(c['diff'], d)} {ci(c['ci95'], d)}, p = {p_note(c)}"
  if holm and "p_holm" in c:
    out += f" (Holm {p_note(c, 'p_holm', m) if m else p(c['p_holm'])})"
  return out


def ran_on(machines):
  """"*Ran on: a; b.*": the machines a table's numbers ran on (`Sources.ran_on`)."""
  return "*Ran on: " + "; ".join(machines) + ".*" if machines else ""


FILTERS = {fn.__name__: fn for fn in (f, sf, p, e, g, thousands, ratio, pct, sig, mr, ci, seeds,
                                      p_note, ci_cell, cmp_cell, ran_on)}
