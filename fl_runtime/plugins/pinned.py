"""Load exactly the library bytes that were hashed (docs/operators/certificates.md).

A path is resolved twice by a naive check-then-load: once when its bytes are
hashed, once by dlopen.  A symlink or rename between the two gets another file
loaded under a valid certificate.  Here the library is opened once and hashed from
that descriptor; what is then loaded is provably those bytes, in one of three ways:

1. Its real path (symlinks resolved), when that path still names the opened file
   (same device and inode) and nobody can change what it names who could not already
   rewrite the library itself: the file and every directory above it are owned by
   root or the library's owner, and writable by no other group or user, unless sticky
   (docs/vendors/plugin-location.md "Which path").  Rewriting the library in place was
   never covered by the certificate (docs/operators/certificates.md "What is not
   promised"), so this adds no way in; and the plugin
   is mapped under its own name, so `dladdr()` + `dirname()` find its install
   directory from its very first constructor on, as with a plain dlopen.
2. Otherwise the open descriptor, through /proc/self/fd/N: changing the path after the
   open cannot change what is loaded, but the plugin sees /proc/self/fd/N as its own
   name (`location_note` says why it was not its real path).
3. Where /proc is missing too, a private copy of the hashed bytes.

glibc expands `$ORIGIN` from the name handed to dlopen (verified: for
/proc/self/fd/N it is /proc/self/fd, and for a symlink it is the symlink's own
directory).  So when loading through the descriptor or a copy, a plugin's
`$ORIGIN`-relative DT_RUNPATH/DT_RPATH dependencies are found here, with `$ORIGIN` =
the directory of the user's path (what a plain dlopen(path) would use), and preloaded
by absolute path before the plugin; the dynamic linker then matches the plugin's
DT_NEEDED to them by soname.  Loaded by its real path, the dynamic linker finds them
itself.  Dependencies are not covered by the certificate (it hashes the plugin only).
"""
from __future__ import annotations

import ctypes
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
    loaded_as: str = ""             # the name the dynamic linker knows it by (what dladdr() says)
    location_note: str = ""         # why that is not its real path ("" when it is)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def explain(self, problem: str) -> str:
        """`problem` (the plugin failed while loading), with why the plugin did not see its
        real path, when it did not: the first thing to suspect in a plugin that looks for
        files beside itself."""
        if not self.location_note:
            return problem
        return (f"{problem} (note: it was loaded as {self.loaded_as}, not under its real path, because "
                f"{self.location_note}; a plugin that finds its own files with dladdr() cannot find them "
                f"then: see docs/vendors/plugin-location.md)")


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
    """dlopen the bytes `pinned` hashed: by their real path where nobody else can change
    what it names (real_path_or_reason), else through the descriptor, never the user's path.

    Through /proc the descriptor stays open for the process lifetime (plugins are
    never unloaded): glibc also recognises a loaded library by the name it was
    opened with, so a later dlopen of a reused /proc/self/fd/N would silently return
    the earlier library instead of the new file.  Otherwise it is closed.  For the
    same reason a real path is used only when no library of that name is loaded yet
    (a plugin rebuilt at the same path and loaded again in one process)."""
    try:
        real, pinned.location_note = real_path_or_reason(pinned)
        if real and _loaded_already(real):
            real, pinned.location_note = "", (f"a library named {real} (or that file) is already loaded in this "
                                              "process, and loading that name again could return an earlier file")
        if real:
            lib = dlopen(real)
            pinned.loaded_as = real
        else:
            pinned.dependencies = _preload_origin_dependencies(pinned, dlopen)
            if os.path.isdir(_PROC_FD):
                pinned.loaded_as = f"{_PROC_FD}/{pinned.fd}"
                return dlopen(pinned.loaded_as)
            lib = _load_private_copy(pinned, dlopen)
    except BaseException:
        pinned.close()
        raise
    pinned.close()
    return lib


def real_path_or_reason(pinned: PinnedLibrary) -> tuple[str, str]:
    """(the real path of the opened library, "") when loading it by that path loads the
    hashed bytes; ("", why not) otherwise (module docstring, way 1)."""
    opened = os.fstat(pinned.fd)
    real = os.path.realpath(pinned.path)
    try:
        named = os.lstat(real)
    except OSError as exc:
        return "", f"its real path {real} cannot be examined ({exc.strerror})"
    if (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino):
        return "", f"{real} no longer names the file that was opened and hashed (it was replaced meanwhile)"
    directory = os.path.dirname(real)
    while True:
        try:
            info = os.lstat(directory)
        except OSError as exc:
            return "", f"{directory} cannot be examined ({exc.strerror})"
        who = _other_writer(info, opened)
        if who:
            return "", (f"{directory} can be changed by {who}, who cannot write the library itself, so its "
                        "path could be switched to other bytes between the check and the load; make it "
                        "writable only by the library's owner (or root)")
        if directory == os.path.dirname(directory):
            return real, ""
        directory = os.path.dirname(directory)


def _other_writer(directory: os.stat_result, library: os.stat_result) -> str:
    """Who could rename entries in `directory` without being able to rewrite the library
    in place ("" for nobody).  Its owner always can (chmod); a writable group or "other"
    can unless the directory is sticky (then only an entry's owner may replace it, and
    every entry on the path is owned by root or the library's owner: checked one level
    down, or the library itself).  A group-write bit also bounds POSIX ACL entries (the
    mask), so ACLs grant no write the mode bits do not show."""
    if not stat.S_ISDIR(directory.st_mode):
        return "whoever can replace it (it is no longer a directory)"
    if library.st_mode & stat.S_IWOTH:
        return ""                                    # anyone can rewrite the library itself
    if directory.st_uid not in (0, library.st_uid):
        return f"its owner (uid {directory.st_uid})"
    if directory.st_mode & stat.S_ISVTX:
        return ""
    if directory.st_mode & stat.S_IWOTH:
        return "every user"
    group_can_write_library = library.st_mode & stat.S_IWGRP and directory.st_gid == library.st_gid
    if directory.st_mode & stat.S_IWGRP and not group_can_write_library:
        return f"group {directory.st_gid}"
    return ""


def _loaded_already(path: str) -> bool:
    """Whether the dynamic linker already has a library by that name (or that file):
    RTLD_NOLOAD maps nothing and runs no constructor."""
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    return True


def mapped_name(address: int) -> str:
    """The file name the dynamic linker gives the library mapped at `address`: what
    `dladdr()` tells a plugin about itself ("" when no library is mapped there)."""
    info = _DlInfo()
    if address == 0 or _libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) == 0 or not info.dli_fname:
        return ""
    return os.fsdecode(info.dli_fname)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_libc = ctypes.CDLL(None)
_libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
_libc.dladdr.restype = ctypes.c_int


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
        pinned.loaded_as = copy
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
