"""Linear next-token prediction (seed 003): NTP-separability, the NTP-SVM, implicit bias of GD."""
