"""autograd on fl:0 and fl:1 gives the CPU's gradients."""
import pytest
import torch


@pytest.mark.parametrize("device", ["fl:0", "fl:1"])
def test_mlp_gradients_match_cpu(fl, device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x, y = torch.randn(5, 8), torch.tensor([0, 2, 1, 1, 0])
    torch.nn.functional.cross_entropy(model(x), y).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model.to(device)
    torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
    for param, grad in zip(model.parameters(), expected):
        assert param.grad.device == torch.device(device)
        assert torch.allclose(param.grad.cpu(), grad, rtol=1e-4, atol=1e-6)


def test_conv_pool_gradients_match_cpu(fl):
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(2, 4, 3, padding=1)
    x = torch.randn(3, 2, 8, 8, requires_grad=True)
    torch.nn.functional.max_pool2d(conv(x).relu(), 2).sum().backward()
    grads = [x.grad.clone(), conv.weight.grad.clone(), conv.bias.grad.clone()]
    conv.zero_grad(set_to_none=True)
    conv.to("fl:0")
    xf = x.detach().to("fl:0").requires_grad_()
    torch.nn.functional.max_pool2d(conv(xf).relu(), 2).sum().backward()
    for ours, ref in zip([xf.grad, conv.weight.grad, conv.bias.grad], grads):
        assert torch.allclose(ours.cpu(), ref, rtol=1e-4, atol=1e-5)


def test_leaf_created_on_device_requires_grad(fl):
    w = torch.ones(3, device="fl:1", requires_grad=True)
    (w * w).sum().backward()
    assert w.grad.device == torch.device("fl:1") and w.grad.cpu().tolist() == [2.0, 2.0, 2.0]
