"""What the seed-003 page shows of Figure 1 and the appendix instance: each instance's
geometry, each optimizer's final numbers and the regularisation path (one run per instance:
nothing to aggregate or test)."""


def analyze(src, config):
  rows = {r["label"]: r for r in src.load("convergence.json")["rows"]}
  return {
      "instances": {name: r["instance"] for name, r in rows.items()},
      "runs": {name: r["runs"] for name, r in rows.items()},
      "reg_path": {name: r["reg_path"] for name, r in rows.items()},
      "ran_on": src.ran_on(["convergence.json"]),
  }
