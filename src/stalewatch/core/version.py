"""The version of stalewatch (what ``stalewatch --version`` and the daemon's hello say)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
