"""Compiled object files, cached by content, so a rebuild compiles only what changed.

`fl-sdk build` compiles each C source to its own object (in parallel, one job per
core) and links them.  An object is keyed by everything that decides its bytes:
the compiler and its version, the flags (with the plugin directory written as a
placeholder), the source's name inside the plugin and its bytes, and the bytes of
every header the plugin or the SDK ships.  Two copies of a plugin in different
folders (a vendor's branches, a CI checkout, the conformance mutants) therefore
share objects: `-ffile-prefix-map` keeps the folder out of them.

The cache lives in $FL_SDK_BUILD_CACHE, else $XDG_CACHE_HOME/torch_fl/objects
(~/.cache/torch_fl/objects); FL_SDK_BUILD_CACHE=off compiles without it.  Entries
are written under a temporary name and renamed, so concurrent builds never read
a half-written object; entries unused for PRUNE_AFTER_DAYS are removed.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PRUNE_AFTER_DAYS = 14
PLACEHOLDER = "<plugin>"


class CompileError(RuntimeError):
    """A source did not compile; the message is the compiler's, naming the file."""


@dataclass(frozen=True)
class CompileJob:
    """One plugin's compile: the same compiler and flags for every source."""
    compiler: str
    flags: tuple[str, ...]
    plugin_dir: Path
    headers: tuple[Path, ...]      # every header whose change must recompile everything

    def key(self, source: Path) -> str:
        digest = hashlib.sha256()
        for part in (_compiler_identity(self.compiler), *self._portable_flags(), _portable_name(source, self.plugin_dir)):
            digest.update(part.encode() + b"\0")
        digest.update(source.read_bytes())
        for header in self.headers:
            digest.update(_portable_name(header, self.plugin_dir).encode() + b"\0" + header.read_bytes())
        return digest.hexdigest()

    def _portable_flags(self) -> list[str]:
        return [flag.replace(str(self.plugin_dir), PLACEHOLDER) for flag in self.flags]

    def command(self, source: Path, output: Path) -> list[str]:
        prefix_map = [f"-ffile-prefix-map={self.plugin_dir}=."] if _accepts_prefix_map(self.compiler) else []
        return [self.compiler, *self.flags, *prefix_map, "-c", str(source), "-o", str(output)]


def cache_dir() -> Path | None:
    """Where objects are kept, or None when the cache is switched off."""
    configured = os.environ.get("FL_SDK_BUILD_CACHE", "")
    if configured.lower() in ("off", "0", "no", "false"):
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torch_fl" / "objects"


def compile_all(job: CompileJob, sources: list[Path], scratch: Path, reuse: bool = True,
                jobs: int | None = None) -> list[Path]:
    """Object files for `sources`, in order: cached ones reused (unless `reuse` is False: then
    everything compiles and refreshes the cache), the rest compiled in parallel.  Without a
    cache, objects go to `scratch`.  Raises CompileError with the first failing source's
    diagnostics."""
    cache = cache_dir()
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    workers = jobs or int(os.environ.get("FL_SDK_JOBS", 0)) or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        objects = list(pool.map(lambda item: _object_for(job, item[1], cache, reuse, scratch / f"{item[0]}.o"),
                                enumerate(sources)))
    if cache is not None:
        _prune(cache)
    return objects


def _object_for(job: CompileJob, source: Path, cache: Path | None, reuse: bool, uncached: Path) -> Path:
    if cache is None:
        _compile(job, source, uncached)
        return uncached
    entry = cache / f"{job.key(source)}.o"
    if reuse and entry.exists():
        os.utime(entry)             # the prune clock counts from the last use
        return entry
    fd, partial = tempfile.mkstemp(dir=cache, suffix=".o.partial")
    os.close(fd)
    try:
        _compile(job, source, Path(partial))
        os.replace(partial, entry)
    finally:
        Path(partial).unlink(missing_ok=True)
    return entry


def _compile(job: CompileJob, source: Path, output: Path) -> None:
    result = subprocess.run(job.command(source, output), capture_output=True, text=True)
    if result.returncode != 0:
        raise CompileError(f"{source}:\n{result.stderr.strip()}")


def _portable_name(path: Path, plugin_dir: Path) -> str:
    try:
        return PLACEHOLDER + "/" + str(path.relative_to(plugin_dir))
    except ValueError:
        return str(path)            # an SDK file: its absolute path is the same for every plugin


@functools.lru_cache(maxsize=None)
def _compiler_identity(compiler: str) -> str:
    result = subprocess.run([compiler, "--version"], capture_output=True, text=True)
    return f"{os.path.realpath(compiler)}\n{result.stdout}"


@functools.lru_cache(maxsize=None)
def _accepts_prefix_map(compiler: str) -> bool:
    # gcc >= 8 and clang >= 10 have it; without it objects still work, they only name
    # the folder they were first compiled in (in __FILE__ and debug info).
    probe = subprocess.run([compiler, "-ffile-prefix-map=/a=.", "-E", "-x", "c", "/dev/null"],
                           capture_output=True)
    return probe.returncode == 0


def _prune(cache: Path) -> None:
    horizon = time.time() - PRUNE_AFTER_DAYS * 86400
    for entry in cache.glob("*.o"):
        try:
            if entry.stat().st_mtime < horizon:
                entry.unlink()
        except FileNotFoundError:
            pass                    # another build pruned it first
