"""The kinds of test: every test is exactly one (tests/conftest.py applies the rule).

- ``unit``: pure logic: no thread, no process, no fork (the conftest refuses them), fast.
- ``integration``: real git, watchers, subprocesses, sockets; the default.
- ``real_server``: a real outside server: gunicorn, supervisord, uvicorn, Chromium,
  Prometheus, node_exporter, the Hermes WebUI.

``slow`` (more than a few seconds, or a slower run of what a quicker test covers: a
comment above it names that test) is independent of the kind. ``./scripts/test
--quick`` runs everything but ``real_server`` and ``slow``.
"""

from __future__ import annotations

__all__ = ["KINDS"]

KINDS = ("unit", "integration", "real_server")
