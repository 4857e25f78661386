"""Collectives (ABI 1.1): every collective on groups of 2 and 4 rank processes, and exact statuses.

The checks live in conformance.collective_checks (one family per test: every
declared dtype, every declared reduce op, against a CPU reduction; a
collective queued behind busy work on its stream).  A plugin without the
collectives extension, or without one family's function, gets not_supported;
a group larger than the extension's max_ranks too.
"""
from __future__ import annotations

import pytest

from fl_runtime.plugins.extensions import collectives_of

from conformance import statuses
from conformance.collective_checks import FAMILIES, PASS, error_status_checks, run_group
from conformance.harness import Device

CATEGORY = "collectives"
SIZES = (2, 4)
GROUP_TIMEOUT_S = 300.0            # rank processes start PyTorch: slow on a loaded machine
_groups: dict[int, dict[str, str]] = {}     # one run of every family per group size


@pytest.fixture(scope="module")
def collectives(conformance):
    ext = collectives_of(conformance.plugin)
    if ext is None:
        statuses.not_supported("the plugin offers no collectives extension (fl_api.extension_start)")
    return ext


# Ids say "ranks": pytest's -k also matches directory names, and a bare "2" matches a
# checkout in /tmp/ci2.
@pytest.mark.parametrize("size", SIZES, ids=[f"{n}ranks" for n in SIZES])
@pytest.mark.parametrize("family", FAMILIES)
def test_collective(conformance, collectives, family: str, size: int):
    if size > collectives.max_ranks:
        statuses.not_supported(f"the extension's max_ranks is {collectives.max_ranks}")
    if size not in _groups:
        _groups[size] = run_group(conformance.library, collectives, Device(conformance.plugin, 0), size,
                                  GROUP_TIMEOUT_S)
    verdict = _groups[size][family]
    if verdict.startswith("not_supported:") or "not_supported:" in verdict.split(": ", 1)[-1][:16]:
        statuses.not_supported(verdict.split("not_supported: ", 1)[-1])
    assert verdict == PASS, verdict


def test_error_statuses(conformance, collectives):
    problems = error_status_checks(collectives, Device(conformance.plugin, 0))
    assert not problems, "; ".join(problems)
