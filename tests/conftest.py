"""Shared test set-up: hypothesis profiles and a runner for fresh-process checks.

The runtime is process-global (one PyTorch backend per process), so tests that
need another config, plugin set or a crash run in a subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fl_runtime.bridge import build as bridge_build

ROOT = Path(__file__).resolve().parent.parent

settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Tests that point XDG_CACHE_HOME at a fresh directory (to start the probe or ABI caches
# cold) must not also start the native bridge's cache cold: each such child would compile
# the bridge again (about a minute).  TORCH_FL_CACHE_DIR pins the bridge cache where this
# session found it (docs/users/native-bridge.md); tests of the bridge cache set their own.
os.environ.setdefault(bridge_build.CACHE_ENV, str(bridge_build.cache_dir().parent))


def run_python(code: str, env: dict | None = None, timeout: float = 300, cwd: Path | None = None):
    """Run `code` in a fresh interpreter; returns the CompletedProcess (never raises on failure)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd or ROOT)


@pytest.fixture
def python():
    return run_python


@pytest.fixture
def script(tmp_path):
    """Like `python`, but runs the code as a script file: multiprocessing's 'spawn' start
    method re-imports the main module, which `python -c` does not have."""
    def run(code: str, env: dict | None = None, timeout: float = 300):
        path = tmp_path / "script.py"
        path.write_text(textwrap.dedent(code))
        return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=ROOT)
    return run


PYTHON_ROUTE = {"TORCH_FL_BRIDGE": "0"}     # env of a child on the Python route (docs/users/native-bridge.md)


@pytest.fixture(scope="session")
def fl():
    """The runtime, started in this process on the reference vendor."""
    import torch_fl
    assert torch_fl.list_devices(), torch_fl.why_no_devices()
    return torch_fl
