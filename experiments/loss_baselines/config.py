r"""Seed 001's loss designs as baselines for the E-losses of seed 000: does any loss design
already in use fix the copy task's hard strings the way E1 / E2 / E3 + warmup do?

  python -m el_jax.experiment --config=experiments/loss_baselines/config.py:cpu

Every loss of `GRID` runs on the copy-task demo setting (`configs/copy_task.py:cpu`: L_c = 1,
L_p = 50, 2 x 128 GPT-NeoX, 1500 steps) with the demo's warmup (750 steps, chosen there on
validation for E1), its hyperparameter chosen from a small grid (3 values each, then one more
beyond each end the 3-value grid chose; both ends for GCE's tie) by mean exact match on the
hard strings of the **validation** split over model seeds 0 and 1 (stage `select`;
`el_jax.report.stats.select`: the highest mean, the first grid point on a tie). Stage `test`
trains each chosen setting on model seeds 2-11 (the demo's seeds) beside CE without warmup,
stage `label_copy` on `configs/label_copy.py:cpu` (KJV, fine-tuned from the label_copy
experiment's small GPT-2, 400 steps, warmup 200; model seeds 0-4); the analysis compares
hard-test EM with CE without warmup (family `vs_ce`) and, for the losses with warmup, with
CE + warmup (family `vs_ce_warmup`), each family Holm-adjusted (`el_jax.report.stats.family`).
Stage `table` writes table.json (the choices, the grid, the small GPT-2's pretraining);
`label_copy_grid` is a diagnostic (the grid of `losses` on label copy's validation split).
"reweight" is CE with seed 001's loss-based token reweighting (`loss.reduction="reweight"`);
its grid is the weighting shape.

Writes results/loss_baselines/ (select.json, test.json, label_copy.json, label_copy_grid.json,
table.json, table.png, analysis.json); the runs train under runs/loss_baselines/ (resumable;
a row whose config is unchanged is reused from its results file). Wall time at cpu size on
the 2-core development machine (AMD EPYC; the committed rows record no machine): about 4 h
for the stages of `cpu` (162 min validation grid, 41 min copy task, 41 min label copy; the
compute table of the page sums the rows' seconds). Expected: spherical Z-loss + warmup and
spectral decoupling reach the hard strings as E1 + warmup and E3 + warmup do (hard-test EM
0.77 / 0.66 / 0.69 / 0.65 against CE + warmup's 0.42); on label copy CE already copies the label
(0.99) and spherical Z, E3, spectral decoupling and Dice break.

Variants: `cpu` (the stages select, test, label_copy and table), one recipe per stage
(`select`, `copy_test`, `label_copy`, `table`, and `label_copy_grid`: the diagnostic of the
page, spherical Z, E3, Dice and spectral decoupling), `paper` (configs/copy_task.py:paper with
the seed-000 paper's 1000 warmup steps, configs/label_copy.py:paper from a pretrained GPT-2 at
`lc_pretrained`: our choices, for an accelerator, not run), `test` (the `test` variants, 8
steps, CE with and without warmup only: seconds a run, under runs/). `--config.losses=focal,e1`
runs only those losses (GRID keys, or ce_no_warmup; the other rows of a file are kept).
"""
import ml_collections

# {loss: [overrides of each grid point]}; every point also gets the warmup.
GRID = {
    "ce": [{"loss.name": "ce"}],
    "label_smoothing": [{"loss.name": "label_smoothing", "loss.label_smoothing.eps": e}
                        for e in (0.05, 0.1, 0.2, 0.3)],
    "z_loss": [{"loss.name": "z_loss", "loss.z_loss.coef": c} for c in (1e-4, 1e-3, 1e-2, 1e-1)],
    "spherical_z": [{"loss.name": "spherical_z", "loss.spherical_z.a": 1.0,
                     "loss.spherical_z.b": b} for b in (0.3, 1.0, 3.0, 5.0)],
    "focal": [{"loss.name": "focal", "loss.focal.gamma": g} for g in (0.5, 1.0, 2.0)],
    "dice": [{"loss.name": "dice", "loss.dice.alpha": a, "loss.dice.gamma": 1.0}
             for a in (0.0, 1.0, 2.0, 4.0)],
    "gce": [{"loss.name": "gce", "loss.gce.q": q} for q in (0.1, 0.3, 0.5, 0.7, 0.9)],
    "spectral_decoupling": [{"loss.name": "spectral_decoupling",
                             "loss.spectral_decoupling.lam": l} for l in (1e-3, 1e-2, 1e-1, 1.0)],
    "reweight": [{"loss.name": "ce", "loss.reduction": "reweight", "loss.reweight.strategy": s}
                 for s in ("linupper", "quadratic", "extremes")],
    "e1": [{"loss.name": "e1", "loss.e1.lam": l} for l in (0.5, 1.0, 2.0)],
    "e2": [{"loss.name": "e2", "loss.e2.lam": l} for l in (0.5, 1.0, 2.0, 4.0)],
    "e3": [{"loss.name": "e3", "loss.e3.b": b} for b in (0.3, 1.0, 3.0, 10.0)],
}
REFERENCE = {"loss.name": "ce"}  # CE without warmup: the demo's baseline row, "ce_no_warmup"
E_LOSSES = ("e1", "e2", "e3")
SELECT_METRIC = "valid_em_hard"  # the validation selection's metric
TEST_METRIC = "test_em_hard"  # the comparisons' metric
STAGES = ("select", "test", "label_copy", "label_copy_grid", "table")


def point_name(over):
  """"focal_gamma=1.0": a grid point's label (its loss name and hyperparameters; the
  reweighting fields as `reweight_strategy`, their names before the loss blocks)."""
  keep = {k.split(".")[-1] if not k.startswith("loss.reweight.") else
          "reweight_" + k.split(".")[-1]: v for k, v in over.items() if k != "loss.name"}
  return over.get("loss.name", "ce") + "".join(f"_{k}={v}" for k, v in keep.items())


VARIANTS = ("cpu", "paper", "test", "select", "copy_test", "label_copy", "table",
            "label_copy_grid")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/loss_baselines"  # the stages' files, table.png, analysis.json
  c.runs_dir = "runs/loss_baselines"  # where the runs train (a folder per stage and run)
  c.stages = ("select", "test", "label_copy", "table")  # run in this order (of STAGES)
  c.losses = ()  # only these losses (GRID keys; () = all); the file keeps the others' rows
  c.variant = "cpu"  # of configs/copy_task.py
  c.warmup = 750  # copy-task warmup steps of every loss but CE without warmup
  c.select_seeds = (0, 1)  # model seeds of the validation grid
  c.test_seeds = tuple(range(2, 12))  # model seeds of the chosen settings on the copy task
  c.lc_variant = "cpu"  # of configs/label_copy.py
  c.lc_steps = 400  # label-copy fine-tuning steps (warmup: half)
  c.lc_seeds = tuple(range(5))  # model seeds of label copy
  c.lc_pretrained = "runs/label_copy/small_gpt2"  # the model label copy starts from ("": random)
  c.pretrain_dir = "runs/label_copy/text_lm"  # its pretraining run (table.json's record)
  if variant in ("select", "copy_test", "label_copy", "table"):
    c.stages = ({"copy_test": "test"}.get(variant, variant),)
  elif variant == "label_copy_grid":
    c.stages = ("label_copy_grid",)
    c.losses = ("spherical_z", "e3", "dice", "spectral_decoupling")
  elif variant == "paper":
    c.runs_dir = "runs/loss_baselines_paper"
    c.variant = "paper"
    c.warmup = 1000
    c.lc_variant = "paper"
    c.lc_steps = 5000
    c.lc_pretrained = "/path/to/gpt2"
    c.pretrain_dir = ""
  elif variant == "test":
    c.results_dir = "runs/loss_baselines_test/results"
    c.runs_dir = "runs/loss_baselines_test"
    c.losses = ("ce_no_warmup", "ce")
    c.variant = "test"
    c.warmup = 4
    c.select_seeds = (0,)
    c.test_seeds = (0, 1)
    c.lc_variant = "test"
    c.lc_steps = 8
    c.lc_seeds = (0, 1)
    c.lc_pretrained = ""
    c.pretrain_dir = ""
  return c
