"""The pinned host-memory extension (fl_host_memory.h, ABI 1.2) as the runtime reads it.

`plugin.host_memory` is the small API the runtime's pinned allocator calls:
alloc(device, size) -> host address, free(address); None for a plugin without the
extension.  The reference vendor offers it: blocks are page-aligned, the host reads and
writes them, copies between them and a device through the plugin's own streams are exact,
and host_free refuses what host_alloc did not return.
"""
from __future__ import annotations

import ctypes

import pytest
from conftest import ROOT

from fl_runtime.abi import ffi
from fl_runtime.errors import VendorError
from fl_runtime.plugins.loader import PluginSource, load_plugin


@pytest.fixture(scope="module")
def reference():
    return load_plugin(PluginSource("reference", str(ROOT / "reference_vendor" / "libfl_reference.so"), "config"),
                       probe_plugins=False)


def test_the_reference_offers_pinned_blocks_that_copy_exactly(reference):
    host = reference.host_memory
    assert host is not None and host is reference.host_memory      # read once, cached
    api = reference.api
    stream, device_block = ffi.new("fl_stream*"), ffi.new("fl_devptr*")
    reference.check(api.stream_create(1, stream), "stream_create")
    reference.check(api.fl_malloc(1, 1 << 16, 0, device_block), "fl_malloc")
    source, target = host.alloc(1, 1 << 16), host.alloc(0, 1 << 16)     # usable with any device's stream
    try:
        assert source % 4096 == 0 and target % 4096 == 0
        ctypes.memmove(source, bytes(range(256)) * 256, 1 << 16)
        reference.check(api.memcpy_h2d_async(stream[0], device_block[0], 0, ffi.cast("void*", source), 1 << 16), "h2d")
        reference.check(api.memcpy_d2h_async(stream[0], ffi.cast("void*", target), device_block[0], 0, 1 << 16), "d2h")
        reference.check(api.stream_synchronize(stream[0]), "stream_synchronize")
        assert ctypes.string_at(target, 1 << 16) == bytes(range(256)) * 256
    finally:
        host.free(source)
        host.free(target)
        reference.check(api.fl_free(1, device_block[0]), "fl_free")
        reference.check(api.stream_destroy(stream[0]), "stream_destroy")
    with pytest.raises(VendorError) as freed_twice:
        host.free(source)
    assert freed_twice.value.status_name == "FL_ERROR_INVALID_POINTER" and "freed already" in str(freed_twice.value)
    with pytest.raises(VendorError) as empty:
        host.alloc(0, 0)
    assert empty.value.status_name == "FL_ERROR_INVALID_SIZE"


def test_a_plugin_without_the_extension_has_none(build_plugin):
    """A 1.0-shaped table (tests/fixtures/plugin_bad_malloc.c) offers no extension chain at all."""
    library = build_plugin(ROOT / "tests" / "fixtures" / "plugin_bad_malloc.c")
    plugin = load_plugin(PluginSource("badmalloc", str(library), "config"), probe_plugins=False)
    assert plugin.host_memory is None
