"""Seed 002: how close does masked-LM pre-training get to the exact optimum of its language?"""
