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
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from ..core.errors import DaemonConfigError
from ..core.revisions import is_object_id
from .owned_file import MAX_CONFIG_BYTES, check_ownership, read_checked
from .restart.policy import RestartPolicy, parse_policy

__all__ = [
    "MAX_CONFIG_BYTES",
    "CheckoutConfig",
    "DaemonConfig",
    "DaemonConfigError",
    "HookConfig",
    "check_ownership",
    "load",
    "with_checkouts",
]

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

    @property
    def metrics(self) -> bool:
        """Whether metrics are asked for (they need the ``metrics`` extra)."""
        return self.metrics_address is not None or self.metrics_textfile is not None


def _locate(text: str, table: int | None, key: str | None, sub: str | None = None) -> int | None:
    """The line of ``key`` at top level (``table`` None), in the n-th ``[[checkout]]``, or
    in its ``[checkout.<sub>]`` table (or its inline ``sub = {...}``)."""
    section: tuple[int | None, str | None] | None = (None, None)
    seen = -1
    pattern = re.compile(rf"""^\s*(["']?){re.escape(key)}\1\s*=""") if key else None
    inline = re.compile(rf"""^\s*(["']?){re.escape(sub)}\1\s*=""") if sub else None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("[["):
            seen += 1 if stripped[2:].split("]")[0].strip() == "checkout" else 0
            section = (seen, None) if stripped[2:].split("]")[0].strip() == "checkout" else None
            if key is None and section == (table, sub):
                return number
            continue
        if stripped.startswith("["):
            name = [part.strip().strip("\"'") for part in stripped[1:].split("]")[0].split(".")]
            section = (seen, name[1]) if len(name) == 2 and name[0] == "checkout" else None
            if key is None and section == (table, sub):
                return number
            continue
        if section == (table, None) and inline is not None and inline.match(line):
            return number  # sub = { ... } written inline: the line of the table itself
        if pattern is not None and section == (table, sub) and pattern.match(line):
            return number
    return None


class _Reader:
    def __init__(self, file: Path, text: str) -> None:
        self.file = file
        self.text = text
        self.base = file.parent

    def name(self, table: int | None, key: str, sub: str | None = None) -> str:
        """``checkout[2].restart.settle``: a key as errors name it."""
        return _name(table, key, sub)

    def fail(
        self,
        name: str,
        value: object,
        reason: str,
        table: int | None,
        key: str | None,
        *,
        sub: str | None = None,
    ) -> NoReturn:
        line = _locate(self.text, table, key, sub)
        raise DaemonConfigError(name, value, reason, file=self.file, line=line)

    def number(
        self,
        data: dict[str, Any],
        key: str,
        table: int | None,
        low: float,
        high: float,
        *,
        sub: str | None = None,
    ) -> float:
        value = data[key]
        name = _name(table, key, sub)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(name, value, "expected a number", table, key, sub=sub)
        if not low <= value <= high:
            self.fail(name, value, f"expected between {low:g} and {high:g}", table, key, sub=sub)
        return float(value)

    def integer(self, data: dict[str, Any], key: str, low: int, high: int) -> int:
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(key, value, f"expected a whole number between {low} and {high}", None, key)
        return int(value)

    def address(self, data: dict[str, Any], key: str) -> tuple[str, int]:
        """``HOST:PORT`` with an IP address (``[...]`` for IPv6): no name lookups at load."""
        value = data[key]
        found = _ADDRESS.match(value) if isinstance(value, str) else None
        host = None
        if found is not None:
            with contextlib.suppress(ValueError):
                host = str(ipaddress.ip_address(found.group("v6") or found.group("v4")))
        if found is None or host is None or int(found.group("port")) > 65535:
            reason = 'expected "IP:PORT", e.g. "127.0.0.1:9840" or "[::1]:9840" (port 0: any free port)'
            self.fail(key, value, reason, None, key)
        if (":" in host) != (found.group("v6") is not None):
            self.fail(key, value, 'brackets hold an IPv6 address only, e.g. "[::1]:9840"', None, key)
        return host, int(found.group("port"))

    def textfile(self, data: dict[str, Any], key: str) -> Path:
        """A ``.prom`` file in an existing directory (node_exporter reads only ``*.prom``)."""
        path = self.path(data, key, None)
        if path.suffix != ".prom":
            self.fail(
                key,
                str(path),
                "expected a file name ending in .prom (node_exporter reads only those)",
                None,
                key,
            )
        if not path.parent.is_dir():
            self.fail(key, str(path), f"its directory {path.parent} does not exist", None, key)
        return path

    def path(self, data: dict[str, Any], key: str, table: int | None, sub: str | None = None) -> Path:
        value = data[key]
        if not isinstance(value, str) or not value or "\0" in value:
            reason = "expected a non-empty path string (without NUL)"
            self.fail(_name(table, key, sub), value, reason, table, key, sub=sub)
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base / path  # relative to the file

    def paths(self, data: dict[str, Any], key: str, table: int, sub: str | None = None) -> tuple[Path, ...]:
        """A path or a list of paths."""
        value = data[key]
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
            self.fail(
                _name(table, key, sub), value, "expected a path or a list of paths", table, key, sub=sub
            )
        return tuple(self.path({key: item}, key, table, sub) for item in items)

    def argv(self, data: dict[str, Any], key: str, table: int, sub: str | None = None) -> tuple[str, ...]:
        value = data[key]
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(part, str) and "\0" not in part for part in value)
            or not value[0]
        ):
            self.fail(
                _name(table, key, sub),
                value,
                'expected a non-empty list of strings without NUL, e.g. ["systemctl", "restart", "web"] '
                "(a command is never run through a shell)",
                table,
                key,
                sub=sub,
            )
        return tuple(value)

    def checkout(self, data: object, table: int) -> CheckoutConfig:
        if not isinstance(data, dict):
            raise DaemonConfigError(
                f"checkout[{table + 1}]",
                data,
                "expected a [[checkout]] table",
                file=self.file,
                line=_locate(self.text, None, "checkout"),
            )
        for key in data:
            if key not in _CHECKOUT_KEYS:
                known = ", ".join(sorted(_CHECKOUT_KEYS))
                self.fail(_name(table, key), data[key], f"unknown key (known: {known})", table, key)
        if "path" not in data:
            self.fail(_name(table, "path"), None, "missing: every [[checkout]] needs a path", table, None)
        revision = data.get("revision")
        if revision is not None and (not isinstance(revision, str) or not is_object_id(revision)):
            self.fail(
                _name(table, "revision"),
                revision,
                "expected a full commit id (40 or 64 lower-case hex digits)",
                table,
                "revision",
            )
        hooks = HookConfig(
            **{key: self.argv(data, key, table) for key in _HOOK_KEYS if key in data},
            timeout=self.number(data, "hook_timeout", table, 0.1, 86400) if "hook_timeout" in data else 60.0,
            hold_while=self.path(data, "hold_while", table) if "hold_while" in data else None,
        )
        restart = parse_policy(self, data["restart"], table) if "restart" in data else None
        return CheckoutConfig(self.path(data, "path", table), revision, hooks, restart)


def _name(table: int | None, key: str, sub: str | None = None) -> str:
    if table is None:
        return key
    return f"checkout[{table + 1}].{sub}.{key}" if sub and key != sub else f"checkout[{table + 1}].{key}"


def load(file: Path) -> DaemonConfig:
    """Read and validate a configuration file.

    Raises:
        DaemonConfigError: the file cannot be read (missing, not a regular file,
            larger than :data:`MAX_CONFIG_BYTES`, not UTF-8), is writable by group or
            others or owned by a stranger (see :func:`check_ownership`), is not TOML,
            or a key is invalid (the message names the file, the line and the key).
            This is the only exception it raises.
    """
    text = read_checked(file)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        line = int(found.group(1)) if found else None
        raise DaemonConfigError("TOML", None, f"invalid: {exc}", file=file, line=line) from None
    except (RecursionError, ValueError) as exc:  # nesting past the parser's stack; int limits
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise DaemonConfigError("TOML", None, f"invalid: {reason}", file=file) from None
    reader = _Reader(file, text)
    for key in data:
        if key not in _TOP_KEYS:
            reader.fail(key, data[key], f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})", None, key)
    config: dict[str, Any] = {"file": file}
    if "socket" in data:
        config["socket"] = reader.path(data, "socket", None)
    if "keepalive" in data:
        config["keepalive"] = reader.number(data, "keepalive", None, 0.05, 3600)
    if "max_clients" in data:
        config["max_clients"] = reader.integer(data, "max_clients", 1, 100_000)
    if "client_queue" in data:
        config["client_queue"] = reader.integer(data, "client_queue", 1, 10_000_000)
    if "client_buffer" in data:
        config["client_buffer"] = reader.integer(data, "client_buffer", 1024, 64 << 20)
    if "log_level" in data:
        level = data["log_level"]
        if not isinstance(level, str) or level.lower() not in _LOG_LEVELS:
            reader.fail("log_level", level, f"expected one of {', '.join(_LOG_LEVELS)}", None, "log_level")
        config["log_level"] = str(level).lower()
    if "metrics_address" in data:
        config["metrics_address"] = reader.address(data, "metrics_address")
    if "metrics_textfile" in data:
        config["metrics_textfile"] = reader.textfile(data, "metrics_textfile")
    if "metrics_interval" in data:
        config["metrics_interval"] = reader.number(data, "metrics_interval", None, 1.0, 3600)
    tables = data.get("checkout", [])
    if not isinstance(tables, list):
        reader.fail("checkout", tables, "expected [[checkout]] tables", None, "checkout")
    config["checkouts"] = tuple(reader.checkout(table, index) for index, table in enumerate(tables))
    return DaemonConfig(**config)


def with_checkouts(config: DaemonConfig, paths: Sequence[str]) -> DaemonConfig:
    """``config`` plus checkouts named on the command line (no hooks, HEAD as loaded)."""
    extra = tuple(CheckoutConfig(Path(path).expanduser().absolute()) for path in paths)
    return replace(config, checkouts=config.checkouts + extra)
