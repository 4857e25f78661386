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
if os.environ.get("FAKE_CXX_KILLED") and "-shared" not in args:
    os.kill(os.getpid(), 9)           # as the kernel's OOM killer ends a compiler
time.sleep(float(os.environ.get("FAKE_CXX_SECONDS", "0.2")))
with open(os.environ["FAKE_CXX_LOG"], "a") as log:
    log.write("done %d\n" % os.getpid())
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


# Asked for, the Python route runs (docs/users/native-bridge.md "Switching it"; its status:
# test_the_switch_turns_the_bridge_off_or_requires_it); any other run must find the bridge built.
@pytest.mark.skipif(os.environ.get("TORCH_FL_BRIDGE") == "0", reason="the Python route, asked for (TORCH_FL_BRIDGE=0)")
def test_the_test_processes_run_on_the_bridge(fl):
    state = bridge.status()
    assert state.active, state.detail


def test_a_cached_build_is_found_by_key_and_loaded_without_compiling(fake_compiler):
    env, log = fake_compiler
    chain = build.target()
    first = build.ensure_built(chain, announce=lambda text: None)
    assert len(_builds(log)) == 1 and first.read_bytes().startswith(b"a stand-in library")
    manifest = json.loads((first.parent / build.MANIFEST).read_text())
    assert manifest["key"] == chain.key() and manifest["identity"]["torch"] == chain.torch_version
    assert build.ensure_built(chain, announce=lambda text: None) == first
    assert len(_builds(log)) == 1


def test_max_jobs_caps_the_parallel_compilers(fake_compiler, monkeypatch):
    env, log = fake_compiler
    monkeypatch.setenv("MAX_JOBS", "1")
    build.ensure_built(announce=lambda text: None)
    events = [line.split()[0] for line in log.read_text().splitlines()]
    assert events.count("compile") >= 2, events                 # several files, one at a time
    assert all(first != "compile" or second == "done" for first, second in zip(events, events[1:])), events
    monkeypatch.setenv("MAX_JOBS", "two")
    monkeypatch.setenv("TORCH_FL_CACHE_DIR", env["TORCH_FL_CACHE_DIR"] + "-2")
    with pytest.raises(build.BridgeBuildError, match="MAX_JOBS='two' is not a whole number"):
        build.ensure_built(announce=lambda text: None)


def test_a_wheel_build_copies_what_the_cache_holds_for_its_key(fake_compiler, tmp_path):
    # A reinstall (same torch, Python and sources: the same binary) compiles nothing.
    env, log = fake_compiler
    cached = build.ensure_built(announce=lambda text: None)
    said = []
    wheel = tmp_path / "wheel" / "_prebuilt"
    shipped = build.build_into_wheel(wheel, announce=said.append)
    assert len(_builds(log)) == 1 and shipped.parent == wheel / build.target().key(), said
    assert shipped.read_bytes() == cached.read_bytes() and "copied, not rebuilt" in said[0]
    assert build.cached_library(build.target().key(), (wheel,)) == shipped


def test_a_failed_wheel_build_is_named_at_the_first_fl_use(fake_compiler, tmp_path, monkeypatch):
    # pip hides setup.py's output: the wheel keeps why its build failed, and the Python
    # route's notice names it (here a compiler killed as the OOM killer would).
    monkeypatch.setenv("FAKE_CXX_KILLED", "1")
    wheel = tmp_path / "wheel" / "_prebuilt"
    with pytest.raises(build.BridgeBuildError, match="killed by SIGKILL \\(out of memory\\?"):
        build.build_into_wheel(wheel, announce=lambda text: None)
    monkeypatch.setattr(build, "PREBUILT", wheel)
    detail = bridge._not_built(build)
    assert "none is built for torch" in detail and "building it at pip install (torch" in detail, detail
    assert "was killed by SIGKILL" in detail and "MAX_JOBS=1" in detail, detail


def test_a_corrupt_entry_is_rebuilt_never_loaded(fake_compiler):
    env, log = fake_compiler
    chain = build.target()
    library = build.ensure_built(chain, announce=lambda text: None)
    library.write_bytes(b"flipped bits")                 # the manifest's SHA-256 no longer matches
    assert build.cached_library(chain.key()) is None
    rebuilt = build.ensure_built(chain, announce=lambda text: None)
    assert len(_builds(log)) == 2 and rebuilt.read_bytes().startswith(b"a stand-in library")
    (rebuilt.parent / build.MANIFEST).write_text("{not json")
    assert build.cached_library(chain.key()) is None


def test_the_key_changes_with_every_input_of_the_binary(monkeypatch):
    """Another PyTorch build, C++ ABI, Python ABI or source gets its own entry: a stale one is
    never found, so never loaded."""
    import dataclasses
    chain = build.target()
    key = chain.key()
    for field, value in (("torch_version", "2.99.0"), ("torch_git", "0" * 40), ("cxx11_abi", not chain.cxx11_abi),
                         ("python_abi", ".cpython-399-x86_64-linux-gnu.so")):
        assert dataclasses.replace(chain, **{field: value}).key() != key, field
    monkeypatch.setattr(build, "source_hash", lambda: "edited sources")
    assert chain.key() != key


def test_an_edited_abi_header_changes_the_key(monkeypatch, tmp_path):
    """The bridge includes fl_abi.h by relative path: a header edit changes the binary, so it
    must change the key (else the stale build would be loaded against the new layout)."""
    import shutil
    headers = tmp_path / "include"
    shutil.copytree(build.ABI_HEADERS, headers)
    monkeypatch.setattr(build, "ABI_HEADERS", headers)
    before = build.source_hash()
    with open(headers / "fl_abi.h", "a") as handle:
        handle.write("\n/* an edit */\n")
    assert build.source_hash() != before
    with open(headers / "fl_collectives.h", "a") as handle:     # included by fl_abi.h
        handle.write("\n/* an edit */\n")
    assert build.source_hash() != before


def test_an_edit_to_the_sdks_driver_helpers_keeps_the_key(monkeypatch, tmp_path):
    """fl_driver.h and fl_kernel.h are vendors' helpers the bridge never includes: editing them
    must not make every user rebuild the bridge."""
    import shutil
    headers = tmp_path / "include"
    shutil.copytree(build.ABI_HEADERS, headers)
    monkeypatch.setattr(build, "ABI_HEADERS", headers)
    before = build.source_hash()
    for name in ("fl_driver.h", "fl_kernel.h"):
        with open(headers / name, "a") as handle:
            handle.write("\n/* an edit */\n")
    assert build.source_hash() == before


def test_a_built_bridge_loads_without_a_compiler_and_a_compiler_upgrade_keeps_it(fake_compiler, tmp_path,
                                                                                  monkeypatch):
    """The key names no compiler: a runtime image without one finds the build made for it, and
    a new compiler (another path, size or date) does not rebuild it."""
    env, log = fake_compiler
    built = build.ensure_built(announce=lambda text: None)
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(build.BridgeBuildError, match="no C\\+\\+ compiler"):
        build.compiler()
    assert build.find_built() == built and build.ensure_built(announce=lambda text: None) == built
    assert len(_builds(log)) == 1


def test_cxx_with_arguments_keeps_every_word(fake_compiler, tmp_path, monkeypatch):
    """CXX="ccache g++": the launcher and the compiler both run (shlex-split, as make does)."""
    env, log = fake_compiler
    launcher = tmp_path / "launcher"
    launcher.write_text(f"#!/bin/sh\necho \"launcher $1\" >> {log}\nexec \"$@\"\n")
    launcher.chmod(0o755)
    monkeypatch.setenv("CXX", f"{launcher} {env['CXX']}")
    assert build.compiler() == [str(launcher), env["CXX"]]
    build.ensure_built(announce=lambda text: None)
    calls = log.read_text().splitlines()
    assert sum(line == f"launcher {env['CXX']}" for line in calls) >= 2 and len(_builds(log)) == 1, calls


def test_import_torch_runs_no_compiler_and_the_first_fl_use_says_how_to_build(python, tmp_path):
    """No build for the running torch: `import torch` (autoload) compiles nothing, the runtime
    takes the Python route, and the first fl use says so once, with the command."""
    calls = tmp_path / "compiler-calls"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name in ("c++", "g++", "gcc", "cc"):
        (fake_bin / name).write_text(f"#!/bin/sh\necho \"{name} $*\" >> {calls}\nexit 1\n")
        (fake_bin / name).chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "TORCH_FL_CACHE_DIR": str(tmp_path / "cache"),
           "CXX": "c++", "TORCH_FL_BRIDGE": ""}
    result = python("""
        import sys, torch
        print("fl started at import:", "fl_runtime" in sys.modules)
        torch.ones(2, device="fl:0"); torch.ones(2, device="fl:1") * 2
        from fl_runtime import bridge
        print("active:", bridge.status().active)
    """, env=env)
    assert result.returncode == 0, result.stderr
    assert "fl started at import: True" in result.stdout and "active: False" in result.stdout
    assert not calls.exists(), calls.read_text()
    notices = [line for line in result.stderr.splitlines() if "native bridge is off" in line]
    assert len(notices) == 1 and "torch-fl build-bridge" in notices[0], result.stderr


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


def test_without_a_build_the_python_route_runs_and_says_why_in_our_words(python, tmp_path):
    # TORCH_FL_BRIDGE unset: with it at 0 (this run's own switch) the child would say that instead
    env = {"CXX": str(tmp_path / "no-such-c++"), "TORCH_FL_CACHE_DIR": str(tmp_path), "TORCH_FL_BRIDGE": ""}
    result = _start(python, env, """
        print(json.dumps({"active": bridge.status().active, "detail": bridge.status().detail,
                          "works": (torch.ones(2, device="fl:1") * 3).cpu().tolist()}))
        from fl_runtime.errors import NativeBridgeOffError
        try:
            torch.Generator(device="fl:0")
        except NativeBridgeOffError as exc:
            print("refused:", exc)
        print("cpu generator:", isinstance(torch.Generator().manual_seed(1), torch.Generator))
    """)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[0])
    assert not state["active"] and "none is built for torch" in state["detail"] and state["works"] == [3.0, 3.0]
    assert "no C++ compiler" in state["detail"]
    refused = next(line for line in result.stdout.splitlines() if line.startswith("refused:"))
    assert "torch.Generator(device='fl:0') needs Torch-FL's native bridge" in refused
    assert "torch-fl build-bridge" in refused and "cpu generator: True" in result.stdout
    doctor = subprocess.run([sys.executable, "-m", "fl_runtime.tools.cli", "doctor", "--json"], capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=300)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "native bridge")
    assert check["status"] == "warn" and "none is built" in check["detail"] and "generators" in check["detail"]
    assert "torch-fl build-bridge" in check["next_step"] and "g++" in check["next_step"]


def test_the_switch_turns_the_bridge_off_or_requires_it(python, tmp_path):
    off = _start(python, {"TORCH_FL_BRIDGE": "0"}, "print(bridge.status().active, bridge.status().detail)")
    assert off.returncode == 0 and off.stdout.startswith("False off: TORCH_FL_BRIDGE=0"), off.stderr
    assert "native bridge is off" not in off.stderr      # asked for: no notice
    required = python("import torch_fl", env={"TORCH_FL_BRIDGE": "1", "CXX": str(tmp_path / "no-such-c++"),
                                             "TORCH_FL_CACHE_DIR": str(tmp_path)})
    assert required.returncode != 0
    assert "TORCH_FL_BRIDGE=1 asks for the native bridge" in required.stderr and "none is built" in required.stderr


@pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                    reason="the Python route: no native module, no fl generators (docs/users/native-bridge.md)")
def test_a_device_default_generator_is_not_leaked(fl):
    """default_generator(i) hands Python a new reference (THPGenerator_initDefaultGenerator
    makes a new wrapper): one more reference would keep every wrapper alive forever."""
    native = sys.modules[bridge.MODULE_NAME]
    wrapper = native.default_generator(0)
    owned_once = object()      # held by one local, as `wrapper` is (what getrefcount counts varies by Python)
    assert sys.getrefcount(wrapper) == sys.getrefcount(owned_once)


def test_the_sources_reach_cpython_internals_only_through_one_guarded_helper():
    # CPython 3.13 removed _Py_IsFinalizing: a source naming it builds on 3.10-3.12 only, and the
    # platform runs (tests/platforms) are where that shows; this says which file at once.
    csrc = Path(build.__file__).parent / "csrc"
    users = sorted(p.name for p in csrc.iterdir() if p.suffix in (".cpp", ".h") and "_Py_IsFinalizing" in p.read_text())
    assert users == ["python_calls.cpp"], f"use fl_bridge::interpreter_gone() (python_calls.h) in {users}"


@pytest.mark.skipif("not __import__('fl_runtime.bridge', fromlist=['x']).status().active",
                    reason="the Python route: no native module (docs/users/native-bridge.md)")
def test_the_bridges_methods_refuse_an_index_no_device_has(fl):
    # Every integer argument is read in one place (csrc/python_ints.h): an index past what
    # c10::DeviceIndex holds is an IndexError, never wrapped onto another device (257 -> fl:1).
    native = sys.modules[bridge.MODULE_NAME]
    for call in (lambda: native.figures(257), lambda: native.current_stream(257),
                 lambda: native.pending_uploads(-1), lambda: native.set_current_device(1 << 40),
                 lambda: native.release_taken(257, [])):
        with pytest.raises(IndexError, match="is not a device index"):
            call()
    with pytest.raises(TypeError):
        native.figures("fl:0")
    with pytest.raises(TypeError, match="free\\(device, address\\)"):
        native.free(0)
    assert native.figures(0)["reserved"] >= 0 and native.current_stream(1) is not None
