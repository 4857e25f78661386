"""A plugin's optional feature sets (fl_abi.h, "EXTENSIONS", ABI 1.1): the chain behind fl_api.extension_start.

A 1.0 table ends before `extension_start`, so its plugin offers none; a 1.1
table may leave it NULL.  The chain is walked once per plugin and cached on it.
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

    def takes(self, call: str, fl_dtype: int, op: int | None = None) -> bool:
        """Whether the plugin serves `call` on this dtype (and reduce op)."""
        if call not in self.offered or not (self.dtypes >> fl_dtype) & 1:
            return False
        return op is None or bool((self.reduce_ops >> op) & 1)


def collectives_of(plugin) -> Collectives | None:
    """The plugin's collectives, or None when it offers none (a 1.0 table, no such extension)."""
    with _lock:
        if not hasattr(plugin, "_fl_collectives"):
            plugin._fl_collectives = _read_collectives(plugin)
        return plugin._fl_collectives


def _read_collectives(plugin) -> Collectives | None:
    api = plugin.api
    if not abi.struct_covers(api, "fl_api", "extension_start") or api.extension_start == ffi.NULL:
        return None
    entry = api.extension_start
    for _ in range(_MAX_CHAIN):
        if entry == ffi.NULL:
            return None
        if entry.type == abi.EXTENSION_COLLECTIVES:
            return _collectives(plugin, ffi.cast("const fl_collectives_extension*", entry))
        entry = entry.next
    raise PluginLoadError(plugin.name, f"its extension chain is longer than {_MAX_CHAIN} entries (a loop?): "
                          "fix the plugin's fl_api.extension_start")


def _covers(ext, field: str) -> bool:
    offset = ffi.offsetof("fl_collectives_extension", field)
    return ext.base.struct_size >= offset + ffi.sizeof(ffi.typeof(getattr(ext, field)))


def _collectives(plugin, ext) -> Collectives | None:
    if not _covers(ext, "comm_destroy"):
        raise PluginLoadError(plugin.name, f"its collectives extension is {ext.base.struct_size} bytes, too short "
                              "for the comm_* functions fl_abi.h requires of it")
    missing = [name for name in _REQUIRED if getattr(ext, name) == ffi.NULL]
    if missing:
        raise PluginLoadError(plugin.name, f"its collectives extension has {', '.join(missing)} = NULL; "
                              "fl_abi.h requires them whenever the extension is present")
    offered = frozenset(name for name in COLLECTIVE_CALLS if _covers(ext, name) and getattr(ext, name) != ffi.NULL)
    return Collectives(ext, int(ext.dtypes), int(ext.reduce_ops), int(ext.max_ranks), offered)
