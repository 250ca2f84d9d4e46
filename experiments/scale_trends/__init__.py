"""Seed 000, scale trends: along which axis does E1 + warmup's gain over CE appear?"""
