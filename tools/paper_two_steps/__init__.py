"""Two real training steps of every paper-size run on this CPU."""
