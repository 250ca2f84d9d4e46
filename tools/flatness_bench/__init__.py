"""What the flatness estimators cost against a gradient (el_jax.tools.flatness_bench)."""
