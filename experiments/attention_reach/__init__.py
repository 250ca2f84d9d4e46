"""Seed 002, issue 34: where a pre-trained encoder's masked position looks, block by block."""
