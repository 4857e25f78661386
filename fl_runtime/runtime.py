"""The runtime's state, built once per process: config, plugins, devices,
streams, allocators, RNG and the op launcher, and the few services the
PyTorch-facing modules share (allocating a tensor, ordering against writers).

Threads (docs/users/devices.md "Threads"): the current device is per host thread, as in CUDA
(a new thread starts on fl:0), like the current stream (devices/streams.py).
Everything else here is shared, and each piece guards its own multi-step
updates with its own lock.
"""
from __future__ import annotations

import threading

import torch

from fl_runtime.config import Config, load_config
from fl_runtime.devices.allocator import CachingAllocator
from fl_runtime.devices.registry import DeviceInfo, build_device_list
from fl_runtime.devices.storage import (
    DL_DTYPES,
    contiguous_strides,
    storage_base,
    storage_nbytes,
    wrap_block,
)
from fl_runtime.devices.streams import DEFAULT_STREAM_ID, Stream, StreamRegistry
from fl_runtime.devices.uploads import PendingUploads
from fl_runtime.errors import DeviceNotFoundError, UnsupportedDtypeError
from fl_runtime.logs import configure_logging, logger
from fl_runtime.ops.owned.copies import copy_to_host
from fl_runtime.ops.eager.launcher import Launcher
from fl_runtime.ops.op_table import build_op_table
from fl_runtime.ops.owned.rng import DeviceRNG
from fl_runtime.plugins.certification import CertificationPolicy
from fl_runtime.plugins.loader import LoadFailure, Plugin, discover_sources, load_all
from fl_runtime.plugins.stack import enforce_lock


class Runtime:
    def __init__(self, config: Config | None = None) -> None:
        self.config = config or load_config()
        configure_logging(self.config.logging, self.config.path)
        logger.debug("config: %s", self.config.path or "defaults (no config file)")
        sources = discover_sources(self.config.plugins)
        logger.debug("plugin sources: %s", [f"{s.name} ({s.origin}: {s.path})" for s in sources])
        self.plugins: list[Plugin]
        self.load_failures: list[LoadFailure]
        self.plugins, self.load_failures = load_all(
            sources, CertificationPolicy.from_config(self.config.certification), self.config.probe_plugins)
        self.devices: list[DeviceInfo]
        self.devices, self.device_notes = build_device_list(self.plugins, self.config)
        if self.config.require_lock:      # before any device is used (docs/operators/locks-and-upgrades.md)
            enforce_lock(self.config.require_lock, self.plugins)
        self.streams = StreamRegistry(self._open_default_streams())
        self.op_names = build_op_table(self.devices, self.config.kernels)
        self.allocators = [CachingAllocator(d, self._synchronizer(d.index)) for d in self.devices]
        self.uploads = PendingUploads()      # host buffers of copies in flight (ops/owned/copies.py)
        self.rng = DeviceRNG(len(self.devices))
        self.launcher = Launcher(self)
        self._local = threading.local()     # .device: this thread's current device
        # Writer tracking reads and updates several blocks per launch; one lock keeps a
        # block's (writer, used_by) pair consistent when threads launch on shared tensors.
        self._writers_lock = threading.Lock()
        self._cross_stream = False   # until a second stream is used, no writer tracking is needed
        if not self.devices:
            logger.warning("no fl devices: %s", self.empty_reason())

    def _open_default_streams(self) -> list[Stream]:
        """A default stream per device; a device whose plugin cannot make one is left
        out (with the reason), so one faulty plugin does not take the others down."""
        usable, streams = [], []
        for dev in self.devices:
            dev.index = len(usable)      # before the stream, which carries the index
            try:
                streams.append(Stream(dev, stream_id=DEFAULT_STREAM_ID))
            except Exception as exc:
                self.device_notes.append(f"{dev.device_type} device {dev.uuid} left out: {exc}")
                logger.warning(self.device_notes[-1])
                continue
            usable.append(dev)
        self.devices = usable
        return streams

    # -- devices ---------------------------------------------------------------
    def device(self, index: int) -> DeviceInfo:
        try:
            return self.devices[index]
        except (IndexError, TypeError):
            raise DeviceNotFoundError(
                f"fl:{index} does not exist: {len(self.devices)} fl device(s) are available "
                f"({self.empty_reason() if not self.devices else 'see torch_fl.list_devices()'})") from None

    def current_device(self) -> int:
        """This thread's current device (fl:0 until the thread sets another)."""
        return getattr(self._local, "device", 0)

    def set_current_device(self, index: int) -> None:
        """Make fl:index current for the calling thread only (CUDA's rule)."""
        self.device(index)
        self._local.device = index

    def use_native_thread_state(self, bridge) -> None:
        """With the native bridge, each thread's current device and streams live in C++, where
        PyTorch's device guard reads them (docs/users/native-bridge.md): from now on this
        runtime reads and writes them there."""
        def set_current_device(index: int) -> None:
            self.device(index)
            bridge.set_current_device(index)
        self.current_device = bridge.current_device          # the C function itself: the hot path
        self.set_current_device = set_current_device
        self.streams.use_native_thread_state(bridge.current_stream, bridge.set_current_stream)

    def empty_reason(self) -> str:
        """Why there are no devices, for messages, logs and doctor."""
        if not self.plugins and not self.load_failures:
            return ("no Torch-FL plugin is installed: install one (pip install a vendor plugin), or point "
                    "TORCH_FL_PLUGINS or the config's 'plugins:' at a plugin library")
        notes = [str(f.error) for f in self.load_failures] + list(self.device_notes)
        return "; ".join(notes) or "the loaded plugins report no devices"

    def synchronize(self, index: int | None = None) -> None:
        for i in ([index] if index is not None else range(len(self.devices))):
            self.streams.synchronize_device(i)

    def _synchronizer(self, index: int):
        return lambda: self.streams.synchronize_device(index)

    # -- memory ----------------------------------------------------------------
    def new_tensor(self, index: int, shape, stride, dtype: torch.dtype, stream: Stream) -> torch.Tensor:
        """A fresh, uninitialised tensor on fl:index with the given layout."""
        if dtype not in DL_DTYPES:
            raise UnsupportedDtypeError(dtype, f"fl:{index}", [str(d).removeprefix("torch.") for d in DL_DTYPES])
        return self.new_tensor_from_spec(index, (shape, stride, dtype,
                                                 storage_nbytes(shape, stride, dtype.itemsize)), stream)

    def new_tensor_from_spec(self, index: int, spec: tuple, stream: Stream) -> torch.Tensor:
        """new_tensor for a (shape, stride, dtype, nbytes) output spec (the hot path)."""
        shape, stride, dtype, nbytes = spec
        if nbytes == 0:
            return wrap_block(None, None, index, shape, stride, dtype)
        allocator = self.allocators[index]
        block = allocator.allocate(nbytes, stream)
        return wrap_block(block, allocator.release, index, shape, stride, dtype)

    def new_like_contiguous(self, t: torch.Tensor) -> torch.Tensor:
        index = t.device.index
        return self.new_tensor(index, tuple(t.shape), tuple(contiguous_strides(t.shape)), t.dtype,
                               self.streams.current(index))

    def copy_to_host(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        copy_to_host(self, src, dst)

    # -- ordering across streams (docs/users/devices.md) ------------------------------------------
    def note_cross_stream(self) -> None:
        if not self._cross_stream:
            self._cross_stream = True
            self.launcher.note_cross_stream()

    def order_after_writers(self, index: int, stream: Stream, inputs, outputs) -> None:
        """Make `stream` wait for pending writes (on other streams) to what it will touch,
        and remember that it touched them.  Free while only default streams are used."""
        if not self._cross_stream:
            return
        allocator = self.allocators[index]
        bridge = getattr(allocator, "bridge", None)
        if bridge is not None:
            # This thread's earlier marks are enqueued now (bridge/csrc/stream_order.h "Once per write").
            bridge.settle_writes()
        live = allocator.live
        with self._writers_lock:
            for value in (*inputs, *outputs):
                for t in (value if isinstance(value, (list, tuple)) else (value,)):
                    if isinstance(t, torch.Tensor) and t.device.type != "cpu" and t.device.index == index:
                        block = live.get(storage_base(t))
                        if block is None:
                            continue
                        writer = block.writer or block.stream
                        if writer is not stream:
                            stream.wait_stream(writer)
                        if block.stream is not stream:
                            block.used_by.add(stream)
            for t in outputs:
                self._mark_written_locked(t, stream)

    def mark_written(self, t, stream: Stream) -> None:
        if self._cross_stream and isinstance(t, torch.Tensor):
            with self._writers_lock:
                self._mark_written_locked(t, stream)

    def _mark_written_locked(self, t, stream: Stream) -> None:
        if isinstance(t, torch.Tensor):
            block = self.allocators[t.device.index].live.get(storage_base(t))
            if block is not None:
                block.writer = stream

