"""The train step's cost by loss and by stacked seeds (el_jax.tools.bench): logs, no JSON; its
section of the speed page names them."""
