"""`once_per_session`: a module fixture's work done once per test session, not once per xdist
worker (under `pytest -n 2` a module's tests land on both workers, and each built its own
module fixtures: the copy-task grids, the device queue's runs, the two-process runs)."""
import fcntl
import os
import pickle
import shutil


def once_per_session(tmp_path_factory, name, build):
  """`build(folder)`'s result, `folder` = <the session's temporary folder>/<name>, shared by
  the xdist workers: they take turns on a lock, the first builds and pickles what `build`
  returns, a later one reads it back. A build that raised leaves nothing behind, so the next
  worker builds again (and fails the same way). The folder's files are shared: a test may read
  them, never change them."""
  base = tmp_path_factory.getbasetemp()
  root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
  root.mkdir(exist_ok=True)
  done = root / "result.pickle"
  with open(root / ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not done.exists():
      folder = root / "work"
      if folder.exists():  # a build that raised
        shutil.rmtree(folder)
      folder.mkdir()
      result = build(folder)
      done.write_bytes(pickle.dumps(result))
    return pickle.loads(done.read_bytes())
