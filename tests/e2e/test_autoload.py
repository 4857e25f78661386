"""`import torch` alone makes fl usable (torch.backends entry point), and never breaks."""
import sys

import pytest


def test_bare_import_torch_registers_fl(python):
    result = python("""
        import torch
        x = torch.ones(3, device="fl:0") + 1
        print(x.cpu().tolist(), torch.fl.device_count())
    """)
    assert result.returncode == 0, result.stderr
    assert "[2.0, 2.0, 2.0]" in result.stdout


def test_bad_config_never_breaks_import_torch_but_torch_fl_raises(python, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("devices:\n  - type: reference\n    memory_fraction: 7\n")
    result = python("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        print("torch ok", [str(w.message) for w in caught if "torch_fl" in str(w.message)])
        try:
            import torch_fl
        except Exception as exc:
            print("torch_fl raised", type(exc).__name__, exc)
    """, {"TORCH_FL_CONFIG": str(path)})
    assert result.returncode == 0, result.stderr
    assert "torch ok" in result.stdout and "devices[0].memory_fraction" in result.stdout
    assert "torch_fl raised ConfigError" in result.stdout


def test_autoload_can_be_switched_off(python):
    result = python("""
        import torch
        print(torch._C._get_privateuse1_backend_name())
    """, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0 and "privateuseone" in result.stdout



def test_autoload_stands_aside_where_pytorch_drives_a_gpu(monkeypatch, tmp_path):
    """docs/users/do-no-harm.md: a registered PrivateUse1 backend becomes PyTorch's accelerator ahead
    of CUDA, so beside a GPU the autoload starts nothing (`import torch_fl` still does)."""
    import types

    from fl_runtime.integration import autoload, process
    node = tmp_path / "nvidiactl"
    monkeypatch.setattr(autoload, "_GPU_NODES", {"cuda": str(node)})
    monkeypatch.setitem(sys.modules, "torch.version", types.SimpleNamespace(cuda="13.0", hip=None))
    monkeypatch.setattr(process, "start", lambda: pytest.fail("the autoload started the runtime beside a GPU"))
    monkeypatch.delenv(autoload.FORCE_ENV, raising=False)
    assert autoload.gpu_accelerator_present() is None          # a CUDA build, but no GPU here
    node.touch()
    assert autoload.gpu_accelerator_present() == "cuda"
    autoload.autoload()
    assert "CUDA GPU" in autoload.stood_aside and autoload.FORCE_ENV in autoload.stood_aside
    monkeypatch.setitem(sys.modules, "torch.version", types.SimpleNamespace(cuda=None, hip=None))
    assert autoload.gpu_accelerator_present() is None          # a CPU build cannot drive the GPU


def test_autoload_beside_a_gpu_can_be_forced(monkeypatch, tmp_path):
    from fl_runtime.integration import autoload, process
    started = []
    monkeypatch.setattr(autoload, "gpu_accelerator_present", lambda: "cuda")
    monkeypatch.setattr(process, "start", lambda: started.append(True))
    monkeypatch.setenv(autoload.FORCE_ENV, "1")
    autoload.autoload()
    assert started == [True]
