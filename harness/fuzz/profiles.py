"""Engine profiles in a campaign: on a backend that has them (``NAME@PROFILE``, docs/kernel-backends.md),
each round draws the profile it runs with, so the kernel is fuzzed as each engine version calls it.  A
spec that names its profile keeps it."""

import numpy as np

from ..backends.base import Feature
from ..backends.flashmla_profiles import PROFILES as FLASHMLA_PROFILES

# the built-in backends' profiles, by backend name
KNOWN = {"flashmla": tuple(FLASHMLA_PROFILES)}
ROUND_STREAM = 1      # a round's generator: (seed, round, ROUND_STREAM), apart from each case's (seed, index)


def round_specs(spec: str, backend) -> list[str]:
    """The specs a round may run: ``spec@profile`` for each profile of a backend that has them, else ``spec``."""
    if "@" in spec or not backend.supports(Feature.PROFILES):
        return [spec]
    return [f"{spec}@{profile}" for profile in KNOWN.get(spec, ())] or [spec]


def spec_for_round(specs: list[str], seed: int, round_index: int) -> str:
    if len(specs) == 1:
        return specs[0]
    rng = np.random.default_rng([seed, round_index, ROUND_STREAM])
    return specs[int(rng.integers(0, len(specs)))]
