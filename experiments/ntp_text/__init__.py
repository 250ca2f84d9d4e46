"""Seed 003 on real text: is the King James Bible NTP-separable, at which d, and how close does GD get to the entropy?"""
