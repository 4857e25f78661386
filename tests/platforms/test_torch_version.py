"""an unsupported PyTorch is refused at import with both versions named."""
import pytest

from fl_runtime.errors import TorchVersionError
from fl_runtime.torch_compat import ALLOW_UNTESTED_ENV, check_torch_version, supported_torch_range


def test_declared_range_admits_the_installed_torch():
    check_torch_version()


@pytest.mark.parametrize("version", ["2.13.0", "2.13.1", "2.14.0", "2.14.1", "2.15.0", "2.15.1"])
def test_supported_minors_are_admitted(version):
    """docs/operators/torch-versions.md: every minor from 2.13 to 2.15."""
    check_torch_version(version)


@pytest.mark.parametrize("version", ["2.12.1", "2.16.0", "3.0.0"])
def test_other_versions_are_refused_with_both_versions_named(version, monkeypatch):
    monkeypatch.delenv(ALLOW_UNTESTED_ENV, raising=False)
    with pytest.raises(TorchVersionError) as info:
        check_torch_version(version)
    assert version in str(info.value) and supported_torch_range() in str(info.value)


def test_a_newer_torch_names_the_upgrade_and_the_override(monkeypatch):
    monkeypatch.delenv(ALLOW_UNTESTED_ENV, raising=False)
    with pytest.raises(TorchVersionError) as info:
        check_torch_version("2.16.0")
    assert "pip install -U torch-fl" in str(info.value) and f"{ALLOW_UNTESTED_ENV}=1" in str(info.value)


def test_the_override_admits_a_newer_torch_and_logs_it(monkeypatch, caplog):
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    with caplog.at_level("WARNING", logger="torch_fl"):
        check_torch_version("2.16.0")
    assert any("2.16.0" in r.getMessage() and ALLOW_UNTESTED_ENV in r.getMessage() for r in caplog.records)
    with pytest.raises(TorchVersionError):      # never an older one: the runtime needs its APIs
        check_torch_version("2.12.1")


def test_pyproject_states_the_windows_lower_bound_and_no_upper_bound():
    """pip must never downgrade a newer torch to install Torch-FL (docs/operators/torch-versions.md)."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    (requirement,) = re.findall(r'"torch([<>=!~][^"]*)"', text)
    lower = next(c for c in supported_torch_range().split(",") if c.startswith(">="))
    assert requirement == lower


def test_every_private_pytorch_entry_point_exists_in_this_torch():
    """docs/contributors/private-pytorch-names.md "Admitting a new minor" starts with this list."""
    from fl_runtime.torch_compat import missing_private_apis
    assert missing_private_apis() == []


def test_the_runtime_uses_no_private_pytorch_name_outside_the_table():
    """Every `torch._...` the runtime touches is listed, with why, in torch_compat.PRIVATE_APIS."""
    import re
    from pathlib import Path

    from fl_runtime.torch_compat import PRIVATE_APIS
    root = Path(__file__).resolve().parents[2] / "fl_runtime"
    used = {}
    for path in root.rglob("*.py"):
        for name in re.findall(r"\btorch(?:\._[A-Za-z][A-Za-z0-9_]*|\.__future__)(?:\.[A-Za-z_][A-Za-z0-9_]*)*", path.read_text()):
            used.setdefault(name, path.relative_to(root.parent).as_posix())
    unlisted = {name: where for name, where in used.items()
                if not any(name == listed or name.startswith(listed + ".") or listed.startswith(name + ".")
                           for listed in PRIVATE_APIS)}
    assert unlisted == {}, "add these to fl_runtime.torch_compat.PRIVATE_APIS with why"


_CLAUSES = ["<2.15", ">=2.13", "==2.13", "!=2.14.0", "<=2.14.1", ">2.13.0", "==2.13.*", "~=2.13", ">=2.13.0rc1",
            "<3", "==2"]
_VERSIONS = ["2.13", "2.13.0", "2.13.1", "2.14.1", "2.15.0", "2.15.0rc1", "2.14.0a0", "2.13.0.post1", "2",
             "3.0.0", "2.12.9", "2.13.0.dev20260101"]


@pytest.mark.parametrize("spec", [",".join(pair) for pair in zip(_CLAUSES, _CLAUSES[1:] + _CLAUSES[:1])] +
                         _CLAUSES)
def test_the_version_check_answers_as_packaging_does(spec):
    """torch_compat.admits decides plain clauses without importing packaging (a start-up
    cost): for every version it must give SpecifierSet's answer, pre-releases included."""
    from packaging.specifiers import SpecifierSet

    from fl_runtime.torch_compat import admits
    for version in _VERSIONS:
        assert admits(spec, version) == SpecifierSet(spec).contains(version, prereleases=True), (spec, version)
