"""A daemon whose ``[[checkout]] path`` names a deploy link (issue 28 item 2): the link
switched is a move, told as stale with a ``deploy`` cause, and restarted on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch import Daemon, Guard
from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.deploys import GitSync, Releases
from tests.support.repos import Repo, make_repo
from tests.support.restarts import SKIP, config, names, phases, runs


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def test_a_git_sync_switch_is_stale_and_restarted_onto(workdir: Path) -> None:
    origin = make_repo(workdir / "origin")
    first = origin.head()
    sync = GitSync(workdir / "root", origin, keep=True)
    sync.sync(first)
    cfg = config(workdir, Repo(sync.link))  # the link, as the configuration names it
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        _, (snap,) = greet(sub)
        assert (snap["status"], snap["loaded_revision"]) == ("current", first)
        second = origin.commit("two")
        sync.sync(second)
        event = sub.next("event", skip=("ping", "health", "restart", "processes"))
        assert (event["status"], event["loaded_revision"], event["current_revision"]) == (
            "stale",
            first,
            second,
        )
        assert event["cause"]["action"] == "deploy"
        assert event["cause"]["message"] == f"app switched .worktrees/{first} -> .worktrees/{second}"
        seen = phases(sub, "confirmed", "failed", "refused")
        assert names(seen)[-2:] == ["restarting", "confirmed"]
        assert {m["revision"] for m in seen} == {second}
        assert runs(workdir) == 1
        event = sub.next("event", skip=("ping", "health", "restart", "processes"))
        assert (event["status"], event["loaded_revision"]) == ("current", second)
        third = origin.commit("three")
        sync.sync(third)  # told from the release the servers run now
        event = sub.next("event", skip=("ping", "health", "restart", "processes"))
        assert event["cause"]["message"] == f"app switched .worktrees/{second} -> .worktrees/{third}"


def test_a_capistrano_switch_of_exports_is_stale(workdir: Path) -> None:
    origin = make_repo(workdir / "origin")
    deploys = Releases(workdir / "deploy", origin)
    deploys.capistrano_switch(deploys.export("1", origin.head()))
    cfg = workdir / "c.toml"
    cfg.write_text(f'[[checkout]]\npath = "{deploys.current}"\n')
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        second = origin.commit("two")
        deploys.capistrano_switch(deploys.export("2", second))
        event = sub.next("event", skip=("ping", "health", "restart", "processes"))
        assert (event["status"], event["current_revision"]) == ("stale", second)
        assert event["cause"]["message"] == "current switched releases/1 -> releases/2"


def test_a_server_bound_through_the_link_registers_under_it_and_holds_the_confirmation(
    workdir: Path,
) -> None:
    # R5, R10: the daemon knows what a server behind the link runs, from the release it
    # registered; one left on the old release fails the confirmation, named.
    origin = make_repo(workdir / "origin")
    first = origin.head()
    sync = GitSync(workdir / "root", origin)  # the old worktree removed at the switch
    sync.sync(first)
    cfg = config(workdir, Repo(sync.link), confirm_timeout=0.5, max_attempts=1)
    with start_daemon(workdir, "--config", str(cfg)) as daemon, Subscriber(daemon.socket) as sub:
        greet(sub)
        server = Guard.for_file(sync.link / "module.py", source=Daemon(daemon.socket))
        assert server.checkout == sync.link
        with server:  # a server the action does not restart: it stays on the old release
            line = sub.next("processes", skip=SKIP[:-2])
            assert [(p["revision"], p["pid"]) for p in line["processes"]] == [(first, os.getpid())]
            second = origin.commit("two")
            sync.sync(second)
            failed = phases(sub, "failed", "confirmed")[-1]
            assert failed["phase"] == "failed"
            assert f"{first[:7]}: pids [{os.getpid()}]" in failed["reason"]
            # One started after the switch loaded the new release: the same checkout.
            with Guard.for_file(sync.link / "module.py", source=Daemon(daemon.socket)) as fresh:
                assert fresh.loaded_revision == second
                while True:
                    line = sub.next("processes", skip=(*SKIP[:-2], "restart"))
                    if sorted(p["revision"] for p in line["processes"]) == sorted([first, second]):
                        break
