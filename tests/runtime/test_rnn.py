"""nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell run on fl as on the CPU (ops/owned/rnn.py).

PyTorch sends non-CPU devices to the CUDA-only fused cells; Torch-FL
registers them for fl as aten math.  Each check runs the same module on the
CPU and on fl:0 and compares outputs, input gradients and weight gradients;
a short training loop compares losses step by step.  The fallback chain must
never pick the CPU for an op PyTorch cannot run there.
"""
import copy
import warnings

import pytest
import torch
from torch import nn

from fl_runtime.errors import UnsupportedOpError

TOL = dict(rtol=1e-5, atol=1e-5)


def _compare(module, inputs, device="fl:0"):
    """Run module(*inputs) on CPU and on `device`; compare outputs and all gradients."""
    torch.manual_seed(0)
    fl_module = copy.deepcopy(module).to(device)
    cpu_in = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    fl_in = [t.detach().to(device).requires_grad_(t.is_floating_point()) for t in inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no CPU fallback on the reference vendor
        fl_out = module_out(fl_module, fl_in)
        _loss(fl_out).backward()
    cpu_out = module_out(module, cpu_in)
    _loss(cpu_out).backward()
    for got, want in zip(_flat(fl_out), _flat(cpu_out)):
        assert got.device.type == "fl"
        torch.testing.assert_close(got.cpu(), want, **TOL)
    for got, want in zip(fl_in, cpu_in):
        torch.testing.assert_close(got.grad.cpu(), want.grad, **TOL)
    for (name, want), got in zip(module.named_parameters(), fl_module.parameters()):
        torch.testing.assert_close(got.grad.cpu(), want.grad, **TOL, msg=name)


def module_out(module, inputs):
    if isinstance(module, nn.LSTMCell):
        x, h, c = inputs
        return module(x, (h, c))
    return module(*inputs)


def _flat(value):
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _flat(item)]


def _loss(out):
    # Weighted so each output element has its own gradient (a plain sum hides swaps).
    return sum((t * torch.linspace(0.5, 1.5, t.numel()).reshape(t.shape).to(t.device)).sum()
               for t in _flat(out))


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_multi_layer_rnn_matches_cpu(fl, kind, bidirectional, batch_first):
    torch.manual_seed(1)
    module = kind(3, 5, num_layers=2, bidirectional=bidirectional, batch_first=batch_first)
    x = torch.randn(2, 4, 3)
    _compare(module, [x])


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_rnn_with_initial_state_and_no_bias(fl, kind):
    torch.manual_seed(2)
    module = kind(3, 4, num_layers=1, bias=False)
    x, h = torch.randn(5, 2, 3), torch.randn(1, 2, 4)
    if kind is nn.LSTM:
        fl_module = copy.deepcopy(module).to("fl:0")
        c = torch.randn(1, 2, 4)
        want = module(x, (h, c))
        got = fl_module(x.to("fl:0"), (h.to("fl:0"), c.to("fl:0")))
    else:
        _compare(module, [x, h])
        return
    for g, w in zip(_flat(got), _flat(want)):
        torch.testing.assert_close(g.cpu(), w, **TOL)


def test_lstm_cell_matches_cpu(fl):
    torch.manual_seed(3)
    _compare(nn.LSTMCell(3, 4), [torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)])


def test_gru_cell_matches_cpu(fl):
    torch.manual_seed(4)
    _compare(nn.GRUCell(3, 4), [torch.randn(2, 3), torch.randn(2, 4)])


def test_unbatched_cells_match_cpu(fl):
    torch.manual_seed(5)
    cell = nn.GRUCell(3, 4)
    x = torch.randn(3)
    torch.testing.assert_close(copy.deepcopy(cell).to("fl:0")(x.to("fl:0")).cpu(), cell(x), **TOL)


def test_double_backward_of_a_cell_matches_cpu(fl):
    torch.manual_seed(6)
    cell = nn.LSTMCell(3, 4)
    fl_cell = copy.deepcopy(cell).to("fl:0")
    results = []
    for module, device in ((cell, "cpu"), (fl_cell, "fl:0")):
        x = torch.linspace(-1, 1, 6).reshape(2, 3).to(device).requires_grad_()
        h, c = module(x)
        (gx,) = torch.autograd.grad((h * c).sum(), x, create_graph=True)
        (ggx,) = torch.autograd.grad(gx.pow(2).sum(), x)
        results.append((gx.detach().cpu(), ggx.cpu()))
    torch.testing.assert_close(results[1], results[0], **TOL)


def test_inference_mode_runs_below_autograd(fl):
    torch.manual_seed(7)
    module = nn.LSTM(3, 4, num_layers=2)
    x = torch.randn(4, 2, 3)
    with torch.inference_mode():
        got = copy.deepcopy(module).to("fl:0")(x.to("fl:0"))
        want = module(x)
    for g, w in zip(_flat(got), _flat(want)):
        torch.testing.assert_close(g.cpu(), w, **TOL)


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.lstm = nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = nn.GRU(12, 5, batch_first=True)
        self.head = nn.Linear(5, 3)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        out, _ = self.gru(out)
        return self.head(out)


def _train(model, device: str, steps: int = 4) -> list[float]:
    g = torch.Generator().manual_seed(8)
    tokens = torch.randint(0, 7, (3, 5), generator=g).to(device)
    target = torch.randint(0, 3, (3, 5), generator=g).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(tokens).reshape(-1, 3), target.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_loop_matches_cpu_losses(fl):
    torch.manual_seed(9)
    model = Tagger()
    fl_model = copy.deepcopy(model).to("fl:0")
    want = _train(model, "cpu")
    got = _train(fl_model, "fl:0")
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert want[-1] < want[0]         # it learns: the comparison is not of a flat line


def test_an_op_without_a_cpu_kernel_is_unsupported_not_a_raw_pytorch_error(fl):
    # The backward kernel of CUDA's fused cell: no vendor kernel, no decomposition, no CPU kernel.
    workspace = torch.zeros(2, 16, device="fl:0")
    cx = torch.zeros(2, 4, device="fl:0")
    with pytest.raises(UnsupportedOpError) as info:
        torch.ops.aten._thnn_fused_lstm_cell_backward_impl(cx, cx, cx, cx, workspace, True)
    message = str(info.value)
    assert "_thnn_fused_lstm_cell_backward_impl" in message and "fl:0" in message
    assert "PyTorch has no CPU kernel for it" in message
    assert "Could not run" not in message


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell])
def test_autocast_runs_rnns_in_the_autocast_dtype(fl, kind):
    # CUDA's policy (cuDNN RNNs, lstm_cell, gru_cell in low precision), compared with the
    # float32 CPU result at bfloat16 accuracy.
    torch.manual_seed(10)
    module = kind(3, 4)
    x = torch.randn(5, 2, 3) if kind in (nn.LSTM, nn.GRU) else torch.randn(2, 3)
    fl_module = copy.deepcopy(module).to("fl:0")
    with torch.autocast("fl", dtype=torch.bfloat16):
        got = fl_module(x.to("fl:0"))
    want = module(x)
    for g, w in zip(_flat(got), _flat(want)):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float().cpu(), w, rtol=0.05, atol=0.02)


def test_a_declined_vendor_call_of_an_op_without_cpu_kernel_is_unsupported(fl):
    # The launcher's way into the CPU link (a vendor kernel that declines a call) checks
    # the same feasibility as the chain's decision.
    chain = fl.runtime().launcher.chain
    op = torch.ops.aten._thnn_fused_gru_cell_backward.default
    grad, workspace = torch.zeros(2, 4, device="fl:0"), torch.zeros(2, 20, device="fl:0")
    with pytest.raises(UnsupportedOpError, match="vendor kernel cannot take this call \\(declined\\) and no CPU "
                       "fallback \\(PyTorch has no CPU kernel for it\\)"):
        chain.run_on_cpu(op, (grad, workspace, True), {}, 0, "declined")
