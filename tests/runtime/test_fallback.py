"""An op without a vendor kernel: CPU fallback with one warning per op, or a
clear error naming the op and the device when the fallback is off."""
import warnings

import torch

# An op the reference vendor does not implement (kept so on purpose).
MISSING = "torch.special.erfcx"


def test_cpu_fallback_warns_once_and_computes_correctly(fl):
    x = torch.linspace(-2, 2, 9)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = torch.special.erfcx(x.to("fl:0"))
        second = torch.special.erfcx(x.to("fl:0"))
    messages = [str(w.message) for w in caught if "erfcx" in str(w.message)]
    assert len(messages) == 1 and "fl:0" in messages[0] and "CPU" in messages[0]
    assert first.device.type == "fl" and torch.allclose(second.cpu(), torch.special.erfcx(x))
    assert fl.op_stats.snapshot()["aten::special_erfcx.out"]["cpu"] >= 2


def test_fallback_preserves_inplace_semantics_on_views(fl):
    x = torch.linspace(-0.9, 0.9, 9)
    y = x.to("fl:0")
    returned = y[2:5].erfinv_()            # no vendor kernel: runs on the CPU, written back
    assert returned.device.type == "fl"
    expected = x.clone()
    expected[2:5].erfinv_()
    assert torch.allclose(y.cpu(), expected)


def test_disabled_fallback_raises_naming_op_and_device(python, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("fallback:\n  enable_cpu_fallback: false\n")
    result = python("""
        import torch, torch_fl
        try:
            torch.special.erfcx(torch.ones(3, device="fl:1"))
        except torch_fl.UnsupportedOpError as exc:
            print("ERR", exc)
        print(torch.ones(3, device="fl:1").add(1).cpu().tolist())
    """, {"TORCH_FL_CONFIG": str(path)})
    assert result.returncode == 0, result.stderr
    assert "ERR operator 'aten::special_erfcx.out' has no kernel on fl:1" in result.stdout
    assert "enable_cpu_fallback" in result.stdout and "[2.0, 2.0, 2.0]" in result.stdout


def test_strict_env_turns_fallback_into_error(python):
    result = python("""
        import torch, torch_fl
        try:
            torch.special.erfcx(torch.ones(3, device="fl:0"))
        except NotImplementedError as exc:
            print("ERR", exc)
    """, {"TORCH_FL_STRICT": "1"})
    assert "ERR operator 'aten::special_erfcx.out'" in result.stdout and "TORCH_FL_STRICT" in result.stdout
