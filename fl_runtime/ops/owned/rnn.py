"""The fused RNN cells PyTorch picks for fl, written as the unfused math in aten ops.

PyTorch's RNN code (ATen's RNN.cpp, `LSTMCell`/`GRUCell`) sends every
non-CPU device -- CUDA, XPU and PrivateUse1 -- to `_thnn_fused_lstm_cell` /
`_thnn_fused_gru_cell`, which exist for CUDA only: no CPU kernel, no
decomposition.  So `nn.LSTM`, `nn.GRU`, `nn.LSTMCell` and `nn.GRUCell` on fl
reach an op nothing can run.

This module registers both cells for fl as the cell's equations in ordinary
aten ops (matmuls are done by the caller; the cell adds biases, applies the
gates).  Every op inside runs on fl through its own path (vendor kernel,
generic kernel, CPU fallback).  The same function is registered under
AutogradPrivateUse1, so autograd records those inner ops and differentiates
them (double backward included) instead of calling the CUDA-only
`_thnn_fused_*_cell_backward_impl`; it is also registered under PrivateUse1
for calls below autograd (inference mode).  The workspace output keeps CUDA's
layout (LSTM: activated gates i, f, g, o; GRU: r, z, n, hx, hn), so the
schema's meaning holds; it is not differentiable, as in PyTorch.
"""
from __future__ import annotations

import torch

_KEYS = ("PrivateUse1", "AutogradPrivateUse1")


def _with_biases(input_gates, hidden_gates, input_bias, hidden_bias):
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    return input_gates, hidden_gates


def fused_lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
                    input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None):
    """aten::_thnn_fused_lstm_cell: (hy, cy, workspace) from the pre-activation gates."""
    input_gates, hidden_gates = _with_biases(input_gates, hidden_gates, input_bias, hidden_bias)
    i, f, g, o = (input_gates + hidden_gates).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    workspace = torch.cat([i, f, g, o], 1).detach()
    return hy, cy, workspace


def fused_gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
                   input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None):
    """aten::_thnn_fused_gru_cell: (hy, workspace); the new gate uses r * (W_hn h + b_hn)."""
    input_gates, hidden_gates = _with_biases(input_gates, hidden_gates, input_bias, hidden_bias)
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    workspace = torch.cat([r, z, n, hx, hn], 1).detach()
    return hy, workspace


def register(library: torch.library.Library) -> None:
    """Register both cells for fl, below and at the autograd key."""
    for key in _KEYS:
        library.impl("_thnn_fused_lstm_cell", fused_lstm_cell, key)
        library.impl("_thnn_fused_gru_cell", fused_gru_cell, key)
