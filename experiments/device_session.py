r"""One lent-accelerator session in one command: verify the device, then the device queue.

  python3 experiments/device_session.py --out=$OUT --budget_s=540            # first time on a kind
  python3 experiments/device_session.py --out=$OUT --budget_s=540 --preflight  # a kind verified before

The whole call the device tool runs (docs/accelerator.md gives it with the wheel install):
`python -m el_jax.verify` (every part, or with `--preflight` only env + golden, the short
check a device kind that passed verify before needs) writes `<out>/verify.json`; if its
golden step at the highest precision does not match the CPU, nothing trains (the numbers
would not be el_jax's). Otherwise `experiments/device_queue.py run` trains the next missing
seeds, sized by verify's measured step times to end inside `--budget_s`, writing one JSON
per arm to `<out>`. Collect them here with `python experiments/device_queue.py collect
<files>` and commit verify.json as results/accelerator/verify_<device>_<date>.json.
`--size=test` does the same at test size (the suite runs it on the CPU).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERIFY_SHARE = 0.55  # at most this share of the budget for verify (it needs about 4-5 min)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--out", required=True)
  ap.add_argument("--budget_s", type=float, default=540, help="seconds for the whole session")
  ap.add_argument("--preflight", action="store_true", help="verify only env and golden")
  ap.add_argument("--size", default="paper", choices=("paper", "test"))
  ap.add_argument("--jobs", default="", help="device_queue jobs (default: the queue's order)")
  ap.add_argument("--results_dir", default="", help="device_queue --results_dir")
  args = ap.parse_args(argv)
  t0 = time.time()
  os.makedirs(args.out, exist_ok=True)
  vpath = os.path.join(args.out, "verify.json")
  parts = "env,golden" if args.preflight else "env,golden,seeds,main,throughput,torch"
  vsize = "full" if args.size == "paper" else "test"
  subprocess.run([sys.executable, "-m", "el_jax.verify", f"--out={vpath}", f"--size={vsize}",
                  f"--parts={parts}", f"--budget_s={args.budget_s * VERIFY_SHARE:.0f}"],
                 cwd=ROOT, check=False)
  with open(vpath) as f:
    verify = json.load(f)
  golden = verify["parts"].get("golden", {})
  if not golden.get("ok"):
    print(f"device_session: the golden step does not match the CPU ({golden.get('error') or golden.get('rel_err')}); "
          f"nothing is trained", flush=True)
    return 1
  left = args.budget_s - (time.time() - t0) - 15
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "device_queue.py"), "run",
         f"--budget_s={left:.0f}", f"--out={args.out}", f"--size={args.size}", f"--verify={vpath}"]
  if args.jobs:
    cmd.append(f"--jobs={args.jobs}")
  if args.results_dir:
    cmd.append(f"--results_dir={args.results_dir}")
  print(f"device_session: verify took {time.time() - t0:.0f} s; queue gets {left:.0f} s",
        flush=True)
  rc = subprocess.run(cmd, cwd=ROOT, check=False).returncode
  print(f"device_session: done in {time.time() - t0:.0f} s (queue exit {rc})", flush=True)
  return rc


if __name__ == "__main__":
  sys.exit(main())
