"""torch.compile on fl with the default backend (Inductor) matches eager
(integration/torch_compile.py, dynamo_interface.py, inductor_backend.py; docs/users/compile.md).

Inductor lowers every node of an fl graph to an ATen call that runs the vendor
kernels, so compiled results equal eager fl results and match the CPU within
summation-order tolerance.  Compiling is slow (seconds per graph), so the
checks are few and small: an MLP and a CNN in the script a user would run, a
one-layer HF Llama in this process.
"""
import copy
import math

import pytest
import torch

from fl_runtime.ops import accounting

SCRIPT = """
import sys
import torch
import torch_fl                                   # before dynamo and Inductor are imported
assert "torch._inductor.compile_fx" not in sys.modules, "starting fl must not import Inductor"
from fl_runtime.ops import accounting

# Inductor's decompositions (applied before the graph reaches fl) turn max pooling's
# offsets into indices with integer floor_divide, which the reference vendor has no
# kernel or generic decomposition for: the one op that takes the CPU fallback.
CPU_OPS = {"mlp": set(), "cnn": {"aten::floor_divide"}}
torch.manual_seed(0)
models = {
    "mlp": (torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)),
            torch.randn(5, 8)),
    "cnn": (torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 4)),
            torch.randn(5, 3, 8, 8)),
}
for name, (model, x) in models.items():
    out = model(x)
    out.square().sum().backward()
    want = [out.detach()] + [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    fl_model = model.to("fl:0")
    compiled = torch.compile(fl_model)            # the default backend: Inductor
    for step in range(2):                         # the second call runs the cached graphs
        fl_model.zero_grad(set_to_none=True)
        accounting.reset_counts()
        got_out = compiled(x.to("fl:0"))
        got_out.square().sum().backward()
        counts = accounting.counts()
        on_cpu = {op for (op, path) in counts if path == "cpu"}
        assert got_out.device.type == "fl" and on_cpu == CPU_OPS[name], counts
        got = [got_out.detach().cpu()] + [p.grad.cpu() for p in fl_model.parameters()]
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    print(name, "ok")
from torch._inductor import config
assert config.fallback_by_default is False, "an fl graph left Inductor unfused for the CPU"
from torch._dynamo.device_interface import get_interface_for_device
fl = get_interface_for_device("fl")
assert fl.device_count() == torch.fl.device_count() and fl.current_device() == 0 and fl.is_available()
print("done")
"""


def test_compiled_mlp_and_cnn_match_cpu_forward_and_backward(script):
    result = script(SCRIPT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert result.stdout.split() == ["mlp", "ok", "cnn", "ok", "done"]


def test_compiled_tiny_hf_llama_matches_cpu(fl):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    fl_model = copy.deepcopy(model).to("fl:0")
    fl_model.zero_grad(set_to_none=True)
    accounting.reset_counts()
    fl_loss = torch.compile(fl_model)(input_ids=ids.to("fl:0"), labels=ids.to("fl:0")).loss
    fl_loss.backward()
    assert not [op for (op, path) in accounting.counts() if path == "cpu"]
    # The compiled graphs call the plugin's fused attention, as eager does (ops/owned/attention.py).
    fused = "aten::_scaled_dot_product_fused_attention_overrideable"
    assert accounting.counts()[(fused, "native")] == config.num_hidden_layers
    assert accounting.counts()[(fused + "_backward", "native")] == config.num_hidden_layers
    assert math.isclose(loss.item(), fl_loss.item(), rel_tol=1e-5)
    for (name, want), got in zip(model.named_parameters(), fl_model.parameters()):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-6, msg=name)
