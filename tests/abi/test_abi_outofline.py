"""The header's generated out-of-line cffi module (fl_runtime/abi/outofline.py).

The runtime's `ffi` comes from a module generated from fl_abi.h and cached; these
tests hold it to the in-line `cdef` parse of the same header (every type, size,
offset, enum value and constant), and check that a stale, corrupt or foreign cached
module is never used, that an unwritable cache or a failing generator still gives
a working ffi, and that concurrent first imports all work.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import _cffi_backend
import cffi
import pytest
from conftest import ROOT

from fl_runtime import abi
from fl_runtime.abi import outofline
from fl_runtime.abi.header import build_ffi, read_cdef

REGION = read_cdef(abi.HEADER_PATH)
KEY = outofline.module_key(REGION)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty per-test cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "torch_fl" / "abi"


# ---- the generated declarations equal the in-line ones ------------------------------------

def _describe(ctype, seen: set) -> object:
    """A structural description of a CType: what C sees (kinds, sizes, offsets, fields, values),
    not its display name ('struct fl_x' out-of-line, 'fl_x' in-line, for the same type)."""
    kind = ctype.kind
    if kind == "primitive":
        return (kind, ctype.cname)
    if kind == "enum":
        return (kind, sorted(ctype.elements.items()), _sizeof(ctype))
    if kind == "pointer":
        return (kind, _describe(ctype.item, seen))
    if kind == "array":
        return (kind, ctype.length, _describe(ctype.item, seen))
    if kind == "function":
        return (kind, [_describe(arg, seen) for arg in ctype.args], _describe(ctype.result, seen),
                ctype.ellipsis, ctype.abi)
    if kind == "void":
        return (kind,)
    assert kind in ("struct", "union"), kind
    tag = ctype.cname.split()[-1]
    if _opaque(ctype):
        return (kind, tag, "opaque")
    if tag in seen:                                # recursion through a pointer
        return (kind, tag)
    seen = seen | {tag}
    return (kind, tag, _sizeof(ctype), _cffi_backend.alignof(ctype),
            [(name, field.offset, field.bitshift, field.bitsize, field.flags, _describe(field.type, seen))
             for name, field in ctype.fields])


def _sizeof(ctype) -> int:
    return _cffi_backend.sizeof(ctype)


def _opaque(ctype) -> bool:
    """A declared, never defined struct (fl_stream_impl ...).  Asked by its size: reading
    `.fields` of an opaque struct of an out-of-line ffi trips an assertion in _cffi_backend 2.1."""
    try:
        _cffi_backend.sizeof(ctype)
    except ValueError:           # "ctype 'struct x' is of unknown size"
        return True
    return False


def _all_declarations(ffi) -> dict:
    typedefs, structs, unions = ffi.list_types()
    described = {f"typedef {name}": _describe(ffi.typeof(name), set()) for name in typedefs}
    described.update({f"struct {name}": _describe(ffi.typeof(f"struct {name}"), set()) for name in structs})
    described.update({f"union {name}": _describe(ffi.typeof(f"union {name}"), set()) for name in unions})
    return described


def _constants(ffi) -> dict:
    lib = ffi.dlopen(None)
    values = {}
    for name in dir(lib):
        try:
            value = getattr(lib, name)
        except (AttributeError, NotImplementedError, _cffi_backend.FFI.error):    # a function not here
            continue
        if isinstance(value, int):
            values[name] = value
    return values


def test_the_runtime_uses_the_generated_module():
    assert isinstance(abi.ffi, _cffi_backend.FFI) and not isinstance(abi.ffi, cffi.FFI)


def test_generated_declarations_equal_the_inline_parse():
    inline = build_ffi(abi.HEADER_PATH)
    generated = abi.ffi
    assert generated.list_types() == inline.list_types()
    assert len(inline.list_types()[0]) > 40        # the comparison covers the whole header
    assert _all_declarations(generated) == _all_declarations(inline)
    for name in inline.list_types()[0]:
        ctype = inline.typeof(name)
        if ctype.kind in ("struct", "union", "primitive", "enum", "pointer") and not _opaque(ctype):
            assert generated.sizeof(name) == inline.sizeof(name), name
            assert generated.alignof(name) == inline.alignof(name), name
        if ctype.kind == "struct":
            for field, _ in ctype.fields:
                assert generated.offsetof(name, field) == inline.offsetof(name, field), (name, field)
    other = outofline.execute_source(outofline.generate_source(_other_region())[0], "other")
    assert _all_declarations(other) != _all_declarations(inline)     # the comparison can fail
    constants = _constants(inline)
    assert {"FL_ABI_VERSION_MAJOR", "FL_SUCCESS", "FL_FLOAT32", "FL_COMM_UNIQUE_ID_BYTES"} <= set(constants)
    assert _constants(generated) == constants


def test_function_typedefs_call_through_the_generated_ffi():
    """A C function pointer of a header typedef, called with a header struct, sees what was passed."""
    inline = build_ffi(abi.HEADER_PATH)
    for name in ("fl_plugin_get_api_fn", "fl_all_reduce_fn", "fl_send_fn"):
        assert _describe(abi.ffi.typeof(name), set()) == _describe(inline.typeof(name), set())
    ffi, seen = abi.ffi, []

    @ffi.callback("fl_send_fn")
    def send(args):
        seen.append((args.struct_size, args.peer, args.count))
        return ffi.dlopen(None).FL_ERROR_NOT_SUPPORTED

    args = ffi.new("fl_send_args*", {"struct_size": ffi.sizeof("fl_send_args"), "peer": 3, "count": 17})
    assert send(args) == abi.ERROR_NOT_SUPPORTED
    assert seen == [(ffi.sizeof("fl_send_args"), 3, 17)]


# ---- what is cached, and what is never used -------------------------------------------------

def test_first_load_writes_a_verified_module_and_the_next_reads_it(cache):
    ffi = outofline.load_ffi(REGION)
    path = outofline.cache_path(KEY)
    assert path.parent == cache and path.exists()
    assert outofline.read_verified(path, KEY) is not None
    assert ffi.sizeof("fl_api") == abi.ffi.sizeof("fl_api")
    written = path.stat().st_mtime_ns
    again = outofline.load_ffi(REGION)
    assert path.stat().st_mtime_ns == written          # read, not regenerated
    assert again.offsetof("fl_tensor", "strides") == abi.ffi.offsetof("fl_tensor", "strides")
    assert [p.name for p in cache.iterdir()] == [path.name]        # no temporary files left


def test_the_key_changes_with_the_header_and_with_cffi(monkeypatch):
    assert outofline.module_key(REGION + "\n") != KEY
    minor = f"#define FL_ABI_VERSION_MINOR {abi.ABI_MINOR}"
    assert minor in REGION
    assert outofline.module_key(REGION.replace(minor, f"#define FL_ABI_VERSION_MINOR {abi.ABI_MINOR + 1}")) != KEY
    monkeypatch.setattr(_cffi_backend, "__version__", "0.0.0-other")
    assert outofline.module_key(REGION) != KEY


def _other_region() -> str:
    """The header with one constant changed: a module generated from it gives a visibly different ffi."""
    other = REGION.replace("#define FL_COMM_UNIQUE_ID_BYTES 128", "#define FL_COMM_UNIQUE_ID_BYTES 64")
    assert other != REGION, "the test's marker constant left the headers (fl_collectives.h)"
    return other


def _corruptions() -> dict[str, bytes]:
    valid = outofline.with_trailer(outofline.generate_source(REGION)[0], KEY).encode()
    other = _other_region()
    body = valid[:valid.rindex(b"# torch-fl abi ffi:")]
    return {
        # a whole, valid module of another header, under this header's name
        "stale": outofline.with_trailer(outofline.generate_source(other)[0], outofline.module_key(other)).encode(),
        "truncated": valid[: len(valid) // 2],
        "no trailer": body,
        "body edited": valid.replace(b"_version = 0x", b"_version= 0x", 1),
        "empty": b"",
        "binary": bytes(range(256)) * 8,
        "trailer only": valid[len(body):],
    }


@pytest.mark.parametrize("case", ["stale", "truncated", "no trailer", "body edited", "empty", "binary",
                                  "trailer only"])
def test_a_stale_or_corrupt_cached_module_is_never_used_and_is_regenerated(cache, case):
    path = outofline.cache_path(KEY)
    path.parent.mkdir(parents=True)
    path.write_bytes(_corruptions()[case])
    assert outofline.read_verified(path, KEY) is None
    ffi = outofline.load_ffi(REGION)
    assert ffi.dlopen(None).FL_COMM_UNIQUE_ID_BYTES == abi.COMM_UNIQUE_ID_BYTES == 128
    assert outofline.read_verified(path, KEY) is not None        # replaced by a good one


def test_a_module_that_verifies_but_does_not_build_an_ffi_is_regenerated(cache):
    path = outofline.cache_path(KEY)
    path.parent.mkdir(parents=True)
    path.write_text(outofline.with_trailer("raise ImportError('half-written by a broken tool')\n", KEY))
    assert outofline.load_ffi(REGION).sizeof("fl_api") == abi.ffi.sizeof("fl_api")
    path.write_text(outofline.with_trailer("ffi = 42\n", KEY))
    assert isinstance(outofline.load_ffi(REGION), _cffi_backend.FFI)
    assert "_cffi_backend.FFI(" in outofline.read_verified(path, KEY)


def test_a_packaged_module_comes_first_and_a_stale_one_is_skipped(cache, tmp_path):
    packaged = tmp_path / "pkg" / "_fl_abi_ffi.py"
    assert outofline.write_module(REGION, packaged)
    outofline.load_ffi(REGION, packaged)
    assert not cache.exists()                     # the wheel's module served: nothing generated
    other = _other_region()
    assert outofline.write_module(other, packaged)    # a module of another header in its place
    ffi = outofline.load_ffi(REGION, packaged)
    assert ffi.dlopen(None).FL_COMM_UNIQUE_ID_BYTES == 128
    assert outofline.read_verified(outofline.cache_path(KEY), KEY) is not None


def test_an_unwritable_cache_falls_back_without_an_error(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with caplog.at_level(logging.DEBUG, logger="torch_fl"):
        ffi = outofline.load_ffi(REGION)
    assert isinstance(ffi, _cffi_backend.FFI)
    assert _all_declarations(ffi) == _all_declarations(abi.ffi)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("cannot cache the ABI ffi module" in r.getMessage() for r in caplog.records)


def test_a_failing_generator_falls_back_to_the_inline_parse(cache, monkeypatch, caplog):
    def broken(region):
        raise cffi.CDefError("the generator cannot express this header")
    monkeypatch.setattr(outofline, "generate_source", broken)
    with caplog.at_level(logging.WARNING, logger="torch_fl"):
        ffi = outofline.load_ffi(REGION)
    assert isinstance(ffi, cffi.FFI)
    assert ffi.offsetof("fl_api", "launch_kernel") == abi.ffi.offsetof("fl_api", "launch_kernel")
    assert any("parsing the header in-line" in r.getMessage() for r in caplog.records)
    assert not cache.exists()


def test_a_write_error_midway_leaves_no_file_behind(cache, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(outofline.os, "replace", full_disk)
    assert not outofline.write_atomically(outofline.cache_path(KEY), "text\n")
    assert list(cache.iterdir()) == []


# ---- processes --------------------------------------------------------------------------------

_LOAD_BY_PATH = textwrap.dedent("""
    import importlib.util, json, os, sys, time
    def load(name):
        path = os.path.join(sys.argv[1], "fl_runtime", "abi", name + ".py")
        spec = importlib.util.spec_from_file_location("_t_" + name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    header, outofline = load("header"), load("outofline")
    region = header.read_cdef(sys.argv[2])
    while time.time() < float(sys.argv[3]):      # all start generating at the same moment
        time.sleep(0.001)
    ffi = outofline.load_ffi(region)
    print(json.dumps({"torch": "torch" in sys.modules, "size": ffi.sizeof("fl_api"),
                      "minor": ffi.dlopen(None).FL_ABI_VERSION_MINOR}))
""")


def test_concurrent_first_loads_all_work_and_leave_one_whole_module(tmp_path):
    import time
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    start_at = str(time.time() + 8)
    children = [subprocess.Popen([sys.executable, "-c", _LOAD_BY_PATH, str(ROOT), str(abi.HEADER_PATH), start_at],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                for _ in range(6)]
    results = [child.communicate(timeout=300) for child in children]
    for child, (out, err) in zip(children, results):
        assert child.returncode == 0, err
        assert json.loads(out) == {"torch": False, "size": abi.ffi.sizeof("fl_api"), "minor": abi.ABI_MINOR}
    folder = tmp_path / "xdg" / "torch_fl" / "abi"
    assert [p.name for p in folder.iterdir()] == [f"ffi-{KEY}.py"]      # no torn temporaries
    assert outofline.read_verified(folder / f"ffi-{KEY}.py", KEY) is not None


def test_a_script_with_an_unwritable_cache_runs_on_fl_devices(python, tmp_path):
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    result = python("""
        import torch, torch_fl
        from fl_runtime import abi
        a = torch.arange(12.0).reshape(3, 4)
        out = (a.to("fl:0") * 2 + 1).sum(0).cpu()
        torch.testing.assert_close(out, (a * 2 + 1).sum(0))
        print(type(abi.ffi).__module__, torch.fl.device_count())
    """, {"XDG_CACHE_HOME": str(blocker)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["_cffi_backend", "2"]
    assert "Warning" not in result.stderr and "warning" not in result.stderr.lower(), result.stderr[-2000:]


def test_a_fresh_cache_gets_one_module_and_a_second_process_reuses_it(python, tmp_path):
    code = """
        import os, torch, torch_fl
        from fl_runtime import abi
        from fl_runtime.abi import outofline
        path = outofline.cache_path(outofline.module_key(abi.CDEF))
        print(os.stat(path).st_mtime_ns, torch.fl.device_count())
    """
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    first, second = python(code, env), python(code, env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    assert first.stdout.split()[1] == "2"
    assert first.stdout == second.stdout        # the same file: the second process did not regenerate


def test_a_missing_symbol_is_one_of_the_errors_callers_catch():
    """The out-of-line lib raises ffi.error where the in-line one raised AttributeError; the
    loader and the probe catch abi.MISSING_SYMBOL, which names both."""
    for ffi in (abi.ffi, build_ffi(abi.HEADER_PATH)):
        lib = ffi.dlopen(None)        # the interpreter: it exports no fl_plugin_get_api
        with pytest.raises(abi.MISSING_SYMBOL):
            getattr(lib, abi.ENTRY_SYMBOL)
    with pytest.raises(_cffi_backend.FFI.error):
        getattr(abi.ffi.dlopen(None), abi.ENTRY_SYMBOL)
