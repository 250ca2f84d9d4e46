"""`python -m tools.device_queue session|run|collect|status` (tools/device_queue/queue.py)."""
import sys

from el_jax.run import cli

from tools.device_queue import queue

if __name__ == "__main__":
  sys.exit(cli.script(queue.main))
