"""The plan of every paper-size run: parameters, FLOPs, memory and accelerator-hours."""
