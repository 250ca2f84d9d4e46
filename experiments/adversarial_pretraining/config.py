r"""Seed 002, Tables 1 and 2: normal vs adversarial pre-training vs the lookup table.

  python -m el_jax.experiment --config=experiments/adversarial_pretraining/config.py:cpu
  python -m el_jax.experiment --config=experiments/adversarial_pretraining/config.py:hmm_sharp

Pre-trains the MLM of configs/<language>_mlm.py twice per model seed (the normal AdamW run and
the same recipe plus the adversary's meta-learning term, `el_jax.core.adversarial`; the
adversary's weight chosen on valid by a pilot), then measures every model (probes on the
downstream tasks, Tr(H), the adversary's own objective; each seed's AdamW checkpoint at the
adversarial model's valid loss; the lookup table; majority / Bayes / random-init sanity rows):
`run.py`. The comparisons (paired by model seed) are in `analysis.py`; the section is on
docs/results/seed002_flatness.md#tables-1-2-adversarial-pretraining-pcfg.

Variants:
  cpu              the committed PCFG table (results/adversarial_pretraining/table.json): the
                   `cpu` encoder, model seeds 0-2, the probe's learning rate and normalisation
                   chosen on valid per model. About 50 min with the trainings on a 2-core AMD
                   EPYC (Zen 5) beside another job; the committed measurements, the trainings
                   reused, 18 min there. Expected: no weight keeps the pilot's tolerance, so
                   0.1 (the smallest) is trained; at equal loss task A -5.4 and task B -1.9
                   points, lower in 3 of 3 pairs (p 0.25, the floor of 3 pairs); Tr(H) B.1 286
                   vs 195; every trained model probes below its own random init.
  cpu_fixed_probe  the same models probed as the paper does (lr 1e-3, standardised features),
                   written to results/adversarial_pretraining/fixed_probe/ (not on the page).
  hmm_sharp        the protocol on the sharp HMM's init-0.1 encoders of experiments/mlm_flatness
                   (their finished normal run in runs/mlm_flatness is reused), written to
                   results/adversarial_pretraining/hmm_sharp_init0.1/. 82 min on the Zen 5, the
                   normal arm reused. Expected: weight 0.3, Tr(H) B.1 168 vs 131 (3 of 3
                   higher), probes +0.58 / +0.68 points, every model above its random init.
  paper            configs/pcfg_mlm.py:paper (the 235M BERT) and the paper's probe sizes, for
                   an accelerator (not run here), written to results/adversarial_pretraining/paper/.
  test             seconds; runs/adversarial_pretraining_test.
"""
import ml_collections

VARIANTS = ("cpu", "cpu_fixed_probe", "hmm_sharp", "paper", "test")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/adversarial_pretraining"  # every variant's table.json, analysis.json
  c.table = "table.json"  # this variant's measurements under results_dir (table.png beside it)
  c.runs_dir = "runs/adversarial"  # training workdirs (finished runs are reused)
  c.size = "cpu"  # the variant of configs/<language>_mlm.py both arms train
  c.language = "pcfg"  # configs/<language>_mlm.py: pcfg (the paper's Table 1) or hmm
  c.hmm = "uniform"  # the HMM (el_jax.run.mlm_measure.HMMS), named as experiments/mlm_flatness does
  c.pretrain = ""  # both arms' overrides, "key=value,..." (train.*, optim.*, model.*, data.masking)
  c.seeds = (0, 1, 2)  # model seeds: each is pre-trained normally and adversarially (a pair)
  c.normal_seeds = ()  # the normal run's model seeds (empty: `seeds`; a superset reuses a run)
  c.weights = (0.1, 0.3, 1.0)  # the pilot's adversarial weights, tried from the largest down
  c.pilot_steps = 0  # pilot length, a multiple of train.eval_every (0: first eval >= num_steps/6)
  c.pilot_tol = 0.02  # nats the pilot's valid loss may lie above the normal run's at that step
  c.d2_draws = 20  # (D1, D2) draws of the adversary's objective measured on the final models
  c.chunk = 4  # examples vmapped at once in Tr(H)
  c.tasks = ""  # probe tasks, comma-separated ("": A,B on the PCFG, 10,6 on the HMM)
  c.adv_task = ""  # the adversary's task ("": the language config's, A on the PCFG, 10 on the HMM)
  c.probe_train = 0  # probe training examples, also the adversary's set (0: adversarial.num_train)
  c.probe_valid = 1000  # probe validation examples (the epoch and settings are chosen on them)
  c.probe_test = 2000  # probe test examples
  c.probe_epochs = 100  # probe training epochs
  c.probe_lrs = "0.001,0.01"  # probe learning rates, chosen on valid per model and task
  c.probe_normalizations = "standardize,whiten"  # probe feature normalisations, chosen likewise
  c.flat_inputs = 200  # valid sentences per Tr(H) repetition
  c.flat_reps = 5  # Tr(H) repetitions (B.1: mean and std over them)
  c.fisher_samples = 50  # labels sampled from the model per input (B.1)
  c.hutchinson_probes = 10  # Hutchinson probes of the exact Hessian
  c.probe_cache = ""  # folder of probe results by their inputs' content ("": none)
  if variant == "cpu_fixed_probe":
    c.table = "fixed_probe/table.json"
    c.probe_lrs, c.probe_normalizations = "0.001", "standardize"
  elif variant == "hmm_sharp":
    c.table = "hmm_sharp_init0.1/table.json"
    c.runs_dir = "runs/mlm_flatness"
    c.language, c.hmm = "hmm", "sharp"
    c.pretrain = ("model.init_std=0.1,train.batch_size=256,train.num_steps=6000,optim.lr=0.002,"
                  "optim.warmup_steps=300")
    c.normal_seeds = (0, 1, 2, 3, 4, 5)
    c.weights = (0.03, 0.1, 0.3, 1.0)
    c.probe_train, c.probe_valid, c.probe_test, c.probe_epochs = 10_000, 2000, 4000, 30
    c.flat_inputs, c.fisher_samples = 100, 20
    c.probe_cache = "runs/probe_cache"
  elif variant == "paper":
    c.table = "paper/table.json"
    c.runs_dir = "runs/adversarial_paper"
    c.size = "paper"
    c.probe_valid, c.probe_test = 10_000, 10_000
    c.probe_lrs, c.probe_normalizations = "0.001", "standardize"
  elif variant == "test":
    c.results_dir = "runs/adversarial_pretraining_test"
    c.runs_dir = "runs/adversarial_pretraining_test/runs"
    c.size = "test"
    c.seeds = (0, 1)
    c.weights = (0.3,)
    c.d2_draws = 2
    c.probe_valid, c.probe_test, c.probe_epochs = 32, 32, 3
    c.flat_inputs, c.flat_reps, c.fisher_samples, c.hutchinson_probes = 8, 2, 4, 2
    c.probe_lrs, c.probe_normalizations = "0.001", "standardize"
  return c
