"""The device queue's jobs, in priority order (`JOBS`): a job is a config, its arms (a loss
setting each), the model seeds every arm wants, the metric it is judged on and the baseline
arm; `paper` names each arm's number in `el_jax.report.papers` (none where the paper has
none). Plain data: the analysis imports it without JAX.

  copy_lc1        seed 000 Fig. 1 at one string per context: configs/copy_task.py:paper_lc1
                  (GPT-NeoX 4 x 1024, L_c = 1, L_p = 50, 8 strings per step, 20k steps), CE
                  against E1 (lam 1: the CPU-size validation sweep's choice) + 1000 warmup
                  steps (the paper's E1 copy-task run), 5 seeds per arm; hard-test EM.
                  Complete (5 + 5 seeds, float32, trained before the stacked jobs): its
                  settings stay those its seeds were trained with.
  path_star_g23   seed 000 Table 1, G(2,3) at the reference's budget: configs/path_star.py:paper
                  (GPT-mini 6 x 384, batch 256, lr 1e-4), 100 epochs of the 200k graphs (78,100
                  steps), the reference's test set; CE (100 warmup steps) against E1 (lam 1) +
                  1000 warmup steps; 5 seeds per arm; test exact match of the whole path
  path_star_g53   the same on G(5,3)
  pcfg_task_c     seed 002 Fig. 3 on the PCFG at the paper's size (experiments/mlm_flatness
                  `paper`: the 16 x 1024 BERT of configs/pcfg_mlm.py:paper pre-trained 30k steps
                  with AdamW, then continued with SGD, the task C probe measured along it)
  hmm_mlm_sgd     the same protocol on the HMM (configs/hmm_mlm.py:paper, Fig. 3 with SGD)

`kind` says what the queue does with a job: "arms" jobs are trained by `queue.run`, every arm
x missing seed that fits the call as one stacked program (`el_jax.run.job.train_arms`);
"experiment" jobs are an experiment's recipe (`experiment`, with `experiment_overrides`), sized
by the queue (`tools/device_queue/sizing.py`) but not run by it: a pre-training of 30k steps
does not fit one call, and its checkpoint (GBs) cannot come back for the next.

`dtype` is the job's `model.dtype` and `dtype_why` the reason the page gives: bf16 where
tests/test_mixed_precision.py holds bf16 training to float32 at `test` size for the task (the
copy task and path-star: every training loss within t * 2^-8 relative, evaluation means within
2 SE + one example), and where the session's on-device check of the same bounds passes
(`tools/device_queue/dtype_check.py`); float32 elsewhere. `model` names verify's throughput
row whose measured step time is the job's (`tools/device_queue/sizing.py`), where one is.
"""
STEPS_PER_EPOCH_PS = 200_000 // 256  # path-star paper: 781 steps per epoch of 200k graphs
MIN_MODELS = 3  # an arm is tested against the baseline once both have this many seeds


def _job(name, title, config, variant, metric, arms, baseline, seeds, overrides, paper=None,
         test_overrides=None, kind="arms", dtype_why="", model=None, experiment=None,
         experiment_overrides=None):
  return {"name": name, "title": title, "config": config, "variant": variant, "metric": metric,
          "arms": arms, "baseline": baseline, "seeds": list(seeds), "overrides": overrides,
          "paper": paper or {}, "test_overrides": test_overrides or {}, "kind": kind,
          "dtype": overrides.get("model.dtype", "float32"), "dtype_why": dtype_why,
          "model": model, "experiment": experiment,
          "experiment_overrides": experiment_overrides or {}}


E1_WARMUP = {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 1000}
# Device run settings of the stacked jobs: the arms' seeds as one program (`train_arms` stacks
# every arm's seeds; `train.vmap_seeds` is the setting of a run trained alone), no checkpoint
# (nothing of it comes back, and a call that stops is trained again, not resumed), no
# TensorBoard events and no progress bar (the job's JSON and the session's log are read).
STACKED = {"train.vmap_seeds": True, "progress": False, "train.checkpoint_every": 0,
           "train.tensorboard": False}
BF16_WHY = ("bf16: tests/test_mixed_precision.py holds bf16 training of {task} to float32 at "
            "`test` size (every training loss within t x 2^-8 relative, evaluation means within "
            "2 SE + one example), and the session checks the same bounds on the device before "
            "it trains")
PS_TEST = {"data.test_file": "", "train.num_steps": 8, "train.eval_batch_size": 16}
JOBS = (
    _job("copy_lc1", "Copy task, one string per context (seed 000 Fig. 1, k = 1), paper size",
         "copy_task", "paper_lc1", "test_em_hard",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {"train.vmap_seeds": True, "progress": False, "train.eval_every": 5000,
          "train.checkpoint_every": 20_000, "train.eval_batch_contexts": 1000},
         paper={"ce": "s000.fig1a.ce_k1"},
         test_overrides={"train.eval_every": 4, "train.checkpoint_every": 8},
         dtype_why="float32: its 10 models were trained before the queue chose dtypes; a new "
                   "dtype would be a new job", model="copy_task:paper_lc1"),
    _job("path_star_g23", "Path-star G(2,3) (seed 000 Table 1), the reference's budget",
         "path_star", "paper", "test_em_all",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**STACKED, "model.dtype": "bfloat16", "data.degree": 2, "data.path_len": 3,
          "data.test_file": "reference", "train.num_steps": 100 * STEPS_PER_EPOCH_PS,
          "train.eval_every": 0, "train.eval_batch_size": 5000},
         paper={"ce": "s000.t1.G(2,3).CE", "e1_warmup": "s000.t1.G(2,3).E1 + warmup"},
         test_overrides=PS_TEST, dtype_why=BF16_WHY.format(task="path-star"),
         model="path_star:paper"),
    _job("path_star_g53", "Path-star G(5,3) (seed 000 Table 1), the reference's budget",
         "path_star", "paper", "test_em_all",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**STACKED, "model.dtype": "bfloat16", "data.degree": 5, "data.path_len": 3,
          "data.test_file": "reference", "train.num_steps": 100 * STEPS_PER_EPOCH_PS,
          "train.eval_every": 0, "train.eval_batch_size": 5000},
         paper={"ce": "s000.t1.G(5,3).CE", "e1_warmup": "s000.t1.G(5,3).E1 + warmup"},
         test_overrides={**PS_TEST, "data.degree": 3}, dtype_why=BF16_WHY.format(task="path-star")),
    _job("pcfg_task_c", "PCFG task C along SGD after pre-training (seed 002 Fig. 3), paper size",
         "pcfg_mlm", "paper", "test_acc_C", {"sgd": {}}, "sgd", range(1),
         {"model.dtype": "float32"}, paper={"sgd": "s002.fig3.pcfg_gain"}, kind="experiment",
         dtype_why="float32: no test at `test` size holds bf16 MLM training to float32, and "
                   "Tr(H), which this figure measures, is a second-order quantity",
         experiment="experiments/mlm_flatness/config.py:paper"),
    _job("hmm_mlm_sgd", "HMM MLM along SGD after pre-training (seed 002 Fig. 3), paper size",
         "hmm_mlm", "paper", "test_acc_10", {"sgd": {}}, "sgd", range(1),
         {"model.dtype": "float32"}, paper={"sgd": "s002.fig3.hmm_gain"}, kind="experiment",
         dtype_why="float32: no test at `test` size holds bf16 MLM training to float32, and "
                   "Tr(H), which this figure measures, is a second-order quantity",
         experiment="experiments/mlm_flatness/config.py:paper",
         experiment_overrides={"language": "hmm"}),
)
JOB_NAMES = tuple(j["name"] for j in JOBS)
STACKED_JOBS = tuple(j["name"] for j in JOBS if j["kind"] == "arms")


def job_by_name(name):
  for j in JOBS:
    if j["name"] == name:
      return j
  raise ValueError(f"unknown job {name!r}; jobs: {JOB_NAMES}")


def results_name(job, size="paper"):
  """The job's collected results file in a results folder: `<job>.json` (paper size) or
  `<job>_<size>.json`."""
  return f"{job['name']}{'' if size == 'paper' else '_' + size}.json"
