"""Commands that are not paper results: speed benchmarks, paper-size plans, the accelerator check."""
