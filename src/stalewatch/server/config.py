"""The daemon's configuration file (TOML, read with :mod:`tomllib`).

Example::

    socket = "/run/stalewatch/stalewatch.sock"   # optional; --socket wins
    keepalive = 5.0                              # seconds between ping lines
    max_clients = 256
    client_queue = 1024                          # lines queued per client before it is dropped
    client_buffer = 65536                        # socket send buffer per client, in bytes
    log_level = "info"
    metrics_address = "127.0.0.1:9840"          # optional: serve Prometheus metrics (the metrics extra)
    metrics_textfile = "/var/lib/node_exporter/textfile_collector/stalewatch.prom"  # and/or this
    metrics_interval = 15.0                      # seconds between textfile writes
    metrics_daemon = "hermes-webui"              # the `daemon` label (default: the socket path)

    [[checkout]]
    path = "/srv/hermes-agent"                   # a checkout, or a source file in one
    revision = "0123...cdef"                     # optional; default: HEAD when the daemon starts
    on_stale = ["systemctl", "--no-block", "restart", "hermes-webui.service"]
    on_current = ["logger", "stalewatch: back to the loaded revision"]
    on_unreadable = ["logger", "-p", "err", "stalewatch: checkout unreadable"]
    hook_timeout = 60.0
    hold_while = "/srv/hermes-agent/.updating"   # run hooks only once this file is gone

Every error names the file, the line where it can be found, and the key.

The file names commands the daemon runs, so, as sudo and cron do with theirs, it is
refused when anyone but its owner may write it, or when its owner is neither root nor
the daemon's user. Those checks are made on the opened file (``fstat``), so the file
checked is the file read.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.errors import DaemonConfigError, SupervisedHandoffError
from ..core.revisions import is_object_id
from ..core.settings import MAX_DAEMON_NAME
from ..core.tables import TableReader, parse
from .owned_file import read_checked
from .restart.actions import action_of
from .restart.policy import RestartPolicy, parse_policy

__all__ = ["CheckoutConfig", "DaemonConfig", "HookConfig", "load", "with_checkouts"]

_LOG_LEVELS = ("debug", "info", "warning", "error")
_TOP_KEYS = {
    "socket",
    "keepalive",
    "max_clients",
    "client_queue",
    "client_buffer",
    "log_level",
    "checkout",
    "metrics_address",
    "metrics_textfile",
    "metrics_interval",
    "metrics_daemon",
}
_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<v4>[0-9.]+)):(?P<port>[0-9]{1,5})$")
_HOOK_KEYS = ("on_stale", "on_current", "on_unreadable")
_CHECKOUT_KEYS = {"path", "revision", "hook_timeout", "hold_while", "restart", *_HOOK_KEYS}


@dataclass(frozen=True)
class HookConfig:
    """Commands to run on status changes of one checkout (argv lists, never a shell)."""

    on_stale: tuple[str, ...] | None = None
    on_current: tuple[str, ...] | None = None
    on_unreadable: tuple[str, ...] | None = None
    timeout: float = 60.0
    hold_while: Path | None = None

    @property
    def any(self) -> bool:
        return bool(self.on_stale or self.on_current or self.on_unreadable)


@dataclass(frozen=True)
class CheckoutConfig:
    """One checkout to watch: ``path`` (a checkout or a source file in it), its hooks."""

    path: Path
    revision: str | None = None
    hooks: HookConfig = field(default_factory=HookConfig)
    restart: RestartPolicy | None = None


@dataclass(frozen=True)
class DaemonConfig:
    """Everything the daemon reads from its file (defaults when there is none)."""

    socket: Path | None = None
    keepalive: float = 5.0
    max_clients: int = 256
    client_queue: int = 1024
    client_buffer: int = 65536
    log_level: str = "info"
    checkouts: tuple[CheckoutConfig, ...] = ()
    file: Path | None = None
    metrics_address: tuple[str, int] | None = None  # (IP address, port); port 0: any free one
    metrics_textfile: Path | None = None  # a .prom file for node_exporter's textfile collector
    metrics_interval: float = 15.0  # seconds between textfile writes when nothing changes
    metrics_daemon: str | None = None  # the `daemon` label; None: resolved at start (core.settings)

    @property
    def metrics(self) -> bool:
        """Whether metrics are asked for (they need the ``metrics`` extra)."""
        return self.metrics_address is not None or self.metrics_textfile is not None


def _address(reader: TableReader, data: dict[str, Any], key: str) -> tuple[str, int]:
    """``HOST:PORT`` with an IP address (``[...]`` for IPv6): no name lookups at load."""
    value = data[key]
    found = _ADDRESS.match(value) if isinstance(value, str) else None
    host = None
    if found is not None:
        with contextlib.suppress(ValueError):
            host = str(ipaddress.ip_address(found.group("v6") or found.group("v4")))
    if found is None or host is None or int(found.group("port")) > 65535:
        reason = 'expected "IP:PORT", e.g. "127.0.0.1:9840" or "[::1]:9840" (port 0: any free port)'
        reader.refuse(data, key, reason, None)
    if (":" in host) != (found.group("v6") is not None):
        reader.refuse(data, key, 'brackets hold an IPv6 address only, e.g. "[::1]:9840"', None)
    return host, int(found.group("port"))


def _textfile(reader: TableReader, data: dict[str, Any], key: str) -> Path:
    """A ``.prom`` file in an existing directory (node_exporter reads only ``*.prom``)."""
    path = reader.path(data, key, None)
    if path.suffix != ".prom":
        reason = "expected a file name ending in .prom (node_exporter reads only those)"
        reader.fail(key, str(path), reason, None, key)
    if not path.parent.is_dir():
        reader.fail(key, str(path), f"its directory {path.parent} does not exist", None, key)
    return path


def _daemon_name(reader: TableReader, data: dict[str, Any], key: str) -> str:
    """A name for the ``daemon`` label: printable, 1 to 200 characters."""
    value = data[key]
    if not isinstance(value, str) or not value or len(value) > MAX_DAEMON_NAME or not value.isprintable():
        reader.refuse(data, key, f"expected a name of 1 to {MAX_DAEMON_NAME} printable characters", None)
    return value


def _checkout(reader: TableReader, data: object, table: int) -> CheckoutConfig:
    if not isinstance(data, dict):
        raise DaemonConfigError(
            f"checkout[{table + 1}]",
            data,
            "expected a [[checkout]] table",
            file=reader.file,
            line=reader.locate(None, "checkout"),
        )
    reader.known_keys(data, _CHECKOUT_KEYS, table)
    if "path" not in data:
        reader.fail(reader.name(table, "path"), None, "missing: every [[checkout]] needs a path", table, None)
    revision = data.get("revision")
    if revision is not None and (not isinstance(revision, str) or not is_object_id(revision)):
        reader.refuse(data, "revision", "expected a full commit id (40 or 64 lower-case hex digits)", table)
    hooks = HookConfig(
        **{key: reader.argv(data, key, table) for key in _HOOK_KEYS if key in data},
        timeout=reader.number(data, "hook_timeout", table, 0.1, 86400) if "hook_timeout" in data else 60.0,
        hold_while=reader.path(data, "hold_while", table) if "hold_while" in data else None,
    )
    restart = parse_policy(reader, data["restart"], table) if "restart" in data else None
    if restart is not None:
        _check_action(reader, restart, table)
    return CheckoutConfig(reader.path(data, "path", table), revision, hooks, restart)


def _check_action(reader: TableReader, restart: RestartPolicy, table: int) -> None:
    """Refuse, at start and on every reload, an action the server's supervisor cannot follow."""
    try:
        action_of(restart).check()
    except SupervisedHandoffError as exc:
        key = "handoff"
        raise SupervisedHandoffError(
            exc.supervisor,
            exc.how,
            exc.pid,
            exc.alternative,
            name=reader.name(table, key, "restart"),
            file=reader.file,
            line=reader.locate(table, key, "restart"),
        ) from None


def load(file: Path) -> DaemonConfig:
    """Read and validate a configuration file.

    Raises:
        DaemonConfigError: the file cannot be read (missing, not a regular file,
            larger than :data:`~.owned_file.MAX_CONFIG_BYTES`, not UTF-8), is writable
            by group or others or owned by a stranger (see
            :func:`~.owned_file.check_ownership`), is not TOML, or a key is invalid
            (the message names the file, the line and the key). This is the only
            exception it raises.
    """
    text = read_checked(file)
    data = parse(file, text)
    reader = TableReader(file, text, array="checkout")
    reader.known_keys(data, _TOP_KEYS, None)
    config: dict[str, Any] = {"file": file}
    if "socket" in data:
        config["socket"] = reader.path(data, "socket", None)
    if "keepalive" in data:
        config["keepalive"] = reader.number(data, "keepalive", None, 0.05, 3600)
    if "max_clients" in data:
        config["max_clients"] = reader.integer(data, "max_clients", None, 1, 100_000)
    if "client_queue" in data:
        config["client_queue"] = reader.integer(data, "client_queue", None, 1, 10_000_000)
    if "client_buffer" in data:
        config["client_buffer"] = reader.integer(data, "client_buffer", None, 1024, 64 << 20)
    if "log_level" in data:
        config["log_level"] = reader.choice(data, "log_level", None, _LOG_LEVELS)
    if "metrics_address" in data:
        config["metrics_address"] = _address(reader, data, "metrics_address")
    if "metrics_textfile" in data:
        config["metrics_textfile"] = _textfile(reader, data, "metrics_textfile")
    if "metrics_interval" in data:
        config["metrics_interval"] = reader.number(data, "metrics_interval", None, 1.0, 3600)
    if "metrics_daemon" in data:
        config["metrics_daemon"] = _daemon_name(reader, data, "metrics_daemon")
    tables = data.get("checkout", [])
    if not isinstance(tables, list):
        reader.fail("checkout", tables, "expected [[checkout]] tables", None, "checkout")
    config["checkouts"] = tuple(_checkout(reader, table, index) for index, table in enumerate(tables))
    return DaemonConfig(**config)


def with_checkouts(config: DaemonConfig, paths: Sequence[str]) -> DaemonConfig:
    """``config`` plus checkouts named on the command line (no hooks, HEAD as loaded)."""
    extra = tuple(CheckoutConfig(Path(path).expanduser().absolute()) for path in paths)
    return replace(config, checkouts=config.checkouts + extra)
