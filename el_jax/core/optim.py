"""Optimizers and learning-rate schedules from a config, built from optax parts."""
import optax

OPTIMIZERS = ("adamw", "adam", "sgd")
DECAYS = ("constant", "cosine", "linear", "wsd")


def wsd_decay_steps(cfg, num_steps):
  """Steps of the WSD decay: round(decay_frac * num_steps), at least 1, at most the
  steps left after warmup (so a long warmup shortens the decay, never overlaps it)."""
  n = max(int(round(float(cfg.get("decay_frac", 0.1)) * int(num_steps))), 1)
  return max(min(n, int(num_steps) - int(cfg.warmup_steps)), 1)


def make_schedule(cfg, num_steps):
  """Linear warmup (0 allowed) to `cfg.lr`, then constant, cosine, linear or WSD decay.

  Warmup starts at lr/warmup (not 0) so the first step is not wasted; the
  cosine / linear decay runs over the remaining steps down to `lr * final_lr_frac`.
  "wsd" (warmup-stable-decay) holds `lr` after warmup and decays linearly to
  `lr * final_lr_frac` over the last `decay_frac` of the `num_steps` steps
  (`wsd_decay_steps`); like the others it reaches the final value at step
  `num_steps` and stays there.
  """
  lr, warmup = float(cfg.lr), int(cfg.warmup_steps)
  if not 0 < lr < float("inf"):  # also rejects NaN
    raise ValueError(f"optim.lr={lr} must be a finite number > 0")
  if warmup < 0:
    raise ValueError(f"optim.warmup_steps={warmup} must be >= 0")
  if cfg.decay not in DECAYS:
    raise ValueError(f"optim.decay={cfg.decay!r}; allowed: {DECAYS}")
  final = lr * float(cfg.final_lr_frac)
  decay_steps = max(int(num_steps) - warmup, 1)
  if cfg.decay == "constant":
    after = optax.constant_schedule(lr)
  elif cfg.decay == "cosine":
    after = optax.cosine_decay_schedule(lr, decay_steps, alpha=float(cfg.final_lr_frac))
  elif cfg.decay == "linear":
    after = optax.linear_schedule(lr, final, decay_steps)
  else:  # wsd: stable, then a linear decay over the last wsd_decay_steps
    _check_decay_frac(cfg)
    n_decay = wsd_decay_steps(cfg, num_steps)
    stable = max(int(num_steps) - warmup - n_decay, 0)
    after = optax.join_schedules(
        [optax.constant_schedule(lr), optax.linear_schedule(lr, final, n_decay)], [stable])
  if warmup == 0:
    return after
  ramp = optax.linear_schedule(lr / warmup, lr, warmup)
  return optax.join_schedules([ramp, after], [warmup])


def _check_decay_frac(cfg):
  v = float(cfg.get("decay_frac", 0.1))
  if not 0 < v <= 1:  # also rejects NaN
    raise ValueError(f"optim.decay_frac={v} must be in (0, 1] (the fraction of the steps "
                     f"the wsd decay takes)")


def validate_config(cfg):
  """Checks every field of config.optim (ValueError naming the field and what is allowed)."""
  if cfg.name not in OPTIMIZERS:
    raise ValueError(f"optim.name={cfg.name!r}; allowed: {OPTIMIZERS}")
  lr = float(cfg.lr)
  if not 0 < lr < float("inf"):  # also rejects NaN
    raise ValueError(f"optim.lr={lr} must be a finite number > 0")
  if int(cfg.warmup_steps) != cfg.warmup_steps or cfg.warmup_steps < 0:
    raise ValueError(f"optim.warmup_steps={cfg.warmup_steps!r} must be an integer >= 0")
  if cfg.decay not in DECAYS:
    raise ValueError(f"optim.decay={cfg.decay!r}; allowed: {DECAYS}")
  _check_decay_frac(cfg)
  ranges = {"final_lr_frac": (0.0, 1.0, True), "b1": (0.0, 1.0, False),
            "b2": (0.0, 1.0, False), "momentum": (0.0, 1.0, False)}
  for name, (lo, hi, closed) in ranges.items():
    v = float(cfg.get(name, lo))
    if not (lo <= v <= hi if closed else lo <= v < hi):
      raise ValueError(f"optim.{name}={v} must be in [{lo:g}, {hi:g}{']' if closed else ')'}")
  for name in ("weight_decay", "grad_clip"):
    v = float(cfg.get(name, 0.0))
    if not 0 <= v < float("inf"):
      raise ValueError(f"optim.{name}={v} must be a finite number >= 0 (0 = off)")
  if not float(cfg.get("eps", 1e-8)) > 0:
    raise ValueError(f"optim.eps={cfg.eps} must be > 0")


def make_optimizer(cfg, num_steps):
  """Returns (optax transformation, schedule) for `cfg` (config.optim)."""
  validate_config(cfg)
  schedule = make_schedule(cfg, num_steps)
  return make_transform(cfg, schedule), schedule


def make_transform(cfg, learning_rate, weight_decay=None):
  """The optax transformation of `cfg` (config.optim) with `learning_rate` (a schedule:
  step count -> rate) and `weight_decay` (default `cfg.weight_decay`). Stacked runs
  (el_jax.run.seeds) pass a schedule reading a table and a weight decay that are traced
  arrays; the optimizer state has the same structure either way (optax applies a traced
  weight decay of 0 as `g + 0 * p`, which is `g`)."""
  wd = cfg.weight_decay if weight_decay is None else weight_decay
  if cfg.name == "adamw":
    tx = optax.adamw(learning_rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=wd)
  elif cfg.name == "adam":
    tx = optax.adam(learning_rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
  else:
    tx = optax.sgd(learning_rate, momentum=cfg.momentum or None)
  if cfg.grad_clip:
    tx = optax.chain(optax.clip_by_global_norm(cfg.grad_clip), tx)
  return tx
