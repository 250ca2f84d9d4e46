"""Seed 002 (probe sanity): where a pre-trained encoder's masked position looks, block by block."""
