"""Seed 002, Figures 1 / 3, 2 and 5: flatness and transfer of MLM models at equal loss."""
