"""The optional compiled helpers, and the switch back to their Python versions.

setup.py builds each as an optional C extension (no torch headers): a missing compiler
leaves the package working on the Python versions, which stay beside them with the same
behaviour and tests.  docs/contributors/compiled-helpers.md lists them:
- `fl_runtime.devices._dltensor` (devices/storage.py): fl tensors made and freed without Python;
- `fl_runtime.ops.eager._program` (ops/eager/fast_path.py, ops/eager/marshal.py): a replayed program's call key
  and tensor sites;
- `fl_runtime.ops.graph._launch_list` (ops/graph/launch_list.py): a graph plan's consecutive launches.
TORCH_FL_PURE_PYTHON=1 runs the Python versions (a comparison, or a suspected bug in C).

`HELPERS` is the one list: setup.py loads this file by path (standard library only, no
torch in a build environment) and builds each from `source_of(name)`.
"""
from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

_log = logging.getLogger("torch_fl")       # fl_runtime.logs' logger, reached without importing it

PURE_PYTHON_ENV = "TORCH_FL_PURE_PYTHON"
HELPERS = ("fl_runtime.devices._dltensor", "fl_runtime.ops.eager._program", "fl_runtime.ops.graph._launch_list")
# Header folders the helpers include from (relative to the project root): the ABI's header,
# which _launch_list.c calls launch_kernel through.
INCLUDE_DIRS = ("fl_sdk/include",)


def source_of(name: str) -> str:
    """The C source of helper `name`, relative to the project root (beside its Python version)."""
    return name.replace(".", "/") + ".c"


def pure_python_asked() -> bool:
    """TORCH_FL_PURE_PYTHON asks for the Python versions."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def _built(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        _log.debug("torch_fl: %s is not built (%s); its Python version runs", name, exc)
        return None


def missing() -> list[str]:
    """The helpers this install lacks (not built, or not importable), whatever the switch says."""
    return [name for name in HELPERS if _built(name) is None]


def load(name: str) -> ModuleType | None:
    """The compiled module `name` (a full module name), or None for its Python version."""
    return None if pure_python_asked() else _built(name)
