"""Seed 002, Theorem 6.1: does flatness pick the transferable solution on a Dyck-type language?"""
