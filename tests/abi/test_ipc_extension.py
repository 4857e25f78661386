"""The inter-process memory extension (fl_ipc.h, ABI 1.3) as the runtime reads it.

`ipc_of(plugin)` is what integration/ipc.py calls: get_handle(device, ptr) -> (handle, offset,
size), open(device, handle) -> (ptr, size), close(device, ptr); None for a plugin without the
extension, and a plugin whose extension lacks a call is refused by name.  The two-process
behaviour is tests/runtime/test_ipc.py's; the vendor-side checks are conformance/ipc_checks.py's.
"""
from __future__ import annotations

import pytest
from conftest import ROOT

from fl_runtime.abi import ffi
from fl_runtime.errors import PluginLoadError, VendorError
from fl_runtime.plugins import extensions
from fl_runtime.plugins.loader import PluginSource, load_plugin


@pytest.fixture(scope="module")
def reference():
    return load_plugin(PluginSource("reference", str(ROOT / "reference_vendor" / "libfl_reference.so"), "config"),
                       probe_plugins=False)


def test_the_reference_exports_and_reopens_an_allocation(reference):
    ipc = extensions.ipc_of(reference)
    assert ipc is not None and ipc is extensions.ipc_of(reference)      # read once, cached
    api = reference.api
    block = ffi.new("fl_devptr*")
    reference.check(api.fl_malloc(0, 3 * 4096, 0, block), "fl_malloc")
    try:
        handle, offset, size = ipc.get_handle(0, block[0] + 4096 + 8)
        assert len(handle) == 64 and offset == 4096 + 8 and size >= 3 * 4096
        opened, opened_size = ipc.open(0, handle)
        assert opened_size == size and opened != block[0]       # a second address of the same memory
        ipc.close(0, opened)
        with pytest.raises(VendorError) as twice:
            ipc.close(0, opened)
        assert twice.value.status_name == "FL_ERROR_INVALID_POINTER"
        with pytest.raises(VendorError) as foreign:
            ipc.open(1, handle)                                  # the handle is device 0's
        assert foreign.value.status_name == "FL_ERROR_INVALID_DEVICE"
    finally:
        reference.check(api.fl_free(0, block[0]), "fl_free")
    with pytest.raises(VendorError) as freed:
        ipc.get_handle(0, block[0])
    assert freed.value.status_name == "FL_ERROR_INVALID_POINTER" and "live allocation" in str(freed.value)


class _Plugin:
    """Just enough of a Plugin for the chain reader: a table with one extension on it."""

    def __init__(self, extension) -> None:
        self.name = "fake"
        self._keep = extension
        self.api = ffi.new("fl_api*", {"struct_size": ffi.sizeof("fl_api"),
                                       "extension_start": ffi.cast("const fl_extension_base*", extension)})


def test_an_extension_missing_a_call_is_refused_by_name():
    extension = ffi.new("fl_ipc_extension*")
    extension.base.struct_size = ffi.sizeof("fl_ipc_extension")
    extension.base.type = extensions.abi.EXTENSION_IPC
    with pytest.raises(PluginLoadError, match="lacks one of ipc_get_handle, ipc_open_handle, ipc_close_handle"):
        extensions.ipc_of(_Plugin(extension))


def test_a_chain_without_the_extension_has_none():
    other = ffi.new("fl_extension_base*", {"struct_size": ffi.sizeof("fl_extension_base"), "type": 999})
    assert extensions.ipc_of(_Plugin(other)) is None
