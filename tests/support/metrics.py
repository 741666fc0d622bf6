"""Helpers for the metrics tests: scraping a real daemon over HTTP and reading what it says.

Every exposition is parsed with the client library's own parser
(``prometheus_client.parser``), never with a regular expression of ours.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from .daemons import WAIT, DaemonProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics_url(daemon: DaemonProcess) -> str:
    """The URL the daemon logged (``metrics_address`` with port 0: the port it chose).

    The line is logged before the loop starts, so it is there once READY=1 arrived.
    """
    found = re.search(r"metrics on (http://\S+/metrics)", daemon.log_text())
    assert found is not None, daemon.log_text()
    return found.group(1)


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One real HTTP GET: ``(status, headers, body)``."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=WAIT)
    try:
        conn.request("GET", parts.path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def scrape(url: str, headers: dict[str, str] | None = None) -> str:
    status, _, body = get(url, headers)
    assert status == 200, (status, body[:200])
    return body.decode()


def samples(text: str) -> Samples:
    """``{(sample name, labels): value}`` from an exposition, through the library's parser."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name`` whose labels include ``labels`` (exactly one may match)."""
    wanted = set(labels.items())
    matches = [v for (n, ls), v in found.items() if n == name and wanted <= ls]
    assert len(matches) <= 1, (name, labels, matches)
    return matches[0] if matches else None


def wait_for_scrape(
    url: str, predicate: Callable[[Samples], bool], timeout: float = WAIT, what: str = ""
) -> Samples:
    """Scrape until ``predicate`` holds (each scrape is a real request); fail at the deadline.

    For what no socket line announces (a hook's outcome is counted after its process
    exits): the deadline bounds the wait, the condition ends it.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        found = samples(scrape(url))
        if predicate(found):
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"not seen within {timeout} s: {what}\n{sorted(found)[:40]}")
        pause.wait(0.02)  # between two scrapes, not instead of a condition


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def label_names(found: Samples) -> dict[str, set[frozenset[str]]]:
    """For each sample name, the sets of label names it carries."""
    out: dict[str, set[frozenset[str]]] = {}
    for name, labels in found:
        out.setdefault(name, set()).add(frozenset(k for k, _ in labels))
    return out
