"""What a restart runs (R4): the action through the supervisor, and the verify probe (R2).

Both are configured commands (argv lists, never a shell of ours), run with
:mod:`..commands` (own session, timeout, bounded output, done when the process exits)
and the variables that say which revision they are about.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from .. import commands
from ..commands import Outcome
from .policy import RestartPolicy

__all__ = ["environment", "run_action", "run_probe"]


def environment(key: str, target: str, loaded: str | None) -> dict[str, str]:
    """The ``STALEWATCH_*`` variables of a restart's commands: the checkout, the revision
    restarted onto (``STALEWATCH_REVISION``, also ``..._CURRENT_...``) and the loaded one."""
    return {
        "STALEWATCH_CHECKOUT": key,
        "STALEWATCH_REVISION": target,
        "STALEWATCH_LOADED_REVISION": loaded or "",
        "STALEWATCH_CURRENT_REVISION": target,
    }


def run_action(policy: RestartPolicy, env: Mapping[str, str], stop: threading.Event) -> Outcome:
    """Restart through the supervisor: ``SIG<signal>`` to the pid in ``pidfile``, else the action."""
    if policy.pidfile is not None:
        return commands.signal_pidfile(policy.pidfile, policy.signal)
    return commands.run(policy.action or (), timeout=policy.action_timeout, env=env, stop=stop)


def run_probe(
    probe: tuple[str, ...],
    worktree: Path,
    policy: RestartPolicy,
    env: Mapping[str, str],
    stop: threading.Event,
) -> Outcome:
    """Run a verify probe in the worktree, against the code checked out there (R2)."""
    return commands.run(probe, cwd=worktree, timeout=policy.verify_timeout, env=env, stop=stop)
