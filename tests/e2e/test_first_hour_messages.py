"""The messages a new user meets in the first hour say what went wrong, once, and what to do.

Each case runs as the user meets it, in a fresh process: a broken config under a plain
`import torch` (PyTorch's autoload), `torch-fl doctor` with that config, `torch-fl
devices --json` whose reader stops early (`| head`), and an fl tensor made in a forked
DataLoader worker.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rank_runner import ROOT

BROKEN = "fallback:\n  enable_cpu_fallback: maybe\n"
KEY = "config key 'fallback.enable_cpu_fallback'"


def _python(code: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, **kwargs)


@pytest.fixture
def broken_config(tmp_path) -> dict:
    path = tmp_path / "config.yaml"
    path.write_text(BROKEN)
    return {"TORCH_FL_CONFIG": str(path)}


def test_broken_config_under_plain_import_torch_raises_the_config_error_at_first_use(broken_config):
    proc = _python("""
import torch
assert not torch.fl.is_available() and torch.fl.device_count() == 0
for use in (lambda: torch.ones(2, device="fl"), lambda: torch.zeros(2).to("fl"), lambda: torch.fl.current_device()):
    try:
        use()
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc)
""", broken_config)
    raised = [line for line in proc.stdout.splitlines() if line.startswith("RAISED")]
    assert len(raised) == 3 and all("ConfigError" in line and KEY in line for line in raised), proc.stdout + proc.stderr
    assert "Expected one of cpu" not in proc.stdout + proc.stderr


def test_doctor_with_a_broken_config_says_the_runtime_did_not_start(broken_config):
    proc = _python("from fl_runtime.tools.cli import main; raise SystemExit(main(['doctor']))", broken_config)
    bridge = [line for line in proc.stdout.splitlines() if "native bridge:" in line]
    assert bridge and "the runtime did not start" in bridge[0], proc.stdout
    assert "C++ compiler" not in proc.stdout, proc.stdout


def test_devices_json_into_a_reader_that_stops_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "fl_runtime.tools.cli", "devices", "--json"], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()                         # as `| head` does once it has its lines
    error = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in error and "BrokenPipe" not in error, error


def test_bad_fork_error_from_a_dataloader_worker_says_it_once():
    proc = _python("""
import torch, torch_fl
from torch.utils.data import DataLoader, Dataset

class OnFl(Dataset):
    def __len__(self):
        return 1
    def __getitem__(self, i):
        return torch.ones(2, device="fl")

try:
    list(DataLoader(OnFl(), num_workers=1, multiprocessing_context="fork"))
except Exception as exc:
    print("RAISED", type(exc).__name__, str(exc).count("cannot be used in a forked subprocess"))
""")
    assert "RAISED FLBadForkError 1" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_an_op_on_two_fl_devices_is_refused_with_the_way_out_even_through_a_fallback():
    """torch.equal runs as a generic kernel; were that to fail, the CPU fallback would compare
    the two devices' tensors on the CPU and answer, where CUDA refuses."""
    import torch

    import torch_fl  # noqa: F401
    if torch.fl.device_count() < 2:
        pytest.skip("needs two fl devices")
    a, b = torch.ones(3, device="fl:0"), torch.ones(3, device="fl:1")
    with pytest.raises(RuntimeError, match=r"fl:0 and fl:1.*\.to\('fl:"):
        torch.equal(a, b)
