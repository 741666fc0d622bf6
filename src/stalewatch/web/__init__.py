"""Route barriers for WSGI and ASGI applications (:mod:`.barrier`): answer 409 once the
code is stale. Server-Sent Events of each status change: :mod:`stalewatch.web.sse`
(also importable as :mod:`stalewatch.sse`).
"""

from .barrier import *  # noqa: F403
from .barrier import __all__ as __all__
