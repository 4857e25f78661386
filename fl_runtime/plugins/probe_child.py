"""The isolated probe's child process (run by fl_runtime.plugins.probe as a script).

    python probe_child.py HEADER ENTRY_SYMBOL FD PATH SHA256 SIZE

Loads the library behind the inherited descriptor FD (the bytes the parent
hashed and will load, fl_runtime.plugins.pinned), calls its entry point, runs the
loader's table checks (fl_runtime.plugins.table_checks), initialises it (ABI 1.2)
and asks it for its devices, its device properties and its kernel table: the
calls a start-up makes; then tears it down again.
If the plugin aborts, segfaults or hangs in any of them, this process dies instead
of the user's.  Prints one line, MARKER + JSON: {"outcome": "ok"}, {"outcome":
"refused", "kind", "message"} or {"outcome": "unloadable", "message"} (dlopen or
the entry symbol failed: harmless, the loader says why in-process).

Never imports torch or the fl_runtime package (which imports torch): the four
modules it needs are loaded by path, so a probe costs an interpreter and cffi only
(and the header's cached out-of-line module, fl_runtime.abi.outofline, not a parse).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from types import ModuleType

MARKER = "@@torch-fl-probe@@"
_PLUGINS = os.path.dirname(os.path.abspath(__file__))


def _load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_fl_probe_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module       # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _report(result: dict) -> None:
    sys.stdout.flush()
    sys.stdout.write("\n" + MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


def _exercise(ffi, api, checks: ModuleType, success: int) -> None:
    """The calls a runtime start-up makes on a fresh table (devices.registry, ops.op_table)."""
    count = ffi.new("int32_t*")
    if api.device_count(count) == success and 0 <= count[0] <= checks.MAX_DEVICES_PER_PLUGIN:
        for index in range(count[0]):
            props = ffi.new("fl_device_properties*", {"struct_size": ffi.sizeof("fl_device_properties")})
            api.device_properties(index, props)
    entries, total = ffi.new("const fl_kernel_entry**"), ffi.new("uint32_t*")
    api.kernel_table(entries, total)


def main(argv: list[str]) -> int:
    header_path, entry_symbol, fd, path, sha256, size = argv
    abi_dir = os.path.join(os.path.dirname(_PLUGINS), "abi")
    header = _load("header", os.path.join(abi_dir, "header.py"))
    outofline = _load("outofline", os.path.join(abi_dir, "outofline.py"))
    checks = _load("table_checks", os.path.join(_PLUGINS, "table_checks.py"))
    pinned = _load("pinned", os.path.join(_PLUGINS, "pinned.py"))
    ffi = outofline.load_ffi(header.read_cdef(header_path), outofline.PACKAGED)
    levels = checks.AbiLevels.from_ffi(ffi, entry_symbol)
    library = pinned.PinnedLibrary(path, int(fd), sha256, int(size))
    try:
        lib = pinned.load_pinned(library, ffi.dlopen)      # the plugin's constructors run here
        get_api = getattr(lib, entry_symbol)
    except (OSError, *outofline.MISSING_SYMBOL) as exc:
        _report({"outcome": "unloadable", "message": str(exc)})
        return 0
    try:
        api = checks.negotiate(ffi, levels, get_api)
        checks.initialize(ffi, levels, api)
    except checks.TableRefusal as refusal:
        _report({"outcome": "refused", "kind": refusal.kind, "message": library.explain(refusal.message)})
        return 0
    checks.read_string(ffi, api.info.plugin_name)
    _exercise(ffi, api, checks, levels.success)
    checks.teardown(ffi, api)
    _report({"outcome": "ok"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
