"""Running things: configs, the training loop, one config in one workdir, grids of configs, the CLI."""
