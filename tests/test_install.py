"""`pip install torch-fl` with no extras and no `make`, in a fresh venv, gives working devices
(docs/users/install.md "Installing with pip"): the reference plugin is compiled during the install, and
importing torch_fl pulls in none of the SDK's or the tests' dependencies.

This is the slowest end-to-end test (a venv, PyTorch copied in from the package cache,
the plugin compiled): about two minutes on two cores.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNIPPET = textwrap.dedent("""
    import sys, torch, torch_fl
    devices = torch_fl.list_devices()
    assert [d["device"] for d in devices][:2] == ["fl:0", "fl:1"], devices
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    z = torch.matmul(a.to("fl:0"), b.to("fl:0"))
    moved = z.to("fl:1")
    assert moved.device == torch.device("fl:1")
    torch.testing.assert_close(moved.cpu(), a @ b, rtol=1e-5, atol=1e-5)
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in
                   ("pytest", "hypothesis", "copier", "jsonschema", "xmlschema", "expecttest", "conformance", "fl_sdk"))
    print("loaded:", heavy)
    print("plugin:", devices[0]["plugin_path"])
    from fl_runtime.devices import storage
    from fl_runtime.ops.eager import marshal
    print("compiled helpers:", storage.IMPLEMENTATION, marshal._patch_tensors is not None)
""")


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.fail("the install compiles the reference plugin: a C compiler must be on PATH")
    work = tmp_path_factory.mktemp("plain")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    source = work / "torch-fl"
    _copy_clone(source)
    torch_pin = f"torch=={_installed('torch')}"       # never let pip reach for another PyTorch
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-cache-dir", str(source),
                             torch_pin], capture_output=True, text=True, env=env, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    yield python, env
    # The venv holds a copy of PyTorch (~1 GB); pytest keeps the last three runs' temp folders.
    shutil.rmtree(work, ignore_errors=True)


def _copy_clone(destination: Path) -> None:
    """Copy what a user's clone holds: the files git tracks or would track, never build outputs or
    the venvs `make test` creates beside the sources (each .venv-torch-* is ~6 GB)."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True)
    if listing.returncode != 0:          # not a git checkout (an sdist, say): skip what .gitignore names
        shutil.copytree(ROOT, destination, ignore=shutil.ignore_patterns(
            ".venv*", ".git", "*.so", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache"))
        return
    for name in filter(None, listing.stdout.decode().split("\0")):
        origin = ROOT / name
        if origin.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)


def _installed(name: str) -> str:
    from importlib.metadata import version
    return version(name).split("+")[0]


def test_plain_install_has_devices_and_no_sdk_dependencies(plain_venv, tmp_path):
    python, env = plain_venv
    result = subprocess.run([str(python), "-c", SNIPPET], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loaded: []" in result.stdout
    assert "site-packages" in result.stdout      # the installed plugin, not the checkout's
    assert "compiled helpers: compiled True" in result.stdout     # setup.py built them (fl_runtime/compiled.py)


def test_plain_install_lacks_the_sdk_extras(plain_venv, tmp_path):
    """The SDK's and tests' dependencies are extras (torch-fl[sdk], torch-fl[test]), not installed."""
    python, env = plain_venv
    result = subprocess.run([str(python), "-c", "import importlib.util as u; "
                             "print([m for m in ('copier', 'hypothesis', 'pytest', 'jsonschema', 'xmlschema') "
                             "if u.find_spec(m)])"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_wheel_carries_the_generated_abi_module(plain_venv, tmp_path):
    """setup.py writes the out-of-line cffi modules of the header and of DLPack into the wheel:
    the first start-up parses no C and writes nothing to the user's cache
    (fl_runtime/abi/outofline.py, dlpack.py)."""
    python, env = plain_venv
    code = textwrap.dedent("""
        import json, os, torch, torch_fl
        from fl_runtime import abi
        from fl_runtime.abi import dlpack, outofline
        key = outofline.module_key(abi.CDEF)
        print(json.dumps({"verified": outofline.read_verified(outofline.PACKAGED, key) is not None and
                                      outofline.read_verified(dlpack.PACKAGED, outofline.module_key(dlpack.CDEF))
                                      is not None,
                          "cache": sorted(os.listdir(outofline.cache_dir())) if outofline.cache_dir().exists()
                          else [], "devices": torch.fl.device_count()}))
    """)
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**env, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"verified": True, "cache": [], "devices": 2}
