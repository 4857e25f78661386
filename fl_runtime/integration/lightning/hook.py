"""Run a function right after a given module finishes importing, without importing it.

Lightning has no entry point for accelerators, and torch_fl must not import
lightning (seconds of import time, and a dependency torch_fl does not have).
So the runtime puts this finder on `sys.meta_path`: it answers only for the
watched names, lets the ordinary finders locate the module, and wraps the
loader so the callback runs after the module's own code.  Every other import
costs one dict lookup.
"""
from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable

from fl_runtime.logs import logger


class _CallAfterLoader(importlib.abc.Loader):
    """The module's own loader, then the callback (which must never break the import)."""

    def __init__(self, loader, callback: Callable[[], None], name: str) -> None:
        self._loader, self._callback, self._name = loader, callback, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        try:
            self._callback()
        except Exception as exc:  # noqa: BLE001 (the user's import must still succeed)
            logger.warning("torch_fl: could not register with %s (%s: %s); accelerator='fl' will be unknown to it",
                           self._name, type(exc).__name__, exc)

    def __getattr__(self, name: str):        # get_resource_reader, is_package, get_source, ...
        return getattr(self._loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls callbacks[name]() once, right after module `name` has been imported."""

    def __init__(self, callbacks: dict[str, Callable[[], None]]) -> None:
        self._callbacks = dict(callbacks)
        self._lock = threading.Lock()

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in self._callbacks:
            return None
        with self._lock:
            callback = self._callbacks.pop(fullname, None)
        if callback is None:
            return None
        spec = _spec_from_other_finders(self, fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _CallAfterLoader(spec.loader, callback, fullname)
        return spec


def _spec_from_other_finders(me, fullname: str, path, target):
    for finder in list(sys.meta_path):
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def call_after_import(name: str, callback: Callable[[], None]) -> None:
    """callback() now if `name` is already imported, else right after it is."""
    module = sys.modules.get(name)
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        callback()
        return
    sys.meta_path.insert(0, AfterImport({name: callback}))
