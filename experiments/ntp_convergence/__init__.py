"""Seed 003, Figure 1 and the appendix instance: GD, NGD and Adam towards the NTP-SVM."""
