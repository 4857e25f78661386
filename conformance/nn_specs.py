"""Case generators for the neural-network kernels: convolution, pooling, NLL loss.

Their arguments hang together (a weight's channels divide the input's, a
gradient has the forward output's shape, a class target lies below the class
count, max-pool indices are what the forward returned: conformance.recipes.derive),
which OpInfo samples respect but do not vary: these generators draw
the geometry (batch, channels, groups, kernel, stride, padding, dilation,
ceil mode) and then layouts and values like every other recipe.  The
kernel-table entries in conformance.opspecs also keep OpInfo's samples
(transposed and 3-d convolutions, for one), drawn alongside these.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from . import strategies as s


def _pool_extent(size: int, kernel: int, pad: int, stride: int, dilation: int, ceil_mode: bool) -> int:
    """Output length of a pooling window over `size` (PyTorch's pooling_output_shape)."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:   # the last window would start in the padding
        out -= 1
    return out


def _spatial(draw: s.Draw, count: int, kernel: list[int], pad: list[int], dilation: list[int]) -> list[int]:
    """Input sizes the windows fit in: small ones, now and then one that crosses 32."""
    least = [max(1, d * (k - 1) + 1 - 2 * p) for k, p, d in zip(kernel, pad, dilation)]
    extra = draw(st.sampled_from([0, 0, 0, 1, 2, 5, 30]))
    return [low + draw(st.integers(0, 3)) + extra for low in least[:count]]


def _conv_geometry(draw: s.Draw) -> dict:
    spatial = draw(st.sampled_from([2, 1]))
    kernel = [draw(st.integers(1, 4)) for _ in range(spatial)]
    return {"spatial": spatial, "groups": draw(st.sampled_from([1, 2, 3])), "kernel": kernel,
            "stride": [draw(st.integers(1, 3)) for _ in range(spatial)],
            "padding": [draw(st.integers(0, 2)) for _ in range(spatial)],
            "dilation": [draw(st.sampled_from([1, 1, 2])) for _ in range(spatial)],
            "batch": draw(st.sampled_from([1, 2, 3, 0])),
            "in_per_group": draw(st.integers(1, 3)), "out_per_group": draw(st.integers(1, 3))}


def _conv_tensors(draw: s.Draw, dtype: torch.dtype, g: dict) -> tuple[dict, dict, list[int], list[int]]:
    """(input, weight, input sizes, output sizes) of a convolution geometry."""
    sizes = _spatial(draw, g["spatial"], g["kernel"], g["padding"], g["dilation"])
    c_in, c_out = g["groups"] * g["in_per_group"], g["groups"] * g["out_per_group"]
    x = s.tensor(draw, [g["batch"], c_in, *sizes], dtype)
    w = s.tensor(draw, [c_out, g["in_per_group"], *g["kernel"]], dtype)
    out = [(n + 2 * p - d * (k - 1) - 1) // step + 1
           for n, k, p, step, d in zip(sizes, g["kernel"], g["padding"], g["stride"], g["dilation"])]
    return x, w, [g["batch"], c_out, *out], sizes


def _conv_options(g: dict) -> list:
    """stride, padding, dilation, transposed, output_padding, groups (schema order)."""
    return [g["stride"], g["padding"], g["dilation"], False, [0] * g["spatial"], g["groups"]]


def convolution(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    g = _conv_geometry(draw)
    x, w, out, _ = _conv_tensors(draw, dtype, g)
    bias = s.tensor(draw, [out[1]], dtype) if draw(st.booleans()) else None
    return [x, w, bias, *_conv_options(g)], {}


def convolution_backward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    g = _conv_geometry(draw)
    x, w, out, _ = _conv_tensors(draw, dtype, g)
    grad = s.tensor(draw, out, dtype)
    output_mask = draw(st.lists(st.booleans(), min_size=3, max_size=3).filter(any))
    bias_sizes = [out[1]] if output_mask[2] or draw(st.booleans()) else None
    return [grad, x, w, bias_sizes, *_conv_options(g), output_mask], {}


def _pool_geometry(draw: s.Draw, dilation: bool) -> dict:
    kernel = [draw(st.integers(1, 4)) for _ in range(2)]
    return {"kernel": kernel, "stride": draw(st.sampled_from([[], [1, 1], [2, 2], [2, 1], [3, 2]])),
            "padding": [draw(st.integers(0, k // 2)) for k in kernel],
            "dilation": [draw(st.sampled_from([1, 1, 2])) for _ in range(2)] if dilation else [1, 1],
            "ceil_mode": draw(st.booleans()), "leading": draw(st.sampled_from([[1, 2], [2, 3], [3], [0, 2]]))}


def _pool_input(draw: s.Draw, dtype: torch.dtype, g: dict) -> tuple[dict, list[int]]:
    """(input, output shape) of a pooling geometry."""
    stride = g["stride"] or g["kernel"]   # an empty stride means the kernel size
    sizes = _spatial(draw, 2, g["kernel"], [0, 0], g["dilation"])
    out = [_pool_extent(n, k, p, step, d, g["ceil_mode"])
           for n, k, p, step, d in zip(sizes, g["kernel"], g["padding"], stride, g["dilation"])]
    return s.tensor(draw, [*g["leading"], *sizes], dtype), [*g["leading"], *out]


def max_pool2d(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    g = _pool_geometry(draw, dilation=True)
    x, _ = _pool_input(draw, dtype, g)
    return [x, g["kernel"], g["stride"], g["padding"], g["dilation"], g["ceil_mode"]], {}


def max_pool2d_backward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    """(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices), the
    indices being what the forward returns for self (conformance.recipes.derive)."""
    g = _pool_geometry(draw, dilation=True)
    x, out = _pool_input(draw, dtype, g)
    options = [g["kernel"], g["stride"], g["padding"], g["dilation"], g["ceil_mode"]]
    indices = {"derived": {"op": "max_pool2d_with_indices", "args": [x, *options], "output": 1}}
    return [s.tensor(draw, out, dtype), x, *options, indices], {}


def _avg_pool_options(draw: s.Draw, g: dict) -> list:
    """kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override."""
    return [g["kernel"], g["stride"], g["padding"], g["ceil_mode"], draw(st.booleans()),
            draw(st.sampled_from([None, None, 3]))]


def avg_pool2d(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    g = _pool_geometry(draw, dilation=False)
    x, _ = _pool_input(draw, dtype, g)
    return [x, *_avg_pool_options(draw, g)], {}


def avg_pool2d_backward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    g = _pool_geometry(draw, dilation=False)
    x, out = _pool_input(draw, dtype, g)
    return [s.tensor(draw, out, dtype), x, *_avg_pool_options(draw, g)], {}


def _nll_inputs(draw: s.Draw, dtype: torch.dtype) -> tuple[dict, dict, dict | None, int, int, list[int]]:
    """(log-probabilities, targets, class weights, reduction, ignore_index, per-sample shape)."""
    classes = draw(st.integers(1, 6))
    batch = draw(st.sampled_from([[3], [1], [], [0], [40]]))   # [] : one sample, self is [C]
    ignore = draw(st.sampled_from([-100, -100, 0, classes - 1]))
    target = s.index_tensor(draw, batch, 0, classes)
    weight = s.tensor(draw, [classes], dtype) if draw(st.booleans()) else None
    return (s.tensor(draw, [*batch, classes], dtype), target, weight, draw(st.sampled_from([0, 1, 2])),
            ignore, batch)


def nll_loss_forward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    x, target, weight, reduction, ignore, _ = _nll_inputs(draw, dtype)
    return [x, target, weight, reduction, ignore], {}


def nll_loss_backward(draw: s.Draw, dtype: torch.dtype, mask: int) -> tuple[list, dict]:
    x, target, weight, reduction, ignore, batch = _nll_inputs(draw, dtype)
    grad = s.tensor(draw, batch if reduction == 0 else [], dtype)
    total_weight = s.tensor(draw, [], dtype)   # the forward's second output; any value divides alike
    return [grad, x, target, weight, reduction, ignore, total_weight], {}


NN_GENERATORS = {
    "convolution": convolution, "convolution_backward": convolution_backward,
    "max_pool2d_with_indices": max_pool2d, "max_pool2d_with_indices_backward": max_pool2d_backward,
    "avg_pool2d": avg_pool2d, "avg_pool2d_backward": avg_pool2d_backward,
    "nll_loss_forward": nll_loss_forward, "nll_loss_backward": nll_loss_backward,
}
