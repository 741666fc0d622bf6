"""One human line per protocol message: what ``events``, ``status --socket`` and ``watch`` print.

Every field is escaped with :func:`~stalewatch.core.escaping.printable`, so a path holding
a newline or an escape sequence can never break a line or forge another.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.escaping import printable
from ..core.refusal import retry_seconds
from ..core.revisions import short


class _Shown(dict[str, Any]):
    """A message's fields made safe to print; a missing field reads ``?``."""

    def __missing__(self, key: str) -> str:
        return "?"


def _shown(message: dict[str, Any]) -> _Shown:
    # Any text may hold a newline or an escape sequence (a path can): escape it, so
    # one message is one line. Whatever else a daemon sends (a number where a
    # revision belongs) prints as text instead of raising.
    return _Shown(
        {
            key: value
            if isinstance(value, bool) or (value is None and key.endswith("revision"))
            else printable(str(value))
            for key, value in message.items()
        }
    )


def _processes_text(processes: object) -> str:
    """Who runs what: ``2 on 1a2b3c4 (pids 10, 11); 1 on 5d6e7f8 (pid 12)``."""
    if not isinstance(processes, list) or not processes:
        return "none registered"
    table: dict[str, list[str]] = {}
    for process in processes:
        if isinstance(process, dict):
            revision = process.get("revision")
            table.setdefault(short(revision) if isinstance(revision, str) else "?", []).append(
                printable(str(process.get("pid")))
            )
    return "; ".join(
        f"{len(pids)} on {printable(revision)} (pid{'s' if len(pids) > 1 else ''} {', '.join(pids)})"
        for revision, pids in table.items()
    )


def _restart_text(restart: dict[str, Any]) -> str:
    """``scheduled onto 1a2b3c4 (retry in 3 s)``, ``refused onto 1a2b3c4: verify-failed: ...``."""
    revision = restart.get("revision")
    text = printable(str(restart.get("phase")))
    if isinstance(revision, str):
        text += f" onto {printable(short(revision))}"
    reason, retry = restart.get("reason"), restart.get("retry_after")
    if reason:
        text += f": {printable(str(reason))}"
    if isinstance(retry, int | float) and not isinstance(retry, bool):
        text += f" (retry in {retry_seconds(retry)} s)"  # as a 409's Retry-After says
    return text


def human_line(message: dict[str, Any]) -> str | None:
    """One human line for a protocol message (``None`` for pings and pongs).

    Every field is escaped with :func:`~stalewatch.core.escaping.printable`: the line never
    breaks, whatever a path holds.
    """
    raw, message = message, _shown(message)
    kind = message.get("type")
    if kind in ("snapshot", "event"):
        cause = raw.get("cause")
        summary = cause.get("summary") if isinstance(cause, dict) else None
        moved = f": {printable(summary)}" if isinstance(summary, str) and summary else ""
        error = raw.get("error")
        if raw.get("status") in ("unreadable", "untracked") and error:
            moved = f": {printable(str(error))}"  # why HEAD cannot be read (or never blocks), as --json says
        line = (
            f"{message['status']:<10} {message['checkout']} loaded {short(message['loaded_revision'])} "
            f"current {short(message['current_revision'])} (generation {message['generation']}){moved}"
        )
        # What `status --socket` adds under a checkout: its servers, its restart.
        if kind == "snapshot" and raw.get("processes"):
            line += f"\n{'':<10} servers: {_processes_text(raw['processes'])}"
        if kind == "snapshot" and isinstance(raw.get("restart"), dict):
            line += f"\n{'':<10} restart: {_restart_text(raw['restart'])}"
        return line
    if kind == "restart":
        return f"{'restart':<10} {message['checkout']} {_restart_text(raw)}"
    if kind == "processes":
        return f"{'servers':<10} {message['checkout']} {_processes_text(raw.get('processes'))}"
    if kind == "health":
        trust = "trusted" if message.get("trusted") else "NOT trusted"
        return f"{'health':<10} {message['checkout']} daemon watcher {trust} (mode {message.get('mode')})"
    if kind == "removed":
        return f"{'removed':<10} {message['checkout']} no longer watched"
    if kind == "hello":
        return f"# stalewatch daemon {message.get('version')} (protocol {message.get('protocol')})"
    if kind == "error":
        return f"# error from the daemon: {message.get('reason')}: {message.get('detail')}"
    return None


def line(message: dict[str, Any], as_json: bool) -> str | None:
    """What ``--json`` prints (the message as one compact JSON line), else :func:`human_line`."""
    return json.dumps(message, separators=(",", ":")) if as_json else human_line(message)
