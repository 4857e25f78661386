"""The null plugin: the reference vendor built with FL_REFERENCE_NULL_KERNELS.

Same sources, so the same kernel table (every kernel and dtype declared), the
same device memory, copies, streams and launch-time declines; only an accepted
launch returns at once instead of validating, copying and queueing its
arguments (reference_vendor/src/driver/launch.c).  With it, the time a
benchmark measures on fl:0 is the runtime's own host cost.

Why a compile-time switch and not a separate plugin: a separate plugin would
have to restate the reference table (218 entries, their dtypes and `accepts`
declines) and would drift from it; the switch keeps both by construction.

    python benchmarks/null_plugin.py      # builds benchmarks/build/libfl_null.so
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

from fl_sdk.build import BuildError, build_command, read_spec
from fl_sdk.plugin_meta import write_metadata

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reference_vendor"
TARGET = Path(__file__).resolve().parent / "build" / "libfl_null.so"
SWITCH = "-DFL_REFERENCE_NULL_KERNELS"


def build_null_plugin(target: Path = TARGET) -> Path:
    """Compile the null plugin with fl-sdk's own command line (plus the switch); returns its path.
    Rebuilt only when a reference or SDK source is newer than the library."""
    spec = read_spec(REFERENCE)
    spec = dataclasses.replace(spec, library=target.name, cflags=[*spec.cflags, SWITCH])
    command = build_command(spec, target)
    inputs = [Path(p) for p in command if p.endswith((".c", ".h"))]
    inputs += list((REFERENCE / "src").rglob("*.h")) + [Path(__file__)]
    if not target.exists() or any(p.stat().st_mtime > target.stat().st_mtime for p in inputs):
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        command[command.index(str(target))] = str(partial)
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise BuildError(f"building the null plugin failed:\n{result.stderr.strip()}")
        os.replace(partial, target)
    write_metadata(REFERENCE / "plugin.yaml", target)     # the driver requirement the runtime checks
    return target


if __name__ == "__main__":
    print(build_null_plugin())
