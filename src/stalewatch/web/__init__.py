"""Route barriers for WSGI and ASGI applications (:mod:`.barrier`): answer 409 once the
code is stale. Server-Sent Events of each status change: :mod:`stalewatch.web.sse`
(also importable as :mod:`stalewatch.sse`).
"""

from . import barrier
from .barrier import *  # noqa: F403 - the package's names are the barrier's public ones

__all__ = list(barrier.__all__)
