"""The daemon's metrics, scraped over HTTP from a real daemon process after real git commits."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from stalewatch.cli.run import main
from tests.support.daemons import WAIT, Subscriber, daemon_command, greet, short_dir, start_daemon
from tests.support.metrics import (
    label_names,
    metrics_url,
    samples,
    scrape,
    value,
    wait_for_scrape,
    write_config,
)
from tests.support.repos import Repo, make_repo
from tests.support.restarts import RawServer, phases
from tests.support.restarts import config as restart_config


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _config(workdir: Path, body: str, top: str = "") -> Path:
    return write_config(workdir / "c.toml", f'metrics_address = "127.0.0.1:0"\n{top}{body}')


def test_a_commit_is_in_the_next_scrape_and_a_rollback_clears_it(workdir: Path, git_repo: Repo) -> None:
    loaded = git_repo.head()
    key = str(git_repo.path.resolve())
    config = _config(workdir, f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        url = metrics_url(daemon)
        greet(sub)
        before = samples(scrape(url))
        assert value(before, "stalewatch_stale", checkout=key) == 0
        assert value(before, "stalewatch_status", checkout=key, stalewatch_status="current") == 1
        assert value(before, "stalewatch_stale_since_timestamp_seconds", checkout=key) is None
        assert value(before, "stalewatch_watcher_trusted", checkout=key) == 1
        assert value(before, "stalewatch_watcher_mode", checkout=key, stalewatch_watcher_mode="native") == 1
        assert value(before, "stalewatch_clients") == 1

        new = git_repo.commit("moved")
        event = sub.next("event")  # counted before it was sent: the next scrape has it
        after = samples(scrape(url))
        assert value(after, "stalewatch_stale", checkout=key) == 1
        assert value(after, "stalewatch_status", checkout=key, stalewatch_status="stale") == 1
        assert value(after, "stalewatch_status", checkout=key, stalewatch_status="current") == 0
        assert value(after, "stalewatch_stale_since_timestamp_seconds", checkout=key) == pytest.approx(
            event["at"]
        )
        info = {
            dict(labels)["current_revision"]: dict(labels)["loaded_revision"]
            for name, labels in after
            if name == "stalewatch_revision_info"
        }
        assert info == {new: loaded}
        assert value(after, "stalewatch_events_total", checkout=key, status="stale") == 1
        # The commit's ref write explains the event: one latency observation, small.
        assert value(after, "stalewatch_detection_latency_seconds_count", checkout=key) == 1
        latency = value(after, "stalewatch_detection_latency_seconds_sum", checkout=key)
        assert latency is not None and 0 <= latency < WAIT

        second = git_repo.commit("again")  # still stale: the time it went stale stays
        assert sub.next("event")["current_revision"] == second
        again = samples(scrape(url))
        assert value(again, "stalewatch_stale_since_timestamp_seconds", checkout=key) == pytest.approx(
            event["at"]
        )
        assert value(again, "stalewatch_events_total", checkout=key, status="stale") == 2

        git_repo.git("reset", "-q", "--hard", loaded)
        assert sub.next("event")["status"] == "current"
        back = samples(scrape(url))
        assert value(back, "stalewatch_stale", checkout=key) == 0
        assert value(back, "stalewatch_stale_since_timestamp_seconds", checkout=key) is None
        assert value(back, "stalewatch_events_total", checkout=key, status="current") == 1
        assert value(back, "stalewatch_detection_latency_seconds_count", checkout=key) == 3


def test_the_exposition_parses_in_both_formats_and_follows_the_naming_conventions(
    workdir: Path, git_repo: Repo, tmp_path: Path
) -> None:
    other = make_repo(tmp_path / "other")
    config = _config(
        workdir,
        f'[[checkout]]\npath = "{git_repo.path}"\non_stale = ["true"]\n'
        f'[checkout.restart]\naction = ["true"]\nsettle = 0\n'
        f'[[checkout]]\npath = "{other.path}"\n',
    )
    with start_daemon(workdir, "--config", str(config)) as daemon:
        url = metrics_url(daemon)
        text = scrape(url)
        om = scrape(url, {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.rstrip().endswith("# EOF")
    om_names = {family.name for family in openmetrics_families(om)}
    found = samples(text)  # the 0.0.4 text format, as node_exporter and Prometheus read it
    names = {name for name, _ in found}
    ours = {name for name in names if not name.startswith("process_")}
    assert all(name.startswith("stalewatch_") for name in ours)
    assert {"stalewatch_build_info", "stalewatch_clients", "stalewatch_restart_phase"} <= ours
    assert "stalewatch_events" in om_names  # OpenMetrics names a counter family without _total
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= names  # HTTP only
    counters = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in openmetrics_families(om)
        if family.type == "counter"
    }
    assert counters >= {"stalewatch_events_total", "stalewatch_hook_runs_total", "stalewatch_restarts_total"}
    for name, labels in label_names(found).items():
        for label_set in labels:
            # Revisions label only the info metric and the registered processes (gauges).
            if {"loaded_revision", "current_revision", "revision"} & label_set:
                assert name in ("stalewatch_revision_info", "stalewatch_registered_processes"), name
    # Only the checkout with hooks has hook series, only the one with a policy restart series.
    keys = {dict(ls).get("checkout") for n, ls in found if n == "stalewatch_hook_runs_total"}
    assert keys == {str(git_repo.path.resolve())}
    keys = {dict(ls).get("checkout") for n, ls in found if n == "stalewatch_restart_phase"}
    assert keys == {str(git_repo.path.resolve())}
    # Every series of ours names the daemon (by default its socket), over HTTP as in a textfile.
    assert {dict(ls).get("daemon") for n, ls in found if n in ours} == {str(daemon.socket)}
    assert all("daemon" not in dict(ls) for n, ls in found if n.startswith("process_"))


def _series(found: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[tuple[str, frozenset[str]]]:
    """Series without their revision label values: what must not grow with commits."""
    revision_labels = {"loaded_revision", "current_revision", "revision"}
    return {
        (name, frozenset(f"{k}={'*' if k in revision_labels else v}" for k, v in labels))
        for name, labels in found
        if not name.startswith("process_")
    }


@pytest.mark.slow
def test_cardinality_stays_flat_across_300_commits(workdir: Path, git_repo: Repo) -> None:
    commits_made = 300  # each a real ref move and a real event: enough to show nothing grows per commit
    key = str(git_repo.path.resolve())
    loaded = git_repo.head()
    # Real commits, made in one git process; git update-ref then moves the branch
    # to each in turn (lock file, rename), exactly as a commit does.
    stream = "".join(
        f"commit refs/heads/spare\nmark :{n + 1}\ncommitter t <t@t> {1700000000 + n} +0000\n"
        f"data 3\nc{n % 10}\n" + (f"from {loaded}\n" if n == 0 else f"from :{n}\n") + "\n"
        for n in range(commits_made)
    )
    done = subprocess.run(
        ["git", "fast-import", "--quiet", f"--export-marks={workdir / 'marks'}"],
        cwd=git_repo.path,
        input=stream,
        text=True,
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert done.returncode == 0
    commits = [line.split()[1] for line in (workdir / "marks").read_text().splitlines()]
    assert len(set(commits)) == commits_made
    config = _config(workdir, f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        url = metrics_url(daemon)
        greet(sub)
        # HEAD goes through the first twelve commits: the daemon refuses a registration of
        # a revision the checkout never had (R10).
        for commit in commits[:12]:
            git_repo.git("update-ref", "refs/heads/main", commit)
            assert sub.next("event")["current_revision"] == commit
        # Twelve server processes on twelve revisions: shown as the 8 most common + other.
        servers = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(12)]
        try:
            for n, server in enumerate(servers):
                server.connect(str(daemon.socket))
                line = f'{{"type":"register","checkout":"{key}","revision":"{commits[n]}"}}\n'
                server.sendall(line.encode())
                assert sub.next("processes")["processes"]
            first = samples(scrape(url))
            for commit in commits[12:]:
                git_repo.git("update-ref", "refs/heads/main", commit)
                assert sub.next("event")["current_revision"] == commit
            last = samples(scrape(url))
        finally:
            for server in servers:
                server.close()
    assert _series(first) == _series(last)
    assert len(first) == len(last)
    assert value(last, "stalewatch_events_total", checkout=key, status="stale") == commits_made
    revisions = {dict(ls)["revision"] for n, ls in last if n == "stalewatch_registered_processes"}
    assert len(revisions) == 9 and "other" in revisions
    assert sum(v for (n, _), v in last.items() if n == "stalewatch_registered_processes") == 12
    assert value(last, "stalewatch_stale_processes", checkout=key) == 12  # none runs HEAD's code
    assert value(last, "stalewatch_detection_latency_seconds_count", checkout=key) == commits_made


def test_hook_runs_are_counted_by_outcome(workdir: Path, git_repo: Repo, tmp_path: Path) -> None:
    loaded = git_repo.head()
    other = make_repo(tmp_path / "other")
    one, two = str(git_repo.path.resolve()), str(other.path.resolve())
    config = _config(
        workdir,
        f'[[checkout]]\npath = "{git_repo.path}"\non_stale = ["true"]\non_current = ["false"]\n'
        f'on_unreadable = ["{workdir}/no-such-hook"]\n'
        f'[[checkout]]\npath = "{other.path}"\non_stale = ["sh", "-c", "kill -KILL $$"]\n'
        f'on_current = ["sleep", "30"]\nhook_timeout = 0.3\n',
    )
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        url = metrics_url(daemon)
        greet(sub)

        def runs(key: str, hook: str, outcome: str, count: int = 1) -> None:
            wait_for_scrape(
                url,
                lambda f: (
                    value(f, "stalewatch_hook_runs_total", checkout=key, hook=hook, outcome=outcome) == count
                ),
                what=f"{hook} {outcome} x{count} for {key}",
            )

        git_repo.commit()
        runs(one, "on_stale", "success")
        git_repo.git("reset", "-q", "--hard", loaded)
        runs(one, "on_current", "failure")
        git_repo.git("symbolic-ref", "HEAD", "refs/heads/missing")  # HEAD unborn: unreadable
        runs(one, "on_unreadable", "not_started")
        git_repo.git("symbolic-ref", "HEAD", "refs/heads/main")
        runs(one, "on_current", "failure", 2)
        other_loaded = other.head()
        other.commit()
        runs(two, "on_stale", "killed")
        other.git("reset", "-q", "--hard", other_loaded)
        found = wait_for_scrape(
            url,
            lambda f: (
                value(f, "stalewatch_hook_runs_total", checkout=two, hook="on_current", outcome="timeout")
                == 1
            ),
            what="timeout",
        )
    total = sum(v for (n, _), v in found.items() if n == "stalewatch_hook_runs_total")
    assert total == 6


def test_restart_phases_and_outcomes(workdir: Path, git_repo: Repo, tmp_path: Path) -> None:
    refused = make_repo(tmp_path / "refused")
    one, two = str(git_repo.path.resolve()), str(refused.path.resolve())
    config = _config(
        workdir,
        f'[[checkout]]\npath = "{git_repo.path}"\n[checkout.restart]\naction = ["true"]\nsettle = 0\n'
        f'[[checkout]]\npath = "{refused.path}"\n[checkout.restart]\naction = ["true"]\nsettle = 0\n'
        'verify = ["false"]\n',
    )
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        url = metrics_url(daemon)
        greet(sub)
        idle = samples(scrape(url))
        assert value(idle, "stalewatch_restart_phase", checkout=one, stalewatch_restart_phase="idle") == 1
        git_repo.commit()
        while (line := sub.next("restart", "event"))["type"] != "restart" or line["phase"] != "confirmed":
            pass
        found = samples(scrape(url))
        assert value(found, "stalewatch_restarts_total", checkout=one, outcome="confirmed") == 1
        assert value(found, "stalewatch_restart_actions_total", checkout=one) == 1
        assert (
            value(found, "stalewatch_restart_phase", checkout=one, stalewatch_restart_phase="confirmed") == 1
        )
        assert value(
            found, "stalewatch_restart_phase_since_timestamp_seconds", checkout=one
        ) == pytest.approx(line["at"])
        refused.commit()
        while (line := sub.next("restart", "event"))["type"] != "restart" or line["phase"] != "refused":
            pass
        found = samples(scrape(url))
        assert value(found, "stalewatch_restarts_total", checkout=two, outcome="refused") == 1
        assert value(found, "stalewatch_restart_actions_total", checkout=two) == 0
        assert value(found, "stalewatch_restart_phase", checkout=two, stalewatch_restart_phase="refused") == 1


def test_r8_the_drain_gauge_follows_the_work_a_real_restart_waits_for(workdir: Path, git_repo: Repo) -> None:
    """Issue 15: ``stalewatch_restart_inflight`` while a real daemon drains, scraped over HTTP."""
    key = str(git_repo.path.resolve())
    config = restart_config(workdir, git_repo, drain_poll=0.1)
    config.write_text('metrics_address = "127.0.0.1:0"\n' + config.read_text())
    with (
        start_daemon(workdir, "--config", str(config)) as daemon,
        Subscriber(daemon.socket) as sub,
        RawServer(daemon.socket, git_repo.path) as old,
    ):
        url = metrics_url(daemon)
        greet(sub)
        old.register(git_repo.head(), inflight=2)
        assert value(samples(scrape(url)), "stalewatch_restart_inflight", checkout=key) is None  # no drain
        new = git_repo.commit()
        wait_for_scrape(url, lambda f: value(f, "stalewatch_restart_inflight", checkout=key) == 2, what="2")
        old.inflight(1)
        wait_for_scrape(url, lambda f: value(f, "stalewatch_restart_inflight", checkout=key) == 1, what="1")
        old.inflight(0)
        assert phases(sub, "restarting")[-1]["revision"] == new
        old.close()
        with RawServer(daemon.socket, git_repo.path) as fresh:
            fresh.register(new)
            assert phases(sub, "confirmed", "failed")[-1]["phase"] == "confirmed"
        found = samples(scrape(url))
        assert value(found, "stalewatch_restart_inflight", checkout=key) is None  # absent once drained
        assert value(found, "stalewatch_restarts_total", checkout=key, outcome="confirmed") == 1


def test_clients_connected_and_dropped_by_reason(workdir: Path, git_repo: Repo) -> None:
    config = _config(workdir, f'[[checkout]]\npath = "{git_repo.path}"\n', top="max_clients = 2\n")
    with start_daemon(workdir, "--config", str(config)) as daemon:
        url = metrics_url(daemon)
        with Subscriber(daemon.socket) as one, Subscriber(daemon.socket) as two:
            greet(one)
            greet(two)
            assert value(samples(scrape(url)), "stalewatch_clients") == 2
            with Subscriber(daemon.socket) as third:
                assert third.next("error")["reason"] == "too-many-clients"
            two.send(b"not json\n")
            assert two.next("error")["reason"] == "bad-request"
            found = samples(scrape(url))
            assert value(found, "stalewatch_clients_dropped_total", reason="too-many-clients") == 1
            assert value(found, "stalewatch_clients_dropped_total", reason="bad-request") == 1
            assert value(found, "stalewatch_clients_dropped_total", reason="slow-client") == 0
            assert value(found, "stalewatch_client_connections_total") == 2  # the refused one never was
        wait_for_scrape(url, lambda f: value(f, "stalewatch_clients") == 0, what="both clients closed")


def test_registered_processes_by_revision(workdir: Path, git_repo: Repo) -> None:
    key = str(git_repo.path.resolve())
    old = git_repo.head()
    config = _config(workdir, f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        url = metrics_url(daemon)
        greet(sub)
        with Subscriber(daemon.socket) as a, Subscriber(daemon.socket) as b:
            for server in (a, b):
                server.send(f'{{"type":"register","checkout":"{key}","revision":"{old}"}}\n'.encode())
                assert sub.next("processes")["processes"]
            found = samples(scrape(url))
            assert value(found, "stalewatch_registered_processes", checkout=key, revision=old) == 2
            assert value(found, "stalewatch_stale_processes", checkout=key) == 0
            new = git_repo.commit()
            assert sub.next("event")["current_revision"] == new
            found = samples(scrape(url))
            assert value(found, "stalewatch_stale_processes", checkout=key) == 2  # serving old code
        assert sub.next("processes")
        assert sub.next("processes")["processes"] == []
        found = samples(scrape(url))
        assert value(found, "stalewatch_registered_processes", checkout=key, revision=old) is None


def test_a_checkout_path_that_is_not_utf8_is_a_label_that_still_encodes(
    workdir: Path, tmp_path: Path
) -> None:
    repo = make_repo(Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/odd\xff\nname")))
    config = _config(workdir, "")
    with start_daemon(workdir, "--config", str(config), str(repo.path)) as daemon:
        found = samples(scrape(metrics_url(daemon)))
    keys = {dict(ls)["checkout"] for n, ls in found if n == "stalewatch_stale"}
    assert len(keys) == 1
    (shown,) = keys
    assert "\\udcff" in shown and "\\n" in shown and "\n" not in shown


def test_a_reload_forgets_removed_checkouts_and_keeps_the_address(
    workdir: Path, git_repo: Repo, tmp_path: Path
) -> None:
    other = make_repo(tmp_path / "other")
    body = f'[[checkout]]\npath = "{git_repo.path}"\n'
    config = _config(workdir, body + f'[[checkout]]\npath = "{other.path}"\n')
    with start_daemon(workdir, "--config", str(config)) as daemon, Subscriber(daemon.socket) as sub:
        url = metrics_url(daemon)
        greet(sub)
        keys = {dict(ls)["checkout"] for n, ls in samples(scrape(url)) if n == "stalewatch_stale"}
        assert keys == {str(git_repo.path.resolve()), str(other.path.resolve())}
        write_config(config, 'metrics_address = "127.0.0.1:1"\n' + body)
        daemon.signal(signal.SIGHUP)
        assert sub.next("removed")["checkout"] == str(other.path.resolve())
        found = samples(scrape(url))  # the same port: a reload does not move the endpoint
    keys = {dict(ls)["checkout"] for n, ls in found if n == "stalewatch_stale"}
    assert keys == {str(git_repo.path.resolve())}
    assert "take effect only after a restart" in daemon.log_text()


def test_an_address_in_use_exits_2_naming_the_key(workdir: Path, git_repo: Repo) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        config = write_config(workdir / "c.toml", f'metrics_address = "127.0.0.1:{port}"\n')
        done = subprocess.run(
            daemon_command("--socket", str(workdir / "d.sock"), "--config", str(config), str(git_repo.path)),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        taken.close()
    assert done.returncode == 2, done.stderr
    assert f"metrics_address: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert not (workdir / "d.sock").exists()  # nothing left behind


def test_an_ipv6_address_in_use_without_dual_stack_exits_2(
    workdir: Path, git_repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A platform without dual-stack sockets (OpenBSD, or IPv6 only): a bind error there
    # is the same clean exit 2 as anywhere, never a traceback (in process: the platform
    # is the one thing simulated).
    monkeypatch.setattr(socket, "has_dualstack_ipv6", lambda: False)
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(workdir / "c.toml", f'metrics_address = "[::1]:{port}"\n')
        code = main(
            ["daemon", "--socket", str(workdir / "d.sock"), "--config", str(config), str(git_repo.path)]
        )
    assert code == 2
    assert f"metrics_address: cannot listen on [::1]:{port}" in capsys.readouterr().err
    assert not (workdir / "d.sock").exists()  # nothing left behind


def _listening_tcp_sockets(pid: int) -> int:
    """How many TCP sockets ``pid`` holds in the LISTEN state (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    listening = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                listening += fields[3] == "0A" and fields[9] in inodes
    return listening


def test_only_a_configured_daemon_listens_on_tcp(workdir: Path, git_repo: Repo) -> None:
    with start_daemon(workdir, str(git_repo.path)) as daemon:
        assert _listening_tcp_sockets(daemon.proc.pid) == 0
        assert "metrics" not in daemon.log_text()
    config = _config(workdir, f'[[checkout]]\npath = "{git_repo.path}"\n')
    with start_daemon(workdir, "--config", str(config), name="m") as daemon:
        assert _listening_tcp_sockets(daemon.proc.pid) == 1
