#!/usr/bin/env python3
"""The least a watcher process could do, for ``bench_scale.py`` to compare with the daemon.

One thread: it blocks on an inotify instance watching one ref's directory; when the ref
is renamed into place (what git does), it reads the ref and writes one JSON line to
its one client. No classification, no reflog, no scheduler, no loop: what any design
must pay at least, a wake-up in this process and one in the client's. Run beside the
daemon on the same machine, with updates alternating between the two, its times say
how much of a detection's time, and of its tail, is the machine's (wake-ups, CPUs the
hypervisor takes away) rather than the daemon's.

Usage: python scripts/floor.py SOCKET REF   (serves one client, until it disconnects)
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import struct
import sys
from pathlib import Path

_IN_MOVED_TO = 0x80
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")


def main() -> int:
    sock_path, ref = sys.argv[1], Path(sys.argv[2])
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(_IN_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(ref.parent), _IN_MOVED_TO) < 0:
        raise SystemExit(f"floor: inotify: {os.strerror(ctypes.get_errno())}")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path)
    listener.listen(1)
    print("ready", flush=True)
    client, _ = listener.accept()
    name = os.fsencode(ref.name)
    with client:
        while True:
            data = os.read(fd, 4096)
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, _, _, length = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                seen = data[start : start + length].rstrip(b"\0")
                offset = start + length
                if seen == name:
                    with open(ref, "rb") as file:
                        current = file.read(100).strip().decode()
                    try:
                        client.sendall(json.dumps({"type": "event", "current": current}).encode() + b"\n")
                    except OSError:
                        return 0  # the bench is done


if __name__ == "__main__":
    sys.exit(main())
