"""Seed 000, Table 1: does E1 + warmup escape the teacher-forcing failure on path-star graphs?"""
