"""Where committed numbers disagree: the same config and seed in two results files."""
