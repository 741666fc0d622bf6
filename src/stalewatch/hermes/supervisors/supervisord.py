"""supervisord: a ``[program:...]`` in its configuration or a file it includes.

Setup writes the action ``supervisorctl -c CONF restart PROGRAM``, its pid from
``supervisorctl pid PROGRAM`` (0 while stopped: then no restart),
``[program:stalewatch-hermes]`` beside the WebUI's program, and the socket in the
WebUI's ``.env``.
"""

from __future__ import annotations

import argparse
import configparser
import glob
import itertools
import shlex
from dataclasses import replace
from pathlib import Path

from ..discovery import MOST_BYTES, Process, probe, read_text
from .base import DAEMON_NAME, Found, Install, Service, Supervisor, assignments, mentions_webui

_CONFIGS = (Path("/etc/supervisor/supervisord.conf"), Path("/etc/supervisord.conf"))


class Supervisord(Supervisor):
    option = "supervisord"

    def parent(self, parent: Process, server: Process, webui_dir: Path) -> Found | None:
        if parent.name != "supervisord" and not any(a.endswith("/supervisord") for a in parent.argv[:2]):
            return None
        config = _config(parent)
        program = server.environ.get("SUPERVISOR_PROCESS_NAME", "")
        defined = _programs(config) if config is not None else []
        match = next((f for f in defined if f.name == program), None) or next(
            (f for f in defined if str(webui_dir) in _text(f.definition)), None
        )
        evidence = f"supervisord {parent.pid} runs it (program {program or '?'})"
        if match is None:
            return Found(self, program or "hermes-webui", evidence, config, config)
        return replace(match, name=program or match.name, evidence=evidence)

    def definitions(self, webui_dir: Path | None, home: Path | None) -> list[Found]:
        config = next((c for c in _CONFIGS if c.is_file()), None)
        return webui_programs(config, webui_dir) if config is not None else []

    def named(self, args: argparse.Namespace, webui_dir: Path | None) -> Found:
        conf = args.supervisord_conf
        return Found(self, args.program or "hermes-webui", "--supervisor", conf, conf)

    def status(self, found: Found, uid: int) -> list[str]:
        return [*_ctl(found), "status", found.name]

    def answered(self, found: Found, out: str, code: int) -> bool:
        # supervisorctl exits 3 for a program not running; it answered all the same.
        return found.name in out and any(state in out for state in ("RUNNING", "STARTING"))

    def service(self, found: Found, install: Install) -> Service:
        ctl = _ctl(found)
        block = (
            "; stalewatch for Hermes WebUI: restart it after `hermes update` (stalewatch hermes setup).\n"
            f"[program:{DAEMON_NAME}]\n"
            f"command={shlex.join(install.run)}\n"
            f"directory={install.hermes_home}\n"
            + (f"user={found.user}\n" if found.user else "")
            + "autostart=true\nautorestart=true\nstartsecs=2\nstopsignal=TERM\nstopwaitsecs=10\n"
            "redirect_stderr=true\n"
            f"stdout_logfile={install.log}\n"
        )
        allowed = f"the daemon runs `{shlex.join(ctl)}`: its user must be allowed by [unix_http_server]"
        then = [f"{shlex.join(ctl)} update", f"{shlex.join(ctl)} restart {found.name}"]
        pid = [*ctl, "pid", found.name]
        definition = found.definition
        if definition is not None and found.config not in (None, definition):  # a file it includes
            beside = definition.with_name(f"{DAEMON_NAME}{definition.suffix}")
            return Service([*ctl, "restart", found.name], {beside: (block, 0o644)}, then, [allowed], pid)
        own = (
            f"the WebUI's program is in supervisord's own file ({found.config}): append the "
            f"[program:{DAEMON_NAME}] block printed below to it (setup never edits that file)"
        )
        return Service([*ctl, "restart", found.name], {}, then, [own, allowed, block], pid)


def _ctl(found: Found) -> list[str]:
    return ["supervisorctl", *(["-c", str(found.config)] if found.config else [])]


def _config(parent: Process) -> Path | None:
    argv = list(parent.argv)
    for flag in ("-c", "--configuration"):
        if flag in argv[:-1]:
            given = Path(argv[argv.index(flag) + 1])
            return given if given.is_absolute() or parent.cwd is None else parent.cwd / given
    for arg in argv:
        if arg.startswith("--configuration="):
            return Path(arg.split("=", 1)[1])
    return next((c for c in _CONFIGS if c.is_file()), None)


MOST_INCLUDED = 256
"""Files the ``[include]`` patterns may add in all (a configuration is outside input)."""


def _programs(config: Path) -> list[Found]:
    """Every program the configuration defines, in it or in a file it includes
    (``[include] files =``: globs relative to its directory)."""
    files, found = [config], []
    for file in files:  # supervisord's own first: the files it includes are added as it is read
        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        try:  # refused past MOST_BYTES (an include may name /proc/kcore: read whole, it fills the memory)
            parser.read_string(read_text(file, MOST_BYTES, whole=True), str(file))
        except configparser.Error:
            continue
        for pattern in parser.get("include", "files", fallback="").split() if file is config else []:
            if len(files) > MOST_INCLUDED:
                break
            # supervisord's own glob: relative to the configuration's directory, and `**`
            # is `*` (Path.glob would walk for it, and refuses `/`). Taken lazily and cut
            # short: at most MOST_INCLUDED files in all, each once, however many patterns.
            globbed = itertools.islice(glob.iglob(str(config.parent / pattern)), 4 * MOST_INCLUDED)  # noqa: PTH207
            try:
                matches = sorted(globbed)
            except ValueError:  # a NUL byte in the pattern
                continue
            for match in matches:
                if len(files) <= MOST_INCLUDED and Path(match) not in files and probe(Path(match)):
                    files.append(Path(match))
        for section in (s for s in parser.sections() if s.startswith("program:")):
            name = section.split(":", 1)[1]
            # An open quote (supervisord refuses it): the program, without its environment.
            environ = assignments(parser.get(section, "environment", fallback="").replace(",", " "))
            user = parser.get(section, "user", fallback=None)
            evidence = f"supervisord program {name} in {file}"
            found.append(Found(SUPERVISORD, name, evidence, file, config, user, environ))
    return found


def _text(file: Path | None) -> str:
    return read_text(file, MOST_BYTES, whole=True) if file else ""


def webui_programs(config: Path, webui_dir: Path | None) -> list[Found]:
    """The programs of supervisord's ``config`` running the WebUI."""
    found = _programs(config)
    return [f for f in found if f.name == "hermes-webui" or mentions_webui(_text(f.definition), webui_dir)]


SUPERVISORD = Supervisord()
