"""One human line per protocol message: what ``events``, ``status --socket`` and ``watch`` print.

Every field is escaped with :func:`~stalewatch.core.escaping.printable`, so a path holding
a newline or an escape sequence can never break a line or forge another.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from ..core.escaping import printable
from ..core.refusal import retry_seconds
from ..core.revisions import short


def _processes_text(processes: object) -> str:
    """Who runs what: ``2 on 1a2b3c4 (pids 10, 11); 1 on 5d6e7f8 (pid 12)``."""
    if not isinstance(processes, list) or not processes:
        return "none registered"
    table: dict[str, list[str]] = {}
    for process in processes:
        if isinstance(process, dict):
            revision = process.get("revision")
            pids = table.setdefault(short(revision) if isinstance(revision, str) else "?", [])
            pids.append(printable(str(process.get("pid"))))
    return "; ".join(
        f"{len(pids)} on {printable(revision)} (pid{'s' if len(pids) > 1 else ''} {', '.join(pids)})"
        for revision, pids in table.items()
    )


def _restart_text(restart: dict[str, Any]) -> str:
    """``scheduled onto 1a2b3c4 (retry in 3 s)``, ``refused onto 1a2b3c4: verify-failed: ...``."""
    revision, reason, retry = restart.get("revision"), restart.get("reason"), restart.get("retry_after")
    text = printable(str(restart.get("phase")))
    text += f" onto {printable(short(revision))}" if isinstance(revision, str) else ""
    text += f": {printable(str(reason))}" if reason else ""
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        text += f" (retry in {retry_seconds(retry)} s)"  # as a 409's Retry-After says
    return text


def human_line(message: dict[str, Any]) -> str | None:
    """One human line for a protocol message (``None`` for pings, pongs and unknown types).

    Any text may hold a newline or an escape sequence (a path can): each field is
    escaped, so one message is one line, and whatever else a daemon sends (a number
    where a revision belongs) prints as text instead of raising; a missing field reads ``?``.
    """
    shown: defaultdict[str, Any] = defaultdict(lambda: "?")
    for key, value in message.items():
        revision = key.endswith("revision")  # a revision is text or None, never a boolean
        keep = (isinstance(value, bool) and not revision) or (value is None and revision)
        shown[key] = value if keep else printable(str(value))
    kind, checkout = message.get("type"), shown["checkout"]
    if kind in ("snapshot", "event"):
        cause, error = message.get("cause"), message.get("error")
        summary = cause.get("summary") if isinstance(cause, dict) else None
        moved = f": {printable(summary)}" if isinstance(summary, str) and summary else ""
        if message.get("status") in ("unreadable", "untracked") and error:
            moved = f": {printable(str(error))}"  # why HEAD cannot be read (or never blocks), as --json says
        line = (
            f"{shown['status']:<10} {checkout} loaded {short(shown['loaded_revision'])} "
            f"current {short(shown['current_revision'])} (generation {shown['generation']}){moved}"
        )
        # What `status --socket` adds under a checkout: its servers, its restart.
        if kind == "snapshot" and message.get("processes"):
            line += f"\n{'':<10} servers: {_processes_text(message['processes'])}"
        if kind == "snapshot" and isinstance(message.get("restart"), dict):
            line += f"\n{'':<10} restart: {_restart_text(message['restart'])}"
        return line
    if kind == "restart":
        return f"{'restart':<10} {checkout} {_restart_text(message)}"
    if kind == "processes":
        return f"{'servers':<10} {checkout} {_processes_text(message.get('processes'))}"
    if kind == "health":
        trust = "trusted" if shown.get("trusted") else "NOT trusted"
        return f"{'health':<10} {checkout} daemon watcher {trust} (mode {shown.get('mode')})"
    if kind == "removed":
        return f"{'removed':<10} {checkout} no longer watched"
    if kind == "hello":
        return f"# stalewatch daemon {shown.get('version')} (protocol {shown.get('protocol')})"
    if kind == "error":
        return f"# error from the daemon: {shown.get('reason')}: {shown.get('detail')}"
    return None


def line(message: dict[str, Any], as_json: bool) -> str | None:
    """What ``--json`` prints (the message as one compact JSON line), else :func:`human_line`."""
    return json.dumps(message, separators=(",", ":")) if as_json else human_line(message)
