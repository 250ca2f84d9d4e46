"""What the speed page shows of the flatness bench's JSON line: per batch (the training
batch, 8x it) each estimator's time and XLA FLOPs over a gradient's, the gradient's speed,
whether a probe in a batch of 8 and a Fisher draw meet their targets, and how much slower the
8x batch's gradient was than its FLOPs say."""

BATCHES = (("x1", "the training batch"), ("x8", "the 8x batch"))


def _estimators(x, config):
  fl, by = x["flops_over_grad"], x["batched_probe_over_grad_by_probes"]
  return [
      {"name": "one Hutchinson probe (v^T H v)", "time": x["probe_over_grad"],
       "flops": fl["probe"], "target": None},
      {"name": "probe in a batch of 8", "time": by["8"], "flops": fl["probes_8"],
       "target": config.probe_target},
      {"name": "probe in a batch of 32", "time": by["32"], "flops": fl["probes_32"],
       "target": config.probe_target},
      {"name": "probe in 8, per-layer (HVP)", "time": x["per_layer_probe_over_grad"],
       "flops": fl["probes_per_layer_8"], "target": None},
      {"name": "one Fisher draw (single)", "time": x["fisher_draw_over_grad"],
       "flops": fl["fisher_draw"], "target": config.fisher_target},
      {"name": "one Fisher draw (per-example)", "time": x["fisher_draw_per_example_over_grad"],
       "flops": fl["fisher_draw_per_example"], "target": None},
  ]


def analyze(src, config):
  d = src.load(config.log)
  batches, missed = [], []
  for key, name in BATCHES:
    x = d[key]
    probe, fisher = x["batched_probe_over_grad_by_probes"]["8"], x["fisher_draw_over_grad"]
    b = {"key": key, "name": name, "contexts": x["contexts"], "grad_ms": x["grad_ms"],
         "grad_gflops": x["grad_gflop"] / x["grad_ms"] * 1e3, "estimators": _estimators(x, config),
         "probe_8": probe, "fisher": fisher, "probe_met": probe <= config.probe_target,
         "fisher_met": fisher <= config.fisher_target}
    missed += [{"target": t, "batch": name} for t, ok in (("probe", b["probe_met"]),
                                                          ("Fisher", b["fisher_met"])) if not ok]
    batches.append(b)
  x1, x8 = d["x1"], d["x8"]
  return {
      "num_params": d["num_params"], "batches": batches,
      "probe_target": config.probe_target, "fisher_target": config.fisher_target,
      "all_met": not missed, "missed": missed,
      "time_ratio": x8["grad_ms"] / x1["grad_ms"],
      "flops_ratio": x8["grad_gflop"] / x1["grad_gflop"],
      "ran_on": src.ran_on([config.log]),
  }
