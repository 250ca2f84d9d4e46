"""Seed 001's loss designs as baselines: does a loss already in use fix the copy task's hard strings as the E-losses do?"""
