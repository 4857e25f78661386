"""What an error's traceback keeps alive (docs/users/errors-and-memory.md).

A traceback holds every frame its exception passed through, and each frame its local
variables: a runtime function's `self`, its inputs, its temporaries.  For as long as a
caller keeps the exception (a REPL's `sys.last_value`, a retry loop's `except ... as
exc`), fl tensors among those locals keep their device memory.  Once the exception has
left the runtime, its frames there are finished and nothing reads their locals but a
post-mortem debugger, so they are cleared:

- at once, where an exception leaves the runtime for PyTorch's dispatcher or a compiled
  graph (fl_runtime.ops.boundary, which calls release_runtime_frames);
- otherwise, when device memory is next needed or measured: every FLError is remembered
  here (weakly) when it is made, and the allocator's out-of-memory retry, its statistics
  and empty_cache() call release_remembered.  That covers errors that leave through a
  Python API PyTorch calls directly (torch.distributed's process group, torch.fl.*).

Only frames of the runtime's own files (fl_runtime/, torch_fl/) are cleared; the user's
frames, and PyTorch's, keep their locals.  Generator and coroutine frames are left
alone: clearing a suspended one would close it.
"""
from __future__ import annotations

import inspect
import os
import threading
import weakref

_PACKAGES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIME_DIRS = tuple(os.path.join(_PACKAGES, name) + os.sep for name in ("fl_runtime", "torch_fl"))
_SUSPENDABLE = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                | inspect.CO_ITERABLE_COROUTINE)

_remembered: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()        # a WeakSet must not grow while another thread lists it


def is_runtime_frame(frame) -> bool:
    """Whether `frame` runs code from the runtime's own files."""
    return frame.f_code.co_filename.startswith(RUNTIME_DIRS)


def release_runtime_frames(error: BaseException) -> None:
    """Clear the locals of the finished runtime frames in `error`'s traceback and in those
    of the exceptions it chains (__cause__, __context__).  Frames still executing (the one
    handling it, or another thread's) are skipped."""
    pending, seen = [error], set()
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            _clear(tb.tb_frame)
            tb = tb.tb_next
        pending += (exc.__cause__, exc.__context__)


def _clear(frame) -> None:
    if frame.f_code.co_flags & _SUSPENDABLE or not is_runtime_frame(frame):
        return
    try:
        frame.clear()
    except RuntimeError:        # still executing
        pass


def remember(error: BaseException) -> None:
    """Keep a weak reference to `error` for release_remembered (FLError.__init__)."""
    with _lock:
        _remembered.add(error)


def release_remembered() -> None:
    """release_runtime_frames for every remembered error still alive."""
    if not _remembered:
        return
    with _lock:
        errors = list(_remembered)
    for error in errors:
        release_runtime_frames(error)
