"""Bad PCFG grammar files: one clear ValueError naming the file and the
symbols, found when the grammar is read, and one `error: ...` line from the CLI.

Unproductive start symbol, useless nonterminals (reachable, no finite derivation), dead
ones (unreachable and unproductive), files that are not UTF-8 text, and a `max_len` the
grammar's sentences cannot fit. Unreachable nonterminals that derive words are allowed:
the paper's grammar has one (A1_9)."""
import os
import re
import time

import pytest

import reliability
from el_jax.core.data import pcfg

_RESOURCE = os.path.join(reliability.ROOT, "el_jax", "core", "data", "resources", "pcfg",
                         "rule_deep_mlm.txt")
PAPER_GRAMMAR = (_RESOURCE if os.path.exists(_RESOURCE) else
                 os.path.join(os.path.dirname(reliability.ROOT), "shared", "data", "pcfg",
                              "rule_deep_mlm.txt"))

# B -> B B only: B never ends in words, so neither does S -> A B.
UNPRODUCTIVE_START = "S A B 1.0\nA a 1.0\nB B B 1.0\n"
# S can end (S -> a) but B, reachable through S -> A B, cannot.
USELESS = "S A B 0.5\nS a 0.5\nA a 1.0\nB B B 1.0\n"
# X is never reached from S and never ends in words.
DEAD = "S a 1.0\nX X X 1.0\n"


def _write(tmp_path, text, name="g.txt"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def test_unproductive_start_is_named_with_the_file(tmp_path):
  path = _write(tmp_path, UNPRODUCTIVE_START)
  with pytest.raises(ValueError) as e:
    pcfg.PCFG.from_file(path)
  msg = str(e.value)
  assert msg.startswith(f"{path}: the start symbol 'S' derives no finite sentence"), msg
  assert "unproductive nonterminals: 'S', 'B'" in msg and "max_len" not in msg
  with pytest.raises(ValueError, match=r"start symbol 'T' derives no finite sentence"):
    pcfg.PCFG.from_string(UNPRODUCTIVE_START.replace("S", "T"), start="T")


def test_useless_nonterminal_is_named(tmp_path):
  path = _write(tmp_path, USELESS)
  with pytest.raises(ValueError, match=re.escape(path) + r": useless nonterminal\(s\) 'B': "
                     r"reachable from the start symbol 'S'"):
    pcfg.PCFG.from_file(path)


def test_dead_nonterminal_is_named(tmp_path):
  path = _write(tmp_path, DEAD)
  with pytest.raises(ValueError, match=re.escape(path) + r": nonterminal\(s\) 'X' are unreachable "
                     r"from the start symbol 'S' and derive no finite sentence"):
    pcfg.PCFG.from_file(path)


def test_many_symbols_are_cut_short():
  text = "S a 0.5\nS A0 B0 0.5\nA0 a 1.0\n" + "".join(
      f"B{i} B{i + 1} B{i + 1} 1.0\n" for i in range(8)) + "B8 B8 B8 1.0\n"
  with pytest.raises(ValueError, match=r"useless nonterminal\(s\) 'B0', 'B1', 'B2', 'B3', 'B4' "
                     r"and 4 more:"):
    pcfg.PCFG.from_string(text)


def test_unreachable_productive_nonterminal_is_allowed_and_listed():
  g = pcfg.PCFG.from_string("S a 1.0\nX x 1.0\n")
  assert g.unreachable == ("X",) and g.terminals == ("a", "x")
  assert [list(s) for s in g.sample(3, 0)] == [[0]] * 3


def test_paper_grammar_loads_with_one_unreachable_nonterminal():
  g = pcfg.PCFG.from_file(PAPER_GRAMMAR)
  assert (g.num_nonterminals, g.vocab_size) == (50, 200)
  # A1_9 has rules but no S_i rewrites to it; it stays a task-B/C label candidate.
  assert g.unreachable == ("A1_9",)
  assert g.nonterminals.index("A1_9") in g.default_candidates("B")
  assert g.min_sentence_length == 2


@pytest.mark.parametrize("data, what", [
    (b"S a 1.0\nS caf\xe9 0.0\n", r"is not UTF-8 text \(byte 0xe9 at offset 13\)"),
    ("S a 1.0\n".encode("utf-16"), r"is not UTF-8 text \(byte 0xff at offset 0\)"),
    (b"S a 1.0\n\0\0\0", r"is not a text file \(a NUL byte at offset 8\)"),
])
def test_non_utf8_file_names_the_file_and_the_byte(tmp_path, data, what):
  path = tmp_path / "g.bin"
  path.write_bytes(data)
  with pytest.raises(ValueError, match=r"^grammar file " + re.escape(str(path)) + " " + what
                     + r"; give a text file of lines `LHS RHS\.\.\. prob`$"):
    pcfg.PCFG.from_file(path)


def test_utf8_with_byte_order_mark_and_crlf_loads(tmp_path):
  path = tmp_path / "g.txt"
  path.write_bytes("\ufeffS A A 1.0\r\nA caf\u00e9 1.0\r\n".encode("utf-8"))
  g = pcfg.PCFG.from_file(path)
  assert g.start == "S" and g.terminals == ("caf\u00e9",)
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"S a 1.0\r\n\r\nS b\r\n")
  with pytest.raises(ValueError, match=re.escape(f"{bad}:3:") + " too few fields"):
    pcfg.PCFG.from_file(bad)


def test_max_len_below_the_shortest_sentence_is_named():
  g = pcfg.PCFG.from_string("S A A 1.0\nA B B 1.0\nB b 1.0\n")
  assert g.min_sentence_length == 4
  with pytest.raises(ValueError, match=r"shortest sentence of the grammar has 4 words; max_len=4 "
                     r"keeps only shorter ones: raise max_len above 4"):
    g.sample(5, 0, max_len=4)
  assert [len(s) for s in g.sample(2, 0, max_len=5)] == [4, 4]


def test_rare_short_sentences_end_in_an_error_not_a_hang():
  """Before: with a small `num` the sampler drew batches of ~1100 forever."""
  g = pcfg.PCFG.from_string("S A A 1.0\nA A A 0.999\nA a 0.001\n")
  t0 = time.perf_counter()
  with pytest.raises(ValueError, match=r"no sentence shorter than max_len=5 in \d+ draws \(the "
                     r"shortest possible has 2 words"):
    g.sample(5, 0, max_len=5)
  assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize("case", ["not_utf8", "unproductive", "max_len"])
def test_cli_error_is_one_line(tmp_path, case):
  if case == "not_utf8":
    path = tmp_path / "g.txt"
    path.write_bytes(b"S a 1.0\n\xff\n")
    args, pattern = [f"--grammar={path}"], rf"grammar file {re.escape(str(path))} is not UTF-8 text"
  elif case == "unproductive":
    path = _write(tmp_path, UNPRODUCTIVE_START)
    args, pattern = [f"--grammar={path}"], r"start symbol 'S' derives no finite sentence"
  else:
    path = _write(tmp_path, "S A A 1.0\nA B B 1.0\nB b 1.0\n")
    args, pattern = [f"--grammar={path}", "--max_len=3"], r"shortest sentence .* has 4 words"
  proc = reliability.run(*args, "--num=10", module="el_jax.core.data.pcfg", timeout=120)
  reliability.assert_one_line_error(proc, pattern)
  assert proc.stderr.count("\n") == 1 and proc.stdout == ""
