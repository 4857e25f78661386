"""Run profiles: how many examples each property gets, and what a run may change.

Both are derandomised: every hypothesis run is seeded from --seed (default 0),
so the same plugin, suite version and seed give the same cases.  `cert` runs
with fixed settings: no -k, no --seed, no --run-known-failures.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Profile:
    name: str
    kernel_examples: int      # hypothesis examples per (kernel, dtype)
    property_examples: int    # per memory / alignment property
    stateful_examples: int    # stream/event state machine runs ...
    stateful_steps: int       # ... of at most this many steps
    unit_timeout_s: float     # a kernel worker silent this long on one dtype is hung
    fixed: bool               # certification: no option may change what runs
    full_layout_matrix: bool = False   # conformance.layout_matrix: every case (cert) or a covering subset
    exhaustive_8bit: bool = False      # conformance.fp8_specs: every float8 pattern (cert) or a lean sample


PROFILES: dict[str, Profile] = {
    "ci": Profile("ci", kernel_examples=10, property_examples=25, stateful_examples=25, stateful_steps=50,
                  unit_timeout_s=60, fixed=False),
    "cert": Profile("cert", kernel_examples=120, property_examples=200, stateful_examples=200,
                    stateful_steps=100, unit_timeout_s=300, fixed=True, full_layout_matrix=True,
                    exhaustive_8bit=True),
}
DEFAULT_SEED = 0


class ProfileError(ValueError):
    """An option the chosen profile does not allow, or an unknown profile."""


def choose(name: str, seed: int | None, keyword: str | None, run_known_failures: bool,
           unit_timeout_s: float | None = None) -> tuple[Profile, int]:
    """The profile (with the unit timeout asked for) and the seed to use; refuses options a
    fixed profile forbids."""
    if name not in PROFILES:
        raise ProfileError(f"unknown profile '{name}' (known: {', '.join(PROFILES)})")
    profile = PROFILES[name]
    if profile.fixed:
        given = [flag for flag, used in (("--seed", seed is not None), ("-k", keyword),
                                         ("--run-known-failures", run_known_failures),
                                         ("--unit-timeout", unit_timeout_s is not None)) if used]
        if given:
            raise ProfileError(f"the {name} profile runs with fixed settings; remove {', '.join(given)}")
    if unit_timeout_s is not None:
        if not unit_timeout_s > 0:
            raise ProfileError(f"--unit-timeout must be a positive number of seconds, not {unit_timeout_s:g}")
        profile = replace(profile, unit_timeout_s=unit_timeout_s)
    return profile, DEFAULT_SEED if seed is None else seed
