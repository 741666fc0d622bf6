"""The version of stalewatch (what ``stalewatch --version`` and the daemon's hello say)."""

__version__ = "0.1.0"
