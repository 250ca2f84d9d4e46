"""Seed 001's loss designs as baselines: does a loss in use fix the copy task as the E-losses do?"""
