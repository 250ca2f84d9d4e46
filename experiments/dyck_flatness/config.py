r"""Seed 002, Sec. 6 / Theorem 6.1: flatness picks the transferable solution on a Dyck language.

  OPENBLAS_NUM_THREADS=1 python -m el_jax.experiment --config=experiments/dyck_flatness/config.py:cpu

The setting (`el_jax.core.data.dyck`, `el_jax.core.models.dyck_net`; assumptions in their
docstrings): sentences uniform over the strings of length T with as many ( as ), one uniformly
masked token; the one-attention-layer + ReLU-MLP model on the +-position encoding; loss
1/2 E (f - y)^2 with y = p(() - p()) = +-1 (the exact conditional is one-hot). Every
pre-training quantity is an exact expectation over the C(T, T/2) * T equally likely
(sentence, mask) inputs; downstream errors are exact over all 2^T downstream strings.

Part 1, the two constructions of the seed's Sec. 6: the 2-neuron count solution at the
trace-minimising scale (exact Tr(H) against the seed's lower bound 2 / sqrt(T)), and
random-feature solutions of m = factor * N neurons (N pre-training inputs), `rf_seeds` draws
each, at their flattest rescaling; for each, the downstream error of the minimum-norm linear
head against the number of downstream examples. Part 2, training from random initialisation:
`width` neurons, SGD, for `steps` (long after the loss converges), arm `sgd` and arm
`sgd_label_noise` (targets y +- `label_noise`), one `el_jax.run.grid.Grid` of configs/dyck.py
runs in `<runs_dir>/<arm>` (resumable), measured at each step of `measure` from its checkpoint:
exact loss and Tr(H), the top Hessian eigenvalue, the cancellation ratio and the downstream
error at `track_sizes` examples. Writes results/dyck_flatness/ (dyck_flatness.json,
dyck_flatness.png, analysis.json).

Wall time: 4 min (242 s) on a 2-core CPU (AMD EPYC) at load average ~4, 8 min (492 s) for the
committed run on a busier one (its file does not record which). One BLAS thread
(OPENBLAS_NUM_THREADS=1, set before NumPy loads): threads fighting other jobs made one
random-feature fit ~20x slower. Expected: the count solution's Tr(H) equals the bound (0.7071
at T = 8) and is the flattest zero-loss solution; plain SGD converges and stays at Tr(H) ~9;
SGD with label noise drifts down to ~3.5.

Variants: `cpu` and `paper` (T = 8; the paper gives no numbers and every quantity is exact at
any T: set `length`), `smoke` (2,000 steps, seed 0, one random-feature width: a quick check, under
runs/), `test` (T = 4, 4 neurons, 20 steps, one draw of everything: seconds, under runs/).
"""
import ml_collections

VARIANTS = ("cpu", "paper", "test", "smoke")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/dyck_flatness"  # dyck_flatness.json and .png, analysis.json
  c.runs_dir = "runs/dyck_flatness"  # the training runs, one folder per arm (reused when done)
  c.length = 8  # sentence length T (even)
  c.nested = False  # Dyck-1 (prefix condition) instead of the paper's balanced variant
  c.rf_width_factors = (1, 2, 4)  # random-feature widths, as multiples of the N inputs
  c.rf_seeds = 3  # random-feature draws per width
  c.rf_std = 1.0  # std of the random W_V entries
  c.hutchinson_probes = 40  # Hutchinson check of the first random-feature draw (0: skip)
  c.ds_sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # downstream training-set sizes
  c.ds_draws = 40  # downstream training sets per size
  c.ridge = 0.0  # ridge of the head on the constructions (0: minimum norm, the theorem)
  c.ridge_train = 1e-3  # relative ridge of the head on trained features
  c.track_sizes = (8, 32)  # downstream sizes measured along training
  c.width = 32  # neurons of the trained model
  c.value_std = 0.1  # init std of W_V
  c.lr = 0.1  # SGD learning rate
  c.batch_size = 32  # SGD minibatch
  c.steps = 40_000  # SGD steps
  c.measure = (0, 1000, 2000, 5000, 10_000, 20_000, 30_000, 40_000)  # steps measured
  c.label_noise = 0.5  # amplitude of the label-noise arm (0: plain SGD only)
  c.lanczos_steps = 20  # Lanczos steps for the top Hessian eigenvalue
  c.seeds = (0, 1, 2)  # model seeds of the training runs
  c.x64 = True  # float64 (JAX's 64-bit mode) instead of float32
  c.skip_training = False  # part 1 only
  if variant == "smoke":
    c.results_dir = "runs/dyck_smoke"
    c.runs_dir = "runs/dyck_smoke/runs"
    c.rf_width_factors = (2,)
    c.steps = 2000
    c.seeds = (0,)
  elif variant == "test":
    c.results_dir = "runs/dyck_flatness_test"
    c.runs_dir = "runs/dyck_flatness_test/runs"
    c.length = 4
    c.rf_width_factors = (1,)
    c.rf_seeds = 1
    c.hutchinson_probes = 0
    c.ds_sizes = (2, 4)
    c.ds_draws = 2
    c.track_sizes = (4,)
    c.width = 4
    c.steps = 20
    c.measure = (0, 10)
    c.seeds = (0,)
    c.lanczos_steps = 3
  return c
