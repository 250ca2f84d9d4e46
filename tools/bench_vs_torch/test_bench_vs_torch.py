"""tools/bench_vs_torch: the sides' names and labels, the config's one-line errors, a run at
`test` size (el_jax's sides only: no PyTorch needed) and its analysis, and the speed page's
sentences held to the committed runs' analysis."""
import json
import os

import pytest

from el_jax.report import sources

from tools.bench_vs_torch import analysis
from tools.bench_vs_torch import config as config_file
from tools.bench_vs_torch import run as run_lib
from tools.bench_vs_torch import worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_side_names_and_their_labels():
  assert worker.side_name("xla", False) == "el_jax"
  name = worker.side_name("eigen", True, cpu_devices=2, malloc="glibc", attention_blocks=3)
  assert name == "el_jax_eigen_blocks3_2dev_glibc_malloc_all_positions"
  assert analysis.side_label(name) == ("all positions (equal work), `cpu_dots=eigen`, "
                                       "`attention_blocks=3`, 2 CPU devices, glibc's malloc "
                                       "(as before)")
  assert analysis.side_label("el_jax_blocks3") == (
      "scored positions, `cpu_dots=xla`, `attention_blocks=3`")
  assert analysis.side_label("el_jax") == "scored positions, `cpu_dots=xla` (default)"


@pytest.mark.parametrize("field, value, match", [
    ("cpu_dots", "nope", "config.cpu_dots='nope': give some of"),
    ("malloc", "jemalloc", "config.malloc='jemalloc': give some of tuned, glibc"),
    ("extra_cpu_dots", "[1]", "must be a JSON object of objects"),
    ("attention_blocks", "0", "config.attention_blocks='0': give integers >= 1"),
    ("steps", 0, "each >= 1"),
])
def test_a_bad_setting_is_one_line(field, value, match):
  cfg = config_file.get_config("test")
  cfg[field] = value
  with pytest.raises(ValueError, match=match):
    run_lib.settings(cfg)


def test_the_test_variant_times_el_jax_sides_and_the_analysis_reads_it(tmp_path):
  cfg = config_file.get_config("test")
  cfg.results_dir = str(tmp_path / "out")
  doc = run_lib.run(cfg)
  with open(tmp_path / "out" / "bench_vs_torch.json") as f:
    assert json.load(f) == json.loads(json.dumps(doc))
  assert list(doc["results"]) == ["el_jax", "el_jax_all_positions"]
  assert list(doc["ratio_tokens_per_s"]) == ["el_jax/el_jax_all_positions"]
  assert doc["targets"] == {} and doc["rounds"] == 1 and doc["steps_per_window"] == 2
  assert doc["command"] == run_lib.command(cfg) and "--config.impls=''" in doc["command"]
  for side in doc["results"].values():
    assert side["step_ms_median"] > 0 and 0 < side["mfu"] < 1
  # the all-positions step computes more: XLA counts more FLOPs for it
  assert doc["results"]["el_jax_all_positions"]["flops_per_step"] > doc["results"]["el_jax"][
      "flops_per_step"]
  a = analysis.analyze(sources.Sources(cfg.results_dir, root=ROOT), cfg)
  r = a["runs"]["bench_vs_torch"]
  assert [s["name"] for s in r["sides"]] == ["el_jax", "el_jax_all_positions"]
  assert r["torches"] == [] and r["torch"] is None and not r["has_default"]
  (k,) = a["cpu_kinds"]
  assert k["torch"] is None and k["targets"] == [None, None]
  assert "not recorded" not in a["cpu_kinds_ran_on"][0]


def _committed():
  with open(os.path.join(ROOT, "results", "bench_vs_torch", "analysis.json")) as f:
    return json.load(f)


def _page():
  with open(os.path.join(ROOT, "docs", "results", "speed.md")) as f:
    return " ".join(f.read().split())


SCORED, EQUAL = analysis.TARGET_NAMES


def test_the_per_cpu_sentences_hold():
  """"On the AMD EPYC Zen 5 both targets are met, by the default step as well; on the Zen 4
  the equal-work target is met and the scored-positions target missed; on the Intel Xeons
  (Emerald Rapids, Cascade Lake) both are missed, with el_jax's best side at torch SDPA's speed;
  the two CPUs of the earlier runs (not recorded) meet neither", and the README's row."""
  a = _committed()
  r = a["runs"]
  t = lambda name: r[name]["target"]  # noqa: E731
  assert [k["file"] for k in a["cpu_kinds"]] == list(config_file.CPU_KINDS)
  z5 = t("bench_vs_torch_zen5")
  assert all(x["met"] and x["default_ratio"] >= x["target"] for x in z5.values())
  z4 = t("bench_vs_torch_zen4")
  assert z4[EQUAL]["met"] and not z4[SCORED]["met"]
  for cpu in ("bench_vs_torch_xeon_emr", "bench_vs_torch_xeon_clx"):
    assert not any(x["met"] for x in t(cpu).values())
    assert t(cpu)[SCORED]["torch"] == "torch_sdpa" and abs(t(cpu)[SCORED]["ratio"] - 1) < 0.05
  for old in ("bench_vs_torch", "bench_vs_torch_slow_machine"):
    assert not any(x["met"] for x in t(old).values()) and r[old]["load_before"] is None
  assert [x["target"] for x in z4.values()] == [1.3, 1.0]
  page = _page()
  assert ("On the AMD EPYC Zen 5 both targets are met, by the default step as well; on the Zen 4 "
          "the equal-work target is met and the scored-positions target missed; on the Intel "
          "Xeons (Emerald Rapids, Cascade Lake) both are missed") in page
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  assert (f"AMD EPYC Zen 4: {z4[SCORED]['ratio']:.2f}x PyTorch (target 1.3x), equal work "
          f"{z4[EQUAL]['ratio']:.2f}x (target 1.0x)") in readme
  assert f"Zen 5: {z5[SCORED]['ratio']:.2f}x / {z5[EQUAL]['ratio']:.2f}x (met)" in readme


def test_the_zen4_sentences_hold():
  """attention_blocks=3 does less work; the glibc sides reproduce the issue's 0.88x / 0.74x of
  torch SDPA (within 0.03); reusing the temporaries speeds the default step up; equal work met
  with attention_blocks=3, not by the default step."""
  r = _committed()["runs"]["bench_vs_torch_zen4"]
  assert r["gflop"]["el_jax_blocks3"] < r["gflop"]["el_jax"]
  assert abs(r["ratio"]["el_jax_glibc_malloc/torch_sdpa"] - 0.88) <= 0.03
  assert abs(r["ratio"]["el_jax_glibc_malloc_all_positions/torch_sdpa"] - 0.74) <= 0.03
  assert r["ratio"]["el_jax/el_jax_glibc_malloc"] > 1
  assert r["ratio"]["el_jax_all_positions/el_jax_glibc_malloc_all_positions"] > 1
  eq = r["target"][EQUAL]
  assert eq["met"] and eq["el_jax"] == "el_jax_blocks3_all_positions"
  assert eq["default_ratio"] < eq["target"]
  assert (f"**equal work met** (with `attention_blocks=3`; the default step "
          f"{eq['default_ratio']:.2f}x), **scored positions missed**") in _page()


def test_the_other_cpus_sentences_hold():
  """On the AVX-512 CPUs XLA's dots beat Eigen's and hostmem speeds the default step up, which
  runs below attention_blocks=3; on the Zen 5 el_jax's default step is faster than on the
  Zen 4, and both Zen 5 runs meet both targets with ratios within a quarter of each other; the
  Emerald Rapids' PyTorch is faster than the Zen 4's and its ratios lower; every step on the
  Cascade Lake is slower than on the other two, its best ratios close to the Emerald Rapids'
  and below the Zen 4's."""
  r = _committed()["runs"]
  z4, z5, z5a = r["bench_vs_torch_zen4"], r["bench_vs_torch_zen5"], r["bench_vs_torch_zen5_run1"]
  emr, clx = r["bench_vs_torch_xeon_emr"], r["bench_vs_torch_xeon_clx"]
  for x in (z5, emr, clx):
    assert x["ratio"]["el_jax/el_jax_eigen"] > 1
    assert x["ratio"]["el_jax/el_jax_glibc_malloc"] > 1
    assert x["ratio"]["el_jax/el_jax_blocks3"] < 1
  assert z5["step_ms"]["el_jax"] < z4["step_ms"]["el_jax"]
  for name in (SCORED, EQUAL):
    assert z5["target"][name]["met"] and z5a["target"][name]["met"]
    for key in ("ratio", "default_ratio"):
      a, b = z5["target"][name][key], z5a["target"][name][key]
      assert abs(a - b) / min(a, b) <= 0.25
  assert emr["step_ms"]["torch_sdpa"] < z4["step_ms"]["torch_sdpa"]
  assert all(emr["target"][n]["ratio"] < z4["target"][n]["ratio"] for n in (SCORED, EQUAL))
  for side in ("torch_sdpa", "el_jax"):
    assert clx["step_ms"][side] > max(z4["step_ms"][side], emr["step_ms"][side])
  for n in (SCORED, EQUAL):
    assert clx["target"][n]["ratio"] < z4["target"][n]["ratio"]
    assert abs(clx["target"][n]["ratio"] - emr["target"][n]["ratio"]) < 0.05
  page = _page()
  assert "both targets met in both runs, the ratios moving by up to a quarter between them" in page
  assert "the best ratios are close to the Emerald Rapids' and below the Zen 4's" in page


def test_the_earlier_machines_and_the_ab_sentences_hold():
  """Neither target met on the quiet machine nor the slower one; Eigen's matmuls helped on the
  slower machine (the default's tokens/s below Eigen's); neither A/B (two CPU devices, YNNPACK
  fusions) helps: every such side is slower than the default step."""
  r = _committed()["runs"]
  assert not any(x["met"] for x in r["bench_vs_torch"]["target"].values())
  assert r["bench_vs_torch_slow_machine"]["ratio"]["el_jax/el_jax_eigen"] < 1
  tried = [x for name in config_file.AB_FILES for x in r[name[:-5]]["ab"]
           if "2dev" in x["side"] or "ynn" in x["side"]]
  assert len(tried) == 8 and all(x["ratio"] < 1 for x in tried)
  page = _page()
  assert "**Neither target is met** on this machine" in page
  assert "Neither helps." in page


def test_the_jax_lines_sentences_hold():
  """"every el_jax side's step takes 0.72-0.76 of its time under jax 0.10.2, while PyTorch's
  two sides take the same time in both runs (0.99-1.00), and both targets, missed here under
  the lock's line, are met under jax 0.12.1", recomputed from the two runs' files; the two
  runs are on one CPU, under the two lines, and the Zen 3 row of the per-CPU table is the
  lock's."""
  folder = os.path.join(ROOT, "results", "bench_vs_torch")
  old, new = (sources.Sources(folder, root=ROOT).load(f) for f in config_file.JAX_LINE_FILES)
  assert old["workers"]["el_jax"]["jax"] == "0.10.2"
  assert new["workers"]["el_jax"]["jax"].startswith("0.12.")
  assert analysis.cpu_kind(old)[0] == analysis.cpu_kind(new)[0]
  ratio = {k: new["results"][k]["step_ms_median"] / old["results"][k]["step_ms_median"]
           for k in old["results"]}
  el = [v for k, v in ratio.items() if k.startswith("el_jax")]
  torch = [v for k, v in ratio.items() if k.startswith("torch")]
  assert len(el) == 4 and len(torch) == 2
  assert max(el) < 0.8 and all(abs(v - 1) <= 0.01 for v in torch)
  assert not any(t["met"] for t in old["targets"].values())
  assert all(t["met"] for t in new["targets"].values())
  page = _page()
  assert (f"every el_jax side's step takes {min(el):.2f}-{max(el):.2f} of its time under jax "
          f"0.10.2, while PyTorch's two sides take the same time in both runs "
          f"({min(torch):.2f}-{max(torch):.2f}), and both targets, missed here under the lock's "
          f"line, are met under jax 0.12.1") in page
  a = _committed()
  assert a["cpu_kinds"][-1]["file"] == config_file.JAX_LINE_FILES[0]
  with pytest.raises(ValueError, match="one CPU kind"):
    analysis.jax_lines(sources.Sources(folder, root=ROOT),
                       [config_file.JAX_LINE_FILES[0], "bench_vs_torch_zen4.json"])
