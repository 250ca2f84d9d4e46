"""el_jax: how the loss and the optimizer choose among solutions that fit the data."""

__version__ = "0.1.0"

# Before JAX starts its CPU client: XLA's per-step temporaries reuse freed heap memory instead
# of being mapped and page-faulted in anew every step (el_jax/infra/hostmem.py; EL_JAX_MALLOC=glibc
# leaves glibc's defaults).
from el_jax.infra import hostmem as _hostmem

_hostmem.tune()
