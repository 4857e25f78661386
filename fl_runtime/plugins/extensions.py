"""A plugin's optional feature sets (fl_abi.h, "EXTENSIONS"): the chain behind fl_api.extension_start.

A 1.0 table ends before `extension_start`, so its plugin offers none; a 1.1
table may leave it NULL.  The chain is walked once per plugin and each feature
set read and cached on it:
  - collectives (ABI 1.1, fl_collectives.h): `collectives_of(plugin)`; one too short
    for `reach` (1.1), or with a value the header does not name, reaches the ranks of one
    host only (fl_comm_reach);
  - pinned host memory (ABI 1.2, fl_host_memory.h): `host_memory_of(plugin)`, also
    `plugin.host_memory`: page-locked host blocks whose copies may run truly
    asynchronously;
  - inter-process memory (ABI 1.3, fl_ipc.h): `ipc_of(plugin)`: device allocations
    exported as handles another process opens (integration/ipc.py).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from fl_runtime import abi
from fl_runtime.abi import ffi
from fl_runtime.errors import PluginLoadError

# A chain longer than this is a loop or garbage: a plugin offers a handful of extensions.
_MAX_CHAIN = 64
_REQUIRED = ("comm_get_unique_id", "comm_create", "comm_destroy")
COLLECTIVE_CALLS = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "send", "recv")

_lock = threading.Lock()


@dataclass(frozen=True)
class Collectives:
    """A plugin's collectives extension: the cffi struct and what it declares."""
    table: object                  # fl_collectives_extension*
    dtypes: int                    # mask of (1 << fl_dtype)
    reduce_ops: int                # mask of (1 << fl_reduce_op)
    max_ranks: int
    offered: frozenset[str]        # the COLLECTIVE_CALLS whose pointer is set (and covered)
    reach: int = abi.COMM_REACH_HOST   # fl_comm_reach (ABI 1.2)

    @property
    def crosses_hosts(self) -> bool:
        """Whether one communicator may join ranks on different hosts (FL_COMM_REACH_ANY)."""
        return self.reach == abi.COMM_REACH_ANY

    def takes(self, call: str, fl_dtype: int, op: int | None = None) -> bool:
        """Whether the plugin serves `call` on this dtype (and reduce op)."""
        if call not in self.offered or not (self.dtypes >> fl_dtype) & 1:
            return False
        return op is None or bool((self.reduce_ops >> op) & 1)


class HostMemory:
    """A plugin's pinned host-memory extension (fl_host_memory.h): page-locked host blocks.

    Copies between a block and the plugin's devices (memcpy_h2d_async / memcpy_d2h_async
    with the host side inside one block) may run truly asynchronously: the caller keeps the
    block alive and does not modify it until the stream has passed the copy.  Thread-safe
    (the plugin's calls are)."""

    def __init__(self, plugin, table) -> None:
        self._plugin = plugin
        self.table = table         # fl_host_memory_extension*

    def alloc(self, device: int, size: int) -> int:
        """A block of `size` bytes for copies with the plugin's device `device` (its own index,
        DeviceInfo.local_index); its host address.  VendorError on failure: status
        FL_ERROR_OUT_OF_MEMORY when the host cannot give it now, FL_ERROR_NOT_SUPPORTED from a
        plugin whose extension is a skeleton (treat it as absent)."""
        args = ffi.new("fl_host_alloc_args*", {"struct_size": ffi.sizeof("fl_host_alloc_args"), "device": device,
                                               "size": size})
        self._plugin.check(self.table.host_alloc(args), f"host_alloc(device={device}, size={size})")
        return int(ffi.cast("uintptr_t", args.ptr))

    def free(self, address: int) -> None:
        """Give back a block alloc returned, once no copy still uses it.  VendorError
        (FL_ERROR_INVALID_POINTER) for anything else."""
        args = ffi.new("fl_host_free_args*", {"struct_size": ffi.sizeof("fl_host_free_args"),
                                              "ptr": ffi.cast("void*", address)})
        self._plugin.check(self.table.host_free(args), f"host_free(0x{address:x})")


class Ipc:
    """A plugin's inter-process memory extension (fl_ipc.h): export a device allocation
    as a handle, open another process's handle, close it.  Devices are the plugin's own
    indices (DeviceInfo.local_index).  VendorError with the plugin's message on failure."""

    HANDLE_BYTES = 64

    def __init__(self, plugin, table) -> None:
        self._plugin = plugin
        self.table = table         # fl_ipc_extension*

    def get_handle(self, device: int, ptr: int) -> tuple[bytes, int, int]:
        """(handle, offset of ptr in its allocation, the allocation's bytes)."""
        args = ffi.new("fl_ipc_get_handle_args*", {"struct_size": ffi.sizeof("fl_ipc_get_handle_args"),
                                                   "device": device, "ptr": ptr})
        self._plugin.check(self.table.ipc_get_handle(args), f"ipc_get_handle(device={device}, ptr=0x{ptr:x})")
        return bytes(ffi.buffer(args.handle.bytes)), int(args.offset), int(args.size)

    def open(self, device: int, handle: bytes) -> tuple[int, int]:
        """(the allocation's start in this process, its bytes)."""
        args = ffi.new("fl_ipc_open_handle_args*", {"struct_size": ffi.sizeof("fl_ipc_open_handle_args"),
                                                    "device": device})
        ffi.memmove(args.handle.bytes, handle, min(len(handle), self.HANDLE_BYTES))
        self._plugin.check(self.table.ipc_open_handle(args), f"ipc_open_handle(device={device})")
        return int(args.ptr), int(args.size)

    def close(self, device: int, ptr: int) -> None:
        args = ffi.new("fl_ipc_close_handle_args*", {"struct_size": ffi.sizeof("fl_ipc_close_handle_args"),
                                                     "device": device, "ptr": ptr})
        self._plugin.check(self.table.ipc_close_handle(args), f"ipc_close_handle(device={device}, ptr=0x{ptr:x})")


def collectives_of(plugin) -> Collectives | None:
    """The plugin's collectives, or None when it offers none (a 1.0 table, no such extension)."""
    return _cached(plugin, "_fl_collectives", _read_collectives)


def host_memory_of(plugin) -> HostMemory | None:
    """The plugin's pinned host memory, or None when it offers none (a table before 1.2, or
    no such extension: the runtime then stages copies through memory of its own)."""
    return _cached(plugin, "_fl_host_memory", _read_host_memory)


def ipc_of(plugin) -> Ipc | None:
    """The plugin's inter-process memory, or None when it offers none (a table before 1.3,
    or no such extension: fl tensors then cannot be sent to other processes)."""
    return _cached(plugin, "_fl_ipc", _read_ipc)


def _cached(plugin, attribute: str, read):
    with _lock:
        if not hasattr(plugin, attribute):
            setattr(plugin, attribute, read(plugin))
        return getattr(plugin, attribute)


def _entry(plugin, extension_type: int):
    """The first extension of `extension_type` on the plugin's chain, or NULL."""
    api = plugin.api
    if not abi.struct_covers(api, "fl_api", "extension_start") or api.extension_start == ffi.NULL:
        return ffi.NULL
    entry = api.extension_start
    for _ in range(_MAX_CHAIN):
        if entry == ffi.NULL or entry.type == extension_type:
            return entry
        entry = entry.next
    raise PluginLoadError(plugin.name, f"its extension chain is longer than {_MAX_CHAIN} entries (a loop?): "
                          "fix the plugin's fl_api.extension_start")


def _covers(ext, type_name: str, field: str) -> bool:
    layout = dict(ffi.typeof(type_name).fields)[field]
    return ext.base.struct_size >= layout.offset + ffi.sizeof(layout.type)


def _read_collectives(plugin) -> Collectives | None:
    entry = _entry(plugin, abi.EXTENSION_COLLECTIVES)
    if entry == ffi.NULL:
        return None
    ext = ffi.cast("const fl_collectives_extension*", entry)
    if not _covers(ext, "fl_collectives_extension", "comm_destroy"):
        raise PluginLoadError(plugin.name, f"its collectives extension is {ext.base.struct_size} bytes, too short "
                              "for the comm_* functions fl_collectives.h requires of it")
    missing = [name for name in _REQUIRED if getattr(ext, name) == ffi.NULL]
    if missing:
        raise PluginLoadError(plugin.name, f"its collectives extension has {', '.join(missing)} = NULL; "
                              "fl_collectives.h requires them whenever the extension is present")
    offered = frozenset(name for name in COLLECTIVE_CALLS
                        if _covers(ext, "fl_collectives_extension", name) and getattr(ext, name) != ffi.NULL)
    return Collectives(ext, int(ext.dtypes), int(ext.reduce_ops), int(ext.max_ranks), offered, _reach(ext))


def _reach(ext) -> int:
    """fl_comm_reach: what the plugin declares, FL_COMM_REACH_HOST when it declares nothing we know."""
    if _covers(ext, "fl_collectives_extension", "reach") and int(ext.reach) == abi.COMM_REACH_ANY:
        return abi.COMM_REACH_ANY
    return abi.COMM_REACH_HOST


def _read_host_memory(plugin) -> HostMemory | None:
    entry = _entry(plugin, abi.EXTENSION_HOST_MEMORY)
    if entry == ffi.NULL:
        return None
    ext = ffi.cast("const fl_host_memory_extension*", entry)
    if not _covers(ext, "fl_host_memory_extension", "host_free") or ext.host_alloc == ffi.NULL \
            or ext.host_free == ffi.NULL:
        raise PluginLoadError(plugin.name, f"its host-memory extension ({ext.base.struct_size} bytes) lacks "
                              "host_alloc or host_free; fl_host_memory.h requires both whenever it is present")
    return HostMemory(plugin, ext)


def _read_ipc(plugin) -> Ipc | None:
    entry = _entry(plugin, abi.EXTENSION_IPC)
    if entry == ffi.NULL:
        return None
    ext = ffi.cast("const fl_ipc_extension*", entry)
    calls = ("ipc_get_handle", "ipc_open_handle", "ipc_close_handle")
    if not _covers(ext, "fl_ipc_extension", calls[-1]) or any(getattr(ext, name) == ffi.NULL for name in calls):
        raise PluginLoadError(plugin.name, f"its IPC extension ({ext.base.struct_size} bytes) lacks one of "
                              f"{', '.join(calls)}; fl_ipc.h requires all three whenever it is present")
    return Ipc(plugin, ext)
