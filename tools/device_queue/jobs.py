"""The device queue's jobs, in priority order (`JOBS`): a job is a config, its arms (a loss
setting each), the model seeds every arm wants, the metric it is judged on and the baseline
arm; `paper` names each arm's number in `el_jax.report.papers` (none where the paper has
none). Plain data: the analysis imports it without JAX.

  copy_lc1        seed 000 Fig. 1 at one string per context: configs/copy_task.py:paper_lc1
                  (GPT-NeoX 4 x 1024, L_c = 1, L_p = 50, 8 strings per step, 20k steps), CE
                  against E1 (lam 1: the CPU-size validation sweep's choice) + 1000 warmup
                  steps (the paper's E1 copy-task run), 5 seeds per arm; hard-test EM
  path_star_g23   seed 000 Table 1, G(2,3) at the reference's budget: configs/path_star.py:paper
                  (GPT-mini 6 x 384, batch 256, lr 1e-4), 100 epochs of the 200k graphs (78,100
                  steps), the reference's test set; CE (100 warmup steps) against E1 (lam 1) +
                  1000 warmup steps; 5 seeds per arm; test exact match of the whole path
  path_star_g53   the same on G(5,3)

(The HMM MLM at paper size, 30k steps of a 4096-sentence batch, needs about half an hour on
one GPU: more than one call, and its checkpoint cannot come back, so it is not queued.)
"""

STEPS_PER_EPOCH_PS = 200_000 // 256  # path-star paper: 781 steps per epoch of 200k graphs
MIN_MODELS = 3  # an arm is tested against the baseline once both have this many seeds


def _job(name, title, config, variant, metric, arms, baseline, seeds, overrides, paper=None,
         test_overrides=None):
  return {"name": name, "title": title, "config": config, "variant": variant, "metric": metric,
          "arms": arms, "baseline": baseline, "seeds": list(seeds), "overrides": overrides,
          "paper": paper or {}, "test_overrides": test_overrides or {}}


E1_WARMUP = {"loss.name": "e1", "loss.e1.lam": 1.0, "optim.warmup_steps": 1000}
# Device run settings every job shares: the seeds of an arm as one program, one checkpoint at
# the end (a 4 x 1024 model's is 0.6 GB per seed; nothing of it comes back anyway), no progress
# bar in a log that is read afterwards.
COMMON = {"train.vmap_seeds": True, "progress": False}
JOBS = (
    _job("copy_lc1", "Copy task, one string per context (seed 000 Fig. 1, k = 1), paper size",
         "copy_task", "paper_lc1", "test_em_hard",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**COMMON, "train.eval_every": 5000, "train.checkpoint_every": 20_000,
          "train.eval_batch_contexts": 1000},
         paper={"ce": "s000.fig1a.ce_k1"},
         test_overrides={"train.eval_every": 4, "train.checkpoint_every": 8}),
    _job("path_star_g23", "Path-star G(2,3) (seed 000 Table 1), the reference's budget",
         "path_star", "paper", "test_em_all",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**COMMON, "data.degree": 2, "data.path_len": 3, "data.test_file": "reference",
          "train.num_steps": 100 * STEPS_PER_EPOCH_PS, "train.eval_every": 0,
          "train.checkpoint_every": 100 * STEPS_PER_EPOCH_PS, "train.eval_batch_size": 5000},
         paper={"ce": "s000.t1.G(2,3).CE", "e1_warmup": "s000.t1.G(2,3).E1 + warmup"},
         test_overrides={"data.test_file": "", "train.num_steps": 8,
                         "train.checkpoint_every": 8, "train.eval_batch_size": 16}),
    _job("path_star_g53", "Path-star G(5,3) (seed 000 Table 1), the reference's budget",
         "path_star", "paper", "test_em_all",
         {"ce": {"loss.name": "ce"}, "e1_warmup": dict(E1_WARMUP)}, "ce", range(5),
         {**COMMON, "data.degree": 5, "data.path_len": 3, "data.test_file": "reference",
          "train.num_steps": 100 * STEPS_PER_EPOCH_PS, "train.eval_every": 0,
          "train.checkpoint_every": 100 * STEPS_PER_EPOCH_PS, "train.eval_batch_size": 5000},
         paper={"ce": "s000.t1.G(5,3).CE", "e1_warmup": "s000.t1.G(5,3).E1 + warmup"},
         test_overrides={"data.degree": 3, "data.test_file": "", "train.num_steps": 8,
                         "train.checkpoint_every": 8, "train.eval_batch_size": 16}),
)
JOB_NAMES = tuple(j["name"] for j in JOBS)


def job_by_name(name):
  for j in JOBS:
    if j["name"] == name:
      return j
  raise ValueError(f"unknown job {name!r}; jobs: {JOB_NAMES}")


def results_name(job, size="paper"):
  """The job's collected results file in a results folder: `<job>.json` (paper size) or
  `<job>_<size>.json`."""
  return f"{job['name']}{'' if size == 'paper' else '_' + size}.json"
