"""Seed 000, the copy task: which CPU-size setting shows the effect, chosen on validation?"""
