"""`import torch` alone makes fl usable (torch.backends entry point), and never breaks."""


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
