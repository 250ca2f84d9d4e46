"""Seed 000, the copy task's Figure 1 (context length, width) and Table 3 (ablations), CPU size."""
