"""`import torch` with torch-fl installed and no native bridge built for the running torch runs
no compiler (docs/users/native-bridge.md "Where it is built, and when"): every compiler name on PATH is a
stand-in that records its call, the install's prebuilt bridge is set aside and the cache is
empty.  Prints the import time (-X importtime) and what the first fl use says."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import fl_runtime

COMPILERS = ("c++", "g++", "gcc", "cc", "clang", "clang++", "x86_64-linux-gnu-g++", "x86_64-linux-gnu-gcc")

prebuilt = Path(fl_runtime.__file__).parent / "bridge" / "_prebuilt"
aside = prebuilt.with_name("_prebuilt.aside")
with tempfile.TemporaryDirectory() as scratch:
    fake_bin, calls = Path(scratch, "bin"), Path(scratch, "compiler-calls")
    fake_bin.mkdir()
    for name in COMPILERS:
        (fake_bin / name).write_text(f"#!/bin/sh\necho \"{name} $*\" >> {calls}\nexit 1\n")
        (fake_bin / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}",
           "TORCH_FL_CACHE_DIR": str(Path(scratch, "cache"))}
    env.pop("CXX", None)
    if prebuilt.exists():
        prebuilt.rename(aside)
    try:
        imported = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch"], env=env,
                                  capture_output=True, text=True, timeout=600)
        used = subprocess.run([sys.executable, "-c", "import torch; torch.ones(1, device='fl:0'); "
                               "torch.ones(1, device='fl:0'); from fl_runtime import bridge; print(bridge.status())"],
                              env=env, capture_output=True, text=True, timeout=600)
    finally:
        if aside.exists():
            aside.rename(prebuilt)
    assert imported.returncode == 0, imported.stderr[-2000:]
    lines = [line for line in imported.stderr.splitlines() if line.startswith("import time:")]
    torch_line = next(line for line in lines if line.rstrip().endswith("| torch"))
    autoloaded = any(line.rstrip().endswith("fl_runtime.integration.autoload") for line in lines)
    print(f"import torch: {int(torch_line.split('|')[1]) / 1e6:.2f} s cumulative, "
          f"fl_runtime autoloaded: {autoloaded}")
    assert autoloaded, "the autoload did not run (torch-fl's entry point is missing)"
    assert not calls.exists(), f"import torch ran a compiler: {calls.read_text()}"
    assert used.returncode == 0, used.stderr[-2000:]
    assert not calls.exists(), f"the first fl use ran a compiler: {calls.read_text()}"
    notices = [line for line in used.stderr.splitlines() if "torch-fl build-bridge" in line]
    assert len(notices) == 1, f"the first fl use says once how to build the bridge: {used.stderr[-2000:]}"
    print("first fl use says:", notices[0])
    print("status:", used.stdout.strip())
