"""The fallback chain (docs/users/profiling.md): vendor kernel -> generic kernel -> CPU -> UnsupportedOpError,
each link switchable, the path taken proven by the profile.

aten::logit decomposes into ops the reference vendor has (log, div, sub,
clamp).  The tests hide the vendor's own logit kernel, if it has one, so that
the op can take every path whatever the vendor's kernel table holds.
"""
import textwrap

import pytest
import torch

from fl_runtime.errors import UnsupportedOpError

OP = "aten::logit"


def _logit(x):
    return torch.logit(x, eps=1e-3)


HIDE_KERNEL = """
    for device in torch_fl.runtime().devices:     # the tables are shared per plugin
        hidden = device.kernels.pop("logit", None) or hidden
"""


@pytest.fixture
def chain(fl):
    """The runtime's chain without a vendor logit kernel; switches and kernel restored after."""
    chain = fl.runtime().launcher.chain
    saved = (chain.enable_generic, chain.enable_cpu)
    hidden = [device.kernels.pop("logit", None) for device in fl.runtime().devices]
    chain.configure(*saved)          # forget decisions made while the kernel was there
    yield chain
    for device, kernel in zip(fl.runtime().devices, hidden):
        if kernel is not None:
            device.kernels["logit"] = kernel
    chain.configure(*saved)


@pytest.fixture
def x():
    return torch.linspace(0.05, 0.95, 7)


def _paths(fl, fn, *args):
    with fl.profile(warn_fallback_share=1.0) as prof:
        result = fn(*args)
    return result, prof.paths()


def test_hidden_kernel_leaves_the_generic_path(chain, x):
    op = torch.ops.aten.logit.default
    assert chain.classify(op, (x,), {"eps": 1e-3}, 0) == "generic"


def test_generic_kernel_alone_runs_the_decomposition_on_vendor_kernels(fl, chain, x):
    chain.configure(enable_generic_kernel=True, enable_cpu_fallback=False)
    result, paths = _paths(fl, _logit, x.to("fl:0"))
    assert paths[OP] == {"generic"}
    leaves = {op for op, p in paths.items() if op != OP}
    assert leaves and all(paths[op] == {"native"} for op in leaves), paths
    torch.testing.assert_close(result.cpu(), _logit(x))


def test_cpu_fallback_alone_runs_on_the_cpu_and_counts_bytes(fl, chain, x):
    chain.configure(enable_generic_kernel=False, enable_cpu_fallback=True)
    with fl.profile(warn_fallback_share=1.0) as prof:
        result = _logit(x.to("fl:0"))
    assert prof.paths()[OP] == {"cpu"}
    row = next(r for r in prof.table() if r["op"] == OP)
    assert row["bytes_copied"] == 2 * x.nbytes       # input out, result back
    torch.testing.assert_close(result.cpu(), _logit(x))


def test_both_off_raise_the_documented_error(chain, x):
    chain.configure(enable_generic_kernel=False, enable_cpu_fallback=False)
    with pytest.raises(UnsupportedOpError) as info:
        _logit(x.to("fl:0"))
    message = str(info.value)
    assert message.startswith(f"operator '{OP}' has no kernel on fl:0: the vendor has no kernel for it for float32")
    assert "enable_generic_kernel: false" in message and "enable_cpu_fallback: false" in message
    assert "turn a fallback on" in message
    assert info.value.op == OP and info.value.device == "fl:0"


def test_generic_unavailable_and_cpu_off_says_why(chain):
    chain.configure(enable_generic_kernel=True, enable_cpu_fallback=False)
    # erfcx decomposes into a prim no device implements: the message names the missing leaf
    with pytest.raises(UnsupportedOpError, match=r"no generic kernel \(it needs 'prims::erfcx', which has "
                       r"neither a vendor kernel nor a decomposition\).*enable_cpu_fallback: false"):
        torch.special.erfcx(torch.ones(3, device="fl:0"))


def test_strict_makes_any_fallback_an_error(fl, chain, x, monkeypatch):
    monkeypatch.setenv("TORCH_FL_STRICT", "1")
    with pytest.raises(UnsupportedOpError, match="TORCH_FL_STRICT is set and the op would run through the generic"):
        _logit(x.to("fl:0"))
    assert torch.equal((x.to("fl:0") + 1).cpu(), x + 1)      # native ops are unaffected


def test_config_file_switches_reach_the_chain(python, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("fallback:\n  enable_cpu_fallback: false\n  enable_generic_kernel: false\n")
    result = python("import torch, torch_fl\nhidden = None" + textwrap.dedent(HIDE_KERNEL) + textwrap.dedent("""
        try:
            torch.logit(torch.full((3,), 0.5, device="fl:1"))
        except torch_fl.UnsupportedOpError as exc:
            print("ERR", exc)
    """), {"TORCH_FL_CONFIG": str(path)})
    assert result.returncode == 0, result.stderr
    assert "ERR operator 'aten::logit' has no kernel on fl:1" in result.stdout
    assert "enable_generic_kernel: false" in result.stdout


def test_decision_is_cached_per_device_op_and_dtypes(chain, x):
    op = torch.ops.aten.logit.default
    first = chain.decide(op, (x,), {}, 0)
    assert chain.decide(op, (x * 2,), {}, 0) is first                    # same signature: cached
    assert chain.decide(op, (x.double(),), {}, 0) is not first           # other dtypes: decided again


# Convolutions the reference kernel cannot compute: it declines them at launch
# (FL_ERROR_NOT_SUPPORTED, nothing enqueued) and the runtime runs them on the CPU.
DECLINED_CONVOLUTIONS = {
    "conv3d": (torch.nn.functional.conv3d, (2, 3, 5, 5, 5), (4, 3, 3, 3, 3)),
    "conv_transpose2d": (torch.nn.functional.conv_transpose2d, (2, 3, 5, 5), (3, 4, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(DECLINED_CONVOLUTIONS))
def test_declined_convolution_runs_on_the_cpu(fl, name):
    conv, x_shape, w_shape = DECLINED_CONVOLUTIONS[name]
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    result, paths = _paths(fl, conv, x.to("fl:0"), w.to("fl:0"))
    assert paths["aten::convolution"] == {"cpu"}
    torch.testing.assert_close(result.cpu(), conv(x, w))


@pytest.mark.parametrize("name", sorted(DECLINED_CONVOLUTIONS))
def test_declined_convolution_under_strict_names_the_op(fl, name, monkeypatch):
    conv, x_shape, w_shape = DECLINED_CONVOLUTIONS[name]
    x, w = torch.randn(x_shape, device="fl:0"), torch.randn(w_shape, device="fl:0")
    monkeypatch.setenv("TORCH_FL_STRICT", "1")
    with pytest.raises(UnsupportedOpError, match=r"operator 'aten::convolution' has no kernel on fl:0: .*"
                       r"FL_ERROR_NOT_SUPPORTED: launch_kernel\(convolution\) declines"):
        conv(x, w)
    fl.synchronize()     # nothing was enqueued: the stream holds no failed kernel


def test_a_complex_operand_is_declined_at_launch(fl):
    # add.Tensor's main operand is float32 (a dtype the kernel takes); the complex one is
    # refused by launch_kernel itself, before anything is enqueued
    a, z = torch.randn(3), torch.randn(3, dtype=torch.complex64)
    result, paths = _paths(fl, torch.add, a.to("fl:0"), z.to("fl:0"))
    assert paths["aten::add.Tensor"] == {"cpu"}
    torch.testing.assert_close(result.cpu(), a + z)
