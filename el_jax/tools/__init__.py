"""Commands that are not paper results: the demo, speed benchmarks, paper-size plans, the accelerator check."""
