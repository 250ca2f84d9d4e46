"""Seed 002's question for seed 000's copy task: does equal learning land in flatter solutions?"""
