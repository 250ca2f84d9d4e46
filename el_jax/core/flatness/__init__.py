"""Flatness toolkit: exact HVPs, Hessian and Fisher traces, Lanczos spectra.

All estimators take a pure `loss_fn(params, batch) -> scalar` (or
`logits_fn(params, batch) -> logits | (logits, mask)` for the Fisher), pass
params and batch as arguments of their jitted code, and are deterministic for
a given PRNG key. See docs/flatness.md.
"""
from el_jax.core.flatness.fisher import FisherResult
from el_jax.core.flatness.fisher import fisher_trace
from el_jax.core.flatness.fisher import fisher_trace_over_batches
from el_jax.core.flatness.hvp_ops import batched_hvp
from el_jax.core.flatness.hvp_ops import batched_quadratic_form
from el_jax.core.flatness.hvp_ops import hvp
from el_jax.core.flatness.spectrum import LanczosResult
from el_jax.core.flatness.spectrum import SpectralDensity
from el_jax.core.flatness.spectrum import lanczos
from el_jax.core.flatness.spectrum import plot_spectral_density
from el_jax.core.flatness.spectrum import spectral_density
from el_jax.core.flatness.spectrum import top_eigenvalues
from el_jax.core.flatness.spectrum import top_eigenvalues_over_batches
from el_jax.core.flatness.trace import TraceResult
from el_jax.core.flatness.trace import hessian_trace
from el_jax.core.flatness.trace import hessian_trace_over_batches
from el_jax.core.flatness.training import measure_during_training
from el_jax.core.flatness.training import plot_flatness

__all__ = [
    "FisherResult", "LanczosResult", "SpectralDensity", "TraceResult", "batched_hvp",
    "batched_quadratic_form",
    "fisher_trace", "fisher_trace_over_batches", "hessian_trace",
    "hessian_trace_over_batches", "hvp", "lanczos", "measure_during_training",
    "plot_flatness", "plot_spectral_density", "spectral_density", "top_eigenvalues",
    "top_eigenvalues_over_batches",
]
