"""How long the NTP-SVM takes to solve (el_jax.tools.ntp_bench)."""
