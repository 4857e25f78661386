"""The compiled helpers (fl_runtime/compiled.py) against their Python versions.

- `fl_runtime.devices._dltensor` (devices/storage.py's module doc): fl tensors made in one C
  call, freed by a deleter that never enters Python.  Driven directly with tokens of our own
  (release = a list's append), so each property is checked on its own: every token released
  exactly once, nothing released before PyTorch frees the tensor, no leak when PyTorch refuses
  the capsule.  The runtime's use of it (the allocator's accounting) is covered by
  test_memory.py and test_allocator.py, whose exception-unwinding tests run on both versions.
- `fl_runtime.ops.eager._program`: a replayed program's call key and tensor sites, which must equal
  the Python versions' byte for byte (a different key or site is a wrong result or a program
  replayed for the wrong call).
"""
from __future__ import annotations

import gc
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_runtime import compiled
from fl_sdk.build import compiler

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / compiled.source_of(name) for name in compiled.HELPERS]


@pytest.fixture(scope="module")
def native(fl):
    from fl_runtime.devices import storage
    assert storage.IMPLEMENTATION == "compiled", "the install did not build fl_runtime.devices._dltensor"
    return storage._native


@pytest.fixture(autouse=True)
def settled_capsules():
    """Tensors of earlier tests in this process that only a cycle collection frees (a traceback
    kept by pytest, say) would release their capsules inside a test's own gc.collect() and move
    the live() baseline it read: collect them before each test."""
    gc.collect()


def wrap(native, data: int, token, shape=(2, 3), stride=(3, 1), codes=None) -> torch.Tensor:
    """native.wrap as storage.wrap_block calls it; `codes`: a DLPack (type code, bits) of float32's."""
    from fl_runtime.devices import storage
    code, bits = codes or storage.DL_DTYPES[torch.float32]
    return native.wrap(data, storage._KDL_EXT_DEV, 0, shape, stride, code, bits, token)


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.name)
def test_compiles_without_warnings(tmp_path, source):
    include = sysconfig.get_paths()["include"]
    for flags in (["-O0"], ["-O3"]):
        result = subprocess.run([compiler(), "-std=c11", *flags, "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                                 f"-I{include}", *(f"-I{ROOT / d}" for d in compiled.INCLUDE_DIRS), str(source),
                                 "-o", str(tmp_path / "helper.so")],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def test_the_install_built_every_helper(fl):
    from fl_runtime.devices import storage
    from fl_runtime.ops.eager import fast_path, marshal
    assert compiled.missing() == [] and len(SOURCES) == 3 and all(path.exists() for path in SOURCES)
    assert storage.IMPLEMENTATION == "compiled"
    assert fast_path.positional_key is fast_path._native.call_key
    assert marshal._patch_tensors is not None
    from fl_runtime.ops.graph import launch_list
    assert launch_list._run_launches is launch_list._native.run_launches


def test_layout_agrees_with_the_pure_path(native):
    from fl_runtime.devices import storage
    assert native.layout() == (storage._MANAGED_SIZE, storage._DELETER_OFFSET)


def test_a_block_is_released_once_after_pytorch_frees_it(native):
    native.collect()
    released = []
    live = native.live()
    t = wrap(native, 0x10000, (released.append, "block"))
    assert t.device == torch.device("fl:0") and t.shape == (2, 3) and t.stride() == (3, 1)
    assert t.dtype == torch.float32 and t.data_ptr() == 0x10000
    view = t[1:]                       # shares the storage: the block stays
    del t
    assert native.collect() == 0 and released == [] and native.live() == live + 1
    del view
    assert native.live() == live       # counted at the free, released at the next collect
    assert released == []
    assert native.collect() == 1 and released == ["block"]
    assert native.collect() == 0 and released == ["block"]


def test_empty_tensor_has_no_token(native):
    native.collect()
    t = wrap(native, 0, None, shape=(0, 4), stride=(4, 1))
    assert t.numel() == 0 and t.device.type == "fl"
    del t
    assert native.collect() == 1       # its node is freed; None is not called


def test_capsule_pytorch_refuses_is_released(native):
    native.collect()
    released = []
    live = native.live()
    with pytest.raises(Exception):   # an unknown DLPack type code: PyTorch raises, the capsule dies
        wrap(native, 0x20000, (released.append, "refused"), codes=(99, 32))
    gc.collect()
    assert native.live() == live
    assert native.collect() == 1 and released == ["refused"]


@pytest.mark.parametrize("shape, stride", [((2, 3), (1,)), ((2, "x"), (3, 1)), (5, (1,))])
def test_bad_shapes_raise_and_leak_nothing(native, shape, stride):
    native.collect()
    released = []
    live = native.live()
    with pytest.raises((ValueError, TypeError)):
        wrap(native, 0x30000, (released.append, "bad"), shape=shape, stride=stride)
    assert native.live() == live and native.collect() == 0 and released == []


def test_a_failing_release_does_not_keep_the_others(native):
    native.collect()
    released = []

    def broken(block):
        raise RuntimeError("release failed")

    tensors = [wrap(native, 0x40000, (released.append, 1)), wrap(native, 0x40000, (broken, 2)),
               wrap(native, 0x40000, (released.append, 3))]
    del tensors
    reported = []
    hook, sys.unraisablehook = sys.unraisablehook, reported.append
    try:
        assert native.collect() == 3             # the failure is reported, not raised
    finally:
        sys.unraisablehook = hook
    assert sorted(released) == [1, 3]
    assert [str(r.exc_value) for r in reported] == ["release failed"]


def test_threads_freeing_while_others_collect(native):
    # Eight threads make and drop tensors while two collect: every token comes back exactly once.
    native.collect()
    released, lock = [], threading.Lock()

    def release(token):
        with lock:
            released.append(token)

    def maker(base):
        for i in range(2000):
            t = wrap(native, 0x50000, (release, base + i))
            if i % 3:
                del t

    stop = threading.Event()

    def collector():
        while not stop.is_set():
            native.collect()

    collectors = [threading.Thread(target=collector) for _ in range(2)]
    makers = [threading.Thread(target=maker, args=(k * 10_000,)) for k in range(8)]
    for thread in collectors + makers:
        thread.start()
    for thread in makers:
        thread.join()
    stop.set()
    for thread in collectors:
        thread.join()
    native.collect()
    assert sorted(released) == [k * 10_000 + i for k in range(8) for i in range(2000)]


def test_pure_python_path_when_asked(python):
    result = python("""
        import torch, torch_fl
        from fl_runtime.devices import storage
        a = torch.randn(64, 64)
        before = torch.fl.memory_allocated(0)
        x = a.to("fl:0")
        y = (x @ x).relu().sum(0)
        print("IMPL", storage.IMPLEMENTATION, storage._native_wrap is None)
        print("SAME", torch.allclose(y.cpu(), (a @ a).relu().sum(0)))
        del x, y
        print("LEAK", torch.fl.memory_allocated(0) - before)
    """, {"TORCH_FL_PURE_PYTHON": "1"})
    assert result.returncode == 0, result.stderr
    assert "IMPL python True" in result.stdout and "SAME True" in result.stdout and "LEAK 0" in result.stdout


# ---- fl_runtime.ops.eager._program -----------------------------------------------------------


def _keys_agree(args: tuple) -> None:
    from fl_runtime.ops.eager import fast_path
    compiled, python = fast_path._native.call_key(args), fast_path._positional_key(args)
    assert compiled == python and repr(compiled) == repr(python)     # repr: 1 == True, 1.0 == 1
    try:
        expected = hash(python)
    except TypeError:
        with pytest.raises(TypeError):
            hash(compiled)
    else:
        assert hash(compiled) == expected


class Half(float):
    """A float subclass, as numpy.float64 is."""


def _tensors(fl):
    base = torch.arange(24, dtype=torch.float32)
    on_device = base.to("fl:0")
    return [base.view(4, 6), base.view(4, 6).t(), base[3:].view(3, 7), on_device.view(2, 12),
            on_device.view(4, 6)[1:, ::2], torch.empty(0, 3, device="fl:1"), torch.ones((), dtype=torch.int64),
            torch.nn.Parameter(torch.zeros(2, 2)), on_device.to(torch.bfloat16)]


@given(st.lists(st.one_of(st.integers(0, 8), st.sampled_from(["int", "float", "bool", "none", "half",
                                                              "list", "tuple", "nested", "dtype", "str",
                                                              "format", "dict"])), max_size=6))
@settings(max_examples=200)
def test_call_key_agrees_with_python(fl, picks):
    tensors = _tensors(fl)
    values = {"int": 3, "float": 0.5, "bool": True, "none": None, "half": Half(2.5), "list": [1, 2.5, True],
              "tuple": (tensors[0], 1.5, Half(1.0)), "nested": [[1, (2, 3.0)], (tensors[3], [tensors[4]])],
              "dtype": torch.float16, "str": "mean", "format": torch.channels_last, "dict": [{"a": 1}]}
    _keys_agree(tuple(tensors[p] if isinstance(p, int) else values[p] for p in picks))


def test_call_key_errors(fl):
    from fl_runtime.ops.eager import fast_path
    deep = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        fast_path._native.call_key((deep,))
    with pytest.raises(TypeError):
        fast_path._native.call_key([1, 2])        # a list, not the call's tuple


@pytest.mark.parametrize("case", ["contiguous", "offset view", "transposed", "empty input", "float scalar",
                                  "in place"])
def test_tensor_sites_agree_with_python(fl, monkeypatch, case):
    from fl_runtime.ops.eager import marshal
    a = torch.randn(6, 8, device="fl:0")
    out = torch.randn(6, 8, device="fl:0")
    calls = {
        "contiguous": lambda: torch.add(a, a, alpha=2),
        "offset view": lambda: torch.mul(a[2:, 3:], a[1:5, :5]),
        "transposed": lambda: torch.mm(a.t()[1:], a[:, :4]),
        "empty input": lambda: torch.sum(torch.empty(0, 8, device="fl:0"), 0),
        "float scalar": lambda: torch.add(a, a[0], alpha=0.25),
        "in place": lambda: out.abs_(),
    }
    seen = []
    real_replay = marshal.replay

    def replay_both(plan, values, outputs, entry):
        args, count = real_replay(plan, values, outputs, entry)       # the compiled sites
        arena = marshal._local.arena
        compiled = bytes(arena.mem[0:entry.template.size])
        monkeypatch.setattr(marshal, "_patch_tensors", None)
        try:
            real_replay(plan, values, outputs, entry)                  # the Python sites
        finally:
            monkeypatch.undo()
        seen.append(compiled == bytes(arena.mem[0:entry.template.size]))
        return args, count

    from fl_runtime.ops.eager import launcher
    calls[case]()                                  # records the program
    monkeypatch.setattr(launcher, "replay", replay_both)
    native = fl.runtime().launcher.native          # the bridge's C++ kernels replay it there: not here
    if native is not None:
        native.set_switch(launcher.NATIVE_DISABLED, True)
    try:
        for _ in range(2):
            result = calls[case]()
    finally:
        if native is not None:
            native.set_switch(launcher.NATIVE_DISABLED, False)
    monkeypatch.undo()
    assert seen and all(seen)
    assert torch.equal(result.cpu(), calls[case]().cpu())


def test_tensor_site_outside_the_template_is_refused(fl):
    from fl_runtime.ops.eager import fast_path
    scratch = bytearray(64)
    address = torch.frombuffer(scratch, dtype=torch.uint8).data_ptr()
    t = torch.zeros(2)
    with pytest.raises(ValueError):
        fast_path._native.patch_tensors(address, bytes(32), ((24, 0, 4),), (), [t], [])
    assert scratch == bytearray(64)


def test_doctor_names_a_missing_helper(python):
    # sys.modules[name] = None makes importing it fail, as an install without a compiler does
    result = python("""
        import sys
        sys.modules["fl_runtime.ops.eager._program"] = None
        import torch, torch_fl
        from fl_runtime.ops.eager import fast_path, marshal
        from fl_runtime.tools.diagnostics import check_compiled_helpers
        check = check_compiled_helpers()
        print("CHECK", check.status, "|", check.detail, "|", check.next_step)
        print("FALLBACK", fast_path.positional_key is fast_path._positional_key, marshal._patch_tensors is None)
        a = torch.randn(3, 3)
        x = a.to("fl:0")
        print("SAME", all(torch.equal((x + x).cpu(), a + a) for _ in range(3)))
    """)
    assert result.returncode == 0, result.stderr
    assert "CHECK warn | not built: fl_runtime.ops.eager._program;" in result.stdout
    assert "reinstall torch-fl" in result.stdout
    assert "FALLBACK True True" in result.stdout and "SAME True" in result.stdout


def test_doctor_when_python_versions_are_asked_for(python):
    result = python("""
        from fl_runtime.tools.diagnostics import check_compiled_helpers
        check = check_compiled_helpers()
        print("CHECK", check.status, "|", check.detail)
    """, {"TORCH_FL_PURE_PYTHON": "1"})
    assert result.returncode == 0, result.stderr
    assert "CHECK ok | built; their Python versions run, as TORCH_FL_PURE_PYTHON asks" in result.stdout


# ---- fl_runtime.ops.graph._launch_list ------------------------------------------------------


def _recorded_segment(fl):
    """A replayed MLP's first launch segment, its launches replaced by one that records the
    (base, byte offset) pairs it was given (no kernel runs on made-up addresses)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fl_runtime import abi
    from fl_runtime.abi import ffi
    from fl_runtime.ops.graph import graph_plan, launch_list

    def mlp(x, w, v):
        return torch.relu(x @ w + 1)[1:] @ v.t()
    inputs = [torch.randn(5, 4), torch.randn(4, 4), torch.randn(3, 4)]
    runner = launch_list.LaunchList(make_fx(mlp)(*inputs), fl.runtime().launcher)
    runner(*[t.to("fl:0") for t in inputs])
    (plan,) = runner.plans()
    seen = []

    def launch(stream, entry, args, nargs):
        for i in range(nargs):
            if args[i].kind == abi.ARG_TENSOR:
                t = args[i].value.tensor
                seen.append((int(ffi.cast("uintptr_t", t.base)), int(t.byte_offset)))
        return abi.SUCCESS
    callback = ffi.callback(launch_list.LAUNCH_TYPE, launch)
    for step in plan.launches:
        step.program = type("Program", (), {"choice": type("Choice", (), {"entry": step.program.choice.entry,
                                                                          "launch_fn": callback}),
                                            "device": step.program.device})
    segment = next(s for s in graph_plan.segments(plan.order) if isinstance(s, graph_plan.LaunchSegment))
    return segment, seen, callback, plan


def test_launch_segments_agree_with_the_python_loop(fl):
    from array import array

    from fl_runtime.ops.graph import launch_list
    segment, seen, _callback, plan = _recorded_segment(fl)
    addresses = array("Q", [0x1000 * (i + 1) for i in range(2 * plan.addresses)])
    results = []
    for run in (launch_list._native.run_launches, launch_list._run_launches_in_python):
        seen.clear()
        assert run(segment.program, addresses, 0xABC000, 0) is None
        results.append(list(seen))
    assert results[0] == results[1] and len(results[0]) >= 2 * len(segment.launches)
    bases = {base for base, _ in results[0]}
    assert 0xABC000 in bases and bases & set(addresses[::2]), results[0]    # the workspace and the inputs


def test_a_malformed_launch_program_is_refused(fl):
    from array import array

    from fl_runtime.ops.graph import launch_list
    segment, _seen, _callback, _plan = _recorded_segment(fl)
    with pytest.raises(ValueError, match="malformed"):
        launch_list._native.run_launches(segment.program, array("Q"), 0, 0)    # no address pairs at all
    with pytest.raises(ValueError, match="malformed"):
        launch_list._native.run_launches(segment.program[:-8], array("Q", [0] * 64), 0, 0)
