"""Reading a gateway process from outside: /proc, its HTTP endpoints, its group's offsets.

Nothing here imports the gateway: what it reads is what an operator sees
(the process's RSS and sockets, `/readyz`, `/metrics`, committed offsets).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

import orjson
from aiokafka import TopicPartition

from bench.broker import Admin

if TYPE_CHECKING:  # the bench's subprocess runner, for its type only
    from bench.gatewayrun import GatewayProcess


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """The process's resident memory now (`VmRSS`), or at its peak so far (`VmHWM`)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def broker_connections(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` whose remote port is `port`."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                remote, state, inode = fields[2], fields[3], fields[9]
                if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                    count += inode in inodes
    return count


def scrape(port: int) -> tuple[int, float]:
    """(/metrics bytes, seconds)."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        body = r.read()
    return len(body), time.perf_counter() - started


def readyz(port: int) -> tuple[bool, int | None]:
    """(200?, pairs listed as assigned; None when /readyz does not list them)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
            body = orjson.loads(r.read())
            ok = r.status == 200
    except urllib.error.HTTPError as exc:
        try:
            body, ok = orjson.loads(exc.read()), False
        except ValueError:
            return False, 0
    except (OSError, ValueError):
        return False, 0
    assigned = body.get("assigned") if isinstance(body, dict) else None
    if isinstance(assigned, list | dict):
        return ok, len(assigned)
    if isinstance(assigned, int) and not isinstance(assigned, bool):
        return ok, assigned
    return ok, None


class GatewayExited(RuntimeError):
    """The gateway process ended while the fleet was measured (a finding, not a bench error)."""


def _last_error(gateway: GatewayProcess) -> str:
    for line in reversed(gateway.log_tail(200).splitlines()):
        try:
            record = orjson.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("level") in ("error", "critical"):
            return str(record.get("msg"))[:400]
    return gateway.log_tail(3)[-400:]


async def wait_assigned(
    gateway: GatewayProcess, pairs: int, timeout: float
) -> tuple[float | None, int | None]:
    """Seconds until /readyz is 200 with at least `pairs` assigned (None: not in time)."""
    started = time.perf_counter()
    seen: int | None = 0
    while time.perf_counter() - started < timeout:
        assert gateway.proc is not None
        if gateway.proc.poll() is not None:
            raise GatewayExited(f"gateway exited {gateway.proc.returncode}: {_last_error(gateway)}")
        ok, seen = await asyncio.to_thread(readyz, gateway.port)
        if ok and (seen is None or seen >= pairs):  # None: ready is all /readyz says
            return time.perf_counter() - started, seen
        await asyncio.sleep(0.1)
    return None, seen


async def wait_committed(
    admin: Admin, group: str, ends: dict[TopicPartition, int], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        committed = await admin.committed(group)
        if all(committed.get(tp, -1) >= end for tp, end in ends.items()):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the gateway did not consume the fleet's events within {timeout} s")
