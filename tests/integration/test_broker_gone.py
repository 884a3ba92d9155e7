"""When the broker is gone: readiness, a bounded stop, bounded logs, nothing lost.

These tests kill and restart a broker, so they run one of their own (deploy/kafka.sh
on KAFKA_PORT + 300, controller KAFKA_PORT + 400, state in a temporary directory),
never the session's broker that other tests share. It runs with a small heap set
through KAFKA_HEAP_OPTS, which the first test checks on the JVM's command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from gateway.commands.lifecycle import EXIT_SHUTDOWN_TIMEOUT, SHUTDOWN_GRACE_S
from tests.bridge.support import BridgeProcess, bridge_settings
from tests.integration.conftest import KAFKA_SH, REPO_ROOT, START_TIMEOUT_S, kafka_port
from tests.integration.support import (
    GatewayProcess,
    Namespace,
    collect,
    free_port,
    header,
    produce,
    values,
)
from tests.integration.test_gateway_durability import (
    AGENT,
    request_for,
    thread_events,
    wait_metric,
)

HEAP = "-Xms128m -Xmx384m"
BROKER_TIMEOUT_S = 4.0
UNREACHABLE = "unreachable: no answer since "
SHUTDOWN_TIMEOUT_S = 6.0
# Generous room for a loaded machine: these bound a wait, they time nothing.
MARGIN_S = 30.0
# Lines the gateway may write while its broker is gone (the issue saw 45,209 in 3 min).
MAX_OUTAGE_LINES = 60


class Broker:
    """A broker of these tests alone, killed (SIGKILL, as when its JVM dies) and restarted."""

    def __init__(self, state: Path, offset: int = 300, heap: str = HEAP) -> None:
        """On the session broker's port + `offset` (its controller + `offset` + 100)."""
        self.port = kafka_port() + offset
        self.state = state
        self.env = {
            **os.environ,
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(kafka_port() + offset + 100),
            "KAFKA_STATE_DIR": str(state),
            "KAFKA_HEAP_OPTS": heap,
        }
        self.bootstrap = f"127.0.0.1:{self.port}"

    def sh(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KAFKA_SH), command],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )

    def start(self) -> None:
        result = self.sh("start")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().splitlines()[-1] == self.bootstrap

    def pid(self) -> int:
        return int((self.state / "kafka.pid").read_text().strip())

    def kill(self) -> None:
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    own = Broker(tmp_path_factory.mktemp("gone-broker"))
    own.start()
    try:
        yield own
    finally:
        own.sh("stop")


@pytest.fixture
async def up(broker: Broker) -> Broker:
    """The broker, running (a test before may have left it killed)."""
    if broker.sh("status").returncode != 0:
        broker.start()
    return broker


def readyz(gw: GatewayProcess) -> tuple[int, dict]:
    status, body = gw.http("/readyz")
    return status, orjson.loads(body)


async def wait_readyz(gw: GatewayProcess, want: int, timeout: float, broker: str = "") -> dict:
    """The first /readyz body with status `want` whose "broker" starts with `broker`.

    A 503 alone does not say the broker is gone: a rebalance or a restore on a
    loaded machine answers 503 too, with the broker still "reachable".
    """
    deadline = time.monotonic() + timeout
    last: tuple[int, dict] | None = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(readyz, gw)
        if last[0] == want and str(last[1].get("broker", "")).startswith(broker):
            return last[1]
        await asyncio.sleep(0.2)
    raise AssertionError(f"/readyz never answered {want} {broker!r}: {last!r}\n{gw.log_tail()}")


def log_lines(gw: GatewayProcess) -> list[dict]:
    return [orjson.loads(line) for line in gw.log_path.read_bytes().splitlines() if line]


def gateway(ns: Namespace, tmp_path: Path, name: str) -> GatewayProcess:
    return GatewayProcess(
        ns,
        tmp_path,
        name=name,
        broker_timeout_s=BROKER_TIMEOUT_S,
        shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
    )


async def test_readiness_follows_the_broker_and_its_heap_is_the_one_set(up, tmp_path) -> None:
    cmdline = Path(f"/proc/{up.pid()}/cmdline").read_bytes().split(b"\0")
    assert [b"-Xms128m", b"-Xmx384m"] == [a for a in cmdline if a.startswith((b"-Xms", b"-Xmx"))]
    ns = Namespace(up.bootstrap)
    await ns.create_agent(AGENT, partitions=2)
    gw = await gateway(ns, tmp_path, "gw").start()
    try:
        # ready once does not mean ready still: a rebalance on a loaded machine
        # may unassign the pairs for a moment
        body = await wait_readyz(gw, 200, MARGIN_S)
        assert body["broker"] == "reachable"
        up.kill()
        await wait_readyz(gw, 503, BROKER_TIMEOUT_S + MARGIN_S, UNREACHABLE)
        up.start()
        body = await wait_readyz(gw, 200, 120)
        assert body["broker"] == "reachable"
        messages = [r["msg"] for r in log_lines(gw)]
        assert sum(m.startswith("kafka broker unreachable: no answer for") for m in messages) == 1
        assert sum(m.startswith("kafka broker reachable again after") for m in messages) == 1
    finally:
        await gw.stop(timeout=SHUTDOWN_TIMEOUT_S + SHUTDOWN_GRACE_S + MARGIN_S)


async def send_until_failure(bootstrap: str, topic: str, threads: list[str]) -> list[str]:
    """Send one request per thread, in order, until the broker fails; those acknowledged."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, request_timeout_ms=3000
    )
    await producer.start()
    acked: list[str] = []
    try:
        for index, thread in enumerate(threads):
            await asyncio.wait_for(
                producer.send_and_wait(
                    topic,
                    orjson.dumps(request_for(thread, index % 2 == 0)),
                    key=thread.encode(),
                    headers=[("agui-correlation-id", thread.encode())],
                ),
                timeout=5,
            )
            acked.append(thread)
            await asyncio.sleep(0.01)
    except (KafkaError, TimeoutError):
        pass
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.stop(), timeout=10)
    return acked


async def test_sigterm_without_a_broker_exits_in_bounded_time_and_nothing_is_lost(
    up, tmp_path
) -> None:
    ns = Namespace(up.bootstrap)
    await ns.create_agent(AGENT, partitions=3)
    threads = [f"t{i:03d}" for i in range(150)]
    first = await gateway(ns, tmp_path, "first").start()
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in thread_events(t)])
    await wait_metric(
        first,
        'agui_gateway_runs_closed_total{outcome="interrupt"}',  # over all agents (the default)
        len(threads),
    )
    # the broker dies while requests flow and the gateway decides them
    sender = asyncio.create_task(send_until_failure(ns.bootstrap, ns.requests(AGENT), threads))
    await wait_metric(first, "agui_gateway_requests_total{", 10)
    up.kill()
    killed_at_line = len(log_lines(first))
    acked = await sender
    await wait_readyz(first, 503, BROKER_TIMEOUT_S + MARGIN_S, UNREACHABLE)
    await asyncio.sleep(SHUTDOWN_TIMEOUT_S)  # the outage goes on a while

    asked = time.monotonic()
    code = await first.stop(timeout=SHUTDOWN_TIMEOUT_S + SHUTDOWN_GRACE_S + MARGIN_S)
    assert code in (0, EXIT_SHUTDOWN_TIMEOUT), first.log_tail()
    outage = log_lines(first)[killed_at_line:]
    print(f"stopped in {time.monotonic() - asked:.1f} s, exit {code}, {len(outage)} lines")
    assert len(outage) <= MAX_OUTAGE_LINES, Counter(r["msg"][:60] for r in outage).most_common(10)
    if code == EXIT_SHUTDOWN_TIMEOUT:
        cut = [r["msg"] for r in outage if r["msg"].startswith("shutdown did not finish")]
        assert len(cut) == 1, outage[-10:]

    up.start()
    # what the broker kept of the requests (an unacknowledged one may have been written)
    logged = await collect(ns.bootstrap, ns.requests(AGENT), count=len(acked), timeout=60, settle=2)
    sent = {header(r, "agui-correlation-id") for r in logged}
    assert set(acked) <= sent
    missing = [t for t in threads if t not in sent]
    second = await gateway(ns, tmp_path, "second").start(ready_timeout=120)
    try:
        for index, thread in enumerate(threads):
            if thread in missing:
                await produce(
                    ns.bootstrap,
                    ns.requests(AGENT),
                    [(thread, request_for(thread, index % 2 == 0))],
                    headers=[("agui-correlation-id", thread.encode())],
                )
        good = {t for i, t in enumerate(threads) if i % 2 == 0}
        bad = set(threads) - good
        forwarded = await collect(
            ns.bootstrap, ns.run_requests(AGENT), count=len(good), timeout=120, settle=3.0
        )
        rejected = await collect(
            ns.bootstrap, ns.rejections, count=len(bad), timeout=60, settle=1.0
        )
        fwd = Counter(header(r, "agui-correlation-id") for r in forwarded)
        rej = Counter(orjson.loads(r.value)["correlationId"] for r in rejected)
        twice = [c for c, n in fwd.items() if n > 1]
        assert twice == [], (
            "duplicate forwards",
            [
                (header(r, "agui-correlation-id"), r.partition, r.offset)
                for r in forwarded
                if header(r, "agui-correlation-id") in twice
            ],
            {"acked": len(acked), "resent": [t for t in missing if t in twice]},
        )
        assert [c for c, n in rej.items() if n > 1] == [], "duplicate rejections"
        assert set(fwd) == good, f"forward gap: missing {sorted(good - set(fwd))[:5]}"
        assert set(rej) == bad, f"rejection gap: missing {sorted(bad - set(rej))[:5]}"
        assert {r["reasons"][0]["code"] for r in values(rejected)} == {"uncovered_interrupt"}
    finally:
        await second.stop()


async def test_the_bridge_reports_the_broker_gone_and_stops_in_bounded_time(up, tmp_path) -> None:
    ns = Namespace(up.bootstrap)
    await ns.create_agent(AGENT, partitions=2)
    endpoints = {AGENT: {"url": f"http://127.0.0.1:{free_port()}/", "connect_timeout_s": 1.0}}
    bridge = await BridgeProcess(
        ns,
        tmp_path,
        "bridge",
        broker_timeout_s=BROKER_TIMEOUT_S,
        shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
        **bridge_settings(ns, endpoints),
    ).start()
    body = await wait_readyz(bridge, 200, MARGIN_S)  # ready still (see above)
    assert body["broker"] == "reachable"
    up.kill()
    killed_at_line = len(log_lines(bridge))
    await wait_readyz(bridge, 503, BROKER_TIMEOUT_S + MARGIN_S, UNREACHABLE)
    await asyncio.sleep(SHUTDOWN_TIMEOUT_S)
    code = await bridge.stop(timeout=SHUTDOWN_TIMEOUT_S + SHUTDOWN_GRACE_S + MARGIN_S)
    assert code in (0, EXIT_SHUTDOWN_TIMEOUT), bridge.log_tail()
    outage = log_lines(bridge)[killed_at_line:]
    assert len(outage) <= MAX_OUTAGE_LINES, Counter(r["msg"][:60] for r in outage).most_common(10)
