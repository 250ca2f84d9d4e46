"""Commands that are not paper results, with the analyses and page sections of what they
measure: benchmarks, the device queue, cross-machine comparisons, paper-size plans."""
