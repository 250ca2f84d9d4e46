"""What every run stands on: atomic files and locks, checkpoints, metrics, progress, processes, where a run ran."""
