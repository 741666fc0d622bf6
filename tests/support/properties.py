"""The budgets of the property tests (hypothesis): fixed, so CI time is too.

``deadline=None``: a loaded CI machine is slow, not wrong. With
``STALEWATCH_TESTS=quick`` (``./scripts/test --quick``) every budget is a tenth, at
least 20 examples: the maintainer's loop still runs every property, CI runs them all.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["QUICK", "budget"]

QUICK = os.environ.get("STALEWATCH_TESTS") == "quick"


def budget(examples: int) -> settings:
    """Hypothesis settings for ``examples`` examples (a tenth of them in the quick loop)."""
    return settings(
        max_examples=max(20, examples // 10) if QUICK else examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
