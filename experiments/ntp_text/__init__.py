"""Seed 003 on real text: is the KJV NTP-separable, from which d, and how near does GD get to H?"""
