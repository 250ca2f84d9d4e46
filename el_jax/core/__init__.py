"""The science: losses, optimizers, the train step, models, tasks, data, flatness, probes, linear NTP.

Nothing here runs a workdir or writes a page: a notebook can import these modules alone.
"""
