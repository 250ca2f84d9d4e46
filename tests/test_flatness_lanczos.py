"""Lanczos, top eigenvalues and SLQ on quadratics with known spectra (float64)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from el_jax.core import flatness as fl


def quad_loss(p, b):
  x = jnp.concatenate([p["a"], p["b"]])
  return 0.5 * x @ (b["A"] @ x)


def quad_problem(eigs, seed=0, rotate=True):
  r = np.random.default_rng(seed)
  n = len(eigs)
  q = np.linalg.qr(r.normal(size=(n, n)))[0] if rotate else np.eye(n)
  a = (q * np.asarray(eigs)[None]) @ q.T
  a = 0.5 * (a + a.T)
  p = {"a": jnp.asarray(r.normal(size=n // 2)), "b": jnp.asarray(r.normal(size=n - n // 2))}
  return p, {"A": jnp.asarray(a)}, a


# Widely spread spectrum: the top eigenvalues converge early, after which plain
# Lanczos loses orthogonality and produces ghost copies of them.
EIGS = np.concatenate([np.geomspace(1e-2, 1e3, 36), [-0.5, -3.0, 5e3, 1e4]])


def test_full_reorthogonalisation_recovers_every_eigenvalue():
  with jax.enable_x64(True):
    p, b, a = quad_problem(EIGS)
    n = len(EIGS)
    true = np.sort(EIGS)
    r = fl.lanczos(quad_loss, p, b, key=jax.random.key(0), num_steps=n, return_vectors=True)
    np.testing.assert_allclose(r.ritz_values, true, rtol=1e-8, atol=1e-8 * true.max())
    # Ritz vectors: A u = theta u and the basis is orthonormal.
    u_mxn = np.asarray(jax.vmap(lambda t: ravel_pytree(t)[0])(r.ritz_vectors))
    np.testing.assert_allclose(u_mxn @ a, r.ritz_values[:, None] * u_mxn, atol=1e-6)
    np.testing.assert_allclose(u_mxn @ u_mxn.T, np.eye(n), atol=1e-8)
    # Without reorthogonalisation the same run misses part of the spectrum.
    plain = fl.lanczos(quad_loss, p, b, key=jax.random.key(0), num_steps=n,
                       reorthogonalize=False)
    err = np.max(np.abs(plain.ritz_values - true) / np.maximum(np.abs(true), 1.0))
    assert err > 1e-2, f"plain Lanczos unexpectedly exact (err {err}); the test lost its power"


def test_top_eigenvalues_with_few_steps():
  with jax.enable_x64(True):
    p, b, _ = quad_problem(EIGS, seed=1)
    top = fl.top_eigenvalues(quad_loss, p, b, key=jax.random.key(1), k=2, num_steps=15)
    np.testing.assert_allclose(top, [1e4, 5e3], rtol=1e-6)


def test_invariant_subspace_breakdown_restarts():
  # Repeated eigenvalues: the Krylov space of any start vector has dimension 3,
  # so Lanczos breaks down and must restart to find all multiplicities.
  with jax.enable_x64(True):
    eigs = np.repeat([1.0, 2.0, 7.0], 4)
    p, b, _ = quad_problem(eigs, seed=2)
    r = fl.lanczos(quad_loss, p, b, key=jax.random.key(2), num_steps=12)
    np.testing.assert_allclose(r.ritz_values, np.sort(eigs), atol=1e-8)


def test_slq_moments_exact_on_diagonal_and_unbiased_rotated():
  with jax.enable_x64(True):
    eigs = np.random.default_rng(3).uniform(-1.0, 4.0, 30)
    # Rademacher start vectors: v^T A^k v = tr(A^k) / n exactly for diagonal A,
    # and Lanczos quadrature with m steps is exact for degree < 2m.
    p, b, a = quad_problem(eigs, rotate=False)
    sd = fl.spectral_density(quad_loss, p, b, key=jax.random.key(0), num_steps=4, num_draws=3)
    for k in range(8):
      np.testing.assert_allclose(sd.moment(k), np.trace(np.linalg.matrix_power(a, k)) / 30,
                                 rtol=1e-9, err_msg=f"moment {k}")
    np.testing.assert_allclose(sd.weights.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.trapezoid(sd.density, sd.grid), 1.0, atol=1e-3)
    # Rotated A: the same estimate is unbiased; check within 4 standard errors.
    p, b, a = quad_problem(eigs, seed=4)
    sd = fl.spectral_density(quad_loss, p, b, key=jax.random.key(1), num_steps=4, num_draws=24)
    for k in (1, 2, 3):
      per_draw = np.sum(sd.weights * sd.nodes**k, axis=1)
      se = per_draw.std(ddof=1) / np.sqrt(len(per_draw))
      true = np.trace(np.linalg.matrix_power(a, k)) / 30
      assert abs(per_draw.mean() - true) < 4 * se, (k, per_draw.mean(), true, se)


def test_plot_spectral_density(tmp_path):
  with jax.enable_x64(True):
    p, b, _ = quad_problem(EIGS[:10], seed=5)
    sd = fl.spectral_density(quad_loss, p, b, key=jax.random.key(0), num_steps=4, num_draws=3)
  path = fl.plot_spectral_density(sd, str(tmp_path / "sd.png"))
  assert (tmp_path / "sd.png").stat().st_size > 1000 and path.endswith("sd.png")


def test_lanczos_bad_input():
  with jax.enable_x64(True):
    p, b, _ = quad_problem(EIGS[:6])
    with pytest.raises(ValueError, match="num_steps"):
      fl.lanczos(quad_loss, p, b, key=jax.random.key(0), num_steps=0)
