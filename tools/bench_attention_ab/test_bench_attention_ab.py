"""tools/bench_attention_ab at `test` size: both attentions are timed for both kinds of step,
the log written, el_jax's own attention restored afterwards, and a bad shape one line."""
import os

import pytest

from el_jax.core.models import decoder

from tools.bench_attention_ab import config as config_file
from tools.bench_attention_ab import run as run_lib


def test_the_test_variant_times_both_attentions(tmp_path):
  cfg = config_file.get_config("test")
  cfg.results_dir = str(tmp_path / "out")
  attend = decoder.Attention.attend
  lines = run_lib.run(cfg)
  assert decoder.Attention.attend is attend
  assert [l.split(":")[0] for l in lines] == ["all_positions=False", "all_positions=True"]
  assert all("einsum" in l and "dpa" in l and "per-round median" in l for l in lines)
  with open(os.path.join(cfg.results_dir, cfg.log)) as f:
    assert f.read().splitlines() == lines


def test_the_committed_config_is_the_benchmarks_shape():
  from tools.bench_vs_torch import config as bvt
  shape = run_lib._overrides(config_file.get_config("cpu"))  # noqa: SLF001
  assert {f"--config.{k}={v}" for k, v in shape.items()} == set(bvt.MODEL.split()[1:])
  bad = config_file.get_config("test")
  bad.shape = "model.num_layers=four"
  with pytest.raises(ValueError, match="is not key=<integer>"):
    run_lib.run(bad)
