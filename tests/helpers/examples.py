"""How many examples a property test runs: the count it asks for, scaled by the loaded hypothesis
profile's `max_examples` against hypothesis's default of 100 (the sanitized profile's 10 runs a
tenth). conftest loads the profile before the test modules are imported."""

from __future__ import annotations

from hypothesis import settings


def examples(count: int) -> int:
    return max(1, count * settings.default.max_examples // 100)
