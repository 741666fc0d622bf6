"""A daemon whose ``[[checkout]] path`` names a deploy link (issue 28 item 2): the link
switched is a move, told as stale with a ``deploy`` cause, and restarted on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import Subscriber, greet, short_dir, start_daemon
from tests.support.deploys import GitSync, Releases
from tests.support.repos import Repo, make_repo
from tests.support.restarts import config, names, phases, runs


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
