"""Parts the tests drive that come from Debian's packages, not from pip."""

from __future__ import annotations

__all__ = ["CI_INSTALLS"]

CI_INSTALLS = ".ci/run installs it"
"""In a skip's reason: the part is Debian's and CI installs it (so on CI the skip fails)."""
