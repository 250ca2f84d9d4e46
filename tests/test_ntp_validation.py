"""el_jax.core.ntp refuses bad inputs, configs and workdirs with one clear ValueError, before work."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from el_jax.infra import workdir as wd
from el_jax.core.ntp import data as data_lib
from el_jax.core.ntp import dynamics
from el_jax.core.ntp import geometry
from el_jax.run import ntp_train
from el_jax.run import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(**overrides):
  return config_lib.get_config("ntp_linear", "test", overrides)


# A short run of the test variant (fig1 instance): one JIT compile each, ~seconds.
FAST = {"steps": 100, "log_every": 50, "path_bounds": "1,4", "path_steps": 20}


# ----------------------------------------------------------------------------
# geometry.entropy (and the other public geometry functions) validate their inputs.


def numpy_entropy(P, pi):
  """-sum_j pi_j sum_{z: p_jz > 0} p_jz log p_jz, by explicit loops."""
  total = 0.0
  for j, row in enumerate(P):
    for p in row:
      if p > 0:
        total -= pi[j] * p * np.log(p)
  return total


def test_entropy_of_a_valid_input_matches_numpy():
  P = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
  pi = np.array([0.5, 0.3, 0.2])
  assert geometry.entropy(P, pi) == pytest.approx(numpy_entropy(P, pi), rel=1e-14)
  assert geometry.entropy(P) == pytest.approx(numpy_entropy(P, np.full(3, 1 / 3)), rel=1e-14)


@pytest.mark.parametrize("P,pi,msg", [
    ([[0.5, 0.5], [np.nan, 0.5]], None, "NaN entry at row 1, column 0"),
    ([[0.5, 0.5], [np.inf, 0.5]], None, "negative or infinite entry at row 1, column 0"),
    ([[0.5, 0.4], [0.5, 0.5]], None, "row 0 of P sums to 0.9, not 1"),
    ([[1.5, -0.5], [0.5, 0.5]], None, "negative or infinite entry at row 0, column 1"),
    ([[0.5, 0.5], [0.5, 0.5]], [1.5, -0.5], r"pi\[1\] = -0.5 must be positive"),
    ([[0.5, 0.5], [0.5, 0.5]], [0.5, np.nan], r"pi\[1\] = nan must be positive and finite"),
    ([[0.5, 0.5], [0.5, 0.5]], [0.3, 0.3], "pi sums to 0.6, not 1"),
    ([[0.5, 0.5], [0.5, 0.5]], [1.0], r"pi must be \[m\] = \[2\]"),
    ([0.5, 0.5], None, r"P must be \[m, V\]"),
    (np.zeros((0, 3)), None, "m = 0 contexts"),
])
def test_entropy_rejects_what_the_other_functions_reject(P, pi, msg):
  with pytest.raises(ValueError, match=msg):
    geometry.entropy(P, pi)
  # The same input is refused with the same message where H is also given.
  P = np.asarray(P, dtype=np.float64)
  if P.ndim == 2 and P.shape[0]:
    with pytest.raises(ValueError, match=msg):
      geometry.cross_entropy(np.zeros((P.shape[1], 2)), np.ones((P.shape[0], 2)), P, pi)


def test_other_geometry_functions_reject_bad_shapes_and_indices():
  ds = data_lib.fig1_instance(14)
  with pytest.raises(ValueError, match=r"W must be \[V, d\] = \[5, 2\]; got shape \(1, 2\)"):
    geometry.cross_entropy(np.zeros((1, 2)), ds.H, ds.P, ds.pi)  # would broadcast silently
  with pytest.raises(ValueError, match="W has a non-finite entry at row 0, column 1"):
    geometry.cross_entropy(np.array([[0, np.nan]] + [[0, 0]] * 4), ds.H, ds.P)
  pr = geometry.projector(ds.H, ds.P)
  with pytest.raises(ValueError, match=r"W must be \[V, d\]"):
    pr.onto_f(np.zeros((6, 2)))
  with pytest.raises(ValueError, match=r"a\[0\] = -1 is not a token id in \[0, V = 5\)"):
    geometry.diff_matrix(np.array([-1]), np.array([0]), 5)
  with pytest.raises(ValueError, match=r"b\[0\] = 5 is not a token id"):
    geometry.diff_matrix(np.array([0]), np.array([5]), 5)
  with pytest.raises(ValueError, match=r"certificate Y must be \[m, V\]"):
    geometry.check_infeasibility_certificate(ds.H, ds.P, np.zeros((3, 4)))
  with pytest.raises(ValueError, match="certificate Y has a non-finite entry"):
    geometry.check_infeasibility_certificate(ds.H, ds.P, np.full((3, 5), np.nan))
  with pytest.raises(ValueError, match="unknown method 'cvx'"):
    geometry.ntp_svm(ds.H, ds.P, method="cvx")


def test_dynamics_rejects_bad_steps_and_learning_rates():
  prob = dynamics.targets(data_lib.fig1_instance(14))
  with pytest.raises(ValueError, match="lr=-1.0 must be a finite number > 0 .*gradient ascent"):
    dynamics.train(prob, "gd", lr=-1.0, steps=10, log_every=5)
  with pytest.raises(ValueError, match="steps=0 must be an integer >= 1"):
    dynamics.train(prob, "gd", lr=0.5, steps=0, log_every=5)
  with pytest.raises(ValueError, match="log_every=0 must be an integer >= 1"):
    dynamics.train(prob, "gd", lr=0.5, steps=10, log_every=0)
  with pytest.raises(ValueError, match="unknown optimizer 'sgd'; valid: gd, ngd, adam"):
    dynamics.train(prob, "sgd", lr=0.5, steps=10, log_every=5)
  with pytest.raises(ValueError, match=r"Bs\[1\] = -2.0 must be a finite number > 0"):
    dynamics.regularization_path(prob, np.array([1.0, -2.0]), steps=10)


# ----------------------------------------------------------------------------
# validate_config: each bad config is one ValueError naming the key.


def test_fig1_sizes_are_those_of_the_fig1_instance_and_every_variant_is_valid():
  ds = data_lib.fig1_instance(0)
  assert (ds.m, ds.d, ds.V) == tuple(data_lib.FIG1_SIZES[k] for k in ("m", "d", "V"))
  assert set((ds.P > 0).sum(1)) == {data_lib.FIG1_SIZES["support_size"]}
  for variant in config_lib.load_config_module("ntp_linear").VARIANTS:
    names = ntp_train.validate_config(config_lib.get_config("ntp_linear", variant))
    assert names and set(names) <= set(dynamics.OPTIMIZERS)


@pytest.mark.parametrize("overrides,msg", [
    ({"lr.gd": -1.0}, r"lr\.gd=-1\.0 must be a finite number > 0 \(a negative step runs "
                      r"gradient ascent\)"),
    ({"lr.gd": 0.0}, r"lr\.gd=0\.0 must be a finite number > 0"),
    ({"lr.gd": float("nan")}, r"lr\.gd=nan must be a finite number > 0"),
    ({"lr.gd": float("inf")}, r"lr\.gd=inf must be a finite number > 0"),
    ({"optimizers": "gd,ngd", "lr.ngd": -0.1}, r"lr\.ngd=-0\.1 must be"),
    ({"steps": 0}, "steps=0 must be an integer >= 1"),
    ({"steps": -5}, "steps=-5 must be an integer >= 1"),
    ({"log_every": 0}, "log_every=0 must be an integer >= 1"),
    ({"log_every": 300}, "steps=2000 must be a multiple of log_every=300"),
    ({"log_every": 4000}, "steps=2000 must be a multiple of log_every=4000"),
    ({"optimizers": "gd,sgd"}, "optimizers='gd,sgd': unknown optimizer 'sgd'; valid: gd, "
                               "ngd, adam"),
    ({"optimizers": " , "}, "optimizers=' , ' names no optimizer"),
    ({"optimizers": "gd,gd"}, "optimizers='gd,gd' names 'gd' twice"),
    ({"data.kind": "fig2"}, "data.kind='fig2' is not a known instance; valid: fig1, random, "
                            "text"),
    ({"data.V": 7}, r"data.kind=fig1 is the paper's fixed instance \(m=3, d=2, V=5, "
                    r"support_size=3\) and does not use data.V=7; set data.kind=random"),
    ({"data.m": 4}, "does not use data.m=4"),
    ({"data.d": 3}, "does not use data.d=3"),
    ({"data.support_size": 2}, "does not use data.support_size=2"),
    ({"data.n_samples": 100}, "data.n_samples=100 is not used by data.kind=fig1"),
    ({"data.n_samples": -1}, "data.n_samples=-1 must be an integer >= 0"),
    ({"data.kind": "random", "data.support_size": 6}, "data.support_size=6 must be <= data.V=5"),
    ({"data.kind": "random", "data.support_size": 0}, "data.support_size=0 must be an integer"),
    ({"data.kind": "random", "data.m": 0}, "data.m=0 must be an integer >= 1"),
    ({"data.kind": "random", "data.d": 0}, "data.d=0 must be an integer >= 1"),
    ({"data.kind": "text", "data.V": 1}, "data.V=1 must be an integer >= 2"),
    ({"data.kind": "text", "data.context_len": 0}, "data.context_len=0 must be"),
    ({"data.kind": "text", "data.max_verses": -1}, "data.max_verses=-1 must be"),
    ({"data.kind": "text", "data.n_samples": 5}, "data.n_samples=5 is not used by data.kind=text"),
    ({"path_bounds": "1,x"}, "path_bounds='1,x' must be comma-separated numbers"),
    ({"path_bounds": "1,-4"}, "path_bounds='1,-4': the norm bound -4.0 must be a finite "
                              "number > 0"),
    ({"path_bounds": "nan"}, "path_bounds='nan': the norm bound nan must be"),
    ({"path_steps": 0}, "path_steps=0 must be an integer >= 1"),
    ({"seed": -1}, "seed=-1 must be an integer >= 0"),
])
def test_bad_config_is_one_value_error_naming_the_key(overrides, msg, tmp_path):
  cfg = _config(**overrides)
  with pytest.raises(ValueError, match=msg) as e:
    ntp_train.validate_config(cfg)
  assert "\n" not in str(e.value)
  # train_and_evaluate checks first: nothing is written, not even the workdir.
  with pytest.raises(ValueError, match=msg):
    ntp_train.train_and_evaluate(cfg, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_a_missing_learning_rate_is_named():
  cfg = _config(optimizers="gd,adam")
  del cfg.lr["adam"]
  with pytest.raises(ValueError, match=r"lr\.adam is missing: optimizers='gd,adam' runs adam"):
    ntp_train.validate_config(cfg)


def test_paths_steps_are_not_checked_without_a_path():
  assert ntp_train.validate_config(_config(path_bounds="", path_steps=0)) == ["gd"]


# ----------------------------------------------------------------------------
# The workdir: config.json decides, another config is refused, files untouched.


def _snapshot(d):
  """{path under `d`: (bytes, mtime)} of every file (the TensorBoard events under tb/ too)."""
  files = sorted(os.path.relpath(os.path.join(root, f), d)
                 for root, _, names in os.walk(d) for f in names)
  return {p: (open(os.path.join(d, p), "rb").read(), os.stat(os.path.join(d, p)).st_mtime_ns)
          for p in files}


def test_workdir_of_another_config_is_refused_and_the_same_config_reruns(tmp_path):
  work = str(tmp_path / "w")
  first = ntp_train.train_and_evaluate(_config(**FAST), work)
  files = set(os.listdir(work))
  assert {"config.json", "metrics.jsonl", "summary.json", "fig1.png", "convergence.png",
          "reg_path.png"} <= files
  assert not any(f.endswith(".tmp") or f == ".lock" for f in files)
  assert json.loads((tmp_path / "w" / "config.json").read_text())["lr"]["gd"] == 0.5
  assert len((tmp_path / "w" / "metrics.jsonl").read_text().splitlines()) == 100 // 50 + 1
  before = _snapshot(work)
  with pytest.raises(wd.WorkdirError, match=r"different config \(lr\.gd: 0\.5 -> 0\.25\)"):
    ntp_train.train_and_evaluate(_config(**FAST, **{"lr.gd": 0.25}), work)
  assert _snapshot(work) == before  # nothing rewritten, and no lock left behind
  again = ntp_train.train_and_evaluate(_config(**FAST), work)
  assert again["runs"]["gd"]["gap"] == first["runs"]["gd"]["gap"]
  assert set(os.listdir(work)) == files


def test_workdir_from_before_config_json_is_judged_by_its_summary(tmp_path):
  # Workdirs written before config.json existed (e.g. results/ntp_convergence/fig1) record
  # their config only in summary.json.
  old = _config(**FAST).to_dict()
  (tmp_path / "summary.json").write_text(json.dumps({"config": old, "runs": {}}))
  before = _snapshot(str(tmp_path))
  with pytest.raises(wd.WorkdirError, match=r"different config \(steps: 100 -> 200.*summary"):
    ntp_train.train_and_evaluate(_config(**{**FAST, "steps": 200}), str(tmp_path))
  assert _snapshot(str(tmp_path)) == before


def test_a_workdir_in_use_is_refused(tmp_path):
  lock = {"pid": os.getpid(), "host": socket.gethostname(), "since": "now", "argv": "other run"}
  (tmp_path / wd.LOCK_NAME).write_text(json.dumps(lock))
  with pytest.raises(wd.WorkdirError, match="is in use by pid"):
    ntp_train.train_and_evaluate(_config(**FAST), str(tmp_path))
  assert os.listdir(tmp_path) == [wd.LOCK_NAME]


def test_cli_negative_learning_rate_is_an_error_naming_the_key(tmp_path):
  work = tmp_path / "w"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  r = subprocess.run([sys.executable, "-m", "el_jax.main", "--config=configs/ntp_linear.py:test",
                      f"--workdir={work}", "--config.lr.gd=-1"],
                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert r.returncode != 0
  last = r.stderr.strip().splitlines()[-1]
  assert "lr.gd" in last and "must be a finite number > 0" in last, r.stderr
  assert not (work / "config.json").exists() and not (work / "metrics.jsonl").exists()

