"""PyTorch's own profilers with fl: `torch.autograd.profiler.profile(use_device="fl")`,
and `torch.profiler.profile` asked for `ProfilerActivity.PrivateUse1`
(docs/users/profiling.md).

For a PrivateUse1 device PyTorch records each op through the backend's C++
profiler stubs (state KINETO_PRIVATEUSE1), which only a C++ backend can
register.  Without them the stub throws in every op's start callback, the start
is lost, and `key_averages()` shows totals like -2.2e16 us.  So for
use_device="fl" the profile runs as PyTorch's CPU (Kineto) profile, whose host
times are right, and the fl device time comes from Torch-FL's profiler
(tools/profiler.py: vendor events around each launch): after PyTorch builds its
events, each vendor launch's device time is attached, in launch order, to the
next PyTorch event of the same op (as a kernel on fl:N) and added as a device
event of its own, as Kineto does for a CUDA kernel, so the device columns
(`self_device_time_total`, the table's "fl" columns) add up the vendor's time.

PyTorch's class is wrapped once (four methods), from the package root;
profiles for other devices are untouched.
"""
from __future__ import annotations

import functools
from collections import defaultdict, deque

import torch
from torch.autograd import DeviceType
from torch.autograd import profiler as autograd_profiler
from torch.autograd.profiler_util import FunctionEvent

from fl_runtime.devices.registry import DEVICE_TYPE

_WRAPPED = "_torch_fl_wrapped"


def install() -> None:
    """Wrap torch.autograd.profiler.profile for use_device="fl" (idempotent)."""
    cls = autograd_profiler.profile
    if getattr(cls, _WRAPPED, False):
        return
    cls.__init__ = _after_init(cls.__init__)
    cls._start_trace = _with_fl_session_start(cls._start_trace)   # __enter__ and torch.profiler call it
    cls.__exit__ = _with_fl_session_exit(cls.__exit__)
    cls._ensure_function_events = _with_device_times(cls._ensure_function_events)
    setattr(cls, _WRAPPED, True)


def _is_fl(prof) -> bool:
    return getattr(prof, "use_device", None) == DEVICE_TYPE and getattr(prof, "enabled", False)


def _after_init(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self._fl_session = None
        if _is_fl(self):
            # Host events as a CPU profile: the PrivateUse1 states need C++ stubs (module docstring).
            self.profiler_kind = torch._C._profiler.ProfilerState.KINETO
    return __init__


def _with_fl_session_start(start):
    @functools.wraps(start)
    def _start_trace(self):
        result = start(self)
        if _is_fl(self) and getattr(self, "_fl_session", None) is None:
            # warn_share=1: the user asked PyTorch's profiler, not for Torch-FL's fallback warning.
            from fl_runtime.tools.profiler import Profile    # at first use: fl_runtime.LAZY_NAMES
            self._fl_session = Profile(warn_share=1.0).__enter__()
        return result
    return _start_trace


def _with_fl_session_exit(exit_):
    @functools.wraps(exit_)
    def __exit__(self, exc_type, exc_val, exc_tb):
        session, self._fl_session = getattr(self, "_fl_session", None), None
        if session is not None:
            session.__exit__(exc_type, exc_val, exc_tb)    # waits for the devices, reads vendor events
            self._fl_spans = [e for e in session.trace if e["pid"] == 1]
        return exit_(self, exc_type, exc_val, exc_tb)
    return __exit__


def _with_device_times(ensure):
    @functools.wraps(ensure)
    def _ensure_function_events(self):
        ensure(self)
        spans = getattr(self, "_fl_spans", None)
        if spans and self._function_events is not None:
            attach_device_times(self._function_events, spans)
            self._fl_spans = None
    return _ensure_function_events


def attach_device_times(events, spans: list[dict]) -> int:
    """Give each vendor launch (Chrome-trace span: name "aten::add.Tensor", tid = device,
    dur in us) to the next unmatched PyTorch event named "aten::add", in time order: as a
    kernel of that event, and as a device event of its own ("fl: aten::add.Tensor" on
    fl:N, where PyTorch puts a CUDA kernel), which the table's device totals add up.
    Returns how many were attached."""
    pending: dict[str, deque] = defaultdict(deque)
    for event in sorted(events, key=lambda e: e.time_range.start):
        if not event.is_async and event.device_type == DeviceType.CPU:
            pending[event.name].append(event)
    attached = 0
    for span in spans:
        queue = pending.get(span["name"].split(".")[0])
        if not queue:
            continue
        host = queue.popleft()
        name = f"{DEVICE_TYPE}: {span['name']}"
        host.append_kernel(name, span["tid"], span["dur"])
        start = host.time_range.start
        events.append(FunctionEvent(id=host.id, name=name, thread=span["tid"], start_us=start,
                                    end_us=start + span["dur"], use_device=DEVICE_TYPE,
                                    device_type=DeviceType.PrivateUse1, device_index=span["tid"], stack=[],
                                    input_shapes=[]))
        attached += 1
    return attached
