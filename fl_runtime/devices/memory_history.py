"""Memory history and snapshots in the format PyTorch's memory visualizer reads
(torch.cuda.memory._snapshot's: docs/users/errors-and-memory.md "Memory snapshots").

While recording is on, the allocators report every allocation, free and vendor segment here:
the Python one (allocator.py) directly, the bridge's C++ one (caching_allocator.h) through
BridgeCalls.memory_event.  Each event keeps the Python stack that caused it, so
`python -m torch.cuda._memory_viz trace_plot snap.pickle -o out.html` shows fl memory over time
as it shows CUDA's.  Off (the default), an allocator pays one attribute read per call.
"""
from __future__ import annotations

import atexit
import pickle
import sys
import threading
import time
from collections import deque

_THIS_PACKAGE = __name__.rsplit(".", 2)[0]       # fl_runtime: its own frames are left out


class MemoryRecorder:
    def __init__(self) -> None:
        self.enabled = False
        self.stacks = "python"
        self._max_entries = sys.maxsize
        self._traces: dict[int, deque] = {}
        self._frames_of: dict[tuple[int, int], list] = {}     # (device, address) -> the allocation's frames
        self._lock = threading.Lock()
        self.on_change = None          # the bridge's switch (set_memory_history), when it runs
        self._stops_at_exit = False

    def start(self, stacks: str = "python", max_entries: int = sys.maxsize) -> None:
        with self._lock:
            self.stacks, self._max_entries = stacks, max_entries
            self._traces = {device: deque(trace, maxlen=max_entries) for device, trace in self._traces.items()}
            self.enabled = True
            if not self._stops_at_exit:    # before the interpreter finalizes: no event from C++ after it
                atexit.register(self.stop)
                self._stops_at_exit = True
        if self.on_change is not None:
            self.on_change(True)

    def stop(self) -> None:
        """Stop recording and forget what was recorded (CUDA's enabled=None)."""
        with self._lock:
            self.enabled = False
            self._traces.clear()
            self._frames_of.clear()
        if self.on_change is not None:
            self.on_change(False)

    def record(self, action: str, device: int, address: int, size: int, stream: int) -> None:
        frames = _python_frames() if self.stacks != "none" else []
        entry = {"action": action, "addr": address, "size": size, "stream": stream, "frames": frames,
                 "time_us": time.time_ns() // 1000, "device_free": 0}
        with self._lock:
            if not self.enabled:
                return
            self._traces.setdefault(device, deque(maxlen=self._max_entries)).append(entry)
            if action == "alloc":
                self._frames_of[(device, address)] = frames
            elif action == "free_completed":
                self._frames_of.pop((device, address), None)

    def traces(self, devices: int) -> list[list[dict]]:
        with self._lock:
            return [list(self._traces.get(device, ())) for device in range(devices)]

    def frames_of(self, device: int, address: int) -> list:
        with self._lock:
            return self._frames_of.get((device, address), [])


recorder = MemoryRecorder()


def _python_frames() -> list[dict]:
    """The calling Python stack, innermost first (PyTorch's order), without the runtime's own frames."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(_THIS_PACKAGE):
            frames.append({"filename": code.co_filename, "line": frame.f_lineno, "name": code.co_name})
        frame = frame.f_back
    return frames


def snapshot(rt) -> dict:
    """torch.cuda.memory._snapshot()'s dictionary for every fl device: each vendor allocation is a
    segment holding one block (the fl allocators do not split blocks)."""
    segments = []
    for allocator in rt.allocators:
        index = allocator.device.index
        for address, size, requested, stream, state in allocator.segments():
            live = state == "active_allocated"
            block = {"address": address, "size": size, "requested_size": requested if live else 0,
                     "state": state, "frames": recorder.frames_of(index, address) if live else []}
            segments.append({"device": index, "address": address, "total_size": size, "stream": stream,
                             "segment_type": "large" if size >= 1 << 20 else "small", "segment_pool_id": (0, 0),
                             "allocated_size": size if live else 0, "active_size": size if state != "inactive" else 0,
                             "requested_size": requested if live else 0, "is_expandable": False,
                             "frames": block["frames"], "blocks": [block]})
    return {"segments": segments, "device_traces": recorder.traces(len(rt.allocators)),
            "allocator_settings": {"PYTORCH_FL_ALLOC_CONF": "", "expandable_segments": False}}


def memory_module(rt):
    """`torch.fl.memory`: the torch.cuda.memory names that record and snapshot (PyTorch's own
    spelling, underscores included, so code written for CUDA runs with `cuda` -> `fl`)."""
    import types

    def _record_memory_history(enabled: str | None = "all", context: str | None = "all",
                               stacks: str = "python", max_entries: int = sys.maxsize, **_ignored) -> None:
        """Start (enabled="all"/"state"/True) or stop (None/False) recording allocator events."""
        if enabled in (None, False):
            recorder.stop()
        else:
            recorder.start("none" if context is None else stacks, max_entries)

    def _snapshot(device=None) -> dict:
        for allocator in rt.allocators:
            allocator.settle()
        return snapshot(rt)

    def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
        with open(filename, "wb") as out:
            pickle.dump(_snapshot(), out)

    module = types.ModuleType("torch.fl.memory", "Memory history and snapshots of fl devices.")
    for function in (_record_memory_history, _snapshot, _dump_snapshot):
        setattr(module, function.__name__, function)
    return module
