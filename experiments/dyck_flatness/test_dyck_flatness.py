"""experiments/dyck_flatness: at a tiny size (the `test` variant: T = 4, both arms) it writes
the committed file's schema and the numbers the script wrote before it trained through
el_jax.run.train (pinned); the sample-need rule (`stays_below`) and the committed run's page
sentences held to the analysis."""
import json
import os

import jax
import numpy as np
import pytest

from el_jax.report import papers
from el_jax.report import sources

from experiments.dyck_flatness import analysis
from experiments.dyck_flatness import config as config_file
from experiments.dyck_flatness import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOISE = 0.5

# The `test` variant, both arms. PINNED: what the script wrote with these settings before it
# trained through el_jax.run.train (its own loop, dyck_net.train_chunk; identical to the last
# bit then, as at the smoke size). Per arm: per measured step (loss, Tr(H), lambda_max,
# cancellation ratio, active neurons per input, downstream error at n = 4); final flattest
# rescaling (c, Tr(H)).
PINNED = {
    "sgd": ([(0, 0.5141324411112954, 0.18795223609311848, 0.09174952204497311,
              1.602979259975882, 2.1666666666666665, 11.001713367420425),
             (10, 0.5046004909056215, 0.15240843541463256, 0.07654955335146182,
              1.6566785121710477, 1.9583333333333333, 12.847504571594817),
             (20, 0.49855920467838183, 0.14844296885936237, 0.0685785964116615,
              1.7825294062051251, 1.9166666666666667, 11.035898588135836)],
            (2.485337001895784, 0.047952376775064816)),
    "sgd_label_noise": ([(0, 0.5141324411112954, 0.18795223609311848, 0.09174952204497311,
                          1.602979259975882, 2.1666666666666665, 11.001713367420425),
                         (10, 0.5047606218388253, 0.15679087486995058, 0.07880025262901291,
                          1.739790808537557, 2.0416666666666665, 9.682810005849774),
                         (20, 0.4979783077218208, 0.15848261970496838, 0.06890702883496917,
                          1.9384332597807619, 1.9583333333333333, 10.08357060531218)],
                        (2.55492153540859, 0.04876317678437584)),
}


def _keys(d):
  return sorted(d)


def test_the_test_variant_writes_its_schema_and_the_pinned_numbers(tmp_path):
  cfg = config_file.get_config("test")
  cfg.results_dir = str(tmp_path / "out")
  cfg.runs_dir = str(tmp_path / "out" / "runs")
  x64 = jax.config.jax_enable_x64
  try:
    run_lib.run(cfg)  # switches JAX's 64-bit mode on (config.x64)
  finally:
    jax.config.update("jax_enable_x64", x64)
  out = tmp_path / "out"
  got = json.load(open(out / "dyck_flatness.json"))
  assert (out / "dyck_flatness.png").exists()
  assert os.path.isdir(out / "runs" / "sgd_label_noise" / "seed_0" / "checkpoints" / "20")
  # The schema of the committed results (results/dyck_flatness/), up to the config's fields.
  ref = json.load(open(os.path.join(ROOT, "results", "dyck_flatness", "dyck_flatness.json")))
  # `ran_on` (where the numbers were computed) is newer than the committed file.
  assert _keys(got) == sorted(set(_keys(ref)) | {"ran_on"}) and got["ran_on"]["platform"]
  assert _keys(got["setting"]) == _keys(ref["setting"])
  assert got["paper"] == ref["paper"]  # from el_jax.report.papers
  assert [_keys(c) for c in got["constructions"]] == [_keys(c) for c in ref["constructions"][:2]]
  assert _keys(got["training"]) == _keys(ref["training"]) == sorted(PINNED)
  for arm, (points, (c, trace)) in PINNED.items():
    t, r = got["training"][arm], ref["training"][arm]
    assert _keys(t) == _keys(r) and t["label_noise"] == (NOISE if "noise" in arm else 0.0)
    run = t["runs"][0]
    assert _keys(run) == _keys(r["runs"][0])
    assert [_keys(p) for p in run["points"]] == [_keys(r["runs"][0]["points"][0])] * 3
    assert [_keys(s) for s in t["summary"]] == [sorted(
        [k for k in r["summary"][0] if not k.startswith("downstream_")] + ["downstream_4"])] * 3
    measured = [(p["step"], p["loss"], p["trace"], p["lambda_max"], p["ratio"],
                 p["active_per_input"], p["downstream"]["4"]) for p in run["points"]]
    np.testing.assert_allclose(measured, points, rtol=1e-9, err_msg=arm)
    f = run["final_flattest_rescaling"]
    np.testing.assert_allclose([f["c"], f["trace"]], [c, trace], rtol=1e-9, err_msg=arm)
  assert got["args"]["runs_dir"] == str(out / "runs")
  assert got["command"] == run_lib.COMMAND
  # Its analysis: the test's constructions (count, one width) and both arms' last step.
  a = analysis.analyze(sources.Sources(str(out), root=ROOT), cfg)
  assert list(a["constructions"]) == ["count", "random_features_1N"]
  assert a["training"]["sgd"]["last_step"] == "20"
  assert a["training"]["sgd"]["at"]["20"]["trace"]["mean"] == pytest.approx(
      PINNED["sgd"][0][2][2], rel=1e-12, abs=0)  # (the last bit moves with the JAX line)


def test_the_sample_need_is_where_the_error_stays_below():
  """The count solution's error above 1% at n = 16 (after reaching it at 8) moves its sample
  need to 32."""
  curve = lambda d: {n: {"mean": v} for n, v in d.items()}  # noqa: E731
  assert analysis.stays_below(curve({"8": 0.0, "16": 0.0125, "32": 0.0})) == 32
  assert analysis.stays_below(curve({"8": 0.0, "16": 0.0, "32": 0.0})) == 8
  assert analysis.stays_below(curve({"8": 0.0, "16": 0.02})) is None
  assert analysis.stays_below(curve({2: 0.5, 16: 0.001, 4: 0.002})) == 4  # sorted by n
  assert analysis.first_below(curve({"8": 0.0, "16": 0.0125, "32": 0.0})) == 8


def test_the_papers_claim_is_in_papers():
  claim, source = papers.entry("s002.thm61.claim")
  assert "flattest zero-loss solution" in claim and "Theorem 6.1" in source
  assert papers.entry("s002.thm61.trace_lower_bound")[0].startswith("2 / sqrt(T)")


def _page():
  with open(os.path.join(ROOT, "docs", "results", "seed002_flatness.md")) as f:
    return " ".join(f.read().split())


def test_the_page_says_what_the_analysis_gives():
  """Each sentence of the section held to its numbers: the count solution at the bound and the
  flattest ("both interpolate and the count solution is the flattest"); its sample need (stays
  below 1% from n = 32) no smaller than the best random-feature draw's, while its error at
  n = 32 is zero up to rounding and theirs is not; plain SGD converged (loss < 1e-4) and stays
  (Tr(H) at 5k and at the end within 1%); label noise drifts down (Tr(H) and the n = 32 error
  fall from 2k to the end) but stays several times the count solution's Tr(H); trained models
  transfer better than the flatter m = 2240 random features."""
  out = os.path.join(ROOT, "results", "dyck_flatness")
  a = analysis.analyze(sources.Sources(out, root=ROOT), config_file.get_config("cpu"))
  page = _page()
  cons, s = a["constructions"], a["samples"]
  count = cons["count"]
  rf = [c for k, c in cons.items() if k != "count"]
  assert abs(count["trace"] - a["trace_lower_bound"]) < 1e-12
  assert all(count["trace"] < c["trace"]["min"] for c in rf)
  assert count["loss"] < 1e-20 and all(c["loss_max"] < 1e-20 for c in rf)
  assert "both interpolate and the count solution is the flattest" in page
  assert s["count_stays"] >= s["rf_stays_min"]  # "needs no fewer examples than the best"
  assert (f"the count solution's mean error stays below 1% from n = {s['count_stays']} examples "
          f"on, the random-feature solutions' from n = {s['rf_stays_min']} to "
          f"{s['rf_stays_max']} (each of their {s['rf_draws']} draws, {s['rf_widths']} widths); "
          f"the count solution first reaches it at n = {s['count_first']}, but its error at "
          f"n = 16 is 0.0125") in page
  assert [x["n"] for x in s["count_above"]] == [16]
  assert count["downstream"]["32"] < 1e-20 < a["rf_downstream_32"]["min"]
  sgd, noisy = a["training"]["sgd"], a["training"]["sgd_label_noise"]
  end, at5k = sgd["at"][sgd["last_step"]], sgd["at"]["5000"]
  assert at5k["loss"]["mean"] < 1e-4 and end["loss"]["mean"] < at5k["loss"]["mean"]
  assert abs(end["trace"]["mean"] / at5k["trace"]["mean"] - 1) < 0.01  # "stays where it is"
  assert (f"Tr(H) {at5k['trace']['mean']:.2f} ({at5k['trace']['min']:.2f}, "
          f"{at5k['trace']['max']:.2f}) at step 5k") in page
  nend, n2k = noisy["at"][noisy["last_step"]], noisy["at"]["2000"]
  assert nend["trace"]["mean"] < n2k["trace"]["mean"]
  assert nend["downstream_32"]["mean"] < n2k["downstream_32"]["mean"]
  assert nend["trace"]["mean"] > 3 * count["trace"]  # "still several times its Tr(H)"
  flat = cons["random_features_4N"]
  assert flat["width"] == 2240 and flat["trace"]["mean"] < end["trace"]["mean"]
  assert end["downstream_8"]["mean"] < flat["downstream"]["8"] / 5  # "transfer far better"
  assert "Training does not" in page and "Reproduced at CPU size: **partly**" in page
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  assert (f"count solution Tr(H) {count['trace']:.4f} = bound {a['trace_lower_bound']:.4f}, the "
          "flattest; paper: the flattest is the count solution (no numbers)") in readme
