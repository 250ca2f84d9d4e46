"""Seed 002, issue 34: where along a pre-trained encoder the downstream probe loses the task."""
