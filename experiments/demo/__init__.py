"""Seed 000, the copy task at CPU size: does E1 + warmup learn the hard strings CE memorises?"""
