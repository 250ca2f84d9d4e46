"""Seed 002, Tables 1-2: does adversarial pre-training at equal loss give worse probes and a larger Tr(H)?"""
