"""`pip install torch-fl` with no extras and no `make`, in a fresh venv, gives working devices
(docs/users/install.md "Installing with pip"): the reference plugin is compiled during the install, and
importing torch_fl pulls in none of the SDK's or the tests' dependencies.

This is the slowest end-to-end test (a venv, PyTorch copied in from the package cache,
the plugin compiled): about two minutes on two cores.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


# ---- a vendor's plugin, from `fl-sdk new` to a user's certified install -----------------
# (docs/vendors/release.md). The vendor side runs this checkout's fl-sdk; the user side is
# plain_venv above (torch-fl without extras) with the plugin's wheel installed by plain pip
# into a directory of its own, so the tests above keep seeing the reference devices alone.

USER_CHECK = textwrap.dedent("""
    import json, torch, torch_fl
    acme = [d["device"] for d in torch_fl.list_devices() if d["type"] == "acme"]
    x = torch.arange(6, dtype=torch.float32).to(acme[0])
    y = (x * 2 + 1).cpu()
    assert y.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0], y
    status = {s["plugin"]: s for s in torch_fl.plugin_certifications()}["acme"]
    print(json.dumps({"device": acme[0], "certified": status["certified"], "code": status["code"],
                      "path": status["path"]}))
""")


def _fl_sdk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_FL_TEMPLATE_STORE": str(cwd / "template-store")}
    result = subprocess.run([sys.executable, "-m", "fl_sdk", *args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"fl-sdk {' '.join(args)}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def acme_wheel(tmp_path_factory) -> tuple[Path, Path]:
    """(wheel, the certifier's public key): new, build, a short suite run, keygen, certify,
    `pip wheel ./acme` as a release pipeline runs it (build isolation: no torch-fl there).
    The certificate signs a cert-profile report for this very build (the full cert profile
    takes minutes; conformance's own tests run it): what is checked here is the packaging."""
    from test_certificate import synthetic_report

    from fl_runtime.plugins.certification import sha256_of
    work = tmp_path_factory.mktemp("vendor")
    _fl_sdk("new", "acme", "--defaults", "--output", "acme", cwd=work)
    _fl_sdk("build", "acme", cwd=work)
    _fl_sdk("test", "acme", "-k", "suite_abi", cwd=work)
    _fl_sdk("keygen", str(work / "certifier.key"), cwd=work)
    library = work / "acme" / "acme" / "libfl_acme.so"
    report = work / "cert.json"
    report.write_text(json.dumps(synthetic_report(sha256_of(library))))
    _fl_sdk("certify", "acme", "--key", str(work / "certifier.key"), "--report", str(report), cwd=work)
    certified = sha256_of(library)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "./acme", "-w", "dist"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sha256_of(library) == certified       # packaging did not rebuild the certified library
    (wheel,) = (work / "dist").glob("acme-*.whl")
    return wheel, work / "certifier.key.pub"


def test_the_plugin_wheel_is_one_per_platform_and_carries_its_certificate(acme_wheel):
    import zipfile
    wheel, _ = acme_wheel
    assert re.fullmatch(r"acme-0\.1\.0-py3-none-linux_\w+\.whl", wheel.name), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert {"acme/libfl_acme.so", "acme/libfl_acme.so.flcert", "acme/__init__.py"} <= set(names), names
    assert not [n for n in names if n.endswith(".build.json")]


def test_a_user_installs_the_wheel_and_requires_certified_plugins(plain_venv, acme_wheel, tmp_path):
    python, env = plain_venv
    wheel, public_key = acme_wheel
    site = tmp_path / "site"
    result = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                             str(wheel)], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    config = tmp_path / "config.yaml"
    config.write_text(f"certification:\n  require_certified: true\n  trusted_keys: [{public_key}]\n")
    user = {**env, "PYTHONPATH": str(site), "TORCH_FL_CONFIG": str(config)}
    devices = subprocess.run([str(python.parent / "torch-fl"), "devices"], capture_output=True, text=True,
                             env=user, cwd=tmp_path, timeout=300)
    assert devices.returncode == 0, devices.stderr[-3000:]
    row = next(line for line in devices.stdout.splitlines() if " acme " in line)
    assert re.search(r"\byes\b", row) and str(site) in row, devices.stdout
    assert "reference" not in devices.stdout.split("\n", 1)[1]      # uncertified: refused
    result = subprocess.run([str(python), "-c", USER_CHECK], capture_output=True, text=True, env=user,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    status = json.loads(result.stdout.strip().splitlines()[-1])
    assert status["certified"] and status["code"] == "certified", status
    assert status["path"] == str(site / "acme" / "libfl_acme.so")
