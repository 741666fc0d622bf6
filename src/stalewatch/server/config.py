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
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..core.declared import ARGV, PATH, Kind, Refused, choice, integer, known, read, seconds, setting
from ..core.errors import DaemonConfigError, SupervisedHandoffError
from ..core.revisions import is_object_id
from ..core.settings import METRICS_DAEMON, NAME, is_name
from ..core.tables import TableReader, parse
from .restart.actions import action_of
from .restart.policy import RestartPolicy, parse_policy

MAX_CONFIG_BYTES = 1 << 20
"""Largest configuration file read (a real one is a few hundred bytes)."""

_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<v4>[0-9.]+)):(?P<port>[0-9]{1,5})$")


def _address(value: object, _: TableReader) -> tuple[str, int]:
    """``HOST:PORT`` with an IP address (``[...]`` for IPv6): no name lookups at load."""
    found = _ADDRESS.match(value) if isinstance(value, str) else None
    host = None
    if found is not None:
        with contextlib.suppress(ValueError):
            host = str(ipaddress.ip_address(found.group("v6") or found.group("v4")))
    if found is None or host is None or int(found.group("port")) > 65535:
        raise Refused('expected "IP:PORT", e.g. "127.0.0.1:9840" or "[::1]:9840" (port 0: any free port)')
    if (":" in host) != (found.group("v6") is not None):
        raise Refused('brackets hold an IPv6 address only, e.g. "[::1]:9840"')
    return host, int(found.group("port"))


def _textfile(value: object, table: TableReader) -> Path:
    """A ``.prom`` file in an existing directory (node_exporter reads only ``*.prom``)."""
    path = PATH.read(value, table)
    if path.suffix != ".prom":
        raise Refused("expected a file name ending in .prom (node_exporter reads only those)", str(path))
    if not path.parent.is_dir():
        raise Refused(f"its directory {path.parent} does not exist", str(path))
    return path


def _daemon_name(value: object, _: TableReader) -> str:
    """A name for the ``daemon`` label: printable, 1 to 200 characters."""
    if not is_name(value):
        raise Refused(NAME)
    return str(value)


def _revision(value: object, _: TableReader) -> str:
    if not isinstance(value, str) or not is_object_id(value):
        raise Refused("expected a full commit id (40 or 64 lower-case hex digits)")
    return value


def _restart(value: object, table: TableReader) -> RestartPolicy:
    policy = parse_policy(table, value, table.table or 0)
    try:  # at start and on every reload, which read the file alike: an action the supervisor cannot follow
        action_of(policy).check()
    except SupervisedHandoffError as exc:  # located where the file says it
        at = table.at(table.table, "restart")
        name, line = at.name("handoff"), at.locate("handoff")
        args = (exc.supervisor, exc.how, exc.pid, exc.alternative)
        raise SupervisedHandoffError(*args, name=name, file=at.file, line=line) from None
    return policy


def _checkouts(value: object, top: TableReader) -> tuple[CheckoutConfig, ...]:
    if not isinstance(value, list) or not all(isinstance(each, dict) for each in value):
        raise Refused("expected [[checkout]] tables")
    return tuple(_checkout(top.at(index), each) for index, each in enumerate(value))


@dataclass(frozen=True)
class HookConfig:
    """Commands to run on status changes of one checkout (argv lists, never a shell)."""

    on_stale: tuple[str, ...] | None = setting(None, ARGV, "run when the checkout becomes `stale`")
    on_current: tuple[str, ...] | None = setting(
        None, ARGV, "run when it is `current` again (after a rollback)"
    )
    on_unreadable: tuple[str, ...] | None = setting(None, ARGV, "run when its HEAD cannot be read")
    timeout: float = setting(
        60.0,
        seconds(0.1, 86400.0),
        "a hook may run this long; then its process group is killed",
        key="hook_timeout",
    )
    hold_while: Path | None = setting(None, PATH, "run hooks only once nothing exists at this path")

    @property
    def any(self) -> bool:
        return bool(self.on_stale or self.on_current or self.on_unreadable)


@dataclass(frozen=True)
class CheckoutConfig:
    """One checkout to watch: ``path`` (a checkout or a source file in it), its hooks."""

    path: Path = setting(Path(), PATH, "a checkout, or a source file tracked in one", shown="(required)")
    revision: str | None = setting(
        None, Kind(_revision, "full commit id"), "the loaded revision; default: HEAD when the daemon starts"
    )
    hooks: HookConfig = field(default_factory=HookConfig)
    restart: RestartPolicy | None = setting(
        None, Kind(_restart, "table"), "its automatic restart: see [Automatic restart](restart.md)"
    )


@dataclass(frozen=True)
class DaemonConfig:
    """Everything the daemon reads from its file (defaults when there is none)."""

    socket: Path | None = setting(None, PATH, "`--socket` wins", shown="see [Running it](#running-it)")
    keepalive: float = setting(
        5.0, seconds(0.05, 3600.0), "between ping lines (clients call a daemon wedged after 3)"
    )
    max_clients: int = setting(256, integer(1, 100_000), "clients connected at once")
    client_queue: int = setting(
        1024, integer(1, 10_000_000), "lines queued for one client (beyond its greeting) before it is dropped"
    )
    client_buffer: int = setting(65536, integer(1024, 64 << 20), "kernel send buffer per client, bytes")
    log_level: str = setting("info", choice(("debug", "info", "warning", "error")), "the daemon's log level")
    checkouts: tuple[CheckoutConfig, ...] = setting(
        (), Kind(_checkouts, "`[[checkout]]` tables"), "the checkouts to watch (below)", key="checkout"
    )
    file: Path | None = None
    metrics_address: tuple[str, int] | None = setting(
        None, Kind(_address, '"IP:PORT"'), "serve `GET /metrics` over HTTP (port 0: any free port, logged)"
    )
    metrics_textfile: Path | None = setting(
        None, Kind(_textfile, "path"), "a `.prom` file for node_exporter's textfile collector"
    )
    metrics_interval: float = setting(
        15.0, seconds(1.0, 3600.0), "between textfile writes when nothing changes"
    )
    metrics_daemon: str | None = setting(
        None,
        Kind(_daemon_name, METRICS_DAEMON.shows),
        "the `daemon` label (else `STALEWATCH_METRICS_DAEMON`)",
    )

    @property
    def metrics(self) -> bool:
        """Whether metrics are asked for (they need the ``metrics`` extra)."""
        return self.metrics_address is not None or self.metrics_textfile is not None


def _checkout(table: TableReader, data: dict[str, object]) -> CheckoutConfig:
    if "path" not in data:
        known(table, data, CheckoutConfig, HookConfig)
        table.fail("path", None, "missing: every [[checkout]] needs a path")
    checkout, hooks = read(table, data, CheckoutConfig, HookConfig)
    return CheckoutConfig(**checkout, hooks=HookConfig(**hooks))


def load(file: Path) -> DaemonConfig:
    """Read and validate a configuration file.

    Raises:
        DaemonConfigError: the file cannot be read (missing, not a regular file,
            larger than :data:`MAX_CONFIG_BYTES`, not UTF-8), is writable
            by group or others or owned by a stranger (see
            :func:`check_ownership`), is not TOML, or a key is invalid
            (the message names the file, the line and the key). This is the only
            exception it raises.
    """
    text = read_checked(file)
    (config,) = read(TableReader(file, text, array="checkout"), parse(file, text), DaemonConfig)
    return DaemonConfig(**config, file=file)


def with_checkouts(config: DaemonConfig, paths: Sequence[str]) -> DaemonConfig:
    """``config`` plus checkouts named on the command line (no hooks, HEAD as loaded)."""
    try:
        extra = tuple(CheckoutConfig(Path(path).expanduser().absolute()) for path in paths)
    except RuntimeError:  # pathlib's word for "~user" naming nobody
        raise DaemonConfigError("CHECKOUT", paths, "no home directory to expand ~ to") from None
    return replace(config, checkouts=config.checkouts + extra)


def read_checked(file: Path) -> str:
    """The file's text, after checking the opened file: regular, small, safely owned.

    Every check is made on the opened file (``fstat``): the file checked is the file
    read. A FIFO, a device or a huge file is refused without hanging or reading it whole.
    """
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the daemon (or a reload).
        fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise _refused(file, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(file, "cannot read: not a regular file")
        check_ownership(file, info)
        with open(fd, "rb", closefd=False) as opened:  # buffered: reads on until that much, or the end
            data = opened.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise _refused(file, f"cannot read: larger than {MAX_CONFIG_BYTES} bytes")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _refused(file, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        os.close(fd)


def check_ownership(file: Path, info: os.stat_result, euid: int | None = None) -> None:
    """Refuse a file that anyone but its owner may write, or owned by a stranger.

    Its owner must be root or the daemon's user (``euid``; default ours).

    Raises:
        DaemonConfigError: naming the owner or the mode, and what to do.
    """
    euid = os.geteuid() if euid is None else euid
    if info.st_uid not in (0, euid):
        owner = f"owned by uid {info.st_uid}, neither root nor the daemon's user (uid {euid})"
        raise _refused(file, f"{owner}; it names commands the daemon runs")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else "group" if mode & 0o020 else "others"
        reason = f"writable by {who} (mode {mode:04o}); it names commands the daemon runs"
        raise _refused(file, f"{reason}: chmod go-w {file}")


def _refused(file: Path, reason: str) -> DaemonConfigError:
    return DaemonConfigError("config", str(file), reason, file=file)
