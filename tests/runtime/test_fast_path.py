"""Per-signature launch programs (fl_runtime/ops/eager/fast_path.py): a repeated call signature
skips the launcher's full path.  Each test warms a signature up first (so the call under
test runs a program, which the test checks was recorded), then changes one thing the
program must not ignore, and compares with PyTorch's CPU result."""
import json
import threading

import pytest
import torch
from conftest import ROOT

from fl_runtime.ops import accounting

FP32 = dict(rtol=1.3e-6, atol=1e-5)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _programs(fl, name: str) -> dict:
    return fl.runtime().launcher.programs(name)


def _warm(fn, *args, times: int = 3):
    for _ in range(times):
        out = fn(*args)
    return out


def test_a_repeated_signature_runs_a_program_with_the_same_values(fl):
    a = torch.randn(4, 4, generator=_gen(0))
    b = torch.randn(4, 4, generator=_gen(1))
    fa, fb = a.to("fl:0"), b.to("fl:0")
    before = accounting.counts()[("aten::add.Tensor", "native")]
    outs = [(fa + fb).cpu() for _ in range(5)]
    assert _programs(fl, "add.Tensor"), "add.Tensor recorded no program"
    for out in outs:
        torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    # every call is counted, program or not
    assert accounting.counts()[("aten::add.Tensor", "native")] - before == 5


def test_strides_are_in_the_key(fl):
    """Same shape and dtype, transposed operand: a program for the contiguous layout
    would read the transposed one in the wrong order."""
    a = torch.randn(5, 5, generator=_gen(2))
    b = torch.randn(5, 5, generator=_gen(3))
    fa, fb = a.to("fl:0"), b.to("fl:0")
    _warm(lambda: fa + fb)
    torch.testing.assert_close((fa + fb.t()).cpu(), a + b.t(), **FP32)
    torch.testing.assert_close((fa.t() + fb).cpu(), a.t() + b, **FP32)
    torch.testing.assert_close((fa + fb).cpu(), a + b, **FP32)


def test_dtype_is_in_the_key(fl):
    a = torch.randn(6, generator=_gen(4))
    f32 = a.to("fl:0")
    _warm(torch.relu, f32)
    for dtype in (torch.float64, torch.float16, torch.int32):
        x = a.mul(10).to(dtype)
        got = torch.relu(x.to("fl:0"))
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), torch.relu(x), **FP32)


def test_storage_offsets_change_per_call(fl):
    """The offset is not in the key: the template patches each tensor's base and offset
    per call.  Views at other offsets of the same shape must read their own elements;
    float64 and int64 operands check the per-site element size."""
    base = torch.arange(40, dtype=torch.float64)
    idx = torch.tensor([3, 1, 0, 2, 4, 1], dtype=torch.int64)
    fbase, fidx = base.to("fl:0"), idx.to("fl:0")
    for shift in range(5):
        x = fbase[shift:shift + 10]
        i = fidx[shift % 2:shift % 2 + 4]
        got = torch.index_select(x, 0, i)
        torch.testing.assert_close(got.cpu(), torch.index_select(base[shift:shift + 10], 0, idx[shift % 2:shift % 2 + 4]),
                                   rtol=0, atol=0)
        torch.testing.assert_close((x + x).cpu(), base[shift:shift + 10] * 2, rtol=0, atol=0)
    assert _programs(fl, "index_select")


def test_devices_are_in_the_key(fl):
    if len(fl.list_devices()) < 2:
        pytest.skip("needs two fl devices (the reference vendor has two by default)")
    a = torch.randn(3, 3, generator=_gen(5))
    b = torch.randn(3, 3, generator=_gen(6))
    on0 = _warm(lambda: a.to("fl:0") @ b.to("fl:0"))
    on1 = a.to("fl:1") @ b.to("fl:1")
    assert on0.device == torch.device("fl:0") and on1.device == torch.device("fl:1")
    torch.testing.assert_close(on1.cpu(), a @ b, **FP32)
    with pytest.raises(RuntimeError, match="same device"):
        a.to("fl:0") @ b.to("fl:1")


def test_ints_are_in_the_key_and_floats_are_patched(fl):
    a = torch.randn(4, 4, generator=_gen(7))
    fa = a.to("fl:0")
    _warm(lambda: fa.sum(0))
    torch.testing.assert_close(fa.sum(1).cpu(), a.sum(1), **FP32)
    torch.testing.assert_close(torch.softmax(fa, 0).cpu(), torch.softmax(a, 0), **FP32)
    torch.testing.assert_close(torch.softmax(fa, 1).cpu(), torch.softmax(a, 1), **FP32)
    _warm(lambda: fa * 2.0)
    for scale in (0.5, -3.25, 1e3):
        torch.testing.assert_close((fa * scale).cpu(), a * scale, **FP32)


def test_bool_and_int_scalars_stay_apart(fl):
    """True == 1 as a dict key, but a bool tensor times True stays bool while times 1 is int64."""
    x = torch.tensor([True, False, True])
    fx = x.to("fl:0")
    _warm(lambda: fx * True)
    got_bool, got_int = fx * True, fx * 1
    assert got_bool.dtype == torch.bool and got_int.dtype == torch.int64
    torch.testing.assert_close(got_bool.cpu(), x * True, rtol=0, atol=0)
    torch.testing.assert_close(got_int.cpu(), x * 1, rtol=0, atol=0)


def test_keyword_arguments(fl):
    a = torch.randn(5, generator=_gen(8))
    b = torch.randn(5, generator=_gen(9))
    fa, fb = a.to("fl:0"), b.to("fl:0")
    for alpha in (2, 2, 3, 2.5, -0.5):
        torch.testing.assert_close(torch.add(fa, fb, alpha=alpha).cpu(), torch.add(a, b, alpha=alpha), **FP32)
    torch.testing.assert_close((fa + fb).cpu(), a + b, **FP32)   # no kwargs: not the alpha=... programs
    c = a.clone().to("fl:0")
    for value in (0.5, 0.5, -2.0):
        c.addcdiv_(fb, fb.abs() + 1, value=value)
        a = a.clone().addcdiv_(b, b.abs() + 1, value=value)
    torch.testing.assert_close(c.cpu(), a, **FP32)


def test_in_place_and_out_arguments(fl):
    a = torch.randn(4, 4, generator=_gen(10))
    fa = a.to("fl:0")
    for _ in range(3):
        fa.mul_(1.5)
        a.mul_(1.5)
    torch.testing.assert_close(fa.cpu(), a, **FP32)
    out = torch.empty(0, device="fl:0")
    for _ in range(3):
        result = torch.sum(fa, 1, out=out)      # the first call resizes out; later ones run a program
        assert result is out
    torch.testing.assert_close(out.cpu(), a.sum(1), **FP32)
    assert _programs(fl, "sum.IntList_out")
    for _ in range(3):
        fresh = torch.empty(0, device="fl:0")   # resized by every call (logsumexp's pattern): no program
        torch.sum(fa, 1, out=fresh)
        torch.testing.assert_close(fresh.cpu(), a.sum(1), **FP32)
    small = torch.empty(2, device="fl:0")
    with pytest.warns(UserWarning, match="resized"):
        torch.sum(fa, 1, out=small)
    torch.testing.assert_close(small.cpu(), a.sum(1), **FP32)
    torch.sum(fa * 2, 1, out=small)             # now the right shape: the program, with another input
    torch.testing.assert_close(small.cpu(), (a * 2).sum(1), **FP32)


def test_tensor_lists(fl):
    """cat and index (Tensor[] and Tensor?[]): each entry's layout and device are in the key;
    a CPU index tensor is copied to the device by the full path, never by a program."""
    a = torch.randn(4, 3, generator=_gen(13))
    b = torch.randn(2, 3, generator=_gen(14))
    fa, fb = a.to("fl:0"), b.to("fl:0")
    _warm(lambda: torch.cat([fa, fb]))
    assert _programs(fl, "cat")
    torch.testing.assert_close(torch.cat([fa, fb]).cpu(), torch.cat([a, b]), rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([fb, fa]).cpu(), torch.cat([b, a]), rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([fa, fa.flip(0)[:2]]).cpu(), torch.cat([a, a.flip(0)[:2]]), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="device"):
        torch.cat([fa, b])                      # the same shapes with a CPU entry: still refused
    idx = torch.tensor([2, 0, 3])
    fidx = idx.to("fl:0")
    _warm(lambda: fa[fidx])
    torch.testing.assert_close(fa[idx].cpu(), a[idx], rtol=0, atol=0)     # CPU index: copied, not replayed
    torch.testing.assert_close(fa[fidx].cpu(), a[idx], rtol=0, atol=0)
    torch.testing.assert_close(fa[idx.flip(0)].cpu(), a[idx.flip(0)], rtol=0, atol=0)


def test_a_hidden_kernel_turns_the_program_away(fl):
    """Tests (and the coverage tool) hide a kernel to force the fallbacks: a program
    recorded before must not keep launching it."""
    devices = fl.runtime().devices
    chain = fl.runtime().launcher.chain
    saved = (chain.enable_generic, chain.enable_cpu)
    a = torch.rand(6, generator=_gen(11)) * 0.8 + 0.1
    fa = a.to("fl:0")
    _warm(torch.logit, fa)
    assert _programs(fl, "logit")
    hidden = [device.kernels.pop("logit", None) for device in devices]    # the tables are shared per plugin
    chain.configure(*saved)
    try:
        before = accounting.counts()
        got = torch.logit(fa)
        after = accounting.counts()
    finally:
        for device, kernel in zip(devices, hidden):
            if kernel is not None:
                device.kernels["logit"] = kernel
        chain.configure(*saved)
    assert after[("aten::logit", "native")] == before[("aten::logit", "native")]
    assert sum(after[("aten::logit", path)] - before[("aten::logit", path)] for path in ("generic", "cpu")) == 1
    torch.testing.assert_close(got.cpu(), torch.logit(a), **FP32)
    torch.logit(fa)      # the kernel is back: native again
    assert accounting.counts()[("aten::logit", "native")] == after[("aten::logit", "native")] + 1


def test_a_profile_sees_calls_that_have_programs(fl):
    a = torch.randn(4, 4, device="fl:0")
    _warm(torch.relu, a)
    with fl.profile() as prof:
        for _ in range(3):
            torch.relu(a)
    rows = {r["op"]: r["count"] for r in prof.table()}
    assert rows.get("aten::relu") == 3, rows


def test_memory_is_returned(fl):
    a = torch.randn(64, 64, device="fl:0")
    _warm(lambda: a + a)
    torch.fl.synchronize()
    before = torch.fl.memory_allocated(0)
    for _ in range(20):
        a + a
    torch.fl.synchronize()
    assert torch.fl.memory_allocated(0) == before
    kept = [a + a for _ in range(4)]
    assert torch.fl.memory_allocated(0) >= before + 4 * a.numel() * 4
    del kept
    assert torch.fl.memory_allocated(0) == before


def test_threads_on_two_devices_share_programs(fl):
    """Eight threads, two devices, the same signatures with different values."""
    devices = ["fl:0", "fl:1"] if len(fl.list_devices()) > 1 else ["fl:0"]
    errors = []

    def work(seed: int) -> None:
        try:
            device = devices[seed % len(devices)]
            for step in range(40):
                a = torch.randn(8, 8, generator=_gen(seed * 100 + step))
                b = torch.randn(8, 8, generator=_gen(seed * 100 + step + 50))
                fa, fb = a.to(device), b.to(device)
                got = [(fa + fb * 0.5).cpu(), (fa @ fb).cpu(), torch.relu(fa - fb).sum(1).cpu()]
                want = [a + b * 0.5, a @ b, torch.relu(a - b).sum(1)]
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)
        except BaseException as exc:   # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_side_stream_is_ordered_after_programs_exist(fl, python):
    """Cross-stream write tracking switches on at the first side stream, after the
    programs below were recorded: they must run on the current stream and order their
    launches as the full path does.  In a fresh process: this one may have used side
    streams already (tracking never switches off)."""
    result = python("""
        import torch, torch_fl
        a = torch.randn(800, 800, device="fl:0")
        for _ in range(3):
            z = a @ a
            w = z + 1
        torch.fl.synchronize()
        assert torch_fl.runtime().launcher.programs("mm") and not torch_fl.runtime()._cross_stream
        side = torch.fl.Stream(0)
        live = torch_fl.runtime().allocators[0].live
        base = lambda t: t.data_ptr() - t.storage_offset() * t.element_size()
        for _ in range(3):
            with torch.fl.stream(side):
                z = a @ a               # asynchronous, on the side stream
            w = z + 1                   # default stream reads what the side stream wrote
            assert live[base(z)].stream is side and live[base(w)].stream is torch.fl.default_stream(0)
            assert torch.allclose(w.cpu(), a.cpu() @ a.cpu() + 1, rtol=1e-4, atol=1e-3)
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.split()[-1] == "ok", result.stderr


VARIANTS = """
    import ctypes, os, torch, torch_fl
    lib = ctypes.CDLL(os.environ["TORCH_FL_PLUGINS"])
    lib.fl_variants_fast_launches.restype = ctypes.c_uint64
    a = torch.randn(8, 8, device="fl:0")
    for _ in range(5):
        a + a                                   # precise, through a program after the first call
    assert torch_fl.runtime().launcher.programs("add.Tensor")
    before = lib.fl_variants_fast_launches()
    with torch.autocast("fl", dtype=torch.bfloat16):
        for _ in range(3):
            inside = a + a                      # fast: the program must not take the precise entry
    during = lib.fl_variants_fast_launches() - before
    for _ in range(3):
        a + a
    after = lib.fl_variants_fast_launches() - before
    assert torch.equal(inside.cpu(), (a + a).cpu())
    print(during, after)
"""


def test_autocast_takes_the_fast_variant_after_programs_exist(python, tmp_path, build_plugin):
    lib = build_plugin(ROOT / "tests" / "fixtures" / "plugin_variants.c")
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  - type: variants\n")
    result = python(VARIANTS, {"TORCH_FL_CONFIG": str(config), "TORCH_FL_PLUGINS": str(lib),
                               "FL_VARIANTS_INNER": str(ROOT / "reference_vendor" / "libfl_reference.so")})
    assert result.returncode == 0, result.stderr
    during, after = map(int, result.stdout.split()[-2:])
    assert (during, after) == (3, 3), json.dumps({"during": during, "after": after})
