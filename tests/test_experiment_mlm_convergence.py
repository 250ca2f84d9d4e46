"""experiments/mlm_convergence.py (issue 24 items 1 and 4): the curves copied into the JSON are
the seed means of the runs' eval rows, each row's headline is its aggregate, the test-size runs
are pinned; the same checks on the committed results/mlm_convergence JSON."""
import json
import os

import numpy as np
import pytest

from el_jax import report
import pins  # tests/pins.py
import reliability

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED = os.path.join(ROOT, "results", "mlm_convergence")

_script = reliability.experiment_script


def test_curve_is_the_mean_over_seeds_at_steps_every_seed_evaluated(tmp_path):
  mc = _script("mlm_convergence")
  rows = []
  rng = np.random.default_rng(0)
  table = {}
  for seed in (0, 1):
    for step in (0, 10, 20):
      if seed == 1 and step == 20:
        continue  # seed 1 was killed before its last evaluation
      vals = {k: float(rng.normal()) for k in mc.CURVE_KEYS}
      table[seed, step] = vals
      rows.append({"seed": seed, "step": step, "kind": "eval", **vals})
    rows.append({"seed": seed, "step": 5, "kind": "train", "loss": 1.0})
  with open(tmp_path / "metrics.jsonl", "w") as fh:
    fh.write("\n".join(json.dumps(r) for r in rows) + "\n")
  got = mc.curve(str(tmp_path), [0, 1])
  assert sorted(got) == sorted(mc.CURVE_KEYS)
  for k in mc.CURVE_KEYS:
    assert [p[0] for p in got[k]] == [0, 10]
    for step, value in got[k]:
      assert value == pytest.approx((table[0, step][k] + table[1, step][k]) / 2, abs=1e-12)
  assert [p[0] for p in mc.curve(str(tmp_path), [0])["valid_gap"]] == [0, 10, 20]


def _check_doc(mc, doc):
  _, _, runs = mc.design(doc["language"], doc["size"])
  assert [r["label"] for r in doc["rows"]] == [r[0] for r in runs]
  for row in doc["rows"]:
    h, agg, cfg = row["headline"], row["aggregate"], row["config"]
    assert h["valid_gap"] == agg["valid_gap"]["mean"]
    assert h["valid_gap"] == pytest.approx(np.mean(row["per_seed"]["valid_gap"]), abs=1e-12)
    assert h["converged"] == (h["valid_gap"] <= doc["converged_within"])
    assert h["sentences_seen"] == cfg["train"]["num_steps"] * cfg["train"]["batch_size"]
    assert h["epochs"] == pytest.approx(h["sentences_seen"] / cfg["data"]["num_train"])
    # The curve ends at the final evaluation, whose seed mean is the headline.
    last_step, last_gap = row["curve"]["valid_gap"][-1]
    assert last_step == cfg["train"]["num_steps"]
    assert last_gap == pytest.approx(h["valid_gap"], abs=1e-9)
    # gap = loss - true entropy at every evaluated step
    for (s1, gap), (s2, loss), (s3, ent) in zip(row["curve"]["valid_gap"],
                                                row["curve"]["valid_mlm_loss"],
                                                row["curve"]["valid_true_entropy"]):
      assert s1 == s2 == s3 and gap == pytest.approx(loss - ent, abs=1e-9)
  if doc["language"] == "pcfg":
    assert doc["extrapolation"] == mc.extrapolate(doc["rows"])
  else:
    assert doc["extrapolation"] is None


@pytest.mark.parametrize("language", ["pcfg", "lm"])
def test_mlm_convergence_at_test_size(tmp_path, language):
  mc = _script("mlm_convergence")
  out = str(tmp_path / "out")
  mc.main([f"--language={language}", "--size=test", f"--out={out}",
           f"--runs={tmp_path / 'runs'}"])
  doc = json.load(open(os.path.join(out, f"{language}.json")))
  assert doc["size"] == "test" and doc["language"] == language
  _check_doc(mc, doc)
  assert os.path.getsize(os.path.join(out, f"{language}.png")) > 0
  pins.check(f"mlm_convergence/{language}", doc["rows"])
  # A second call reads the rows back from the JSON (the runs folder gone) and keeps the curves.
  for row in doc["rows"]:
    os.remove(os.path.join(row["workdir"], "metrics.jsonl"))
  again = mc.run_language(language, "test", out, str(tmp_path / "elsewhere"), doc["command"])
  assert [r["curve"] for r in again["rows"]] == [r["curve"] for r in doc["rows"]]


def test_unknown_language_is_refused():
  with pytest.raises(ValueError, match="unknown language 'dyck'; valid"):
    _script("mlm_convergence").design("dyck", "cpu")


@pytest.mark.parametrize("language", ["pcfg", "lm"])
def test_committed_mlm_convergence_recomputes(language):
  path = os.path.join(COMMITTED, f"{language}.json")
  mc = _script("mlm_convergence")
  doc = json.load(open(path))
  assert doc["size"] == "cpu"
  assert doc["command"] == f"python experiments/mlm_convergence.py --language={language}"
  _check_doc(mc, doc)


def test_the_lm_generator_is_the_small_gpt2_lm_mlm_cpu_reads(monkeypatch):
  """--language=lm pretrains (or reads back) exactly the folder configs/lm_mlm.py:cpu samples
  from, with the label-copy experiment's pretraining config and folders."""
  mc = _script("mlm_convergence")
  calls = []
  monkeypatch.setattr(mc.runner, "pretrain_and_export",
                      lambda cfg, workdir, export: calls.append((cfg, workdir, export)))
  mc.prepare_generator()
  ((cfg, workdir, export),) = calls
  lm = mc.config_lib.get_config("lm_mlm", "cpu")
  assert export == lm.data.generator == "runs/label_copy/small_gpt2"
  assert workdir == "runs/label_copy/text_lm"
  assert cfg.to_dict() == mc.config_lib.get_config("text_lm", "cpu", {}).to_dict()


def test_the_papers_numbers_are_report_paper():
  mc = _script("mlm_convergence")
  assert mc.PAPER["pcfg"]["loss"] == float(report.PAPER["s002.t1.adamw.loss"][0])
  assert mc.PAPER["pcfg"]["optimum"] == float(report.PAPER["s002.t1.lookup.loss"][0])
  assert mc.PAPER["pcfg"]["gap"] == pytest.approx(mc.PAPER["pcfg"]["loss"]
                                                  - mc.PAPER["pcfg"]["optimum"])
  assert mc.PAPER["lm"]["optimum"] == float(report.PAPER["s002.entropy.lm"][0])


def _xrow(label, steps, gap, seconds):
  return {"label": label, "config": {"train": {"num_steps": steps}}, "seconds": seconds,
          "headline": {"valid_gap": gap}}


def test_extrapolation_is_the_power_law_through_the_two_runs():
  mc = _script("mlm_convergence")
  e = mc.extrapolate([_xrow("a", 3000, 0.3, 100.0), _xrow("b", 12000, 0.15, 600.0)])
  assert e["exponent"] == pytest.approx(np.log(0.5) / np.log(4))
  assert e["factor_per_4x_steps"] == pytest.approx(0.5)
  # the law through both points gives 0.02 at the steps it names
  assert 0.15 * (e["steps_to_target"] / 12000) ** e["exponent"] == pytest.approx(0.02)
  assert e["steps_to_target"] == pytest.approx(12000 * (0.15 / 0.02) ** 2)
  assert e["hours_to_target"] == pytest.approx(e["steps_to_target"] * 0.05 / 3600)
  # 2x steps instead of 4x: the factor is still per 4x steps
  e = mc.extrapolate([_xrow("a", 3000, 0.3, 1.0), _xrow("b", 6000, 0.15, 1.0)])
  assert e["factor_per_4x_steps"] == pytest.approx(0.25)
  assert mc.extrapolate([_xrow("a", 3000, 0.3, 1.0), _xrow("b", 12000, 0.31, 1.0)]) is None
