"""A small experiment used by tests/test_experiments.py: copied into a checkout's experiments/."""
