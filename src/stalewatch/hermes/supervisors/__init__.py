"""Which supervisor runs Hermes WebUI, found rather than guessed, and whether it answers.

The WebUI documents five ways to run it (its docs/supervisor.md and ``ctl.sh``): a
systemd unit (user or system), a launchd LaunchAgent (macOS), a supervisord program,
a runit or s6 service directory, and ``ctl.sh`` (a PID file; ``start.sh`` by hand has
no one to restart it). Each is a :class:`~.base.Supervisor` (in :mod:`.kinds`, or :mod:`.supervisord`),
listed in :data:`KINDS`. :func:`from_process` reads it off the running server (Linux:
its nearest supervising ancestor, else its systemd service from its control group,
else the PID file ``ctl.sh`` keeps); :func:`which` also reads the definitions on disk
(every platform; the WebUI may be stopped) and picks the one setup serves, asking the
user (``--supervisor``) rather than guessing; :func:`answers` asks the supervisor
itself before anything is written.
"""

from __future__ import annotations

import argparse
import errno
import os
import selectors
import shlex
import subprocess
import time
from pathlib import Path
from typing import IO, cast

from ...core.errors import SetupError
from ..discovery import Process, ancestors, looks_like_webui
from . import supervisord
from .base import Found, Supervisor
from .kinds import Ctl, Launchd, ServiceDirectory, Systemd

KINDS: dict[str, Supervisor] = {  # a new kind is added here
    kind.option: kind
    for kind in (
        Systemd(user=True),
        Systemd(user=False),
        Launchd(),
        supervisord.SUPERVISORD,
        ServiceDirectory("runit", "runsv", "runsvdir", ("sv", "status"), ("sv", "restart")),
        ServiceDirectory("s6", "s6-supervise", "s6-svscan", ("s6-svstat",), ("s6-svc", "-r")),
        Ctl(),
    )
}
"""Every way of running the WebUI by its ``--supervisor`` name, in the order they are tried."""


def from_process(server: Process, webui_dir: Path, hermes_home: Path | None) -> Found | None:
    """Who runs ``server``: its nearest supervising ancestor, its service, or ``ctl.sh``."""
    for parent in ancestors(server.pid):
        for kind in KINDS.values():
            if found := kind.parent(parent, server, webui_dir):
                return found
    return next((f for kind in KINDS.values() if (f := kind.process(server, webui_dir, hermes_home))), None)


def which(
    args: argparse.Namespace,
    running: tuple[Process, Path] | None,
    webui_dir: Path | None,
    home: Path | None,
    hermes_home: Path,
) -> Found:
    """What runs the WebUI: named in full by setup's flags, else found from the ``running``
    server, else from the definitions on disk, narrowed by ``--supervisor`` and its name.

    Raises:
        SetupError: nothing, or more than one, may run it (the message names the flag).
    """
    if args.supervisor and (given := KINDS[args.supervisor].given(args)):
        return given
    if running is not None:
        found = from_process(running[0], running[1], hermes_home)
        if found is not None and args.supervisor in (None, found.kind.option):
            return found
        if found is None and args.supervisor is None:
            raise SetupError(
                f"the WebUI (pid {running[0].pid}) runs without a supervisor (start.sh by hand?): nothing "
                "could restart it. Run it under one (systemd, launchd, supervisord, runit, s6) or with "
                "`ctl.sh start`, or pass --supervisor"
            )
    if args.supervisord_conf:  # named: its programs, in the files it includes too
        candidates = supervisord.webui_programs(args.supervisord_conf, webui_dir)
    else:  # every definition on disk that runs the WebUI (several: ask which)
        candidates = [found for kind in KINDS.values() for found in kind.definitions(webui_dir, home)]
    if args.supervisor is not None:
        kind, name = KINDS[args.supervisor], args.unit or args.label or args.program or None
        candidates = [c for c in candidates if c.kind is kind and name in (None, c.name)]
        candidates = candidates or [kind.named(args, webui_dir)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise SetupError(
            "cannot tell what runs Hermes WebUI (no running server found, no unit, LaunchAgent, supervisord "
            f"program or service directory naming it): pass --supervisor ({', '.join(KINDS)})"
        )
    listed = "; ".join(f"{c.kind.option}: {c.evidence}" for c in candidates)
    raise SetupError(f"more than one supervisor may run Hermes WebUI ({listed}): pass --supervisor")


def webui_dir_of(found: Found) -> Path | None:
    """The WebUI checkout a definition runs (its ``start.sh`` or ``directory=``), if it says."""
    for word in found.kind.arguments(found.definition) if found.definition is not None else []:
        path = Path(word.strip("\"'"))
        for candidate in (path.parent, path):
            if candidate.is_absolute() and looks_like_webui(candidate):
                return candidate
    return None


def answers(found: Found) -> str:
    """Ask the supervisor about the WebUI's service: what it said.

    Raises:
        SetupError: it did not answer (the message says what it said instead).
    """
    command = found.kind.status(found, os.getuid())
    try:
        stdout, stderr, code = _ask(command, timeout=15.0)
    except (OSError, subprocess.TimeoutExpired) as exc:
        out, ok = str(exc), False
    else:
        out = (stdout + stderr).strip().replace("\n", "; ")[:300] or f"exit {code}"
        ok = found.kind.answered(found, stdout, code)
    said = f"`{shlex.join(command)}`: {out}"
    if not ok:
        raise SetupError(
            f"{found.kind.option} does not answer for {found.name}: {said} "
            "(pass --supervisor if another runs the WebUI, or --no-check to write anyway)"
        )
    return said


ANSWER_LIMIT = 64 * 1024  # bytes of each of a status command's outputs kept: a flood is cut there


def _ask(command: list[str], timeout: float) -> tuple[str, str, int]:
    """``command``'s stdout, stderr (decoded, bad bytes replaced) and exit code.

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout`` (it is killed).
        OSError: it could not run, or wrote more than :data:`ANSWER_LIMIT` bytes to one
            output (it is killed: a status that floods is no answer, and never memory's).
    """
    with subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        kept = {cast("IO[bytes]", pipe).fileno(): bytearray() for pipe in (proc.stdout, proc.stderr)}
        deadline = time.monotonic() + timeout
        try:
            with selectors.DefaultSelector() as selector:
                for fd in kept:
                    selector.register(fd, selectors.EVENT_READ)
                while selector.get_map():
                    if not (ready := selector.select(max(0.0, deadline - time.monotonic()))):
                        raise subprocess.TimeoutExpired(command, timeout)
                    for key, _ in ready:
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            selector.unregister(key.fd)
                        elif len(kept[key.fd]) + len(chunk) > ANSWER_LIMIT:
                            raise OSError(errno.EFBIG, f"more than {ANSWER_LIMIT} bytes of output")
                        kept[key.fd] += chunk
            code = proc.wait(max(0.0, deadline - time.monotonic()))
        finally:
            if proc.returncode is None:  # timed out or flooding: never left running (the with waits)
                proc.kill()
    said, complained = (output.decode(errors="replace") for output in kept.values())
    return said, complained, code
