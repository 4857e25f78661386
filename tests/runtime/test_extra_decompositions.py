"""Torch-FL's own decompositions (fl_runtime/ops/fallback/extra_decompositions.py) against the CPU.

Each is checked twice: the Python function on CPU tensors against ATen's CPU kernel
(the decomposition itself is right), and the op on fl against the CPU with the path
counted as generic (the chain picks it and runs it on fl, not on the CPU).
"""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from conftest import ROOT

from fl_runtime.ops.fallback import extra_decompositions as extra

aten = torch.ops.aten


def _paths(fl, op: str) -> dict:
    return fl.op_stats.snapshot().get(op, {})


@pytest.mark.parametrize("args", [(0, 8), (5,), (3, -5, -2), (0, 0), (0, 17, 3), (1.0, 4.0, 0.5),
                                  (0.1, 1.0, 0.1), (-2.5, 2.5, 0.7), (0, 1000)])
def test_arange_on_fl_matches_cpu(fl, args):
    fl.op_stats.reset()
    got = torch.arange(*args, device="fl:0").cpu()
    want = torch.arange(*args)
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert _paths(fl, "aten::arange.start_out") == {"generic": 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_arange_with_dtype(fl, dtype):
    got = torch.arange(2, 30, 3, dtype=dtype, device="fl:0").cpu()
    assert torch.equal(got, torch.arange(2, 30, 3, dtype=dtype))


@pytest.mark.parametrize("args,dtype", [((-3.3, 1000.7, 0.37), torch.float32), ((0, 10, 0.1), torch.float16),
                                        ((0, 50, 0.3), torch.bfloat16), ((1e6, 1e6 + 3, 1e-3), torch.float32)])
def test_arange_fractional_step_equals_the_cpu_bit_for_bit(fl, args, dtype):
    """A fractional step: PyTorch's CPU kernel adds steps in vector chunks of the output
    dtype, so its values are not start + i*step rounded once; fl makes them with that same
    kernel on the host (one copy to the device) and gives the CPU's values exactly."""
    fl.op_stats.reset()
    got = torch.arange(*args, dtype=dtype, device="fl:0").cpu()
    assert torch.equal(got, torch.arange(*args, dtype=dtype))
    assert _paths(fl, "aten::arange.start_out") == {"generic": 1}
    assert "cpu" not in {path for paths in fl.op_stats.snapshot().values() for path in paths}


def test_arange_rejects_inconsistent_bounds():
    out = torch.empty(0, dtype=torch.int64)
    with pytest.raises(ValueError, match="inconsistent"):
        extra.arange_start_out(5, 0, 1, out=out)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("shape,dim", [((13,), 0), ((3, 7), 1), ((4, 5, 6), 0), ((4, 5, 6), -2), ((2, 1), 1)])
def test_cumsum_integer_on_fl_matches_cpu(fl, dtype, shape, dim):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-50, 50, shape, generator=gen).to(dtype)
    want = torch.cumsum(x, dim)
    assert torch.equal(extra.cumsum(x, dim), want)
    fl.op_stats.reset()
    got = torch.cumsum(x.to("fl:0"), dim).cpu()
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert _paths(fl, "aten::cumsum") == {"generic": 1}


def test_cumsum_with_dtype_and_scalar():
    x = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert torch.equal(extra.cumsum(x, 0, dtype=torch.float32), torch.cumsum(x, 0, dtype=torch.float32))
    assert torch.equal(extra.cumsum(torch.tensor(4), 0), torch.cumsum(torch.tensor(4), 0))


def _layer_args(norm_first: bool, use_gelu: bool, embed: int = 16, heads: int = 2, ff: int = 24):
    gen = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=gen) * 0.3
    src = r(2, 5, embed)
    return (src, embed, heads, r(3 * embed, embed), r(3 * embed), r(embed, embed), r(embed), use_gelu, norm_first,
            1e-5, 1 + r(embed), r(embed), 1 + r(embed), r(embed), r(ff, embed), r(ff), r(embed, ff), r(embed))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("use_gelu", [False, True])
def test_transformer_encoder_layer_matches_aten(norm_first, use_gelu):
    args = _layer_args(norm_first, use_gelu)
    want = aten._transformer_encoder_layer_fwd(*args)
    torch.testing.assert_close(extra.transformer_encoder_layer_fwd(*args), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_kind", ["causal", "padding"])
def test_transformer_encoder_layer_masks_match_aten(mask_kind):
    args = _layer_args(False, False)
    if mask_kind == "causal":
        mask, mask_type = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), 0
    else:
        mask, mask_type = torch.tensor([[False] * 5, [False] * 3 + [True] * 2]), 1
    want = aten._transformer_encoder_layer_fwd(*args, mask, mask_type)
    got = extra.transformer_encoder_layer_fwd(*args, mask, mask_type)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_transformer_encoder_eval_fast_path_on_fl(fl):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 24, dropout=0.0, batch_first=True, norm_first=True,
                                             activation="gelu")
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        want = encoder(x)
        encoder.to("fl:0")
        fl.op_stats.reset()
        got = encoder(x.to("fl:0")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert _paths(fl, "aten::_transformer_encoder_layer_fwd") == {"generic": 2}


@pytest.mark.parametrize("mode,padding_idx,weighted", [("sum", None, False), ("sum", 4, True), ("sum", None, True),
                                                       ("mean", None, False), ("mean", 4, False)])
def test_embedding_bag_forward_backward_on_fl(fl, mode, padding_idx, weighted):
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx)
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4, 4])   # bag 1 is empty
    weights = torch.rand(8) if weighted else None
    want = bag(indices, offsets, per_sample_weights=weights)
    want.pow(2).sum().backward()
    want_grad, bag.weight.grad = bag.weight.grad, None
    bag.to("fl:0")
    fl.op_stats.reset()
    got = bag(indices.to("fl:0"), offsets.to("fl:0"),
              per_sample_weights=None if weights is None else weights.to("fl:0"))
    got.pow(2).sum().backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(bag.weight.grad.cpu(), want_grad)
    assert _paths(fl, "aten::_embedding_bag") == {"generic": 1}
    assert _paths(fl, "aten::_embedding_bag_backward") == {"generic": 1}
    with torch.no_grad():
        torch.testing.assert_close(bag(indices.to("fl:0"), offsets.to("fl:0"),
                                       per_sample_weights=None if weights is None else weights.to("fl:0")).cpu(),
                                   want.detach())


def test_embedding_bag_sample_weight_gradient_reads_our_offset2bag(fl):
    """The per-sample-weights gradient is ATen's (CPU fallback); it reads the
    offset2bag our forward made, which must mean what ATen's means."""
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode="sum")
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 2, 2])
    weights = torch.rand(6, requires_grad=True)
    bag(indices, offsets, per_sample_weights=weights).pow(2).sum().backward()
    weights_fl = weights.detach().to("fl:0").requires_grad_()
    bag.to("fl:0")(indices.to("fl:0"), offsets.to("fl:0"), per_sample_weights=weights_fl).pow(2).sum().backward()
    torch.testing.assert_close(weights_fl.grad.cpu(), weights.grad)


def test_embedding_bag_max_mode_declines():
    w, i, o = torch.randn(5, 2), torch.tensor([0, 1]), torch.tensor([0])
    assert extra.embedding_bag(w, i, o, mode=2) is NotImplemented


def test_every_extra_decomposition_is_tested():
    assert set(extra.EXTRA_DECOMPOSITIONS) == {
        aten.arange.start_out, aten.cumsum.default, aten._transformer_encoder_layer_fwd.default,
        aten._embedding_bag.default, aten._embedding_bag_forward_only.default, aten._embedding_bag_backward.default,
        aten.index_copy_.default, aten.index_copy.default, aten.index_copy.out}


def test_arange_under_a_default_fl_device_stays_on_the_vendor_path(fl):
    """torch.set_default_device("fl:0") / `with torch.device("fl:0")`: the host-made values
    must still be made on the host (not recurse into fl's arange and its CPU fallback)."""
    fl.op_stats.reset()
    with torch.device("fl:0"):
        got = torch.arange(0.5, 7.0, 0.25)
    assert got.device.type == "fl"
    assert torch.equal(got.cpu(), torch.arange(0.5, 7.0, 0.25))
    assert _paths(fl, "aten::arange.start_out") == {"generic": 1}, fl.op_stats.snapshot()


@pytest.mark.parametrize("shape,dim,index", [((1, 2, 8, 4), 2, [5]), ((6, 3), 0, [4, 0, 2]), ((6, 3), -1, [2, 1]),
                                             ((5,), 0, [3]), ((4, 5), 1, 3)])
def test_index_copy_matches_the_cpu(fl, shape, dim, index):
    """StaticCache's key/value write: index_copy_ (eager) and index_copy (compiled graphs),
    one scatter_ on fl; the decomposition itself against ATen on CPU tensors too."""
    torch.manual_seed(0)
    self = torch.randn(shape)
    index = torch.tensor(index)
    source_shape = list(shape)
    source_shape[dim] = index.numel()
    source = torch.randn(source_shape)
    want = self.index_copy(dim, index, source)
    torch.testing.assert_close(extra.index_copy(self, dim, index, source), want, rtol=0, atol=0)
    on_fl = [t.to("fl:0") for t in (self, index, source)]
    fl.op_stats.reset()
    torch.testing.assert_close(on_fl[0].index_copy(dim, on_fl[1], on_fl[2]).cpu(), want, rtol=0, atol=0)
    in_place = on_fl[0].clone()
    in_place.index_copy_(dim, on_fl[1], on_fl[2])
    torch.testing.assert_close(in_place.cpu(), want, rtol=0, atol=0)
    assert fl.op_stats.snapshot().get("aten::scatter_.src") == {"native": 2}


@pytest.mark.parametrize("bad", [[9], [-1]])
def test_index_copy_refuses_indices_the_cpu_refuses(fl, bad):
    """ATen refuses a negative or out-of-range index; PyTorch's own decomposition (through
    index_put) wrapped -1 to the last row, a silent write where the CPU raises.  The
    vendor's scatter fails the launch instead: the error surfaces by the next synchronize,
    as a device-side error does on CUDA."""
    self, source = torch.zeros(5, 2), torch.ones(1, 2)
    with pytest.raises(IndexError):
        self.index_copy(0, torch.tensor(bad), source)
    on_fl = self.to("fl:0")
    with pytest.raises(fl.VendorError, match="out of bounds"):
        on_fl.index_copy_(0, torch.tensor(bad).to("fl:0"), source.to("fl:0"))
        torch.fl.synchronize()
    torch.testing.assert_close(on_fl.cpu(), self)


def test_index_copy_shapes_aten_refuses_keep_atens_error(fl):
    self, source = torch.zeros(5, 2, device="fl:0"), torch.ones(2, 2, device="fl:0")
    with pytest.raises(IndexError, match="Number of indices"):
        self.index_copy(0, torch.tensor([1], device="fl:0"), source)


# -- the native bridge's C++ run of index_copy.out and arange.start_out (cpp_generic.py) ---------
# Each call is made a few times: the first call of a (device, dtypes) runs in Python, which tells
# the bridge the chain's decision; the later ones are served in C++ when the bridge is active.
# Values, errors and op_stats must be the same whichever served them.

_REPEAT = 4


def _error_of(fn):
    try:
        fn()
    except Exception as exc:        # noqa: BLE001 - the test compares whatever is raised
        return type(exc), str(exc).split("\n")[0]
    return None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64])
@pytest.mark.parametrize("shape,dim,index", [((1, 2, 8, 4), 2, [5]), ((6, 3), 0, [4, 0, 2]), ((6, 3), -1, [2, 1]),
                                             ((5,), 0, [3]), ((4, 5), 1, 3), ((2, 3, 4), -3, [1])])
def test_index_copy_repeated_matches_the_cpu_and_counts_generic(fl, dtype, shape, dim, index):
    gen = torch.Generator().manual_seed(1)
    self = torch.randn(shape, generator=gen).mul(10).to(dtype)
    index = torch.tensor(index)
    source_shape = list(shape)
    source_shape[dim] = index.numel()
    source = torch.randn(source_shape, generator=gen).mul(10).to(dtype)
    want = self.index_copy(dim, index, source)
    on_fl = [t.to("fl:0") for t in (self, index, source)]
    fl.op_stats.reset()
    for _ in range(_REPEAT):
        in_place = on_fl[0].clone()
        assert in_place.index_copy_(dim, on_fl[1], on_fl[2]) is in_place
        assert torch.equal(in_place.cpu(), want)
        assert torch.equal(on_fl[0].index_copy(dim, on_fl[1], on_fl[2]).cpu(), want)
        out = torch.empty_like(on_fl[0])
        assert torch.index_copy(on_fl[0], dim, on_fl[1], on_fl[2], out=out) is out
        assert torch.equal(out.cpu(), want)
    assert _paths(fl, "aten::index_copy.out") == {"generic": 3 * _REPEAT}
    assert torch.equal(on_fl[0].cpu(), self)        # the functional forms leave self alone


def test_static_cache_write_pattern_matches_the_cpu(fl):
    """transformers' StaticCache: k_cache.index_copy_(2, cache_position, k) per layer and step."""
    gen = torch.Generator().manual_seed(2)
    cache, cache_fl = torch.zeros(1, 4, 16, 8), torch.zeros(1, 4, 16, 8, device="fl:0")
    fl.op_stats.reset()
    for step in range(12):
        position = torch.tensor([step])
        k = torch.randn(1, 4, 1, 8, generator=gen)
        cache.index_copy_(2, position, k)
        cache_fl.index_copy_(2, position.to("fl:0"), k.to("fl:0"))
    assert torch.equal(cache_fl.cpu(), cache)
    prefill = torch.randn(1, 4, 5, 8, generator=gen)
    cache.index_copy_(2, torch.arange(11, 16), prefill)
    cache_fl.index_copy_(2, torch.arange(11, 16, device="fl:0"), prefill.to("fl:0"))
    assert torch.equal(cache_fl.cpu(), cache)
    assert _paths(fl, "aten::index_copy.out") == {"generic": 13}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("args", [(0, 8), (3, -5, -2), (0, 0), (5, 5, -1), (1.0, 4.0, 0.5), (-2.5, 2.5, 0.7),
                                  (0, 10, 0.3), (2 ** 40, 2 ** 40 + 5)])
def test_arange_repeated_matches_the_cpu_and_counts_generic(fl, dtype, args):
    error = _error_of(lambda: torch.arange(*args, dtype=dtype))
    if error is not None:            # a fractional step in an integer dtype: the CPU's error
        for _ in range(_REPEAT):
            assert _error_of(lambda: torch.arange(*args, dtype=dtype, device="fl:0")) == error
        return
    want = torch.arange(*args, dtype=dtype)
    fl.op_stats.reset()
    for _ in range(_REPEAT):
        got = torch.arange(*args, dtype=dtype, device="fl:0")
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
        out = torch.full((3,), 7, dtype=dtype, device="fl:0")
        assert torch.arange(*args, out=out) is out
        assert torch.equal(out.cpu(), want)
    assert _paths(fl, "aten::arange.start_out") == {"generic": 2 * _REPEAT}


@pytest.mark.parametrize("args", [(5, 0, 1), (0, 5, -1), (0, 5, 0), (0.0, 5.0, 0.0), (0, float("nan")),
                                  (0, float("inf")), (float("-inf"), 0, 1.0), (0, 2 ** 60, 2 ** -40)])
def test_arange_bad_bounds_raise_what_the_cpu_raises_in_the_steady_state(fl, args):
    for _ in range(_REPEAT):                             # the (device, dtype) decision is known
        torch.arange(0, 3, device="fl:0")
        torch.arange(0.0, 3.0, device="fl:0")
    want = _error_of(lambda: torch.arange(*args))
    assert want is not None
    for _ in range(2):
        assert _error_of(lambda: torch.arange(*args, device="fl:0")) == want


@pytest.mark.parametrize("make", [
    lambda d: (torch.zeros(5, 2, device=d), 0, torch.tensor([1], dtype=torch.int32, device=d), torch.ones(1, 2, device=d)),
    lambda d: (torch.zeros(5, 2, device=d), 0, torch.tensor([[1]], device=d), torch.ones(1, 2, device=d)),
    lambda d: (torch.zeros(5, 2, device=d), 0, torch.tensor([1], device=d), torch.ones(2, 2, device=d)),
    lambda d: (torch.zeros(5, 2, device=d), 2, torch.tensor([1], device=d), torch.ones(1, 2, device=d)),
    lambda d: (torch.zeros(5, 2, device=d), 0, torch.tensor([1], device=d), torch.ones(1, 2, dtype=torch.float64, device=d)),
    lambda d: (torch.zeros(5, 2, device=d), 1, torch.tensor([1], device=d), torch.ones(5, 3, device=d)),
])
def test_index_copy_bad_calls_raise_what_the_cpu_raises_in_the_steady_state(fl, make):
    good = torch.zeros(5, 2, device="fl:0")
    for _ in range(_REPEAT):
        good.index_copy_(0, torch.tensor([1], device="fl:0"), torch.ones(1, 2, device="fl:0"))
    want = _error_of(lambda: make("cpu")[0].index_copy_(*make("cpu")[1:]))
    assert want is not None
    for _ in range(2):
        self, dim, index, source = make("fl:0")
        assert _error_of(lambda: self.index_copy_(dim, index, source)) == want
        assert _error_of(lambda: self.index_copy(dim, index, source)) == want


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_index_copy_out_of_another_shape_or_dtype_is_left_to_pytorch(fl):
    self, index, source = torch.zeros(5, 2), torch.tensor([1, 3]), torch.ones(2, 2)
    for out_shape, dtype in [((3,), torch.float32), ((5, 2), torch.float64), ((0,), torch.float32)]:
        want = torch.index_copy(self, 0, index, source, out=torch.empty(out_shape, dtype=dtype)) \
            if dtype == torch.float32 else None
        for _ in range(_REPEAT):
            out = torch.empty(out_shape, dtype=dtype, device="fl:0")
            got = _error_of(lambda: torch.index_copy(self.to("fl:0"), 0, index.to("fl:0"), source.to("fl:0"), out=out))
            if want is not None:
                assert got is None and torch.equal(out.cpu(), want)
            else:
                assert got == _error_of(lambda: torch.index_copy(self, 0, index, source,
                                                                 out=torch.empty(out_shape, dtype=dtype)))


def test_strict_mode_and_switches_are_read_on_every_call(fl, monkeypatch):
    """The C++ path serves only what the chain would run as the decomposition: TORCH_FL_STRICT
    (read per call) and the config switches (configure forgets the decisions) reach it too."""
    from fl_runtime.errors import UnsupportedOpError
    chain = fl.runtime().launcher.chain
    saved = (chain.enable_generic, chain.enable_cpu)
    cache = torch.zeros(4, 3, device="fl:0")
    index, row = torch.tensor([2], device="fl:0"), torch.ones(1, 3, device="fl:0")
    for _ in range(_REPEAT):
        cache.index_copy_(0, index, row)
        torch.arange(0, 4, device="fl:0")
    monkeypatch.setenv("TORCH_FL_STRICT", "1")
    with pytest.raises(UnsupportedOpError, match="TORCH_FL_STRICT is set"):
        cache.index_copy_(0, index, row)
    with pytest.raises(UnsupportedOpError, match="TORCH_FL_STRICT is set"):
        torch.arange(0, 4, device="fl:0")
    monkeypatch.delenv("TORCH_FL_STRICT")
    try:
        chain.configure(enable_generic_kernel=False, enable_cpu_fallback=True)
        fl.op_stats.reset()
        with warnings.catch_warnings():       # the CPU fallback's once-per-op warning
            warnings.simplefilter("ignore")
            for _ in range(_REPEAT):
                cache.index_copy_(0, torch.tensor([1], device="fl:0"), row * 2)
                assert torch.equal(torch.arange(0, 4, device="fl:0").cpu(), torch.arange(0, 4))
        assert _paths(fl, "aten::index_copy.out") == {"cpu": _REPEAT}
        assert _paths(fl, "aten::arange.start_out") == {"cpu": _REPEAT}
        chain.configure(enable_generic_kernel=False, enable_cpu_fallback=False)
        with pytest.raises(UnsupportedOpError):
            cache.index_copy_(0, index, row)
    finally:
        chain.configure(*saved)
    fl.op_stats.reset()
    for _ in range(_REPEAT):
        cache.index_copy_(0, index, row)
    assert _paths(fl, "aten::index_copy.out") == {"generic": _REPEAT}
    assert torch.equal(cache.cpu()[1:3], torch.tensor([[2.0] * 3, [1.0] * 3]))


def test_other_streams_and_a_profile_take_the_python_chain_with_the_same_results(fl):
    cache = torch.zeros(6, 2, device="fl:0")
    for _ in range(_REPEAT):
        cache.index_copy_(0, torch.tensor([0], device="fl:0"), torch.ones(1, 2, device="fl:0"))
    stream = torch.Stream(device="fl:0")
    with stream:
        cache.index_copy_(0, torch.tensor([3], device="fl:0"), torch.full((1, 2), 3.0, device="fl:0"))
        positions = torch.arange(2, 6, device="fl:0")
    stream.synchronize()
    with fl.profile(warn_fallback_share=1.0) as prof:
        cache.index_copy_(0, torch.tensor([5], device="fl:0"), torch.full((1, 2), 5.0, device="fl:0"))
    assert prof.paths().get("aten::index_copy.out") == {"generic"}
    want = torch.zeros(6, 2)
    want[0], want[3], want[5] = 1.0, 3.0, 5.0
    assert torch.equal(cache.cpu(), want)
    assert torch.equal(positions.cpu(), torch.arange(2, 6))


_BOTH_ROUTES = """
import json, torch, torch_fl
gen = torch.Generator().manual_seed(3)
out = {}
cache = torch.zeros(1, 2, 8, 4, device="fl:0")
for step in range(6):
    k = torch.randn(1, 2, 1, 4, generator=gen)
    cache.index_copy_(2, torch.tensor([step], device="fl:0"), k.to("fl:0"))
out["cache"] = cache.cpu().flatten().tolist()
out["index_copy"] = torch.zeros(5, 3, device="fl:0").index_copy(1, torch.tensor([2, 0], device="fl:0"),
                                                            torch.ones(5, 2, device="fl:0")).cpu().tolist()
out["arange"] = [torch.arange(0.1, 1.0, 0.1, device="fl:0").cpu().tolist() for _ in range(3)]
out["arange_int"] = torch.arange(3, 20, 4, dtype=torch.int32, device="fl:0").cpu().tolist()
errors = []
for bad in [lambda: torch.arange(5, 0, 1, device="fl:0"),
            lambda: cache.index_copy_(2, torch.tensor([1], dtype=torch.int32, device="fl:0"),
                                      torch.ones(1, 2, 1, 4, device="fl:0"))]:
    try:
        bad()
    except Exception as exc:
        errors.append([type(exc).__name__, str(exc).splitlines()[0]])
out["errors"] = errors
stats = torch_fl.op_stats.snapshot()
out["stats"] = {op: stats[op] for op in ("aten::index_copy.out", "aten::arange.start_out", "aten::scatter_.src")}
print(json.dumps(out))
"""


def test_python_route_gives_the_same_results_and_counts(python):
    results = {}
    for route in ("0", ""):
        run = python(_BOTH_ROUTES, env={"TORCH_FL_BRIDGE": route})
        assert run.returncode == 0, run.stderr
        results[route] = json.loads(run.stdout.strip().splitlines()[-1])
    assert results["0"] == results[""]
    assert results[""]["stats"]["aten::index_copy.out"] == {"generic": 7}


_VENDOR_KERNEL = """
import ctypes, json, os, warnings, torch, torch_fl
warnings.simplefilter("ignore")
lib = ctypes.CDLL(os.environ["TORCH_FL_PLUGINS"])
lib.fl_index_copy_launches.restype = ctypes.c_uint64
cache = torch.zeros(4, 3, device="fl:0")
for step in range(5):
    cache.index_copy_(0, torch.tensor([step % 4], device="fl:0"), torch.full((1, 3), float(step), device="fl:0"))
    positions = torch.arange(step, step + 3, device="fl:0")
chain = torch_fl.runtime().launcher.chain
print(json.dumps({"launches": lib.fl_index_copy_launches(), "cache": cache.cpu()[:, 0].tolist(),
                  "positions": positions.cpu().tolist(), "cpp_generic": sorted(op.name() for op in chain.cpp_generic)}))
"""


def test_a_vendor_kernel_for_the_ops_is_still_launched(python, tmp_path, build_plugin):
    """A plugin with an index_copy.out / arange.start_out kernel keeps it (the launcher's kernel,
    not the bridge's C++ decomposition): each call launches it (this one declines, so the
    fallback chain then runs the call and the values stay the CPU's)."""
    lib = build_plugin(ROOT / "tests" / "fixtures" / "plugin_index_copy_kernel.c")
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  - type: index_copy_kernel\n")
    for route in ("", "0"):
        result = python(_VENDOR_KERNEL, {"TORCH_FL_CONFIG": str(config), "TORCH_FL_PLUGINS": str(lib),
                                         "TORCH_FL_BRIDGE": route,
                                         "FL_INDEX_COPY_INNER": str(ROOT / "reference_vendor" / "libfl_reference.so")})
        assert result.returncode == 0, result.stderr
        got = json.loads(result.stdout.strip().splitlines()[-1])
        assert got == {"launches": 10, "cache": [4.0, 1.0, 2.0, 3.0], "positions": [4, 5, 6], "cpp_generic": []}, route
