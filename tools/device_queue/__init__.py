"""The paper-size jobs for an accelerator, in priority order, run a few seeds per lent session."""
