"""Seed 000, the copy task: which CPU-size setting shows the paper's effect, chosen on validation?"""
