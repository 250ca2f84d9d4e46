"""The one registry from `config.task` to what trains it.

  from el_jax.core import tasks
  tasks.get("copy_task")          # -> CopyTask (a `tasks.Task` subclass)
  job.run(config, workdir)        # what `python -m el_jax.main` does (el_jax.run.job)

Two kinds of entries:

* a `Task` subclass (`el_jax.core.tasks.base`): trained by the generic loop
  `el_jax.run.job.train_and_evaluate` (copy_task, path_star, mlm, label_copy, text_lm,
  dyck: a model of its own, `Task.own_model`);
* an experiment with a trainer of its own, a function `(config, workdir)`
  (ntp_linear: linear next-token prediction, `el_jax.run.ntp_train`).

Entries are "module:attribute" strings, imported on first use so one task's
dependencies never slow another's start-up. A new task is one module plus one
config file: add it here, or call `register(name, TaskClass)` at run time
(the tests do that with a toy task).
"""
import importlib

from el_jax.core.tasks.base import SPLITS, Task

REGISTRY = {
    "copy_task": "el_jax.core.tasks.copy_task:CopyTask",
    "path_star": "el_jax.core.tasks.path_star:PathStarTask",
    "mlm": "el_jax.core.tasks.mlm:MLMTask",
    "label_copy": "el_jax.core.tasks.label_copy:LabelCopyTask",
    "text_lm": "el_jax.core.tasks.text_lm:TextLMTask",
    "dyck": "el_jax.core.tasks.dyck:DyckTask",
    "ntp_linear": "el_jax.run.ntp_train:train_and_evaluate",
}
_loaded = {}


def register(name, target):
  """Registers `target` (a Task subclass, a (config, workdir) function or a "module:attr" string)."""
  REGISTRY[name] = target
  _loaded.pop(name, None)


def unregister(name):
  REGISTRY.pop(name, None)
  _loaded.pop(name, None)


def names():
  return sorted(REGISTRY)


def get(name):
  """The Task subclass or trainer function registered under `name`."""
  if name not in REGISTRY:
    raise ValueError(f"unknown config.task {name!r}; valid tasks: {names()}")
  if name not in _loaded:
    target = REGISTRY[name]
    if isinstance(target, str):
      module, attr = target.split(":")
      target = getattr(importlib.import_module(module), attr)
    _loaded[name] = target
  return _loaded[name]


def is_task_class(obj):
  return isinstance(obj, type) and issubclass(obj, Task)


def get_task_class(name):
  """The Task subclass of `name`; ValueError if `name` is not trained by the generic loop."""
  target = get(name)
  if not is_task_class(target):
    loop = [n for n in names() if is_task_class(get(n))]
    raise ValueError(f"config.task={name!r} has a trainer of its own, not the generic loop "
                     f"el_jax.run.train; tasks of the generic loop: {loop}")
  return target


__all__ = ["SPLITS", "Task", "REGISTRY", "register", "unregister", "names", "get",
           "get_task_class", "is_task_class"]
