"""Torch-FL's own decompositions (fl_runtime/ops/fallback/extra_decompositions.py) against the CPU.

Each is checked twice: the Python function on CPU tensors against ATen's CPU kernel
(the decomposition itself is right), and the op on fl against the CPU with the path
counted as generic (the chain picks it and runs it on fl, not on the CPU).
"""
from __future__ import annotations

import pytest
import torch

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
