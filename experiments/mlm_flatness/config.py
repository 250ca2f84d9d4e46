r"""Seed 002, Figures 1 / 3, 2 and 5: flatness (Tr(H)) and transfer (a linear probe) of MLM
models at equal pre-training loss, and the probe's sanity checks.

  python -m el_jax.experiment --config=experiments/mlm_flatness/config.py:<variant>

One variant per committed file of results/mlm_flatness/ (`RECIPES`: naming it re-runs that
file; finished training runs under `runs` are read back, probe results under `probe_cache`
too), plus `cpu` (the HMM's Figure 1 / 3 recipe, `training_hmm`), `paper` (Figure 1 / 3 on the
PCFG at the paper's size, for an accelerator; not run) and `test` (seconds, under runs/). The
figure of a recipe (`figure`):

  training    Figures 1 / 3: the `cpu` AdamW run of the language, then continued from its
              parameters with SGD (Fig. 3) or AdamW (`continue_with`, Fig. 1), each
              checkpoint measured: valid loss and gap, Tr(H) (App. B.1 and Hutchinson), the
              probe (and fine-tuning); the continuation's learning rate chosen on valid by a
              pilot. Writes <out>/training[_adamw]_<language>[_<hmm>].json.
  pretrained  the AdamW pre-training alone, each model measured at its end (does the probe
              see what pre-training learned?). Writes <out>/pretrained_<language>[_<hmm>].json.
  size        Figure 2: every size of `sizes` trained with the same recipe and measured.
  embedded    Figure 5: the same models grown into one architecture (`embed_into`, else the
              largest size) and Tr(H) measured there.

Every file holds the measured `points`, the `sanity` rows of the probe (majority class, the
block alone, Bayes, the lookup table, the words, every model's random init) and the grid's
`rows` of its runs; `analysis.py` computes every comparison the page shows from them.

Wall time (the `wall_s` of each committed file: the measurements, plus the training where a run
was not read back; on the machine its table's "Ran on" line names: AMD EPYC Zen 5 or Xeon
Cascade Lake, 2 cores): training_pcfg 46 min, training_hmm (`cpu`) 47 min (about 1.5 h with
its training), training_adamw_hmm
35 min, sanity 65 min, size_hmm 13 min, embedded_hmm 1 min, pcfg_12k 34 min, pcfg_tasks 2 min,
pcfg_bert 33 min, pcfg_bert_12k 78 min, pcfg_bert_12k_100k 18 min, pcfg_bert_48k_100k 24 min
(its 48,000-step training about 2 h per model beside it), pcfg_bert_12k_100k_sgd 28 min,
pcfg_bert_12k_100k_adamw 57 min, sharp 25 min, sharp_bilstm 20 min, sharp_bilstm_6k 2 min (the
six models' training read back: about 47 min each), sharp_bilstm_6k_sgd 96 min, sharp_init0.1
72 min, sharp_init0.1_sgd 50 min, sharp_init0.1_adamw 43 min, sharp_init0.1_sizes 34 min,
sharp_init0.1_embedded 3 min; test about a minute.

Expected (the committed files; docs/results/seed002_flatness.md): on the HMMs and the PCFG the
converged models' Tr(H) does not fall along SGD or AdamW (it rises, or is not told apart), the
probe moves by less than a point; the encoders at init 0.02 probe below their random inits,
those at init 0.1 and the 6000-step LSTMs above (6 of 6, p 0.031, the floor of 6 pairs); at
near-equal loss the larger model probes worse (Fig. 2) and is the sharper one (Fig. 5).
"""
import ml_collections

# The pre-training recipes of the sharp HMM's encoders and LSTMs (configs/hmm_mlm.py overrides).
SHARP = "train.batch_size=256,train.num_steps={steps},optim.lr=0.002,optim.warmup_steps=300"
INIT01 = "model.init_std=0.1," + SHARP.format(steps=6000)
BILSTM = "model.preset=bilstm," + SHARP
# The probe protocol of the files with sanity rows (10,000 / 2,000 / 4,000 examples, the
# learning rate and normalisation chosen on valid per model), and its 100,000-example variant.
PROBE = dict(probe_train=10000, probe_valid=2000, probe_test=4000, probe_epochs=30,
             probe_lrs="0.001,0.01", probe_normalizations="standardize,whiten")
PROBE_100K = dict(PROBE, probe_train=100000, probe_epochs=10, probe_lrs="0.001")
CACHE = dict(probe_cache="runs/probe_cache")
# Tr(H) on 5 x 100 valid sentences with 20 sampled labels each (the continuations).
FLAT = dict(flat_inputs=100, fisher_samples=20)
SIX = (0, 1, 2, 3, 4, 5)

# Each committed file's recipe: its fields that differ from the `cpu` defaults below.
RECIPES = {
    "training_pcfg": dict(figure="training", language="pcfg", seeds=(0, 1, 2), sgd_steps=4000,
                          every=2000, **FLAT, **PROBE, **CACHE),
    "training_hmm": dict(figure="training", language="hmm", seeds=(0, 1, 2), sgd_steps=12000,
                         every=6000, fine_tune_seeds=(0, 1), fine_tune_epochs=5, **FLAT, **PROBE,
                         **CACHE),
    "training_adamw_hmm": dict(figure="training", language="hmm", continue_with="adamw",
                               seeds=(0, 1, 2), sgd_steps=9000, every=4500,
                               fine_tune_seeds=(0, 1), fine_tune_epochs=5, **FLAT, **PROBE,
                               **CACHE),
    "sanity": dict(out="sanity", figure="training", language="hmm", seeds=(0, 1),
                   sgd_lrs="0.01,0.03", sgd_steps=3000, every=1500, measure_every=3000,
                   fine_tune_seeds=(0, 1), fine_tune_epochs=3, **PROBE),
    "size_hmm": dict(figure="size", language="hmm", sizes="64/1/1/256,128/2/4/512,192/3/5/768",
                     flat_inputs=50, **PROBE, **CACHE),
    "embedded_hmm": dict(figure="embedded", language="hmm", sizes="64/1/1/256,128/2/4/512",
                         flat_inputs=50, **PROBE, **CACHE),
    "pcfg_12k": dict(out="pcfg_12k", figure="pretrained", language="pcfg", seeds=(0, 1, 2),
                     pretrain="train.num_steps=12000", **PROBE, **CACHE),
    "pcfg_tasks": dict(out="pcfg_tasks", figure="pretrained", language="pcfg", seeds=(0, 1, 2),
                       tasks="A,B,C", **PROBE, **CACHE),
    "pcfg_bert": dict(out="pcfg_bert", figure="pretrained", language="pcfg", seeds=(0, 1, 2),
                      tasks="A,B,C", pretrain="data.masking=bert", **PROBE, **CACHE),
    "pcfg_bert_12k": dict(out="pcfg_bert_12k", figure="pretrained", language="pcfg",
                          seeds=(0, 1, 2), tasks="A,B,C",
                          pretrain="data.masking=bert,train.num_steps=12000",
                          runs="runs/mlm_flatness_12k", **PROBE, **CACHE),
    "pcfg_bert_12k_100k": dict(out="pcfg_bert_12k_100k", figure="pretrained", language="pcfg",
                               seeds=(0, 1, 2), tasks="A,B,C",
                               pretrain="data.masking=bert,train.num_steps=12000",
                               runs="runs/mlm_flatness_12k", **PROBE_100K, **CACHE),
    "pcfg_bert_48k_100k": dict(out="pcfg_bert_48k_100k", figure="pretrained", language="pcfg",
                               seeds=(0, 1, 2), tasks="A,B,C",
                               pretrain="data.masking=bert,train.num_steps=48000",
                               runs="runs/mlm_flatness_48k", **PROBE_100K, **CACHE),
    "pcfg_bert_12k_100k_sgd": dict(out="pcfg_bert_12k_100k_sgd", figure="training",
                                   language="pcfg", tasks="A", seeds=(0, 1, 2),
                                   pretrain="data.masking=bert,train.num_steps=12000",
                                   sgd_lrs="0.01,0.03,0.1", pilot_steps=200, sgd_steps=2000,
                                   every=2000, runs="runs/mlm_flatness_12k", **FLAT,
                                   **PROBE_100K, **CACHE),
    "pcfg_bert_12k_100k_adamw": dict(out="pcfg_bert_12k_100k_adamw", figure="training",
                                     language="pcfg", tasks="A", continue_with="adamw",
                                     seeds=(0, 1, 2),
                                     pretrain="data.masking=bert,train.num_steps=12000",
                                     pilot_steps=150, sgd_steps=2000, every=2000,
                                     runs="runs/mlm_flatness_12k", **FLAT, **PROBE_100K, **CACHE),
    "sharp": dict(out="sharp", figure="pretrained", language="hmm", hmm="sharp", seeds=(0, 1),
                  pretrain=SHARP.format(steps=3000), **PROBE),
    "sharp_bilstm": dict(out="sharp_bilstm", figure="pretrained", language="hmm", hmm="sharp",
                         seeds=(0, 1, 2), pretrain=BILSTM.format(steps=3000), **PROBE),
    "sharp_bilstm_6k": dict(out="sharp_bilstm_6k", figure="pretrained", language="hmm",
                            hmm="sharp", seeds=SIX, pretrain=BILSTM.format(steps=6000),
                            runs="runs/mlm_flatness_6k", **PROBE, **CACHE),
    "sharp_bilstm_6k_sgd": dict(out="sharp_bilstm_6k_sgd", figure="training", language="hmm",
                                hmm="sharp", seeds=(0, 1, 2), pretrain_seeds=SIX,
                                pretrain=BILSTM.format(steps=6000), sgd_lrs="0.1,0.3,1",
                                pilot_steps=150, sgd_steps=2000, every=1000,
                                runs="runs/mlm_flatness_6k", **FLAT, **PROBE, **CACHE),
    "sharp_init0.1": dict(out="sharp_init0.1", figure="pretrained", language="hmm", hmm="sharp",
                          seeds=SIX, pretrain=INIT01, **PROBE, **CACHE),
    "sharp_init0.1_sgd": dict(out="sharp_init0.1_sgd", figure="training", language="hmm",
                              hmm="sharp", tasks="10,6", seeds=SIX, pretrain_seeds=SIX,
                              pretrain=INIT01, sgd_lrs="0.1,0.3,1", pilot_steps=150,
                              sgd_steps=2000, every=2000, **FLAT, **PROBE, **CACHE),
    "sharp_init0.1_adamw": dict(out="sharp_init0.1_adamw", figure="training", language="hmm",
                                hmm="sharp", tasks="10,6", continue_with="adamw", seeds=SIX,
                                pretrain_seeds=SIX, pretrain=INIT01, pilot_steps=150,
                                sgd_steps=2000, every=2000, **FLAT, **PROBE, **CACHE),
    "sharp_init0.1_sizes": dict(out="sharp_init0.1_sizes", figure="size", language="hmm",
                                hmm="sharp", tasks="10,6", seeds=SIX, pretrain=INIT01,
                                sizes="64/1/1/256,128/2/4/512@1000,128/2/4/512", **FLAT,
                                **PROBE, **CACHE),
    "sharp_init0.1_embedded": dict(out="sharp_init0.1_sizes", figure="embedded", language="hmm",
                                   hmm="sharp", tasks="10,6", seeds=SIX, pretrain=INIT01,
                                   sizes="64/1/1/256,128/2/4/512@1000", **FLAT, **PROBE,
                                   **CACHE),
}
TEST = dict(figure="training", language="pcfg", size="test", tasks="A", sgd_lrs="0.03,0.1",
            pilot_steps=2, pilot_tol=10.0, sgd_warmup=1, sgd_steps=4, every=4, flat_inputs=8,
            flat_reps=2, fisher_samples=4, hutchinson_probes=2, chunk=4, probe_train=64,
            probe_valid=32, probe_test=32, probe_epochs=3, fine_tune_seeds=(0, 1),
            fine_tune_epochs=1, results_dir="runs/mlm_flatness_test",
            runs="runs/mlm_flatness_test/runs")
PAPER = dict(figure="training", language="pcfg", size="paper", out="paper",
             runs="runs/mlm_flatness_paper")
VARIANTS = ("test", "cpu", "paper", *RECIPES)


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/mlm_flatness"  # analysis.json; every recipe's file below it
  c.out = ""  # the recipe's folder under results_dir ("" = results_dir itself)
  c.runs = "runs/mlm_flatness"  # training workdirs, one per run label (finished ones reused)
  c.figure = "training"  # training (Figs. 1 / 3) | pretrained | size (Fig. 2) | embedded (Fig. 5)
  c.language = "pcfg"  # pcfg | hmm: configs/<language>_mlm.py
  c.size = "cpu"  # the variant of configs/<language>_mlm.py: cpu | paper | test
  c.seeds = (0,)  # pre-training model seeds (>= 2: comparisons over the models)
  c.tasks = ""  # downstream probe tasks, comma-separated ("" = C for the PCFG, 10 for the HMM)
  c.hmm = "uniform"  # the HMM: uniform (the default draw) | contextual | sharp (mlm_measure.HMMS)
  # Figures 1 / 3: the continuation after the AdamW pre-training, and its pilot.
  c.continue_with = "sgd"  # sgd (Fig. 3) | adamw (Fig. 1)
  c.sgd_lrs = ""  # the pilot's candidate rates ("" = 0.01,0.03,0.1,0.3 for SGD, 1e-4..1e-3 AdamW)
  c.pilot_steps = 400  # steps of each pilot run (chosen: the largest rate within pilot_tol)
  c.pilot_tol = 0.01  # the valid loss may rise at most this much in the pilot (nats)
  c.sgd_warmup = 100  # warmup steps of the continuation
  c.sgd_steps = 6000  # steps of the continuation
  c.every = 1500  # continuation steps between checkpoints
  c.measure_every = 0  # measure the checkpoints at multiples of this (0 = every checkpoint)
  c.pretrain = ""  # overrides of the AdamW pre-training, "key=value,..." (train.*, optim.*,
  #                  model.*, data.masking); its runs are named apart (mlm_measure.pretrain_suffix)
  c.pretrain_seeds = ()  # training figure: the pre-training run's seeds, if more than `seeds`
  # Figures 2 / 5.
  c.sizes = "64/1/1/256,128/2/4/512,192/3/5/768,256/4/6/1024"  # d/heads/layers/MLP[@steps]
  c.size_steps = 0  # training steps of every size (0 = the variant's train.num_steps)
  c.embed_into = ""  # Fig. 5: the architecture every size is grown into ("" = the largest)
  # Tr(H): App. B.1 on flat_reps x flat_inputs valid sentences, and Hutchinson probes.
  c.flat_inputs = 200  # valid sentences per repetition (their fixed masks)
  c.flat_reps = 5  # repetitions, each on its own sentences
  c.fisher_samples = 50  # labels sampled from the model per sentence (B.1)
  c.hutchinson_probes = 10  # Rademacher probes per batch
  c.chunk = 4  # examples vmapped at once (memory)
  # The linear probe (el_jax.core.probe: 5 probe seeds, the epoch chosen on valid).
  c.probe_train = 4000  # training examples per task
  c.probe_valid = 1000  # validation examples (the epoch and settings chosen on them)
  c.probe_test = 2000  # test examples
  c.probe_epochs = 100  # epochs
  c.probe_data_seed = 0  # seed of the probe's data sets
  c.probe_lrs = "0.001"  # learning rates, comma-separated (chosen on valid per model)
  c.probe_weight_decays = "0"  # AdamW weight decays, comma-separated (chosen on valid)
  c.probe_normalizations = "standardize"  # standardize and / or whiten (chosen on valid)
  c.probe_cache = ""  # folder of probe results by their inputs' content ("" = none)
  # Fine-tuning (the paper's protocol) at the first and last checkpoint (training figure).
  c.fine_tune_seeds = ()  # fine-tuning seeds (() = none)
  c.fine_tune_epochs = 10  # epochs (the epoch chosen on valid)
  if variant == "test":
    c.update(TEST)
  elif variant == "paper":
    c.update(PAPER)
  else:
    c.update(RECIPES["training_hmm" if variant == "cpu" else variant])
  return c
