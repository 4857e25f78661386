"""Shared test set-up: levels, hypothesis profiles and a runner for fresh-process checks.

The runtime is process-global (one PyTorch backend per process), so tests that
need another config, plugin set or a crash run in a subprocess.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fl_runtime.bridge import build as bridge_build

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
# One folder per test level (docs/contributors/testing.md "Layout of the tests").  Test modules
# import each other and the helpers beside this file by basename (`from test_certificate import
# issue`, `from rank_runner import run_ranks`), so every level folder is on sys.path, as
# pytest's default import mode already requires basenames unique across the folders.
LEVELS = tuple(sorted(folder.name for folder in TESTS.iterdir()
                     if folder.is_dir() and any(folder.glob("test_*.py"))))
sys.path[:0] = [str(TESTS / level) for level in LEVELS if str(TESTS / level) not in sys.path]


@pytest.hookimpl(tryfirst=True)      # before `-m` selects: the level markers must be on by then
def pytest_collection_modifyitems(config, items):
    """Each test carries its level's marker, the name of its folder (`pytest -m runtime`); the
    markers are registered in pyproject.toml, so a new level folder must be registered too."""
    unplaced = set()
    for item in items:
        if TESTS not in item.path.parents:
            continue                 # not one of this suite's tests
        level = item.path.relative_to(TESTS).parts[0]
        if level == item.path.name:
            unplaced.add(level)
        else:
            item.add_marker(level)
    if unplaced:
        where = 'docs/contributors/testing.md "Layout of the tests"'
        raise pytest.UsageError(f"test files outside a level folder: {', '.join(sorted(unplaced))}; move each into "
                                f"the folder of its level ({', '.join(LEVELS)}: {where})")

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


@pytest.fixture(scope="session")
def build_plugin(tmp_path_factory):
    """build_plugin(source, *flags, output=None, include_dirs=None) -> the shared library compiled
    from one C source with fl_sdk's compiler and flags (fl_sdk/build.py), -Werror, and
    `include_dirs` on the include path (default: fl_sdk's headers; a plugin built against frozen
    headers names their folder instead); `flags` follow (-D..., -l...).  Built once per session
    per source text, flags and include path; `output` gets a copy (a test that needs the library
    under a name or in a folder of its own, or that moves or rewrites it)."""
    from fl_sdk import INCLUDE_DIR
    from fl_sdk.build import BASE_FLAGS, compiler
    built: dict[str, Path] = {}
    lock = threading.Lock()

    def build(source: Path | str, *flags: str, output: Path | None = None,
              include_dirs: list[Path] | None = None) -> Path:
        source = Path(source)
        includes = [f"-I{folder}" for folder in (include_dirs if include_dirs is not None else [INCLUDE_DIR])]
        key = hashlib.sha256(source.read_bytes() + "\0".join([*includes, *flags]).encode()).hexdigest()
        with lock:
            if key not in built:
                library = tmp_path_factory.mktemp("plugins") / f"lib{source.stem}.so"
                subprocess.run([compiler(), *BASE_FLAGS, "-Werror", *includes, str(source), *flags,
                                "-o", str(library)], check=True)
                built[key] = library
        if output is None:
            return built[key]
        shutil.copy2(built[key], output)
        return Path(output)
    return build
