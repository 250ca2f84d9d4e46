"""Seed 003, Lemma 1: at which d / m are random NTP instances separable and compatible?"""
