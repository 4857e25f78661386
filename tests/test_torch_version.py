"""an unsupported PyTorch is refused at import with both versions named."""
import pytest

from fl_runtime.errors import TorchVersionError
from fl_runtime.torch_compat import check_torch_version, supported_torch_range


def test_declared_range_admits_the_installed_torch():
    assert "2.13" in supported_torch_range()
    check_torch_version()


@pytest.mark.parametrize("version", ["2.12.1", "2.14.0", "3.0.0"])
def test_other_versions_are_refused_with_both_versions_named(version):
    with pytest.raises(TorchVersionError) as info:
        check_torch_version(version)
    assert version in str(info.value) and supported_torch_range() in str(info.value)
