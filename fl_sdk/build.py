"""Build a vendor plugin's shared library from its plugin.yaml.

plugin.yaml names the library, its C sources (globs, relative to the plugin
directory), extra compiler flags and well-known libraries to link
('openblas' resolves to the scipy-openblas32 package).  Everything compiles
with -Wall -Wextra (and -Werror where asked: FL_WERROR=1 or `fl-sdk build --werror`, as CI does;
never by default, since a user's newer compiler warns where the vendor's did not) against the SDK's headers (fl_sdk/include: fl_abi.h,
fl_kernel.h), with the plugin's `src/` directory on the include path.  A change
to any file under `src/` that is not a C source (headers, and files of other
suffixes a source includes, such as kernel code in another language) rebuilds
every source.

Keys:
  library        the shared library to write, relative to the plugin directory
  sources        globs of C sources, relative to the plugin directory
  cflags         extra compiler flags (optional)
  link           libraries to link (optional): `openblas` (scipy-openblas32, its
                 include directory and run paths too), or any system or vendor
                 library by the name `-l` takes (`m`, `dl`, `OpenCL`, `acme_driver`)
  link_dirs      directories that `link` libraries live in (optional; relative to
                 the plugin directory or absolute): searched at link time and put
                 on the library's run path, so a vendor driver library outside the
                 system's paths is found when the plugin loads
  sdk_libraries  SDK libraries compiled into the plugin with its own flags
                 (optional): `kernel` is the kernel library of fl_kernel.h
                 (fl_sdk/kernel_lib/: argument access, dtype conversion, type
                 promotion, strided iteration, the elementwise engine and the
                 kernel registry that builds the plugin's kernel table);
                 `driver` the driver library of fl_driver.h (fl_sdk/driver_lib/:
                 the chip-independent half of a driver: errors, negotiation,
                 struct_size rules, handle tables, launch-argument checks).
                 `driver` uses `kernel`, which it brings in when not listed.

`read_spec` resolves sdk_libraries into the spec's sources (absolute paths
after the plugin's own globs), so a spec's `sources` alone rebuild it.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import INCLUDE_DIR
from .object_cache import CompileError, CompileJob, compile_all
from .plugin_meta import PluginMetaError, write_metadata

# The SDK's C libraries a plugin.yaml may ask for (sdk_libraries), by name, and the ones each needs.
SDK_LIBRARIES = {"kernel": Path(__file__).resolve().parent / "kernel_lib",
                 "driver": Path(__file__).resolve().parent / "driver_lib"}
SDK_LIBRARY_NEEDS = {"kernel": (), "driver": ("kernel",)}

COMPILE_FLAGS = ["-std=gnu11", "-fPIC", "-pthread", "-Wall", "-Wextra"]
WERROR_ENV = "FL_WERROR"     # 1: warnings fail the build (the project's and vendors' CI)
LINK_FLAGS = ["-shared", "-pthread"]
# Compile and link in one command (what build_command prints; single-file checks use it).
BASE_FLAGS = [*COMPILE_FLAGS, "-shared"]


class BuildError(RuntimeError):
    """The plugin could not be built; the message says why and what to do."""


@dataclass(frozen=True)
class PluginSpec:
    directory: Path
    library: str
    sources: list[str]
    cflags: list[str]
    links: list[str]
    sdk_libraries: tuple[str, ...] = ()
    link_dirs: tuple[Path, ...] = ()

    @property
    def library_path(self) -> Path:
        return self.directory / self.library


def read_spec(directory: Path) -> PluginSpec:
    spec_file = directory / "plugin.yaml"
    if not spec_file.is_file():
        raise BuildError(f"{directory} has no plugin.yaml: is it a Torch-FL plugin directory?")
    raw = yaml.safe_load(spec_file.read_text()) or {}
    missing = [key for key in ("library", "sources") if key not in raw]
    if missing:
        raise BuildError(f"{spec_file}: missing key(s) {', '.join(missing)}")
    _check_library_name(raw["library"], directory, spec_file)
    listed = tuple(raw.get("sdk_libraries") or ())
    unknown = [name for name in listed if name not in SDK_LIBRARIES]
    if unknown:
        raise BuildError(f"{spec_file}: unknown sdk_libraries {', '.join(unknown)} "
                         f"(known: {', '.join(SDK_LIBRARIES)})")
    libraries = _with_needed(listed)
    sources = list(raw["sources"]) + [str(SDK_LIBRARIES[name] / "*.c") for name in libraries]
    links = [str(name) for name in raw.get("link") or ()]
    for name in links:
        _check_link_name(name, spec_file)
    return PluginSpec(directory, raw["library"], sources, list(raw.get("cflags", [])), links, libraries,
                      tuple(_link_dir(directory, entry, spec_file) for entry in raw.get("link_dirs") or ()))


# What `-l` takes: a library's name without `lib` and `.so` (never an option: no leading dash).
_LINK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_+.-]*")


def _check_link_name(name: str, spec_file: Path) -> None:
    if not _LINK_NAME.fullmatch(name):
        raise BuildError(f"{spec_file}: link: '{name}' is not a library name; write what follows -l "
                         "(OpenCL for libOpenCL.so), and put its directory under link_dirs:")


def _link_dir(directory: Path, entry: object, spec_file: Path) -> Path:
    path = (directory / str(entry)).resolve()
    if not path.is_dir():
        raise BuildError(f"{spec_file}: link_dirs: '{entry}' is not a directory ({path})")
    return path


def _with_needed(listed: tuple[str, ...]) -> tuple[str, ...]:
    """`listed` plus the SDK libraries they need, each once, needed ones first."""
    ordered: list[str] = []
    for name in listed:
        for needed in (*SDK_LIBRARY_NEEDS[name], name):
            if needed not in ordered:
                ordered.append(needed)
    return tuple(ordered)


def _check_library_name(library: object, directory: Path, spec_file: Path) -> None:
    """`library:` names a file inside the plugin directory: building writes it, and a
    plugin.yaml (perhaps from a template or a download) must not make the build
    overwrite a file elsewhere (`../../x.so`, an absolute path)."""
    if not isinstance(library, str) or not library.strip():
        raise BuildError(f"{spec_file}: library must be a file name such as libfl_acme.so, got {library!r}")
    inside = directory.resolve()
    target = (inside / library).resolve()
    if Path(library).is_absolute() or inside not in target.parents:
        raise BuildError(f"{spec_file}: library '{library}' is outside the plugin directory {inside}; name a "
                         "file inside it (e.g. libfl_acme.so) and copy the built library where it is needed")


def _matches(directory: Path, pattern: str) -> list[Path]:
    """The files a sources glob names: relative to the plugin directory, or absolute."""
    if Path(pattern).is_absolute():
        return [Path(p) for p in glob.glob(pattern)]
    return list(directory.glob(pattern))


def _link_flags(name: str) -> list[str]:
    if name == "openblas":
        import scipy_openblas32 as blas
        lib_dir = blas.get_lib_dir()
        # Two run paths: where the package is now (source and editable builds), and where it
        # is relative to an installed plugin package in the same site-packages (a wheel built
        # in pip's isolated build environment, whose lib_dir is gone after the build).
        return [f"-I{blas.get_include_dir()}", f"-L{lib_dir}", "-lscipy_openblas", f"-Wl,-rpath,{lib_dir}",
                "-Wl,-rpath,$ORIGIN/../scipy_openblas32/lib"]
    return [f"-l{name}"]


def compiler() -> str:
    chosen = os.environ.get("CC")
    if chosen:
        if not shutil.which(chosen):
            raise BuildError(f"CC={chosen} names no compiler (no executable file there, nor a command of that name "
                             "on PATH): set CC to an installed C compiler such as gcc or clang, or unset it")
        return chosen
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise BuildError("no C compiler found: install gcc or clang, or set CC")
    return cc


def build_command(spec: PluginSpec, output: Path | None = None, run_paths: tuple[str, ...] = ()) -> list[str]:
    """The whole build as one compiler command (what `--verbose` shows; `build` runs the
    same flags as one compile per source, cached, then one link)."""
    compile_flags, link_flags = _flags(spec, run_paths)
    return [compiler(), *compile_flags, "-shared", *map(str, _sources(spec)), "-o", str(output or spec.library_path),
            *link_flags]


def build(directory: str | Path, force: bool = False, verbose: bool = False, output: Path | None = None,
          run_paths: tuple[str, ...] = ()) -> Path:
    """Compile the plugin in `directory`; returns the library path (`output`, default the
    plugin.yaml's library beside the sources; `run_paths`: extra directories the library
    searches for the shared libraries it links).  Skips an up-to-date build; otherwise
    compiles each source once per content (fl_sdk.object_cache; `force` recompiles
    all and refreshes the cache) on every core, then links."""
    spec = read_spec(Path(directory).resolve())
    target = Path(output).resolve() if output else spec.library_path
    if not force and _up_to_date(spec, target):
        _write_metadata(spec, target)
        return target
    if verbose:
        print(" ".join(build_command(spec, target, run_paths)))
    compile_flags, link_flags = _flags(spec, run_paths)
    job = CompileJob(compiler(), tuple(compile_flags), spec.directory, _headers(spec))
    # Link into a temporary name and rename: a process that has the old library
    # mapped (or dlopens it right now) never sees a half-written file.
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="fl-sdk-build-") as scratch:
        try:
            objects = compile_all(job, _sources(spec), Path(scratch), reuse=not force)
        except CompileError as exc:
            raise BuildError(f"building {spec.library} failed: {exc}") from exc
        result = subprocess.run([job.compiler, *LINK_FLAGS, *map(str, objects), "-o", str(partial), *link_flags],
                                capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(f"linking {spec.library} failed:\n{result.stderr.strip()}")
    os.replace(partial, target)
    _write_metadata(spec, target)
    if output is None:      # beside the sources; an explicit output (a wheel's build tree) gets no record
        _write_record(spec, target)
    return target


def _sources(spec: PluginSpec) -> list[Path]:
    sources = sorted({p.resolve() for pattern in spec.sources for p in _matches(spec.directory, pattern)})
    if not sources:
        raise BuildError(f"{spec.directory}: plugin.yaml sources {spec.sources} match no file")
    return sources


def _flags(spec: PluginSpec, run_paths: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(compile flags, link flags): a linked library's include directory compiles too."""
    library_flags = [flag for name in spec.links for flag in _link_flags(name)]
    includes = [flag for flag in library_flags if flag.startswith("-I")]
    links = [flag for directory in spec.link_dirs for flag in (f"-L{directory}", f"-Wl,-rpath,{directory}")]
    links += [flag for flag in library_flags if not flag.startswith("-I")]
    links += [f"-Wl,-rpath,{path}" for path in run_paths]
    werror = ["-Werror"] if os.environ.get(WERROR_ENV, "") not in ("", "0") else []
    compile_flags = [*COMPILE_FLAGS, *werror, *spec.cflags, f"-I{INCLUDE_DIR}", f"-I{spec.directory / 'src'}", *includes]
    return compile_flags, [*links, "-lm"]


def _headers(spec: PluginSpec) -> tuple[Path, ...]:
    """Every file a source may include from the plugin or the SDK: headers, and any file
    under the plugin's `src/` that is not a C source (headers of system and third-party
    libraries are taken as fixed: `fl-sdk build --force` after upgrading one)."""
    roots = [spec.directory, INCLUDE_DIR, *(SDK_LIBRARIES[name] for name in spec.sdk_libraries)]
    found = {h.resolve() for root in roots for h in root.rglob("*.h")}
    src = spec.directory / "src"
    if src.is_dir():
        found |= {f.resolve() for f in src.rglob("*") if f.is_file() and f.suffix != ".c"}
    return tuple(sorted(found))


def _write_metadata(spec: PluginSpec, library: Path) -> None:
    # Beside the library: the driver requirement the runtime checks (fl_sdk.plugin_meta).
    try:
        write_metadata(spec.directory / "plugin.yaml", library)
    except PluginMetaError as exc:
        raise BuildError(f"plugin.yaml: {exc}") from exc


def _up_to_date(spec: PluginSpec, target: Path) -> bool:
    """The library exists, was built from exactly today's sources (a deleted or added
    source rebuilds: the build record lists them) and is newer than every input."""
    sources = _sources(spec)
    if not target.exists() or _read_record(target).get("sources") != _source_names(spec.directory, sources):
        return False
    inputs = sources + list(_headers(spec))
    inputs += [spec.directory / "plugin.yaml"]
    return all(p.stat().st_mtime <= target.stat().st_mtime for p in inputs if p.exists())


# The build record: a hidden file beside the library naming what it was built from (not
# package data: the package ships `*.so` and its certificate and metadata only).
def _record_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.build.json")


def _source_names(directory: Path, sources: list[Path]) -> list[str]:
    """Sources as names that do not depend on where the plugin or the SDK lies."""
    sdk = Path(__file__).resolve().parent
    return [str(path.relative_to(directory)) if directory in path.parents
            else f"<sdk>/{path.relative_to(sdk)}" if sdk in path.parents else str(path) for path in sources]


def _read_record(target: Path) -> dict:
    try:
        record = json.loads(_record_path(target).read_text())
    except (OSError, ValueError):
        return {}           # none (a library built before records were kept): rebuild once
    return record if isinstance(record, dict) else {}


def _write_record(spec: PluginSpec, target: Path) -> None:
    names = _source_names(spec.directory, _sources(spec))
    _record_path(target).write_text(json.dumps({"sources": names}, indent=1) + "\n")
