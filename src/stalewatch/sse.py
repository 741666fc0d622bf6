"""Server-Sent Events of a guard's status: the public path of :mod:`stalewatch.web.sse`."""

from .web.sse import KEEPALIVE, EventStream, format_message

__all__ = ["KEEPALIVE", "EventStream", "format_message"]
