"""A model of common blocks trains on fl:0 as it does on the CPU, and its coverage
report says where each op runs.

Blocks: a transformer encoder layer (LayerNorm, multi-head attention, GELU,
dropout) and a ResNet basic block (conv, BatchNorm, ReLU, skip).  Dropout is on
(p=0.1) for the coverage trace, so its ops are listed, and off (p=0) for the
numeric comparison: fl:0 draws from its own random stream, so masks would differ
from the CPU's.
"""
import copy

import torch
from torch import nn


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + x)


class CommonBlocks(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=dropout, activation="gelu", batch_first=True)
        self.block = ResidualBlock(4)
        self.head = nn.Linear(16 + 4, 3)

    def forward(self, tokens, image):
        text = self.encoder(tokens).mean(dim=1)
        vision = self.block(image).mean(dim=(2, 3))
        return self.head(torch.cat([text, vision], dim=1))


def _batch():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 5, 16, generator=g), torch.randn(2, 4, 6, 6, generator=g),
            torch.tensor([0, 2]))


def _train(model, tokens, image, target, steps: int = 3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(tokens, image), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_common_blocks_train_on_fl_like_on_cpu(fl):
    torch.manual_seed(0)
    cpu_model = CommonBlocks(dropout=0.0)
    fl_model = copy.deepcopy(cpu_model).to("fl:0")
    tokens, image, target = _batch()
    cpu_losses = _train(cpu_model, tokens, image, target)
    fl_losses = _train(fl_model, tokens.to("fl:0"), image.to("fl:0"), target.to("fl:0"))
    print("losses cpu", cpu_losses, "fl", fl_losses)
    torch.testing.assert_close(fl_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    assert cpu_losses[-1] < cpu_losses[0]
    for (name, p_cpu), p_fl in zip(cpu_model.state_dict().items(), fl_model.state_dict().values()):
        torch.testing.assert_close(p_fl.cpu(), p_cpu, rtol=1e-3, atol=1e-4, msg=name)


def test_coverage_report_of_the_model(fl):
    tokens, image, _ = _batch()
    report = fl.coverage(CommonBlocks(dropout=0.1), (tokens, image), devices=[0])
    print(report)
    status = {o.op: o.status["fl:0"] for o in report.ops}
    for op in ("aten::convolution", "aten::convolution_backward", "aten::native_layer_norm",
               "aten::native_layer_norm_backward", "aten::native_batch_norm", "aten::native_batch_norm_backward",
               "aten::mm", "aten::bmm", "aten::addmm", "aten::_softmax_backward_data", "aten::clone"):
        assert status[op] == "native", (op, status[op])
    assert {"aten::gelu", "aten::gelu_backward", "aten::bernoulli_.float"} <= set(status)   # GELU, dropout
    assert "unsupported" not in status.values()
    totals = report.totals()["fl:0"]
    assert sum(totals.values()) == len(status) and totals["native"] > len(status) // 2
    assert "distinct ATen ops (forward + backward)" in report.to_text()
