"""tools/flatness_bench: the targets' words follow the numbers (a probe that meets its target
at both batches is said to), and the section's sentences hold for the committed bench."""
import json
import os
import shutil

from el_jax.report import render
from el_jax.report import sources

from tools.flatness_bench import analysis
from tools.flatness_bench import config as config_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOG = os.path.join(ROOT, "results", "flatness_bench", "bench.log")


def _bench():
  with open(LOG) as f:
    line = next(l for l in f.read().splitlines() if l.startswith("flatness_bench {"))
  return json.loads(line.split(" ", 1)[1])


def _section(tmp_path, doc):
  """The section rendered from an analysis of a bench log holding `doc`."""
  root = tmp_path / "checkout"
  shutil.copytree(os.path.join(ROOT, "tools"), root / "tools",
                  ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  out = root / "results" / "flatness_bench"
  out.mkdir(parents=True)
  (out / "bench.log").write_text(f"flatness_bench {json.dumps(doc)}\n")
  src = sources.Sources(str(out), root=str(root))
  a = {**analysis.analyze(src, config_file.get_config("cpu")), "sources": src.read}
  (out / "analysis.json").write_text(json.dumps(a))
  return a, " ".join(render.render_section("flatness_bench/page.md", root=str(root)).split())


def test_the_verdict_follows_the_numbers(tmp_path):
  """"missed" / "met" are decided by the numbers: with the training batch's probe at 1.87x
  the probe target is missed there; at 1.4x it is met at both batches and the verdict says
  both targets are met."""
  doc = _bench()
  a, text = _section(tmp_path / "as_run", doc)
  assert not a["all_met"] and a["missed"] == [{"target": "probe", "batch": "the training batch"}]
  assert ("the probe target (<= 1.5x) is **missed** at the training batch, met only at the 8x "
          "batch; the Fisher target (<= 1.3x) is met at both batches") in text
  assert "Verdict: **not met**: the probe target at the training batch missed." in text
  doc["x1"]["batched_probe_over_grad_by_probes"]["8"] = 1.4
  a, text = _section(tmp_path / "changed", doc)
  assert a["all_met"] and a["batches"][0]["probe_met"]
  assert "the probe target (<= 1.5x) is met at both batches" in text
  assert "Verdict: both targets met at both batches." in text
  doc["x8"]["fisher_draw_over_grad"] = 1.4
  a, text = _section(tmp_path / "fisher", doc)
  assert "the Fisher target (<= 1.3x) is met at the training batch, **missed** at the 8x batch" in text
  assert "Verdict: **not met**: the Fisher target at the 8x batch missed." in text


def test_the_section_says_what_the_analysis_gives():
  """The committed bench: the table's ratios, "the 8x batch's gradient took 28.3x the time of
  the training batch's for 8.0x its FLOPs" (an unusually slow gradient: its time grew far more
  than its FLOPs), and the verdict."""
  with open(os.path.join(ROOT, "results", "flatness_bench", "analysis.json")) as f:
    a = json.load(f)
  with open(os.path.join(ROOT, "docs", "results", "speed.md")) as f:
    page = " ".join(f.read().split())
  assert f"({a['num_params']:,} parameters)" in page
  for b in a["batches"]:
    for e in b["estimators"]:
      assert f"| {b['contexts']} x 55 | {b['grad_ms']:.1f} | {e['name']} | {e['time']:.2f}x |" in page
  assert a["time_ratio"] > 2 * a["flops_ratio"]
  assert (f"took {a['time_ratio']:.1f}x the time of the training batch's for "
          f"{a['flops_ratio']:.1f}x its FLOPs, so its ratios are taken over an unusually slow "
          "gradient") in page
  x1, x8 = a["batches"]
  assert not x1["probe_met"] and x8["probe_met"] and x1["fisher_met"] and x8["fisher_met"]
  assert "Verdict: **not met**: the probe target at the training batch missed." in page
