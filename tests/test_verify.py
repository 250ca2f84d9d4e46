"""`python -m el_jax.tools.verify` at test size on the CPU: its parts, its JSON, its verdict."""
import json
import math
import os
import subprocess
import sys

import pytest

from el_jax.tools import golden
from el_jax.tools import verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_golden_part_checks_the_committed_cpu_numbers():
  r = verify.part_golden("test")
  assert r["ok"] and r["max_rel_err_highest"] <= verify.GOLDEN_RTOL
  assert r["cpu"] == golden.STEP_1
  # bf16 really is another computation, and is reported, not required
  assert 0 < max(r["rel_err"]["bfloat16"].values()) < 2e-2


def test_seeds_part_compares_stacked_with_sequential():
  r = verify.part_seeds("test")
  assert r["ok"] and r["impl"] == "map" and r["seeds"] == [0, 1, 2]  # "auto" is map on CPU
  assert r["max_rel_err_metrics"] <= verify.SEEDS_RTOL_METRICS


def test_throughput_part_times_fp32_bf16_and_equal_work():
  r = verify.part_throughput("test", peaks={"float32": 1e11, "bfloat16": 1e11})
  assert r["ok"]
  got = {(x["model"], x["dtype"], x["all_positions"]) for x in r["rows"]}
  assert got == {(m, d, a) for m in ("path_star:test", "copy_task:test")
                 for d, a in (("float32", False), ("bfloat16", False), ("float32", True))}
  for x in r["rows"]:
    assert x["step_s"] > 0 and x["flops_per_step"] > 0
    assert x["mfu"] == pytest.approx(x["flops_per_step"] / x["step_s"] / 1e11)
    assert x["flops_source"] == "XLA cost analysis (lowered)"
  allpos = {x["model"]: x["flops_per_step"] for x in r["rows"] if x["all_positions"]}
  scored = {x["model"]: x["flops_per_step"] for x in r["rows"]
            if not x["all_positions"] and x["dtype"] == "float32"}
  assert all(scored[m] < allpos[m] for m in allpos)  # the scored step does less work
  assert [s["mode"] for s in r["seeds"]] == ["vmap", "sequential"]
  assert set(r["shapes"]) == {"path_star:test", "copy_task:test"}
  assert r["shapes"]["path_star:test"]["preset"] == "gpt2"


def test_ratio_rows_pair_el_jax_with_torch():
  parts = {"throughput": {"rows": [
      {"model": "m", "dtype": "float32", "all_positions": False, "step_s": 1.0},
      {"model": "m", "dtype": "float32", "all_positions": True, "step_s": 2.0}]},
      "torch": {"rows": [{"model": "m", "dtype": "float32", "step_s": 4.0},
                         {"model": "m", "dtype": "float32", "step_s": 3.0, "mode": "compile"}]}}
  rows = verify._ratio_rows(parts)
  assert [(r["mode"], r["equal_work"], r["speedup"]) for r in rows] == [
      ("eager", False, 4.0), ("eager", True, 2.0), ("compile", False, 3.0),
      ("compile", True, 1.5)]


def test_the_command_writes_one_json_and_skips_what_has_no_time(tmp_path):
  out = tmp_path / "v.json"
  p = subprocess.run([sys.executable, "-m", "el_jax.tools.verify", "--size=test", f"--out={out}",
                      "--parts=env,torch", "--budget_s=600"], cwd=ROOT, capture_output=True,
                     text=True, timeout=300)
  assert p.returncode == 0, p.stderr[-2000:]
  res = json.loads(out.read_text())
  env = res["parts"]["env"]
  assert env["ok"] and env["ran_on"]["platform"] == "cpu"
  assert set(env["peak_flops"]) == {"bfloat16", "float32", "float32_highest"}
  assert all(v > 0 and math.isfinite(v) for v in env["peak_flops"].values())
  assert res["parts"]["torch"]["ok"] in (None, True)  # skipped where no torch is installed
  assert p.stdout.strip().splitlines()[-1] == f"verify: passed (env, torch); {out}"
  # a budget too small for any part: every part is skipped, nothing required ran
  p = subprocess.run([sys.executable, "-m", "el_jax.tools.verify", "--size=test", f"--out={out}",
                      "--parts=golden", "--budget_s=5"], cwd=ROOT, capture_output=True,
                     text=True, timeout=120)
  res = json.loads(out.read_text())
  assert res["parts"]["golden"]["skipped"].startswith("out of time")
  assert p.returncode == 1 and not res["ok"]  # a required part that did not run fails verify
  p = subprocess.run([sys.executable, "-m", "el_jax.tools.verify", "--parts=nope"], cwd=ROOT,
                     capture_output=True, text=True, timeout=60)
  assert p.returncode == 2 and "unknown ['nope']" in p.stderr
