"""Where an exception leaves the runtime for PyTorch (docs/users/errors-and-memory.md).

Every Python function the runtime hands PyTorch to call for an op (the launcher's per-op
kernels, the kernels the runtime owns: factories, copies, dropout, attention ...; the
boxed fallback; autocast's kernels) and the graph path's compiled callable end the same
way when they raise: leave_runtime.  The launcher does it inline (its kernels are the hot
path); everything else is registered behind leaves_runtime.
"""
from __future__ import annotations

import functools
import types
from collections.abc import Callable

from fl_runtime.devices.storage import hold_past_unwinding
from fl_runtime.tracebacks import release_runtime_frames


_on_hold = None


def on_hold(listener) -> None:
    """Call `listener()` whenever a failed call's inputs are held (the native bridge then
    sends the next call to the Python kernel, which releases them)."""
    global _on_hold
    _on_hold = listener


def leave_runtime(exc: BaseException, inputs: object) -> None:
    """What a failed call does with its exception on the way out.

    Its inputs may include temporaries only the caller's expression holds (`(a @ a) @ a`).
    Left to the traceback, they would live as long as the exception (a REPL keeps the last
    one); left to the interpreter, they would die while it unwinds, with the exception
    pending, and the user would get SystemError in place of it (docs/users/limits.md
    "Errors and memory").  So they are held until the next op or memory query, and the finished
    runtime frames of the traceback drop their locals now (fl_runtime.tracebacks): the
    runtime's temporaries die here, while the exception is handled, not pending."""
    hold_past_unwinding(inputs)
    if _on_hold is not None:
        _on_hold()
    release_runtime_frames(exc)


def leaves_runtime(kernel: Callable) -> Callable:
    """`kernel` as PyTorch should call it: leave_runtime applied to whatever it raises.
    A C callable (a partial of an operator's redispatch) makes no runtime frame and is
    returned as it is."""
    if not isinstance(kernel, types.FunctionType):
        return kernel

    @functools.wraps(kernel)
    def entry(*args, **kwargs):
        try:
            return kernel(*args, **kwargs)
        except BaseException as exc:
            leave_runtime(exc, (args, kwargs))
            del args, kwargs, exc       # this frame stays in the traceback: it must hold nothing
            raise
    return entry


class GuardedLibrary:
    """A torch.library.Library whose impl() and fallback() register kernels behind
    leaves_runtime; what registers through it need not know."""

    def __init__(self, library) -> None:
        self.library = library

    def impl(self, name: str, kernel: Callable, dispatch_key: str = "") -> None:
        self.library.impl(name, leaves_runtime(kernel), dispatch_key)

    def fallback(self, kernel: Callable, dispatch_key: str = "") -> None:
        self.library.fallback(leaves_runtime(kernel), dispatch_key)
