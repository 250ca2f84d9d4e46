"""Seed 002 (probe sanity): where along a pre-trained encoder the downstream probe loses the task."""
