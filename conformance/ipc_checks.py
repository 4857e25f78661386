"""Conformance of the inter-process memory extension (fl_ipc.h, ABI 1.3), in the memory category.

A plugin that offers the extension must answer its three calls with the statuses the header
names; a handle must cover the allocation holding the pointer (offset and size right); another
process of the host must open it and see the same bytes both ways (it reads what this process
wrote, this process reads what it wrote); an exporter may open its own handle; memory opened
from a handle cannot be exported again; closing gives the room back.  A plugin without the
extension: not_supported.  suite_memory.py collects these tests.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fl_runtime.abi import ffi
from fl_runtime.plugins.extensions import ipc_of

from conformance import statuses
from conformance.harness import STATUS, status_name, text

__all__ = ["ipc", "test_ipc_statuses", "test_ipc_handle_covers_the_allocation_and_reopens_in_this_process",
           "test_ipc_another_process_shares_the_bytes_both_ways"]

_CHILD_TIMEOUT_S = 120


@pytest.fixture
def ipc(conformance):
    ext = ipc_of(conformance.plugin)
    if ext is None:
        statuses.not_supported("the plugin offers no inter-process memory extension (fl_ipc.h)")
    return ext


def _args(type_name: str, **fields):
    return ffi.new(f"{type_name}*", {"struct_size": ffi.sizeof(type_name), **fields})


def _expect(conformance, status: int, expected: str, call: str) -> None:
    assert status == STATUS[expected], f"{call} returned {status_name(status)}, expected {expected}"
    assert text(conformance.plugin.api.last_error_message()).strip(), \
        f"{call} failed with {expected} but last_error_message() is empty"


def test_ipc_statuses(conformance, device, ipc):
    table = ipc.table
    count = ffi.new("int32_t*")
    conformance.plugin.api.device_count(count)
    ptr = device.malloc(4096)
    try:
        garbage = _args("fl_ipc_open_handle_args", device=0)
        ffi.memmove(garbage.handle.bytes, b"\x5a" * 64, 64)
        bad = {
            "ipc_get_handle(NULL)": (table.ipc_get_handle(ffi.NULL), "FL_ERROR_INVALID_POINTER"),
            "ipc_get_handle(struct_size=8)": (table.ipc_get_handle(ffi.new("fl_ipc_get_handle_args*",
                                                                           {"struct_size": 8})),
                                              "FL_ERROR_INVALID_VALUE"),
            "ipc_get_handle(flags=1)": (table.ipc_get_handle(_args("fl_ipc_get_handle_args", device=0, ptr=ptr,
                                                                   flags=1)), "FL_ERROR_INVALID_VALUE"),
            "ipc_get_handle(bad device)": (table.ipc_get_handle(_args("fl_ipc_get_handle_args", device=count[0],
                                                                      ptr=ptr)), "FL_ERROR_INVALID_DEVICE"),
            "ipc_get_handle(a pointer outside any allocation)": (
                table.ipc_get_handle(_args("fl_ipc_get_handle_args", device=0, ptr=8)), "FL_ERROR_INVALID_POINTER"),
            "ipc_open_handle(NULL)": (table.ipc_open_handle(ffi.NULL), "FL_ERROR_INVALID_POINTER"),
            "ipc_open_handle(a handle it never made)": (table.ipc_open_handle(garbage), "FL_ERROR_INVALID_VALUE"),
            "ipc_close_handle(NULL)": (table.ipc_close_handle(ffi.NULL), "FL_ERROR_INVALID_POINTER"),
            "ipc_close_handle(an allocation of its own)": (
                table.ipc_close_handle(_args("fl_ipc_close_handle_args", device=0, ptr=ptr)),
                "FL_ERROR_INVALID_POINTER"),
        }
        for call, (status, expected) in bad.items():
            _expect(conformance, status, expected, call)
    finally:
        device.free(ptr)


def test_ipc_handle_covers_the_allocation_and_reopens_in_this_process(conformance, device, ipc):
    size = 3 * 4096 + 100
    ptr = device.malloc(size)
    stream = device.new_stream()
    try:
        pattern = bytes(range(256)) * (size // 256) + bytes(size % 256)
        device.h2d(stream, ptr, 0, pattern)
        device.synchronize(stream)
        handle, offset, covered = ipc.get_handle(0, ptr + 1000)
        assert offset == 1000 and covered >= size, \
            f"ipc_get_handle(ptr + 1000) gave offset {offset} and size {covered} for an allocation of {size} bytes"
        opened, opened_size = ipc.open(0, handle)
        assert opened_size == covered, f"ipc_open_handle gave size {opened_size}, ipc_get_handle {covered}"
        try:
            assert device.read(stream, opened, 0, size) == pattern, "the opened handle does not hold the exporter's bytes"
            device.h2d(stream, opened, 5, b"\x01\x02\x03")
            device.synchronize(stream)
            assert device.read(stream, ptr, 5, 3) == b"\x01\x02\x03", "a write through the import is not seen"
            again = _args("fl_ipc_get_handle_args", device=0, ptr=opened)
            _expect(conformance, ipc.table.ipc_get_handle(again), "FL_ERROR_INVALID_POINTER",
                    "ipc_get_handle(memory opened from a handle)")
        finally:
            ipc.close(0, opened)
        closed = _args("fl_ipc_close_handle_args", device=0, ptr=opened)
        _expect(conformance, ipc.table.ipc_close_handle(closed), "FL_ERROR_INVALID_POINTER", "ipc_close_handle twice")
        assert device.read(stream, ptr, 0, 5) == pattern[:5], "closing an import changed the exporter's memory"
    finally:
        device.destroy_stream(stream)
        device.free(ptr)


_CHILD = """
import json, sys
from conformance.harness import Device
from conformance.target import load
from fl_runtime.plugins.extensions import ipc_of

plugin = load(sys.argv[1])
ipc, device = ipc_of(plugin), Device(plugin, 0)
stream = device.new_stream()
ptr, size = ipc.open(0, bytes.fromhex(sys.argv[2]))
seen = device.read(stream, ptr, int(sys.argv[3]), 4)
device.h2d(stream, ptr, int(sys.argv[3]) + 4, b"kids")
device.synchronize(stream)
ipc.close(0, ptr)
print(json.dumps({"seen": seen.hex(), "size": size}))
"""


def test_ipc_another_process_shares_the_bytes_both_ways(conformance, device, ipc):
    ptr = device.malloc(8192)
    stream = device.new_stream()
    try:
        device.h2d(stream, ptr, 4096, b"mine")
        device.synchronize(stream)
        handle, offset, size = ipc.get_handle(0, ptr)
        child = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), str(conformance.plugin.source.path),
                                handle.hex(), str(offset + 4096)], capture_output=True, text=True,
                               timeout=_CHILD_TIMEOUT_S)
        assert child.returncode == 0, f"the other process failed to open the handle: {child.stderr[-2000:]}"
        answer = json.loads(child.stdout.strip().splitlines()[-1])
        assert bytes.fromhex(answer["seen"]) == b"mine", "the other process does not read what this one wrote"
        assert answer["size"] == size, f"the other process opened {answer['size']} bytes, the handle covers {size}"
        assert device.read(stream, ptr, 4100, 4) == b"kids", "this process does not read what the other one wrote"
    finally:
        device.destroy_stream(stream)
        device.free(ptr)
