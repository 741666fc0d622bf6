"""``python -m stalewatch`` and the ``stalewatch`` console script: :func:`run`.

A Ctrl-C is the user's at any moment, never a fault: exit 130 (128 + SIGINT, what a
shell reports for it) without a traceback. The command's imports take ~0.2 s before
:func:`~stalewatch.cli.run.main` installs its handlers, and a command restores the
default handler on its way out: a ``KeyboardInterrupt`` then is caught here, around
the imports too (the package's ``__init__`` imports nothing, so this runs within
milliseconds of the interpreter's start). After start-up the commands' own handlers
stop them, and a SIGINT among them exits 130 as well (SIGTERM: 0).
"""

import sys

INTERRUPTED = 130  # core.exits.INTERRUPTED, not imported before the try: that import is interruptible too


def run() -> int:
    """Run the command line of ``sys.argv``; return its exit code (130 on Ctrl-C)."""
    try:
        from .cli.run import main  # noqa: PLC0415 - inside the try: a Ctrl-C among the imports
        from .core import signals  # noqa: PLC0415

        code = main()
    except KeyboardInterrupt:
        return INTERRUPTED
    return INTERRUPTED if signals.interrupted() else code


if __name__ == "__main__":
    sys.exit(run())
