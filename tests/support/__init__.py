"""Helpers shared by the tests (imported as ``tests.support.x``; fixtures stay in conftest.py).

- :mod:`.repos`: real git repositories (:class:`~.repos.Repo`, :func:`~.repos.make_repo`).
- :mod:`.recorder`: waiting for a guard's events without sleeping.
- :mod:`.forks`: a body run in a forked child under an alarm.
- :mod:`.daemons`: a real daemon process, its notifications, socket subscribers.
- :mod:`.web`: real wsgiref and uvicorn servers on loopback, SSE reading.
- :mod:`.browser`: a headless Chromium over the DevTools protocol.
- :mod:`.metrics`: scraping a daemon's metrics.
- :mod:`.children`, :mod:`.process_audit`, :mod:`.webui_runtime`: the Hermes tests' child
  processes, process audit and WebUI-shaped module.
- :mod:`.properties`: the hypothesis budgets.
"""
