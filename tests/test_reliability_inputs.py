"""Reliability, bad input: every mistake a user can make on the command line is one line.

Each case runs `python -m el_jax.main` (or another entry point) as a user would, on the
`test` configs (the config errors through the same entry point in this process,
`reliability.call_main`, and one case of each kind as a process too), and checks: the exit
status (2), that the last stderr line names the problem, that there is no traceback, and
that nothing was started (no workdir) or changed (an existing workdir's files).
"""
import json
import os
import re

import pytest

import reliability as rel

COPY = "--config=configs/copy_task.py:test"
PATH_STAR = "--config=configs/path_star.py:test"

# case: (extra arguments, regex the last stderr line must match)
CONFIG_ERRORS = {
    "num_steps_0": ([COPY, "--config.train.num_steps=0"], r"train\.num_steps=0 must be an integer >= 1"),
    "batch_not_packable": ([COPY, "--config.train.batch_strings=15"],
                           r"train\.batch_strings=15 is not a multiple of the 2 strings packed"),
    "negative_lr": ([COPY, "--config.optim.lr=-1"], r"optim\.lr=-1\.0 must be a finite number > 0"),
    "unknown_loss": ([COPY, "--config.loss.name=foo"],
                     r"unknown loss 'foo'; valid names: \['ce', 'dice', 'e1', 'e2', 'e3', .*'z_loss'\]"),
    "unknown_reduction": ([COPY, "--config.loss.reduction=sum"],
                          r"loss\.reduction='sum'; allowed: \['mean', 'reweight'\]"),
    "bad_gce_q": ([COPY, "--config.loss.name=gce", "--config.loss.gce.q=0"],
                  r"loss\.gce\.q must be a finite number in \(0, 1\], got 0\.0"),
    "wsd_decay_frac": ([COPY, "--config.optim.decay=wsd", "--config.optim.decay_frac=1.5"],
                       r"optim\.decay_frac=1\.5 must be in \(0, 1\]"),
    "negative_lam": ([COPY, "--config.loss.name=e1", "--config.loss.e1.lam=-2"],
                     r"loss\.e1\.lam must be a finite number >= 0"),
    "heads_do_not_divide": ([COPY, "--config.model.num_heads=3"],
                            r"model\.embed_dim=16 is not divisible by model\.num_heads=3"),
    "num_test_0": ([COPY, "--config.data.num_test=0"], r"data\.num_test=0 must be >= 1"),
    "seeds_not_ints": ([COPY, "--config.seeds=abc"], r"config\.seeds=\('abc',\) must be integers"),
    "stop_at_negative": ([COPY, "--config.train.stop_at_step=-1"],
                         r"train\.stop_at_step=-1 must be an integer >= 0"),
    "unknown_optimizer": ([COPY, "--config.optim.name=lion"],
                          r"optim\.name='lion'; allowed: \('adamw', 'adam', 'sgd'\)"),
    "beta_out_of_range": ([COPY, "--config.optim.b2=1.5"], r"optim\.b2=1\.5 must be in \[0, 1\)"),
    "stray_argument": ([COPY, "stray"], r"unexpected argument 'stray'"),
    "unknown_flag": ([COPY, "--bogus=1"], r"Unknown command line flag 'bogus'"),
    "unchangeable_field": ([COPY, "--allow_config_change=model.num_layers"],
                           r"--allow_config_change cannot allow model\.num_layers: only optimizer"),
    "test_file_pattern": ([PATH_STAR, "--config.data.test_file=/x/{foo}.txt"],
                          r"data\.test_file='/x/\{foo\}\.txt' is not a valid pattern .*\{degree\}"),
    "test_file_missing": ([PATH_STAR, "--config.data.test_file=/nonexistent/g.txt"],
                          r"data\.test_file: '/nonexistent/g\.txt' does not exist"),
    "path_star_num_test_negative": ([PATH_STAR, "--config.data.num_test=-1"],
                                    r"data\.num_test=-1 must be an integer >= 0"),
    "duplicate_seeds": ([COPY, "--config.seeds=(0,2,0)"],
                        r"config\.seeds=\(0, 2, 0\) repeats seed 0; .*give distinct seeds"),
    "negative_seed": ([COPY, "--config.seeds=(-1,)"],
                      r"config\.seeds=\(-1,\) has -1; seeds must be integers in \[0, 2\*\*32\)"),
    "seed_too_large": ([COPY, f"--config.seeds=(0,{2**32})"],
                       rf"config\.seeds=\(0, {2**32}\) has {2**32}; seeds must be integers"),
    "negative_data_seed": ([COPY, "--config.data.data_seed=-3"],
                           r"data\.data_seed=-3 must be an integer in \[0, 2\*\*32\)"),
    "init_std_zero": (["--config=configs/hmm_mlm.py:test", "--config.model.init_std=0"],
                      r"model\.init_std=0\.0 must be a finite number > 0 \(the std of the "
                      r"transformer's normal initialisation; default 0\.02\)"),
    "init_std_bilstm": (["--config=configs/hmm_mlm.py:test", "--config.model.preset=bilstm",
                         "--config.model.init_std=0.1"],
                        r"model\.init_std=0\.1 is the transformer's initialisation; the bilstm "
                        r"uses PyTorch's"),
    "model_too_big": ([COPY, "--config.model.embed_dim=100000", "--config.model.num_heads=2"],
                      r"this run needs about [\d.]+ TB of memory \(estimate: params [\d.]+ GB "
                      r"\+ optimizer state .* activations .*\), more than the [\d.]+ [GMT]B "
                      r"available \(cpu: .*\); lower model\.embed_dim"),
}

# Config files with a problem: (file text, regex of the problem after "could not load
# --config=<file>:test: "). The copy_task config is reachable from a file as `_COPY`.
_COPY_FILE = os.path.join(rel.ROOT, "configs", "copy_task.py")
_COPY = ("import importlib.util\n"
         f"_spec = importlib.util.spec_from_file_location('_c', {_COPY_FILE!r})\n"
         "_COPY = importlib.util.module_from_spec(_spec)\n_spec.loader.exec_module(_COPY)\n")
CONFIG_FILES = {
    "syntax_error": ("X = 1\ndef get_config(arg=None:\n  return 1\n",
                     r"syntax error at line 2: .*def get_config\(arg=None:"),
    "import_error": ("import no_such_module_xyz\n", r"importing it raised ModuleNotFoundError: "
                     r"No module named 'no_such_module_xyz' \(line 1\)"),
    "no_get_config": ("X = 1\n", r"it defines no get_config\(variant\) function"),
    "get_config_raises": ("def get_config(arg):\n  raise RuntimeError('boom')\n",
                          r"get_config\('test'\) raised RuntimeError: boom \(line 2\)"),
    "get_config_key_error": ("def get_config(arg):\n  return {}['x']\n",
                             r"get_config\('test'\) raised KeyError: 'x' \(line 2\)"),
    "returns_none": ("def get_config(arg):\n  pass\n",
                     r"get_config\('test'\) returned None \(a missing return statement\?\)"),
    "returns_dict": ("def get_config(arg):\n  return {'task': 'copy_task'}\n",
                     r"get_config\('test'\) returned a dict, not an ml_collections\.ConfigDict"),
    "unknown_variant": (_COPY + "def get_config(arg):\n  return _COPY.get_config('nope')\n",
                        r"get_config\('test'\) raised ValueError: unknown copy_task variant "
                        r"'nope'"),
}
# Blocks every config of the generic loop needs (el_jax.run.setup.REQUIRED_BLOCKS, in part).
MISSING_BLOCKS = ("seeds", "train", "model", "data")


# One case of each kind (a flag of absl, a field of the config checked by the config, by the
# loss registry, by the job before it allocates) also runs as a process of its own, as a user
# runs it (`rel.run`); every case runs in this process (`rel.call_main`: the same entry point,
# ~3 s of CPU less per case).
IN_A_PROCESS = ("unknown_flag", "num_steps_0", "unknown_loss", "model_too_big")


@pytest.mark.parametrize("case", sorted(CONFIG_ERRORS))
def test_config_error_is_one_line_and_starts_nothing(case, tmp_path, capsys, monkeypatch):
  args, pattern = CONFIG_ERRORS[case]
  workdir = tmp_path / "run"
  rel.assert_one_line_error(rel.call_main(capsys, monkeypatch, *args, f"--workdir={workdir}"),
                            pattern)
  assert not workdir.exists(), "a refused run must not create its workdir"
  if case in IN_A_PROCESS:
    rel.assert_one_line_error(rel.run(*args, f"--workdir={workdir}"), pattern)
    assert not workdir.exists(), "a refused run must not create its workdir"


@pytest.mark.parametrize("case", sorted(CONFIG_FILES) + ["missing_file"])
def test_config_file_problem_is_one_line_naming_the_file(case, tmp_path, capsys, monkeypatch):
  path = tmp_path / f"{case}.py"
  if case == "missing_file":
    pattern = "no such file"
  else:
    text, pattern = CONFIG_FILES[case]
    path.write_text(text)
  args = (f"--config={path}:test", f"--workdir={tmp_path / 'run'}")
  proc = (rel.run(*args) if case in ("syntax_error", "missing_file") else
          rel.call_main(capsys, monkeypatch, *args))
  rel.assert_one_line_error(proc, rf"could not load --config={re.escape(str(path))}:test: "
                                  rf"{pattern}")
  assert not (tmp_path / "run").exists()
  # The same problem, one line naming the file, through el_jax.run.config.get_config.
  from el_jax.run import config as config_lib
  with pytest.raises(config_lib.ConfigFileError) as e:
    config_lib.get_config(str(path), "test")
  assert re.fullmatch(rf"could not load config {re.escape(str(path))}(:test)?: {pattern}.*",
                      str(e.value)), e.value


@pytest.mark.parametrize("block", MISSING_BLOCKS)
def test_config_without_a_required_block_names_the_file(block, tmp_path, capsys, monkeypatch):
  path = tmp_path / f"no_{block}.py"
  path.write_text(_COPY + f"def get_config(arg):\n  c = _COPY.get_config(arg)\n"
                  f"  del c[{block!r}]\n  return c\n")
  args = (f"--config={path}:test", f"--workdir={tmp_path / 'run'}")
  proc = rel.run(*args) if block == "model" else rel.call_main(capsys, monkeypatch, *args)
  rel.assert_one_line_error(proc, rf"the config \({re.escape(str(path))}:test\) has no "
                                  rf"'{block}' field")
  assert not (tmp_path / "run").exists()


def test_tilde_in_config_workdir_and_data_paths_is_expanded(tmp_path):
  home = tmp_path / "home"
  home.mkdir()
  with open(os.path.join(rel.ROOT, "configs", "copy_task.py")) as f:
    (home / "c.py").write_text(f.read())
  proc = rel.run("--config=~/c.py:test", "--workdir=~/run", HOME=home)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (home / "run" / "summary.json").exists() and not os.path.exists(
      os.path.join(rel.ROOT, "~"))
  # A path field of the config (path_star's data.test_file).
  (home / "graphs.txt").write_text("".join(line + "\n" for line in _path_star_lines(5)))
  proc = rel.run(PATH_STAR, "--workdir=~/ps", "--config.data.test_file=~/graphs.txt",
                 "--config.data.num_test=0", "--config.train.stop_at_step=2", HOME=home)
  assert proc.returncode == 0, proc.stderr[-3000:]
  config = json.loads((home / "ps" / "config.json").read_text())
  assert config["data"]["test_file"] == str(home / "graphs.txt")


def _path_star_lines(n):
  from el_jax.core.data import path_star
  return path_star.generate_graphs(n, 2, 3, 12, seed=0).lines()  # the test config's G(2,3), 12 nodes


@pytest.mark.parametrize("case", ["malformed", "empty", "node_out_of_range", "too_short"])
def test_bad_path_star_test_file_is_named(case, tmp_path):
  lines = _path_star_lines(5)
  num_test = 20 if case == "too_short" else 0  # 0 = every graph of the file
  if case == "malformed":
    lines[2] = "garbage"
    pattern = r"test\.txt:3: malformed path-star line"
  elif case == "empty":
    lines = []
    pattern = r"test\.txt: no graphs"
  elif case == "node_out_of_range":
    edges, rest = lines[1].split("/", 1)
    lines[1] = edges.replace(edges.split(",")[0], "77", 1) + "/" + rest
    pattern = r"test\.txt:2: .*node id 77 >= num_nodes=12"
  else:
    pattern = r"test\.txt has 5 graphs, fewer than the 20 asked for \(data\.num_test\)"
  path = tmp_path / "test.txt"
  path.write_text("".join(line + "\n" for line in lines))
  proc = rel.run(PATH_STAR, f"--workdir={tmp_path / 'run'}", f"--config.data.test_file={path}",
                 f"--config.data.num_test={num_test}")
  rel.assert_one_line_error(proc, pattern)


def test_help_prints_usage():
  proc = rel.run("--help")
  assert proc.returncode == 0, proc.stderr
  for text in ("--config=<path.py>[:<variant>]", "--workdir", "--allow_config_change",
               "--verbose", "exit status 2"):
    assert text in proc.stdout, text


def test_verbose_shows_the_traceback(tmp_path):
  proc = rel.run(COPY, "--config.train.num_steps=0", f"--workdir={tmp_path / 'a'}", "--verbose")
  assert proc.returncode != 0 and "Traceback" in proc.stderr
  proc = rel.run(COPY, "--config.train.num_steps=0", f"--workdir={tmp_path / 'b'}",
                 EL_JAX_VERBOSE=1)
  assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_workdir_of_another_config_is_refused_untouched(tmp_path):
  workdir = tmp_path / "run"
  first = rel.run(COPY, f"--workdir={workdir}", "--config.train.stop_at_step=4")
  assert first.returncode == 0, first.stderr
  before = rel.snapshot(workdir)
  proc = rel.run(COPY, f"--workdir={workdir}", "--config.optim.lr=0.5")
  rel.assert_one_line_error(proc, r"was trained with a different config \(optim\.lr: 0\.003 -> "
                                  r"0\.5\).*--allow_config_change=optim\.lr")
  proc = rel.run(COPY, f"--workdir={workdir}", "--config.model.num_layers=3")
  line = rel.assert_one_line_error(proc, r"model\.num_layers: 2 -> 3")
  assert "allow_config_change" not in line  # a model change cannot be allowed
  assert rel.snapshot(workdir) == before


def test_damaged_config_json_is_named(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "config.json").write_text('{"task": "copy_ta')
  proc = rel.run(COPY, f"--workdir={workdir}")
  rel.assert_one_line_error(proc, r"config\.json is damaged .*move the workdir away")
  assert (workdir / "config.json").read_text() == '{"task": "copy_ta'


def test_unwritable_workdir_is_one_line(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a folder")
  proc = rel.run(COPY, f"--workdir={blocker / 'run'}")
  rel.assert_one_line_error(proc, r"cannot use workdir .*run: (Not a directory|File exists) "
                                  r".*give a --workdir in a folder you can write to")


def test_other_entry_points_share_the_error_surface(tmp_path):
  proc = rel.run(COPY, "--config.model.num_heads=3", module="el_jax.tools.bench")
  rel.assert_one_line_error(proc, r"not divisible by model\.num_heads=3")
  proc = rel.run(COPY, "--config.loss.name=foo", module="el_jax.tools.flatness_bench")
  rel.assert_one_line_error(proc, r"unknown loss 'foo'")
  ntp = rel.run("--config=configs/ntp_linear.py:test", f"--workdir={tmp_path / 'ntp'}",
                "--config.steps=0")
  rel.assert_one_line_error(ntp, r"steps=0 must be an integer >= 1")


def test_finished_run_talks(tmp_path):
  workdir = tmp_path / "run"
  proc = rel.run(COPY, f"--workdir={workdir}")
  assert proc.returncode == 0, proc.stderr
  summary = workdir / "summary.json"
  assert f"results: {summary}" in proc.stderr
  assert "split  em_easy  cl_easy  em_hard  cl_hard  em_all  cl_all" in proc.stderr
  test_row = [line for line in proc.stderr.splitlines() if line.startswith("test ")][0]
  agg = json.loads(summary.read_text())["aggregate"]
  assert test_row.split()[1] == f"{agg['test_em_easy']['mean']:.3f}"
  again = rel.run(COPY, f"--workdir={workdir}")
  assert again.returncode == 0 and "already finished; nothing to train" in again.stderr
  assert f"results: {summary}" in again.stderr


def test_progress_lines_in_a_log_file(tmp_path):
  proc = rel.run(COPY, f"--workdir={tmp_path / 'run'}", "--config.progress=True",
                 "--config.train.num_steps=40", "--config.train.eval_every=0",
                 EL_JAX_LOG_EVERY_S=0)
  assert proc.returncode == 0, proc.stderr
  lines = [line for line in proc.stderr.splitlines() if line.startswith("seed 0: step ")]
  assert len(lines) >= 10, proc.stderr
  assert any("loss " in line and "steps/s" in line for line in lines), lines
  assert lines[-1].startswith("seed 0: step 40/40") and "done in" in lines[-1]
  assert any(line.startswith("seed 0 step 40: evaluating test: batch ")
             for line in proc.stderr.splitlines()), proc.stderr
  quiet = rel.run(COPY, f"--workdir={tmp_path / 'quiet'}", "--config.progress=False",
                  EL_JAX_LOG_EVERY_S=0, EL_JAX_PLOTS=0)
  assert not [line for line in quiet.stderr.splitlines() if ": step " in line]
  # EL_JAX_PLOTS=0 (the suite's default, tests/reliability.py): the run's files, no plot.
  assert (tmp_path / "quiet" / "summary.json").is_file()
  assert not list((tmp_path / "quiet").glob("*.png"))


def test_a_bad_plots_setting_stops_before_training(tmp_path):
  proc = rel.run(COPY, f"--workdir={tmp_path / 'run'}", EL_JAX_PLOTS="yes")
  rel.assert_one_line_error(proc, re.escape("EL_JAX_PLOTS='yes' in the environment: 1 (draw a "
                                            "run's plots when it ends, the default) or 0 (skip "
                                            "them)"))
  assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_stop_at_step_says_so(tmp_path):
  proc = rel.run(COPY, f"--workdir={tmp_path / 'run'}", "--config.train.stop_at_step=4")
  assert proc.returncode == 0
  assert rel.last_line(proc) == ("seed 0: stopped at step 4 (train.stop_at_step); run again "
                                 "without it to continue to step 8")
