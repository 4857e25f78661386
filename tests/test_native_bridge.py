"""The native bridge's build, cache and switch (docs/users/native-bridge.md).

What the bridge does for PyTorch is tested where PyTorch uses it (generators, streams and
events, pinned memory, storages, threads, accelerator, DDP, FSDP2); here: it is built once per
PyTorch build and cached, a corrupt or stale entry is rebuilt and never loaded, processes
starting together build it once, and where it cannot be built the Python route runs and says
why.  Builds that would take a real compile use a stand-in compiler that records its calls.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fl_runtime import bridge
from fl_runtime.bridge import build

_FAKE_COMPILER = r'''#!{python}
import os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_CXX_LOG"], "a") as log:
    log.write(("link" if "-shared" in args else "compile") + " %d\n" % os.getpid())
time.sleep(float(os.environ.get("FAKE_CXX_SECONDS", "0.2")))
with open(args[args.index("-o") + 1], "wb") as out:
    out.write(b"a stand-in library " + str(os.getpid()).encode())
'''


@pytest.fixture
def fake_compiler(tmp_path, monkeypatch):
    compiler = tmp_path / "fake-c++"
    compiler.write_text(_FAKE_COMPILER.format(python=sys.executable))
    compiler.chmod(0o755)
    log = tmp_path / "compiler.log"
    log.touch()
    env = {"CXX": str(compiler), "FAKE_CXX_LOG": str(log), "TORCH_FL_CACHE_DIR": str(tmp_path / "cache"),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env, log


def _builds(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("link")]


def test_the_test_processes_run_on_the_bridge(fl):
    state = bridge.status()
    assert state.active, state.detail


def test_a_cached_build_is_found_by_key_and_loaded_without_compiling(fake_compiler):
    env, log = fake_compiler
    chain = build.toolchain()
    first = build.ensure_built(chain, announce=lambda text: None)
    assert len(_builds(log)) == 1 and first.read_bytes().startswith(b"a stand-in library")
    manifest = json.loads((first.parent / build.MANIFEST).read_text())
    assert manifest["key"] == chain.key() and manifest["identity"]["torch"] == chain.torch_version
    assert build.ensure_built(chain, announce=lambda text: None) == first
    assert len(_builds(log)) == 1


def test_a_corrupt_entry_is_rebuilt_never_loaded(fake_compiler):
    env, log = fake_compiler
    chain = build.toolchain()
    library = build.ensure_built(chain, announce=lambda text: None)
    library.write_bytes(b"flipped bits")                 # the manifest's SHA-256 no longer matches
    assert build.cached_library(chain.key()) is None
    rebuilt = build.ensure_built(chain, announce=lambda text: None)
    assert len(_builds(log)) == 2 and rebuilt.read_bytes().startswith(b"a stand-in library")
    (rebuilt.parent / build.MANIFEST).write_text("{not json")
    assert build.cached_library(chain.key()) is None


def test_the_key_changes_with_every_input_of_the_binary(monkeypatch):
    """Another PyTorch build, C++ ABI, compiler or source gets its own entry: a stale one is
    never found, so never loaded."""
    import dataclasses
    chain = build.toolchain()
    key = chain.key()
    for field, value in (("torch_version", "2.99.0"), ("torch_git", "0" * 40), ("cxx11_abi", not chain.cxx11_abi),
                         ("compiler_id", "another compiler")):
        assert dataclasses.replace(chain, **{field: value}).key() != key, field
    monkeypatch.setattr(build, "source_hash", lambda: "edited sources")
    assert chain.key() != key


def test_eight_processes_starting_at_once_build_once(fake_compiler, tmp_path):
    """Eight ranks (or two processes) of a job on a machine with an empty cache: one builds,
    the others wait on the key's lock and load what it built."""
    env, log = fake_compiler
    code = textwrap.dedent("""
        from fl_runtime.bridge import build
        print(build.ensure_built(announce=lambda text: None))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **env, "FAKE_CXX_SECONDS": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outputs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1 and len(_builds(log)) == 1, (paths, log.read_text())
    assert not any(p.name.startswith(".tmp") or ".tmp-" in p.name for p in (tmp_path / "cache" / "bridge").iterdir())


def _start(python, env: dict, code: str):
    return python(f"""
        import json, torch, torch_fl
        from fl_runtime import bridge
        {textwrap.indent(textwrap.dedent(code), ' ' * 8).strip()}
    """, env=env)


def test_without_a_compiler_the_python_route_runs_and_says_why(python, tmp_path):
    result = _start(python, {"CXX": str(tmp_path / "no-such-c++"), "TORCH_FL_CACHE_DIR": str(tmp_path)}, """
        print(json.dumps({"active": bridge.status().active, "detail": bridge.status().detail,
                          "works": (torch.ones(2, device="fl:1") * 3).cpu().tolist()}))
        try:
            torch.Generator(device="fl:0")
        except NotImplementedError:
            print("python route: no device generators")
    """)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[0])
    assert not state["active"] and "no C++ compiler" in state["detail"] and state["works"] == [3.0, 3.0]
    assert "python route: no device generators" in result.stdout
    doctor = subprocess.run([sys.executable, "-m", "fl_runtime.tools.cli", "doctor", "--json"], capture_output=True,
                            text=True, env={**os.environ, "CXX": str(tmp_path / "no-such-c++"),
                                            "TORCH_FL_CACHE_DIR": str(tmp_path)}, timeout=300)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "native bridge")
    assert check["status"] == "warn" and "no C++ compiler" in check["detail"] and "g++" in check["next_step"]


def test_the_switch_turns_the_bridge_off_or_requires_it(python, tmp_path):
    off = _start(python, {"TORCH_FL_BRIDGE": "0"}, "print(bridge.status().active, bridge.status().detail)")
    assert off.returncode == 0 and off.stdout.startswith("False off: TORCH_FL_BRIDGE=0"), off.stderr
    required = python("import torch_fl", env={"TORCH_FL_BRIDGE": "1", "CXX": str(tmp_path / "no-such-c++"),
                                             "TORCH_FL_CACHE_DIR": str(tmp_path)})
    assert required.returncode != 0
    assert "TORCH_FL_BRIDGE=1 asks for the native bridge" in required.stderr and "no C++ compiler" in required.stderr
