"""The golden first step of `configs/copy_task.py:test` (model seed 0, one device), and what
computes it.

  from el_jax.tools import golden
  golden.STEP_1                       # {"loss", "grad_norm", "param_norm"} recorded on the CPU
  golden.first_step()                 # the same three numbers, computed here

tests/test_train.py checks the CPU against `STEP_1` (rel 1e-4); `python -m el_jax.tools.verify`
checks an accelerator against it at the highest matmul precision (where it must match) and
reports the default precision (TF32 on NVIDIA GPUs: it need not). If a change of the model,
its initialisation, the data, the loss or the optimizer changes them ON PURPOSE, regenerate them
under the suite's settings (tests/reliability.py `suite_env`: LLVM level 0 and the cross-CPU
ones, docs/testing.md "Across CPUs") with

  JAX_PLATFORMS=cpu .venv/bin/python -c "import os, sys; sys.path.insert(0, 'tests'); \
  import reliability; os.environ.update(reliability.suite_env(os.environ)); \
  from el_jax.tools import golden; print(golden.first_step())"

and paste the printed dict here (say why in the commit message). Under the suite's settings they
print digit for digit the same on an AVX-512 Zen 4 and an emulated AVX2 Haswell; under JAX's
defaults the loss's last digits depend on the CPU (3.3515100479125977 on the Zen 4,
3.351510763168335 on the emulated Haswell): hence the CPU test's and verify's rel 1e-4.
"""
import jax

from el_jax.run import config as config_lib
from el_jax.run import setup as setup_lib

STEP_1 = {"loss": 3.351510763168335, "grad_norm": 1.4828977584838867,
          "param_norm": 9.061310768127441}
KEYS = tuple(STEP_1)


def first_step(overrides=None):
  """{key: float} of the first train step of the `test` copy-task config, seed 0, on one
  device, under the caller's matmul precision (`jax.default_matmul_precision`)."""
  config = config_lib.get_config("copy_task", "test", dict(overrides or {}))
  config.num_devices = 1
  config.progress = False
  setup = setup_lib.Setup(config)
  trainer = setup_lib.Trainer(setup)
  _, m = trainer.step(trainer.init(0), trainer.put_batch(setup.batch(0, 0)))
  m = jax.device_get(m)
  return {k: float(m[k]) for k in KEYS}
