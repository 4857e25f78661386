"""The header's declarations as cffi's out-of-line ABI-mode module, generated once and cached.

Parsing fl_abi.h with `ffi.cdef` at every import costs pycparser's start-up and
parse, and every new type string given to `ffi.new`/`typeof` another parse
(docs/benchmarks/index.md "Start-up").  cffi's out-of-line ABI mode (`set_source(name, None)`
+ `emit_python_code`, no C compiler) turns the same declarations into a small
Python module whose `ffi` _cffi_backend builds from packed type tables, and whose
type strings a C parser reads.  The header stays the one source of truth: the
module is generated from the headers' cdef regions (header.read_cdef), and keyed by the
sha256 of that region and _cffi_backend's version, so a changed header, a changed
extraction or another cffi never meets a stale module.

Where the module is looked for, first match wins:
  1. for the header, fl_runtime/abi/_fl_abi_ffi.py (PACKAGED), written by the package build
     (setup.py) into a wheel;
  2. $XDG_CACHE_HOME/torch_fl/abi/ffi-<key>.py (~/.cache/torch_fl/abi/), written on the
     first import that found neither.
Every file ends with a trailer line naming its key and the sha256 of the lines
before it: a file whose trailer does not match (stale, truncated, corrupt) is
never executed, and is generated again.  Writes are atomic (a temporary file in
the same folder, then os.replace), so concurrent first imports (torchrun ranks)
each write a whole file and only ever read a whole one.  When the cache cannot be
written, the source just generated is executed from memory; when generation
itself fails, the in-line `cdef` FFI is used.  Neither is an error.

The trailer catches accidents (a torn write, a stale or edited file), not a hostile
writer of the user's own cache directory, who could as well edit any Python there.
Differences from an in-line FFI that callers may meet: a tagged typedef's cname reads
'struct fl_x' (in-line: 'fl_x'); a symbol a loaded library lacks raises `ffi.error`
(in-line: AttributeError; catch MISSING_SYMBOL); and `.fields` of an opaque struct (declared, never defined:
fl_stream_impl) trips an assertion in _cffi_backend 2.1 instead of returning None, so
ask such a type's size (ValueError) before its fields.

Standard library and _cffi_backend only (cffi and pycparser only to generate): the
isolated plugin probe (plugins/probe_child.py) and setup.py load this file by path,
without torch or the fl_runtime package.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import _cffi_backend

# Bump when the file layout below changes (the trailer, the module name): older files then miss.
FORMAT = 1
MODULE_NAME = "fl_runtime.abi._fl_abi_ffi"
PACKAGED = Path(__file__).with_name("_fl_abi_ffi.py")
_TRAILER = "# torch-fl abi ffi: key={key} sha256={digest}\n"

_log = logging.getLogger("torch_fl")       # fl_runtime.logs' logger, reached without importing it

# What looking up a symbol a dlopen'ed library lacks raises: ffi.error from an out-of-line
# FFI, AttributeError from an in-line one (the fallback): catch both.
MISSING_SYMBOL = (_cffi_backend.FFI.error, AttributeError)


def module_key(region: str) -> str:
    """The key a generated module must carry: the cdef region, the file format, the cffi backend."""
    digest = hashlib.sha256(f"torch-fl-abi-ffi/{FORMAT}\0{_cffi_backend.__version__}\0".encode())
    digest.update(region.encode("utf-8"))
    return digest.hexdigest()


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/torch_fl/abi (~/.cache/torch_fl/abi), beside plugins/probe.py's verdicts."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_fl" / "abi"


def cache_path(key: str) -> Path:
    return cache_dir() / f"ffi-{key}.py"


def load_ffi(region: str, packaged: Path | None = None) -> Any:
    """The FFI for the C declarations in `region` (an `_cffi_backend.FFI`, or a `cffi.FFI` when
    generation failed), from `packaged` (a module the package build wrote) or the cache; never
    raises for a cache problem.  Any cdef text works: fl_abi.h's region, or another C API's."""
    key = module_key(region)
    for path in (packaged, cache_path(key)):
        if path is None:
            continue
        source = read_verified(path, key)
        if source is not None:
            ffi = execute_source(source, path)
            if ffi is not None:
                return ffi
    return _generate_and_store(region, key)


def read_verified(path: Path, key: str) -> str | None:
    """The module source in `path` when its trailer names `key` and its digest matches, else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    body, newline, trailer = data[:-1].rpartition(b"\n")
    body += newline
    expected = _TRAILER.format(key=key, digest=hashlib.sha256(body).hexdigest()).encode("ascii")
    if not newline or trailer + data[-1:] != expected:
        _log.debug("ABI ffi module %s is stale or corrupt: not used", path)
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def generate_source(region: str) -> tuple[str, Any]:
    """(the out-of-line module's source, the in-line FFI it was generated from)."""
    import io

    import cffi     # only here: pycparser's import and parse are the cost this module saves
    inline = cffi.FFI()
    inline.cdef(region)
    inline.set_source(MODULE_NAME, None, compiler_verbose=0)   # None: ABI mode, no C compiler
    buffer = io.StringIO()
    inline.emit_python_code(buffer)
    return buffer.getvalue(), inline


def with_trailer(source: str, key: str) -> str:
    """`source` followed by the trailer read_verified checks."""
    if not source.endswith("\n"):
        source += "\n"
    return source + _TRAILER.format(key=key, digest=hashlib.sha256(source.encode("utf-8")).hexdigest())


def write_atomically(path: Path, text: str) -> bool:
    """Write `text` to `path` through a temporary file and os.replace; False when it cannot."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
        return True
    except OSError as exc:
        _log.debug("cannot cache the ABI ffi module in %s: %s", path.parent, exc)
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass
        return False


def write_module(region: str, path: Path) -> bool:
    """Generate the module for `region` into `path` (the package build's step); False when it cannot."""
    return write_atomically(path, with_trailer(generate_source(region)[0], module_key(region)))


def _generate_and_store(region: str, key: str) -> Any:
    try:
        source, inline = generate_source(region)
    except Exception as exc:  # noqa: BLE001 - cffi's generator failing is no reason to refuse devices
        _log.warning("could not generate the out-of-line ABI module (%s); parsing the header in-line", exc)
        import cffi
        inline = cffi.FFI()
        inline.cdef(region)
        return inline
    write_atomically(cache_path(key), with_trailer(source, key))
    ffi = execute_source(source, "<generated ABI module>")
    return ffi if ffi is not None else inline


def execute_source(source: str, origin: object) -> Any:
    """The `ffi` the module source builds, or None when it does not build one.  Executed from
    the verified text itself, never imported: no bytecode cache, no file read twice."""
    namespace: dict[str, Any] = {"__name__": MODULE_NAME}
    try:
        exec(compile(source, str(origin), "exec"), namespace)      # noqa: S102 - our own generated code
    except Exception as exc:  # noqa: BLE001 - a bad file is regenerated, never fatal
        _log.debug("ABI ffi module %s does not run (%s): not used", origin, exc)
        return None
    ffi = namespace.get("ffi")
    return ffi if isinstance(ffi, _cffi_backend.FFI) else None
