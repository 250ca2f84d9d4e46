r"""Seed 000, Table 1: CE against E1 + warmup on path-star graphs G(2,3) and G(5,3).

  python -m el_jax.experiment --config=experiments/path_star_table1/config.py:cpu

Trains `configs/path_star.py:<size>` with CE (the reference's 100 warmup steps), CE + 1000
warmup steps (the warmup-only control at E1's budget) and E1 (lam 1) + 1000 warmup steps on
each graph, model seeds 0-4, on one fixed generated training set, and evaluates greedy exact
match of the whole path on the reference implementation's own test sets (20,000 graphs each,
shipped with el_jax) and on a generated validation split. Writes results/path_star_table1/
(table1.json, analysis.json, the figures); each run trains in runs/path_star_table1/<size>/.
Wall time of the 30 runs of `cpu`: 92 min on the 2-core development machine (the committed
rows predate el_jax's record of the CPU). Expected: every run at the Clever-Hans level 1/d
(G(2,3) test EM 0.498 for all three, G(5,3) 0.198 / 0.198 / 0.202), no comparison
significant; the paper's E1 + warmup 0.655 on G(2,3) does not come out at this size.

Variants:
  cpu       the Table 1 runs above (`part` main), seeds 0-4.
  controls  Bachmann & Nagarajan's reverse-target and teacherless variants under CE (not in
            the seed paper's table), seeds 0-2, same model and budget: controls.json.
  long      G(2,3), seeds 0, 1, 10,000 steps (4 times `cpu`'s), evaluated every 2500:
            results/path_star_table1/long/table1.json (runs/path_star_table1_long/).
  paper     the paper's size (accelerator): GPT-Mini with the reference repository's 6 x 384,
            batch 256, lr 1e-4 and 100k steps of its README command (the seed paper gives none
            of these), 200k training graphs, seeds 0-4, into results/path_star_table1_paper/
            (apart from the committed CPU rows). Not run.
  test      `configs/path_star.py:test` on G(2,3), seeds 0, 1, generated test graphs (its 12
            nodes have no reference file): seconds, under runs/.
"""
import ml_collections

VARIANTS = ("cpu", "controls", "long", "paper", "test")
GRAPHS = ("G(2,3)", "G(5,3)")


def get_config(variant="cpu"):
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
  c = ml_collections.ConfigDict()
  c.results_dir = "results/path_star_table1"  # the grid's JSON, analysis.json and the figures
  c.runs_dir = "runs/path_star_table1"  # run folders: <runs_dir>/<size>/<run label>
  c.size = "cpu"  # variant of configs/path_star.py every run trains
  c.part = "main"  # "main": CE, CE + warmup, E1 + warmup (Table 1); "controls": CE reverse / teacherless
  c.file = "table1.json"  # the grid's JSON, under results_dir
  c.graphs = GRAPHS  # graphs trained (the JSON keeps the stored rows of the others)
  c.seeds = (0, 1, 2, 3, 4)  # model seeds of every run (the paper's 5)
  c.test_dir = ""  # folder of the reference test files ("" = those shipped with el_jax)
  c.overrides = ()  # extra "key=value" overrides of configs/path_star.py, e.g. "train.num_steps=10000"
  if variant == "controls":
    c.part = "controls"
    c.file = "controls.json"
    c.seeds = (0, 1, 2)
  elif variant == "long":
    c.file = "long/table1.json"
    c.runs_dir = "runs/path_star_table1_long"
    c.graphs = ("G(2,3)",)
    c.seeds = (0, 1)
    c.overrides = ("train.num_steps=10000", "train.eval_every=2500")
  elif variant == "paper":
    c.results_dir = "results/path_star_table1_paper"
    c.size = "paper"
  elif variant == "test":
    c.results_dir = "runs/path_star_table1_test"
    c.runs_dir = "runs/path_star_table1_test/runs"
    c.size = "test"
    c.graphs = ("G(2,3)",)
    c.seeds = (0, 1)
  return c
