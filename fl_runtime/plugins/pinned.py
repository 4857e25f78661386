"""Load exactly the library bytes that were hashed (README "Certifying a plugin").

A path is resolved twice by a naive check-then-load: once when its bytes are
hashed, once by dlopen.  A symlink or rename between the two gets another file
loaded under a valid certificate.  Here the library is opened once; the hash is
read from that descriptor and dlopen loads the same open file through
/proc/self/fd/N, so changing the path after the open cannot change what is loaded.
Where /proc is missing, the hashed bytes are copied to a private file and that
copy is loaded.

glibc expands `$ORIGIN` from the name handed to dlopen (verified: for
/proc/self/fd/N it is /proc/self/fd, and for a symlink it is the symlink's own
directory).  So a plugin's `$ORIGIN`-relative DT_RUNPATH/DT_RPATH dependencies are
found here, with `$ORIGIN` = the directory of the user's path (what a plain
dlopen(path) would use), and preloaded by absolute path before the plugin; the
dynamic linker then matches the plugin's DT_NEEDED to them by soname.  Those
dependencies are not covered by the certificate (it hashes the plugin only).
"""
from __future__ import annotations

import hashlib
import os
import stat
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_CHUNK = 1 << 20
_PROC_FD = "/proc/self/fd"
_DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 1, 5, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2


@dataclass
class PinnedLibrary:
    """One library opened once: its hash, and what loading it kept alive."""
    path: str                       # the user's path (messages, `devices`, plugin.source.path)
    fd: int                         # -1 once closed
    sha256: str
    size: int
    dependencies: list[Any] = field(default_factory=list)   # preloaded handles, kept mapped

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_pinned(path: str) -> PinnedLibrary:
    """Open `path` once (O_RDONLY|O_CLOEXEC) and hash the bytes behind that descriptor.

    Raises OSError when it cannot be opened or is not a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not _is_regular(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        digest, offset = hashlib.sha256(), 0
        while chunk := os.pread(fd, _CHUNK, offset):
            digest.update(chunk)
            offset += len(chunk)
    except BaseException:
        os.close(fd)
        raise
    return PinnedLibrary(path, fd, digest.hexdigest(), offset)


def _is_regular(mode: int) -> bool:
    return stat.S_ISREG(mode)


def load_pinned(pinned: PinnedLibrary, dlopen: Callable[[str], Any]) -> Any:
    """dlopen the bytes `pinned` hashed, never the path again.

    Through /proc the descriptor stays open for the process lifetime (plugins are
    never unloaded): glibc also recognises a loaded library by the name it was
    opened with, so a later dlopen of a reused /proc/self/fd/N would silently return
    the earlier library instead of the new file.  Otherwise it is closed."""
    try:
        pinned.dependencies = _preload_origin_dependencies(pinned, dlopen)
        if os.path.isdir(_PROC_FD):
            return dlopen(f"{_PROC_FD}/{pinned.fd}")
        lib = _load_private_copy(pinned, dlopen)
    except BaseException:
        pinned.close()
        raise
    pinned.close()
    return lib


def _load_private_copy(pinned: PinnedLibrary, dlopen: Callable[[str], Any]) -> Any:
    # Copy from the same descriptor, checking the copy hashes the same (an in-place
    # rewrite during the copy is refused rather than loaded).
    with tempfile.TemporaryDirectory(prefix="torch-fl-plugin-") as private:
        copy = os.path.join(private, os.path.basename(pinned.path))
        digest = hashlib.sha256()
        with open(copy, "wb") as out:
            offset = 0
            while chunk := os.pread(pinned.fd, _CHUNK, offset):
                digest.update(chunk)
                out.write(chunk)
                offset += len(chunk)
        if digest.hexdigest() != pinned.sha256:
            raise OSError(f"{pinned.path} changed while it was being loaded; load again")
        return dlopen(copy)     # mapped now; the directory may go


def _preload_origin_dependencies(pinned: PinnedLibrary, dlopen: Callable[[str], Any]) -> list[Any]:
    needed, search = elf_needed_and_search_path(pinned.fd)
    origin = os.path.dirname(os.path.abspath(pinned.path))
    handles = []
    for soname in needed:
        found = _first_on_search_path(soname, search, origin)
        if found is not None:
            handles.append(dlopen(found))
    return handles


def _first_on_search_path(soname: str, search: list[str], origin: str) -> str | None:
    """The `$ORIGIN` directory glibc would find `soname` in, when it comes first;
    None when a non-$ORIGIN entry wins (the dynamic linker finds that one itself)."""
    if "/" in soname:
        return None
    for entry in search:
        expanded = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        if "$" in expanded:
            continue                   # $LIB / $PLATFORM: left to the dynamic linker
        candidate = os.path.join(expanded, soname)
        if os.path.isfile(candidate):
            return candidate if expanded != entry else None
    return None


def elf_needed_and_search_path(fd: int) -> tuple[list[str], list[str]]:
    """DT_NEEDED and the DT_RUNPATH (else DT_RPATH) entries of a 64-bit little-endian
    ELF read from `fd`; ([], []) for anything else (the dynamic linker decides then)."""
    header = os.pread(fd, 64, 0)
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        return [], []
    phoff, = struct.unpack_from("<Q", header, 32)
    phentsize, phnum = struct.unpack_from("<HH", header, 54)
    loads, dynamic = [], None
    for i in range(phnum):
        ph = os.pread(fd, 56, phoff + i * phentsize)
        if len(ph) < 56:
            return [], []
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", ph, 0)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return [], []
    raw = os.pread(fd, dynamic[1], dynamic[0])
    entries = [struct.unpack_from("<qQ", raw, i) for i in range(0, len(raw) - 15, 16)]
    strtab = next((value for tag, value in entries if tag == _DT_STRTAB), None)
    if strtab is None:
        return [], []
    strtab_offset = next((off + strtab - vaddr for vaddr, off, size in loads
                          if vaddr <= strtab < vaddr + size), None)
    if strtab_offset is None:
        return [], []

    def string(offset: int) -> str:
        data = os.pread(fd, 4096, strtab_offset + offset)
        return data.split(b"\0", 1)[0].decode(errors="replace")

    needed = [string(value) for tag, value in entries if tag == _DT_NEEDED]
    runpath = [string(value) for tag, value in entries if tag == _DT_RUNPATH]
    rpath = [string(value) for tag, value in entries if tag == _DT_RPATH]
    search = ":".join(runpath or rpath).split(":") if (runpath or rpath) else []
    return needed, [entry for entry in search if entry]


def elf_needed_and_search_path_of(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """elf_needed_and_search_path for a file by name (diagnostics and tests)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return elf_needed_and_search_path(fd)
    finally:
        os.close(fd)
