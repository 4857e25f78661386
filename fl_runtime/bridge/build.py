"""Build the native bridge against the PyTorch that is installed, once, into a cache.

The bridge (csrc/, docs/users/native-bridge.md) is C++ against PyTorch's headers, so it is
built per PyTorch build: vendors never see a torch header, and one plugin binary serves
every admitted minor.  It is built ahead of time only, never behind an `import torch`:
- at `pip install` when the target environment already has torch (setup.py, into the
  package's `_prebuilt/`), and by `make build` / `torch-fl build-bridge` (into the cache);
- a start that finds no build for its PyTorch takes the Python route and says, at the first
  fl use, which command builds it (fl_runtime/bridge/__init__.py).

The key is every input of the binary that can differ on one machine: the PyTorch version and
build (git revision, C++ ABI flag), the Python ABI (extension suffix) and a hash of the
bridge's sources and the ABI headers they include.  The compiler is not part of it: the C++ ABI flag pins what the binary must
match, so a compiler upgrade reuses the build, and finding one needs no compiler (a runtime
image without one loads the bridge built for it).  `find_built()` looks in the package's
`_prebuilt/` first, then the cache.  An entry is a folder `<key>/` holding `_fl_bridge.so` and
`manifest.json` (written last, with the library's SHA-256 and the compiler that built it): it
is used only when the manifest names the same key and the library's hash matches, so a stale
or corrupt entry is rebuilt, never loaded.  Builds run under an exclusive file lock per key
(eight ranks building at once build once), in a temporary folder renamed into place.
`CXX` may carry arguments (`CXX="ccache g++"`); `FL_WERROR=1` adds -Werror (our CI); `MAX_JOBS`
caps the parallel compilers.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
# The ABI headers the bridge includes by relative path (vendor_api.h, launch_program.h): an
# edit there changes the binary, so they are part of the sources' hash.
ABI_HEADERS = Path(__file__).resolve().parents[2] / "fl_sdk" / "include"
LIBRARY = "_fl_bridge.so"
MANIFEST = "manifest.json"
# Shipped by a wheel built where torch was importable (setup.py), checked before the cache.
PREBUILT = Path(__file__).resolve().parent / "_prebuilt"
# Why the wheel's build failed, beside its (missing) entry: pip hides a build's output, so the
# first fl use names it instead (fl_runtime/bridge/__init__.py).
INSTALL_FAILURE = "install-failure.json"
CACHE_ENV = "TORCH_FL_CACHE_DIR"
MAX_JOBS_ENV = "MAX_JOBS"   # parallel compilers, as torch.utils.cpp_extension reads it
WERROR_ENV = "FL_WERROR"     # the switch fl_sdk/build.py reads too: warnings fail the build (CI)
BUILD_COMMAND = "torch-fl build-bridge"
_TYPICAL_SECONDS = 60        # said before the first build on a machine (no timing recorded yet)


class BridgeBuildError(RuntimeError):
    """The bridge could not be built here; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """The PyTorch and Python the bridge is compiled against (its cache key)."""
    torch_version: str
    torch_git: str
    cxx11_abi: bool
    torch_dir: Path
    python_include: str
    python_abi: str = ""

    def identity(self) -> dict:
        return {"torch": self.torch_version, "torch_git": self.torch_git, "cxx11_abi": self.cxx11_abi,
                "python": self.python_abi, "sources": source_hash()}

    def key(self) -> str:
        text = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def source_hash() -> str:
    """The bridge's own sources and the ABI headers they include (fl_abi.h and what it includes;
    the SDK's driver and kernel helpers are vendors' code, which the bridge never compiles)."""
    digest = hashlib.sha256()
    sources = [path for path in sorted(CSRC.iterdir()) if path.suffix in (".cpp", ".h")]
    for path in sources + _abi_headers(sources):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _abi_headers(sources: list[Path]) -> list[Path]:
    """The headers of fl_sdk/include that `sources` include, directly or through each other
    (found by file name: the bridge's own headers share none with the SDK's)."""
    found: dict[Path, None] = {}
    pending = list(sources)
    while pending:
        for name in _QUOTED_INCLUDE.findall(pending.pop().read_text()):
            header = ABI_HEADERS / Path(name).name
            if header not in found and header.is_file():
                found[header] = None
                pending.append(header)
    return sorted(found)


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "torch_fl")
    return Path(base) / "bridge"


def target() -> Target:
    """The running PyTorch and Python (no compiler is looked for)."""
    import torch
    return Target(torch_version=torch.__version__, torch_git=getattr(torch.version, "git_version", "") or "",
                  cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI), torch_dir=Path(torch.__file__).resolve().parent,
                  python_include=sysconfig.get_paths()["include"],
                  python_abi=sysconfig.get_config_var("EXT_SUFFIX") or sys.implementation.cache_tag)


def compiler() -> list[str]:
    """The C++ compiler command (`CXX`, split as a shell would: `ccache g++` keeps both
    words), else Python's own CXX, else c++; BridgeBuildError when it is not on PATH."""
    command = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
    executable = shutil.which(command[0]) if command else None
    if executable is None:
        raise BridgeBuildError(f"no C++ compiler: '{' '.join(command)}' is not on PATH (install g++ or set CXX)")
    return [executable, *command[1:]]


def check_headers(chain: Target) -> None:
    if not (chain.torch_dir / "include" / "ATen" / "detail" / "PrivateUse1HooksInterface.h").is_file():
        raise BridgeBuildError(f"this PyTorch ships no C++ headers ({chain.torch_dir / 'include'}): "
                               "the bridge needs them")


def library_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached_library(key: str, roots: tuple[Path, ...] | None = None) -> Path | None:
    """The verified library of `key` (prebuilt first, then the cache), or None."""
    for root in roots or (PREBUILT, cache_dir()):
        entry = root / key
        try:
            manifest = json.loads((entry / MANIFEST).read_text())
        except (OSError, ValueError):
            continue
        library = entry / LIBRARY
        if manifest.get("key") == key and library.is_file() and manifest.get("sha256") == library_sha256(library):
            return library
    return None


def find_built(chain: Target | None = None) -> Path | None:
    """The verified library for the running PyTorch (prebuilt, then cached), or None.  Runs no
    compiler and builds nothing: what a start calls."""
    return cached_library((chain or target()).key())


def ensure_built(chain: Target | None = None, *, announce=None, into: Path | None = None) -> Path:
    """The library for the running PyTorch: a verified cached one, else built now (under the
    key's lock; `announce(text)` hears what a first build is doing)."""
    chain = chain or target()
    key = chain.key()
    root = into or cache_dir()
    found = cached_library(key, (root,) if into else None)
    if found is not None:
        return found
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{key}.lock"):
        found = cached_library(key, (root,))       # another process may have built it meanwhile
        if found is not None:
            return found
        check_headers(chain)
        return _build_entry(chain, compiler(), key, root, announce or _say)


def build_into_wheel(into: Path, announce=None) -> Path:
    """setup.py's build into the wheel's `_prebuilt/`.  An entry the user's cache holds for the
    same key (the same torch, Python and sources: the same binary) is copied, not compiled again
    (a reinstall).  A failure is kept as INSTALL_FAILURE (the torch version and the error)
    before it is raised."""
    try:
        chain = target()
        key = chain.key()              # hashes every source: once
        cached = cached_library(key, (cache_dir(),))
        if cached is None:
            return ensure_built(chain, into=into, announce=announce)
        into.mkdir(parents=True, exist_ok=True)
        shutil.copytree(cached.parent, into / key, dirs_exist_ok=True)
        (announce or _say)(f"torch_fl: the native bridge for torch {chain.torch_version} is in the cache "
                           f"({cached.parent}): copied, not rebuilt")
        return cached_library(key, (into,)) or ensure_built(chain, into=into, announce=announce)
    except Exception as exc:
        record_install_failure(into, str(exc))
        raise


def record_install_failure(into: Path, error: str, torch_version: str | None = None) -> None:
    into.mkdir(parents=True, exist_ok=True)
    (into / INSTALL_FAILURE).write_text(json.dumps({"torch": torch_version or _installed_torch(), "error": error}))


def install_failure() -> dict | None:
    """What the wheel's build at `pip install` recorded when it failed, else None."""
    try:
        return json.loads((PREBUILT / INSTALL_FAILURE).read_text())
    except (OSError, ValueError):
        return None


def _installed_torch() -> str:
    from importlib import metadata
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def werror_asked() -> bool:
    return os.environ.get(WERROR_ENV, "") not in ("", "0")


def build_command(chain: Target, cxx: list[str], source: Path, output: Path) -> list[str]:
    include = chain.torch_dir / "include"
    # -Werror only where asked: a user's newer compiler warns where ours did not
    werror = ["-Werror"] if werror_asked() else []
    return [*cxx, "-std=c++20", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", *werror,
            f"-D_GLIBCXX_USE_CXX11_ABI={int(chain.cxx11_abi)}",
            # -isystem: PyTorch's and Python's headers are not ours to hold to -Werror
            "-isystem", str(include), "-isystem", chain.python_include, "-c", str(source), "-o", str(output)]


def link_command(chain: Target, cxx: list[str], objects: list[Path], output: Path) -> list[str]:
    lib = chain.torch_dir / "lib"
    return [*cxx, "-shared", *map(str, objects), "-o", str(output), f"-L{lib}",
            "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{lib}"]


def _build_entry(chain: Target, cxx: list[str], key: str, root: Path, announce) -> Path:
    typical = _typical_seconds(root)
    announce(f"torch_fl: building the native bridge for torch {chain.torch_version} "
             f"(once per PyTorch build; usually ~{typical:.0f} s here) into {root / key}")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"{key}.tmp-", dir=root))
    try:
        sources = sorted(CSRC.glob("*.cpp"))
        objects = [work / f"{source.stem}.o" for source in sources]
        jobs = _parallel_jobs(len(sources))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda pair: _run(build_command(chain, cxx, *pair), pair[0].name), zip(sources, objects)))
        _run(link_command(chain, cxx, objects, work / LIBRARY), "link")
        seconds = time.monotonic() - started
        manifest = {"key": key, "identity": chain.identity(), "compiler": _compiler_banner(cxx),
                    "sha256": library_sha256(work / LIBRARY),
                    "seconds": round(seconds, 1), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        for path in objects:
            path.unlink()
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
        final = root / key
        if final.exists():          # a stale or corrupt entry under this key: replaced, never loaded
            shutil.rmtree(final)
        os.rename(work, final)
        _record_seconds(root, seconds)
        announce(f"torch_fl: built the native bridge in {seconds:.0f} s")
        return final / LIBRARY
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _parallel_jobs(files: int) -> int:
    """One compiler per core, or MAX_JOBS (PyTorch's own extension builds read it too): each
    compiler holds PyTorch's headers in memory, so a small machine may want fewer."""
    asked = os.environ.get(MAX_JOBS_ENV, "")
    try:
        limit = int(asked) if asked else (os.cpu_count() or 1)
    except ValueError:
        raise BridgeBuildError(f"{MAX_JOBS_ENV}={asked!r} is not a whole number of parallel compilers") from None
    return max(1, min(files, limit))


def _compiler_banner(cxx: list[str]) -> str:
    try:
        out = subprocess.run([*cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.splitlines()[0] if out else "?"


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode < 0:      # the kernel's OOM killer sends SIGKILL, and says nothing here
        raise BridgeBuildError(f"compiling the native bridge failed at {what}: the compiler was killed by "
                               f"{signal.Signals(-result.returncode).name} (out of memory? a compile takes "
                               "~1 GB per file; close other work, or set MAX_JOBS=1)")
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise BridgeBuildError(f"compiling the native bridge failed at {what}:\n{tail}")


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _typical_seconds(root: Path) -> float:
    try:
        return float(json.loads((root / "timings.json").read_text())["last_build_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return _TYPICAL_SECONDS


def _record_seconds(root: Path, seconds: float) -> None:
    with contextlib.suppress(OSError):
        (root / "timings.json").write_text(json.dumps({"last_build_seconds": round(seconds, 1)}))


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
