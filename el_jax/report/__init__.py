"""Statistics over seeds and the results pages: pure functions of the committed JSON (NumPy, no JAX)."""
