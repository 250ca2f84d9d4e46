"""Seed 000, Table 2: does E1 + warmup copy the label better than CE in natural text?"""
