"""Label copy on natural text (seed 000, section 5.2): the GPT-2 tokenizer, the KJV and
Shakespeare sentences, the examples and splits, and the task through the generic loop."""
import dataclasses
import functools
import json
import os
import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from el_jax.core.data import gpt2_bpe
from el_jax.core.data import label_copy
from el_jax.core.data import texts
from el_jax.run import job
from el_jax.infra import metrics as metrics_lib
from el_jax.core.models import decoder
from el_jax.core import tasks
from el_jax.core.tasks import label_copy as lc_task
from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------
# The GPT-2 tokenizer


def test_gpt2_ids_of_known_strings():
  assert gpt2_bpe.encode("Hello world") == [15496, 995]
  assert gpt2_bpe.encode(" Hello") == [18435]
  assert gpt2_bpe.encode("<|endoftext|>") == [gpt2_bpe.EOT_ID] == [50256]
  assert gpt2_bpe.encode("a<|endoftext|>b") == [64, 50256, 65]
  assert gpt2_bpe.tokenizer().get_vocab_size() == gpt2_bpe.VOCAB_SIZE == 50257
  assert gpt2_bpe.tokenizer() is gpt2_bpe.tokenizer()  # built once


def test_gpt2_ids_are_those_of_encoder_json():
  with open(gpt2_bpe.files()[0], encoding="utf-8") as f:
    enc = json.load(f)
  # Byte-level BPE writes a leading space as "Ġ"; whole words in the vocabulary are one token.
  for word in ("Hello", "Ġworld", "ĠLabel", "ĠGenesis", "Ġthe"):
    assert gpt2_bpe.encode(word.replace("Ġ", " ")) == [enc[word]]
  assert enc["<|endoftext|>"] == gpt2_bpe.EOT_ID


@pytest.mark.parametrize("text", ["Hello world", "  two  spaces\tand a tab\n", "héllo 世界 🙂",
                                  "To be, or not to be,--that is the question:--",
                                  "x<|endoftext|> y<|endoftext|>", ""])
def test_gpt2_round_trip(text):
  ids = gpt2_bpe.encode(text)
  assert all(0 <= i < gpt2_bpe.VOCAB_SIZE for i in ids)
  assert gpt2_bpe.decode(ids) == text
  assert gpt2_bpe.encode_batch([text, text]) == [ids, ids]


# ----------------------------------------------------------------------------
# Texts


def test_kjv_books_labels_and_order():
  kjv = texts.load_sentences("kjv")
  assert len(kjv) == 31_103
  assert kjv[0] == ("In the beginning God created the heaven and the earth.", "Genesis", "Genesis")
  assert kjv[-1][2] == "Revelation"
  books = list(dict.fromkeys(src for _, _, src in kjv))
  assert len(books) == 66 and books[:3] == ["Genesis", "Exodus", "Leviticus"]
  assert books[books.index("1 Samuel") + 1] == "2 Samuel"
  labels = {src: lab for _, lab, src in kjv}
  assert labels["1 Samuel"] == labels["2 Samuel"] == "Samuel"
  assert labels["1 John"] == labels["3 John"] == labels["John"] == "John"
  assert labels["Song of Solomon"] == "Solomon"
  assert len(set(labels.values())) == 56
  assert all(len(lab.split()) == 1 for lab in labels.values())
  assert texts.load_sentences("kjv") is kjv  # cached: read once


def _shakespeare():
  return texts.load_sentences("shakespeare")


def test_shakespeare_works_and_labels():
  rows = _shakespeare()
  works = list(dict.fromkeys(src for _, _, src in rows))
  assert works == sorted(texts.SHAKESPEARE_LABELS) and len(works) == 42
  assert len(set(texts.SHAKESPEARE_LABELS.values())) == 42  # a distinct word per work
  assert all(len(w.split()) == 1 for w in texts.SHAKESPEARE_LABELS.values())
  counts = {w: sum(src == w for _, _, src in rows) for w in works}
  assert min(counts.values()) >= 15 and counts["hamlet"] > 1500  # every work contributes
  assert all(lab == texts.SHAKESPEARE_LABELS[src] for _, lab, src in rows)
  shown = texts.samples("shakespeare", per_source=2)
  assert list(shown) == works and all(len(v) == 2 for v in shown.values())
  assert all((t, texts.SHAKESPEARE_LABELS[w], w) in rows for w, v in shown.items() for t in v)


def test_shakespeare_known_lines_are_sentences():
  by_text = {}
  for text, label, _ in _shakespeare():
    by_text.setdefault(text, label)
  assert by_text["Something is rotten in the state of Denmark."] == "Hamlet"
  assert by_text["Shall I compare thee to a summer's day?"] == "Sonnets"
  assert by_text["Friends, Romans, countrymen, lend me your ears; I come to bury Caesar, not "
                 "to praise him."] == "Caesar"
  assert by_text["Double, double, toil and trouble; Fire, burn; and caldron, bubble."] == "Macbeth"
  assert any(t.startswith("To be, or not to be,--that is the question:") for t in by_text)
  assert any(t.startswith("Now is the winter of our discontent Made glorious summer")
             for t in by_text)
  hamlet = texts.read_shakespeare("hamlet")
  assert [s for s, _, _ in hamlet[:3]] == ["Who's there?", "Nay, answer me: stand, and unfold "
                                          "yourself.", "Long live the king!"]


def test_shakespeare_has_no_speakers_directions_or_front_matter():
  sentences = [t for t, _, _ in _shakespeare()]
  joined = "\n".join(sentences)
  for pattern in (r"\[", r"\]", r"\bExeunt\b", r"^Enter [A-Z]", r"^Exit\b", r"^Re-enter\b",
                  r"^(ACT|Act|SCENE|Scene)\b", r"PERSONS REPRESENTED", r"Dramatis Personae",
                  r"by William Shakespeare", r"THE END"):
    found = re.findall(pattern, joined, re.M)
    assert not found, (pattern, found[:3])
  # Speaker lines of Hamlet (title case), Macbeth (upper case) and joint speakers.
  speakers = ("Ham.", "Hor.", "Ber.", "Fran.", "Mar.", "King.", "Queen.", "Mar. and Ber.",
              "MACBETH.", "LADY MACBETH.", "FIRST WITCH.", "YORK.", "PROTEUS.")
  for s in sentences:
    assert not any(s == sp or s.startswith(sp + " ") for sp in speakers), s


def test_play_parsing_rules_on_a_small_text():
  play = """*** START OF THIS PROJECT GUTENBERG EBOOK X ***
THE TRAGEDY OF X

by William Shakespeare

PERSONS REPRESENTED.

Bernardo, an officer.
FRANCISCO, a soldier.

ACT I.

Scene I. A platform.

[Enter Bernardo and
Francisco.]

Ber.
Who's there?

FRAN.
Nay, answer me: stand, and unfold yourself. Long live
the king!

[Exit Francisco.]

Mar. and Ber.
We do, my lord.

Enter HORATIO, quickly.

FRAN. Sit down awhile. [Aside.] O God! how weary.
KING.
What, ho!  Mrs. Page comes.Exit Boy

[The cock crows.]

And then it started.

SCENE II. The same.

A room in the castle.

THE END
*** END OF THIS PROJECT GUTENBERG EBOOK X ***
Enter the licence here. It is not a sentence of the play.
"""
  assert texts.work_sentences(play) == [
      "Who's there?", "Nay, answer me: stand, and unfold yourself.", "Long live the king!",
      "We do, my lord.", "Sit down awhile.", "O God! how weary.", "What, ho!",
      "Mrs. Page comes.", "And then it started."]


def test_poem_parsing_rules_on_a_small_text():
  poem = """THE SONNETS
by William Shakespeare

I

From fairest creatures we desire increase,
That thereby beauty's rose might never die.
Shall I compare thee
  to a summer's day?

II

When forty winters shall besiege thy brow,
"""
  assert texts.work_sentences(poem) == [
      "From fairest creatures we desire increase, That thereby beauty's rose might never die.",
      "Shall I compare thee to a summer's day?", "When forty winters shall besiege thy brow,"]


def test_split_sentences():
  assert texts.split_sentences("Good night.  Mrs. Page comes!\nWhat, ho? Well: 'tis so.' Ay.") \
      == ["Good night.", "Mrs. Page comes!", "What, ho?", "Well: 'tis so.'", "Ay."]
  assert texts.split_sentences("O heavens! what treachery is here! --") == \
      ["O heavens! what treachery is here!"]


def test_unknown_corpus_and_malformed_files(tmp_path):
  with pytest.raises(ValueError, match=r"unknown corpus 'bible'; valid corpora: \('kjv', "
                                       r"'shakespeare'\)"):
    texts.load_sentences("bible")
  bad = tmp_path / "kjv.jsonl"
  bad.write_text('{"citation": "Genesis 1:1", "text": "In the beginning.", "book": "Genesis"}\n'
                 '{"citation": "Genesis 1:2", "text": "And the earth\n')
  with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}, line 2: not valid JSON"):
    texts.read_kjv(str(bad))
  bad.write_text('{"citation": "Genesis 1:1", "text": "In the beginning.", "book": "Genesis"}\n'
                 '["Genesis", "text"]\n')
  with pytest.raises(ValueError, match=r"line 2: expected a JSON object, got list"):
    texts.read_kjv(str(bad))
  bad.write_text('{"citation": "Genesis 1:1", "book": "Genesis"}\n')
  with pytest.raises(ValueError, match=r"line 1: a verse needs a string \"text\""):
    texts.read_kjv(str(bad))
  with pytest.raises(ValueError, match=r"unknown Shakespeare work 'hamlett'"):
    texts.read_shakespeare("hamlett")


def test_user_jsonl_file(tmp_path):
  path = tmp_path / "mine.jsonl"
  path.write_text('{"text": "The  cat sat on the mat.", "label": "Cats"}\n\n'
                  '{"text": "A dog barked at the moon.", "label": "Dogs", "source": "d.txt"}\n')
  assert texts.load_sentences(str(path)) == [("The cat sat on the mat.", "Cats", "Cats"),
                                             ("A dog barked at the moon.", "Dogs", "d.txt")]
  path.write_text('{"text": "The cat sat.", "label": "Two words"}\n')
  with pytest.raises(ValueError, match=r"mine.jsonl, line 1: \"label\" must be one word"):
    texts.load_sentences(str(path))  # the file changed: read again
  path.write_text('{"label": "Cats"}\n')
  with pytest.raises(ValueError, match=r"line 1: \"text\" must be a non-empty string"):
    texts.read_jsonl(str(path))


# ----------------------------------------------------------------------------
# Label-copy examples and splits


def _data_config(tmp_path, **overrides):
  """config.data of the `test` variant (not type-safe: the tests set wrong types too)."""
  d = config_lib.get_config("label_copy", "test").data.to_dict()
  return ml_collections.ConfigDict({**d, "cache_dir": str(tmp_path), **overrides}, type_safe=False)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("label_copy_cache")


@pytest.fixture(scope="module")
def data(data_dir):
  return label_copy.build(_data_config(data_dir))


def test_example_text():
  s = "In the beginning God created the heaven."  # 7 words: the label goes after word 3
  assert label_copy.example_text(s, "Genesis", easy=False) == (
      "<|endoftext|> In the beginning Genesis God created the heaven. Label: Genesis<|endoftext|>")
  assert label_copy.example_text(s, "Genesis", easy=True) == (
      "<|endoftext|> Genesis In the beginning Genesis God created the heaven. Label: "
      "Genesis<|endoftext|>")


def test_examples_carry_the_label_where_the_group_says(data):
  sentences = texts.load_sentences("kjv")
  a0, lmax = data.answer_start, data.max_label_tokens
  assert lmax == max(len(gpt2_bpe.encode(" " + w)) for w in data.labels)
  for name, split in data.splits.items():
    answers = data.answers(split)
    for r in range(len(split)):
      text, label, _ = sentences[split.sentence[r]]
      assert data.labels[split.label[r]] == label
      row = split.rows[r]
      assert row[split.prompt_start[r]] == gpt2_bpe.EOT_ID
      assert (row[:split.prompt_start[r]] == gpt2_bpe.EOT_ID).all()  # padding before
      decoded = gpt2_bpe.decode(row[split.prompt_start[r]:a0 + split.label_len[r] + 1])
      assert decoded == label_copy.example_text(text, label, bool(split.easy[r]))
      words = decoded[len("<|endoftext|> "):].split(" ")
      n, m = len(text.split()), len(text.split()) // 2
      body = words[1:] if split.easy[r] else words
      assert body[m] == label and body[:m] + body[m + 1:n + 1] == text.split()
      assert (words[0] == label) == bool(split.easy[r]) or text.split()[0] == label
      assert body[n + 1:] == ["Label:", label + "<|endoftext|>"]
      # The target: the label's tokens at the fixed answer positions, -1 after them.
      want = gpt2_bpe.encode(" " + label)
      assert answers[r, :len(want)].tolist() == want and (answers[r, len(want):] == -1).all()
    # The loss: exactly the positions whose target is a label token.
    mask = data.loss_mask(split)
    assert np.array_equal(mask.sum(axis=1), split.label_len)
    assert not mask[:, np.setdiff1d(np.arange(split.context_len), data.scored_positions)].any()
    tgt = split.targets[:, data.scored_positions]
    ok = answers >= 0
    assert np.array_equal(np.where(ok, tgt, -1), answers)
    assert np.array_equal(mask[:, data.scored_positions], ok.astype(np.float32))


def test_splits_are_disjoint_sized_and_deterministic(data, data_dir, tmp_path):
  d = _data_config(data_dir)
  assert {k: len(s) for k, s in data.splits.items()} == {"train": 64, "valid": 16, "test": 24}
  texts_of = {k: {texts.load_sentences("kjv")[i][0] for i in s.sentence}
              for k, s in data.splits.items()}
  assert sum(len(v) for v in texts_of.values()) == 64 + 16 + 24  # distinct sentences, no overlap
  for k, s in data.splits.items():
    assert s.easy.sum() == round(d.p_easy * len(s))
    overhead = 1 + len(label_copy.separator_ids())  # <|endoftext|> and the separator
    text_tokens = data.answer_start - s.prompt_start - overhead - (1 + s.easy) * s.label_len
    assert (text_tokens <= d.max_sentence_tokens).all() and (text_tokens > 0).all()
  again = label_copy.build(_data_config(tmp_path))  # built afresh in another cache folder
  assert again.path != data.path
  for k in label_copy.SPLITS:
    for f in dataclasses.fields(label_copy.Split):
      assert np.array_equal(getattr(again.splits[k], f.name), getattr(data.splits[k], f.name))
  # More training sentences leave valid and test as they were; another seed changes them.
  more = label_copy.build(_data_config(tmp_path, num_train=100))
  assert np.array_equal(more.test.rows, data.test.rows)
  assert np.array_equal(more.valid.sentence, data.valid.sentence)
  assert np.array_equal(more.train.sentence[:64], data.train.sentence)
  other = label_copy.build(_data_config(tmp_path, data_seed=1))
  assert not np.array_equal(other.test.sentence, data.test.sentence)


def test_the_cache_is_read_back_and_a_damaged_one_rebuilt(data, data_dir, capsys):
  again = label_copy.build(_data_config(data_dir))
  assert again.path == data.path and again.build_seconds == 0.0  # read, not built
  assert np.array_equal(again.train.rows, data.train.rows)
  with open(data.path, "r+b") as f:
    f.truncate(100)
  rebuilt = label_copy.build(_data_config(data_dir))
  assert "is damaged" in capsys.readouterr().err
  assert np.array_equal(rebuilt.train.rows, data.train.rows)


def test_bad_data_config_values(tmp_path):
  for field, value, msg in (
      ("corpus", "bible", r"data.corpus='bible'; allowed: \('kjv', 'shakespeare'\) or the path"),
      ("min_words", 1, r"data.min_words=1 must be an integer >= 2"),
      ("p_easy", 1.5, r"data.p_easy=1.5 must be a number in \[0, 1\]"),
      ("num_test", 0, r"data.num_test=0 must be an integer >= 1"),
      ("max_sentence_tokens", "48", r"data.max_sentence_tokens='48' must be an integer")):
    with pytest.raises(ValueError, match=msg):
      label_copy.check_data_config(_data_config(tmp_path, **{field: value}))
  path = tmp_path / "few.jsonl"
  path.write_text("".join(json.dumps({"text": f"Just {i} short words here.", "label": "Few"}) + "\n"
                          for i in range(10)) + json.dumps({"text": "Too short.", "label": "Few"}))
  with pytest.raises(ValueError, match=r"has 10 distinct sentences of >= data.min_words=4 words "
                                       r"and <= data.max_sentence_tokens=24 tokens; .* needs 104"):
    label_copy.build(_data_config(tmp_path, corpus=str(path)))


def test_user_file_as_corpus(tmp_path):
  path = tmp_path / "mine.jsonl"
  rows = [{"text": f"Sentence number {i} has a few words.", "label": ["Alpha", "Beta"][i % 2]}
          for i in range(12)]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  d = _data_config(tmp_path, corpus=str(path), num_train=6, num_valid=2, num_test=2)
  got = label_copy.build(d)
  assert got.labels == ("Alpha", "Beta") and len(got.train) == 6


# ----------------------------------------------------------------------------
# The task


def test_label_metrics_by_hand():
  answers = np.array([[5, 6, -1], [7, -1, -1], [5, 6, -1], [8, 9, 4]])
  pred = np.array([[5, 6, 0], [7, 3, 3], [5, 0, 1], [8, 9, 4]])
  easy = np.array([True, True, False, False])
  m = lc_task.label_metrics(pred, answers, easy)
  assert (m["em_easy"], m["em_hard"], m["em_all"]) == (1.0, 0.5, 0.75)
  assert m["cl_easy"] == 1.0 and m["cl_hard"] == pytest.approx(4 / 5)
  assert m["cl_all"] == pytest.approx(7 / 8) and (m["n_easy"], m["n_hard"], m["n_all"]) == (2, 2, 4)


def test_greedy_labels_match_a_step_by_step_reference():
  cfg = decoder.preset("gpt2", vocab_size=40, num_layers=1, num_heads=2, embed_dim=16,
                       mlp_dim=32, max_len=12, doc_mask=True)
  graphdef, params = decoder.init(cfg, 3)
  rng = np.random.default_rng(0)
  x = rng.integers(0, 40, (5, 12)).astype(np.int32)
  seg = (np.arange(12)[None, :] >= rng.integers(0, 4, (5, 1))).astype(np.int32)
  a0, lmax = 9, 3
  greedy = jax.jit(functools.partial(lc_task.greedy_labels, graphdef, a0, lmax))
  got = np.asarray(greedy(params, jnp.asarray(x), jnp.asarray(seg)))
  forward = jax.jit(functools.partial(decoder.apply, graphdef))
  ctx = x.copy()
  for k in range(lmax):  # full forward each time, argmax at the position before slot a0 + k
    logits = np.asarray(forward(params, jnp.asarray(ctx), jnp.asarray(seg)))
    pred = logits[:, a0 - 1 + k].argmax(-1)
    np.testing.assert_array_equal(got[:, k], pred)
    if a0 + k < 12:
      ctx[:, a0 + k] = pred


def _config(tmp_path, **overrides):
  return config_lib.get_config("label_copy", "test", {"data.cache_dir": str(tmp_path / "cache"),
                                                  **overrides})


def test_the_task_trains_through_the_generic_loop(tmp_path):
  assert tasks.get_task_class("label_copy") is lc_task.LabelCopyTask
  cfg = _config(tmp_path, **{"train.eval_every": 0, "train.checkpoint_every": 8})  # one evaluation
  summary = job.run(cfg, str(tmp_path / "w"))
  assert summary["task"] == "label_copy" and summary["groups"] == ["easy", "hard"]
  agg = summary["aggregate"]
  for split in ("train", "valid", "test"):
    for g in ("easy", "hard", "all"):
      assert f"{split}_em_{g}" in agg and 0.0 <= agg[f"{split}_em_{g}"]["mean"] <= 1.0
  final = summary["per_seed"][0]
  assert (final["train_n_all"], final["valid_n_all"], final["test_n_all"]) == (32, 16, 24)
  assert final["test_n_easy"] == final["test_n_hard"] == 12
  rows = [r for r in metrics_lib.read_rows(str(tmp_path / "w")) if r["kind"] == "train"]
  assert rows and all(np.isfinite(r["loss_easy"]) and np.isfinite(r["loss_hard"]) for r in rows)
  assert rows[-1]["step"] == 8
  info = summary["label_copy"]
  assert info["sizes"] == {"train": 64, "valid": 16, "test": 24} and info["separator"] == " Label:"


def test_task_batches_and_evaluation_inputs(tmp_path):
  task = lc_task.LabelCopyTask(_config(tmp_path))
  b = task.batch(0, 3)
  assert b["inputs"].shape == (16, task.context_len) and task.vocab_size == 50257
  np.testing.assert_array_equal(b["mask_easy"] + b["mask_hard"], b["loss_mask"])
  again = task.batch(0, 3)
  assert all(np.array_equal(b[k], again[k]) for k in b)  # deterministic
  x = task.eval_inputs(task.data.test)
  assert (x[:, task.data.answer_start:] == gpt2_bpe.EOT_ID).all()  # nothing of the label leaks
  np.testing.assert_array_equal(x[:, :task.data.answer_start],
                                task.data.test.inputs[:, :task.data.answer_start])


def test_bad_task_config_values(tmp_path):
  for overrides, msg in (
      ({"model.doc_mask": False}, r"model.doc_mask=False .* needs model.doc_mask=True"),
      ({"model.preset": "encoder"}, r"model.preset='encoder' is bidirectional"),
      ({"model.pretrained": str(tmp_path / "nope")}, r"model.pretrained=.* is not a Hugging Face "
                                                      r"GPT-2 checkpoint directory"),
      ({"train.batch_size": 100}, r"data.num_train=64 < train.batch_size=100"),
      ({"train.eval_train_examples": 0}, r"train.eval_train_examples=0 must be an integer >= 1"),
      ({"data.corpus": "nope"}, r"data.corpus='nope'; allowed")):
    with pytest.raises(ValueError, match=msg):
      setup_lib.validate_config(_config(tmp_path, **overrides))
  os.makedirs(tmp_path / "gpt2")
  (tmp_path / "gpt2" / "config.json").write_text("{}")  # the loop loads it; here it only exists
  setup_lib.validate_config(_config(tmp_path, **{"model.pretrained": str(tmp_path / "gpt2")}))


def test_config_variants_and_field_comments():
  module = config_lib.load_config_module("label_copy")
  for variant in module.VARIANTS:
    cfg = module.get_config(variant)
    assert cfg.task == "label_copy" and cfg.model.pretrained == ""
    setup_lib.validate_config(cfg)
  paper = module.get_config("paper")
  assert (paper.model.num_layers, paper.model.embed_dim, paper.model.num_heads) == (12, 768, 12)
  with pytest.raises(ValueError, match=r"unknown label_copy variant 'gpu'"):
    module.get_config("gpu")
  lines = open(os.path.join(ROOT, "configs", "label_copy.py")).read().splitlines()
  # Fields set on their own line carry a comment; shared blocks (`c.loss = blocks.loss()`)
  # are commented in el_jax/run/config_blocks.py (tests/test_cli.py checks those).
  fields = [line for line in lines if re.match(r"^  c\.[\w.]+ = ", line)
            and "ConfigDict()" not in line and "= blocks." not in line]
  assert fields and all("  # " in line for line in fields)
  swept = []
  module.sweep(lambda **kw: swept.append(kw))
  assert {s["data.corpus"] for s in swept} == {"kjv", "shakespeare"}
  assert {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 1000,
          "data.corpus": "kjv"} in swept
