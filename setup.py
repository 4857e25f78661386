"""Build hook: compile the reference vendor's plugin while the package is built.

`pip install torch-fl` (no extras, no make) must give working fl devices, so the
reference plugin's C sources are compiled here with the SDK's own builder
(fl_sdk/build.py reads reference_vendor/plugin.yaml) into the package being
built; an editable install compiles it in place, as `make build` does.
A wheel also carries the generated out-of-line cffi modules of the ABI header
and of DLPack (fl_runtime/abi/outofline.py, dlpack.py), so even the first `import torch` parses no C; an
editable install generates it into the user's cache on its first import instead.
It also compiles the runtime's optional C helpers (fl_runtime/compiled.py): without a compiler
for them the package still works, on their Python versions.
Everything else about the package is in pyproject.toml.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithReferencePlugin(build_py):
    def run(self) -> None:
        super().run()
        sys.path.insert(0, str(ROOT))       # the builder of the checkout being installed
        from fl_sdk.build import build, read_spec
        source = ROOT / "reference_vendor"
        if getattr(self, "editable_mode", False):
            # beside the sources, where the editable package looks; an up-to-date library is
            # kept, so a second venv (another PyTorch) uses the very same binary
            built = build(source, run_paths=_target_blas_dirs())
        else:
            output = Path(self.build_lib) / "reference_vendor" / read_spec(source).library
            built = build(source, output=output, force=True)   # a fresh build tree: always compile
            _write_abi_module(Path(self.build_lib))
            _prebuild_bridge(Path(self.build_lib))
        print(f"torch-fl: built the reference vendor plugin {built}")


def _prebuild_bridge(build_lib: Path) -> None:
    """The native bridge (fl_runtime/bridge), built into the wheel when the environment being
    installed into already has torch: the build runs the target interpreter in isolated mode
    (-I: pip's build-environment path is dropped, so the target's site-packages, and its torch,
    are seen).  Without torch there, or without a C++ compiler, the runtime takes the Python route
    and names `torch-fl build-bridge` at its first fl use (a start never compiles); a failed
    build leaves its error in the wheel, which that first use names (pip hides this output)."""
    builder = ROOT / "fl_runtime" / "bridge" / "build.py"
    into = build_lib / "fl_runtime" / "bridge" / "_prebuilt"
    script = (f"import importlib.util as u, sys; s = u.spec_from_file_location('fl_bridge_build', {str(builder)!r}); "
              f"b = sys.modules['fl_bridge_build'] = u.module_from_spec(s); s.loader.exec_module(b); "
              f"print(b.build_into_wheel(__import__('pathlib').Path({str(into)!r}), announce=print))")
    found = subprocess.run([sys.executable, "-I", "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        print("torch-fl: torch is not installed where torch-fl goes: run `torch-fl build-bridge` after installing it")
        return
    result = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True)
    for leftover in [*into.glob("*.lock"), into / "timings.json"]:     # the cache's, not the wheel's
        leftover.unlink(missing_ok=True)
    if result.returncode == 0:
        print(f"torch-fl: built the native bridge: {result.stdout.strip().splitlines()[-1]}")
    else:
        lines = result.stderr.strip().splitlines() or [f"the build ended with exit status {result.returncode}"]
        bridge_build = _load_by_path(builder)
        if not (into / bridge_build.INSTALL_FAILURE).exists():     # it died before it could say
            bridge_build.record_install_failure(into, "\n".join(lines[-15:]), found.stdout.strip())
        reason = lines[-1]
        print(f"torch-fl: the native bridge was not built ({reason}); `torch-fl build-bridge` builds it later")


def _write_abi_module(build_lib: Path) -> None:
    """The header's out-of-line cffi module, into the wheel (read by fl_runtime.abi.outofline).
    Loaded by path: importing fl_runtime would import torch, which the build environment lacks.
    A wheel without it still works (the first import generates it into the user's cache)."""
    abi = ROOT / "fl_runtime" / "abi"
    header, outofline, dlpack = (_load_by_path(abi / f"{name}.py") for name in ("header", "outofline", "dlpack"))
    abi_cdef = header.read_cdef(ROOT / "fl_sdk" / "include" / "fl_abi.h")     # with its extension headers
    # the headers' declarations, and DLPack's (devices/storage.py): every C text a start-up reads
    for region, name in ((abi_cdef, outofline.PACKAGED.name), (dlpack.CDEF, dlpack.PACKAGED.name)):
        target = build_lib / "fl_runtime" / "abi" / name
        if outofline.write_module(region, target):
            print(f"torch-fl: generated the cffi module {target}")


def _load_by_path(path: Path):
    spec = importlib.util.spec_from_file_location(f"_torch_fl_build_{path.stem}", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)   # dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _target_blas_dirs() -> tuple[str, ...]:
    """Where the environment being installed into will have OpenBLAS (a runtime dependency):
    pip's isolated build runs the target interpreter, so sysconfig names its site-packages,
    while the scipy_openblas32 the builder sees lives in a temporary overlay."""
    return (str(Path(sysconfig.get_paths()["purelib"]) / "scipy_openblas32" / "lib"),)


class BuildExtReplacingAtomically(build_ext):
    """An editable install copies the compiled extension into the checkout.  `make test`
    installs the checkout into its second venv while the first venv's tests have that
    file loaded, and a shared object rewritten in place under a process that maps it
    crashes the process (SIGBUS): so the copy goes to a temporary name, then os.replace."""

    def copy_file(self, infile, outfile, *args, **kwargs):
        temporary = f"{outfile}.{os.getpid()}.tmp"
        _, copied = super().copy_file(infile, temporary, *args, **kwargs)
        os.replace(temporary, outfile)
        return outfile, copied


class PlatformDistribution(Distribution):
    """The wheel carries a compiled plugin: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


# The compiled helpers (fl_runtime/compiled.py).  Optional: a failed compile warns and the
# package runs their Python versions.  No -Werror here (another compiler or Python's headers
# may warn); tests/runtime/test_compiled_helpers.py compiles them with -Wall -Wextra -Werror.
_helpers = _load_by_path(ROOT / "fl_runtime" / "compiled.py")
COMPILED_HELPERS = [Extension(name, [_helpers.source_of(name)], include_dirs=list(_helpers.INCLUDE_DIRS),
                              extra_compile_args=["-std=c11", "-O2"], optional=True) for name in _helpers.HELPERS]

# setuptools' egg_info writes the package metadata (entry points included) into a folder;
# by default that is the checkout's root, which is on sys.path whenever Python runs there
# (tests, `python -m`), so importlib.metadata takes it for the installed package.  `make
# test` reinstalls the checkout into its second venv while the main suite runs, and that
# rewrite left a moment with no entry points: no reference plugin, no autoload.  build/
# is off sys.path.
EGG_BASE = ROOT / "build"
EGG_BASE.mkdir(exist_ok=True)

setup(cmdclass={"build_py": BuildPyWithReferencePlugin, "build_ext": BuildExtReplacingAtomically},
      distclass=PlatformDistribution, ext_modules=COMPILED_HELPERS,
      options={"egg_info": {"egg_base": str(EGG_BASE)}})
