"""`run(config)`: trains the missing seeds of the queue's jobs on this machine within
`config.budget_s` (`queue.run`), keeps the arm files under `<results_dir>/arms/` and collects
them into `<results_dir>/<job>.json` (`queue.collect`). A lent session instead runs
`python -m tools.device_queue session` there and `collect` here (queue.py)."""
import os

from tools.device_queue import queue


def run(config):
  jobs = [j for j in config.jobs.split(",") if j]
  for j in jobs:
    queue.job_by_name(j)
  files = queue.run(config.budget_s, os.path.join(config.results_dir, "arms"), config.size,
                    jobs, config.results_dir, config.max_seeds or None)
  return queue.collect(files, config.results_dir, config.size)
