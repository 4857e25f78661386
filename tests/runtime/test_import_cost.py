"""What a start-up does and does not do (docs/benchmarks/index.md "Start-up"): behaviour, not timings.

`import torch; import torch_fl; torch.fl.device_count()` with no config file and
uncertified plugins must not parse fl_abi.h with cffi's C parser (its declarations
come from the cached out-of-line module), nor import PyYAML (no file to read),
cryptography (no certificate to check) or packaging's requirement grammar; with a config file or a trusted key, they
are imported and used as before.  Speed itself is measured by benchmarks/import_cost.py.
"""
from __future__ import annotations

import json

import pytest

# Runs in the child before torch: records every cdef cffi is asked to parse.
_RECORD_CDEFS = """
import cffi, json, sys
parsed = []
_cdef = cffi.FFI.cdef
def cdef(self, csource, *args, **kwargs):
    parsed.append(csource)
    return _cdef(self, csource, *args, **kwargs)
cffi.FFI.cdef = cdef
"""
_START = """
import torch, torch_fl
a = torch.arange(6.0).reshape(2, 3)
out = (a.to("fl:0") * 3 - 1).cpu()
torch.testing.assert_close(out, a * 3 - 1)
print(json.dumps({"devices": torch.fl.device_count(),
                  "header_parsed": any("fl_plugin_get_api" in text for text in parsed),
                  "modules": sorted({m.split(".")[0] for m in sys.modules
                                     if m.split(".")[0] in ("yaml", "cryptography")}),
                  "requirements": "packaging.requirements" in sys.modules}))
"""


def _start(python, env: dict) -> dict:
    result = python(_RECORD_CDEFS + _START, env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_default_start_parses_no_header_and_imports_no_yaml_or_cryptography(python, tmp_path):
    env = {"TORCH_FL_CONFIG": "", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    first = _start(python, env)      # an empty cache: the module is generated (the header parsed once)
    assert first["devices"] == 2
    assert first["header_parsed"] is True
    second = _start(python, env)     # every later start reads the cached module
    assert second == {"devices": 2, "header_parsed": False, "modules": [], "requirements": False}


def test_a_config_file_is_still_read_with_yaml(python, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  - type: reference\n    count: 1\n")
    started = _start(python, {"TORCH_FL_CONFIG": str(config)})
    assert started["devices"] == 1 and started["modules"] == ["yaml"]


def test_a_trusted_key_is_still_read_with_cryptography(python, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    key = tmp_path / "certifier.pub"
    key.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    config = tmp_path / "config.yaml"
    config.write_text(f"certification:\n  trusted_keys: [{key}]\n")
    started = _start(python, {"TORCH_FL_CONFIG": str(config)})
    assert started["devices"] == 2 and started["modules"] == ["cryptography", "yaml"]


_LAZY_START = """
import json, sys, torch, torch_fl
(torch.ones(2, device="fl:0") + 1).cpu()
lazy = ("fl_runtime.tools.profiler", "fl_runtime.tools.coverage", "fl_runtime.integration.distributed.process_group",
        "fl_runtime.integration.distributed.checkpoint", "packaging.specifiers", "cffi")
loaded = sorted(m for m in lazy if m in sys.modules)
with torch_fl.profile() as session:               # each still works at first use
    (torch.ones(2, device="fl:0") * 2).cpu()
from fl_runtime.integration import distributed
print(json.dumps({"loaded": loaded, "profiled": "aten::mul" in session.summary(),
                  "group": distributed.FLProcessGroup.__name__, "coverage": callable(torch_fl.coverage)}))
"""


def test_a_default_start_leaves_the_tools_and_group_modules_for_their_first_use(python):
    """Start-up imports no profiler, coverage, process-group or checkpoint module, no
    packaging.specifiers and no cffi front end (fl_runtime.LAZY_NAMES and its kin); each
    is imported, and works, when first asked for."""
    python(_LAZY_START, {"TORCH_FL_CONFIG": ""})        # a first start may fill the header's module cache
    result = python(_LAZY_START, {"TORCH_FL_CONFIG": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "loaded": [], "profiled": True, "group": "FLProcessGroup", "coverage": True}
