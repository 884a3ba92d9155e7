"""Running the real gateway (`agui-gateway run`) against the real broker, for tests."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import socket
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests import record_schemas

REPO_ROOT = Path(__file__).resolve().parents[2]
GATEWAY_BIN = Path(sys.executable).with_name("agui-gateway")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Namespace:
    """Topic templates and a group nobody else uses, so tests never see each other."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = "it" + uuid.uuid4().hex[:10]
        self.group = f"{self.prefix}-gateway"

    def env(self, **overrides: Any) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGUI_GATEWAY_")}
        env.update(
            {
                "AGUI_GATEWAY_BOOTSTRAP_SERVERS": self.bootstrap,
                "AGUI_GATEWAY_GROUP_ID": self.group,
                "AGUI_GATEWAY_EVENTS_TOPIC": f"{self.prefix}.{{agent}}.events",
                "AGUI_GATEWAY_REQUESTS_TOPIC": f"{self.prefix}.{{agent}}.requests",
                "AGUI_GATEWAY_RUN_REQUESTS_TOPIC": f"{self.prefix}.{{agent}}.run-requests",
                "AGUI_GATEWAY_CHANGELOG_TOPIC": f"{self.prefix}.{{agent}}.gateway-changelog",
                "AGUI_GATEWAY_REJECTIONS_TOPIC": f"{self.prefix}.rejections",
                "AGUI_GATEWAY_WARNINGS_TOPIC": f"{self.prefix}.warnings",
                "AGUI_GATEWAY_AUDIT_TOPIC": f"{self.prefix}.audit",
                "AGUI_GATEWAY_INTERRUPTS_TOPIC": f"{self.prefix}.interrupts",
                "AGUI_GATEWAY_DISCOVERY_INTERVAL_MS": "1000",
                "AGUI_GATEWAY_SESSION_TIMEOUT_MS": "6000",
                "AGUI_GATEWAY_HEARTBEAT_INTERVAL_MS": "500",
                "AGUI_GATEWAY_LOG_LEVEL": "INFO",
            }
        )
        env.update({f"AGUI_GATEWAY_{k.upper()}": str(v) for k, v in overrides.items()})
        return env

    def events(self, agent: str) -> str:
        return f"{self.prefix}.{agent}.events"

    def requests(self, agent: str) -> str:
        return f"{self.prefix}.{agent}.requests"

    def run_requests(self, agent: str) -> str:
        return f"{self.prefix}.{agent}.run-requests"

    def changelog(self, agent: str) -> str:
        return f"{self.prefix}.{agent}.gateway-changelog"

    @property
    def rejections(self) -> str:
        return f"{self.prefix}.rejections"

    @property
    def warnings(self) -> str:
        return f"{self.prefix}.warnings"

    @property
    def audit(self) -> str:
        return f"{self.prefix}.audit"

    @property
    def interrupts(self) -> str:
        return f"{self.prefix}.interrupts"

    async def create_agent(
        self, agent: str, partitions: int = 3, *, binary: Path = GATEWAY_BIN
    ) -> str:
        proc = await asyncio.create_subprocess_exec(
            str(binary),
            "topics",
            "create",
            "--agent",
            agent,
            "--partitions",
            str(partitions),
            env=self.env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 0, (out + err).decode()
        return out.decode()

    async def create_agents(self, agents: list[str], partitions: int = 1) -> None:
        """Many agents' topic sets, laid out as `topics create` lays them out, in one
        CreateTopics request (one `topics create` process per agent would take minutes)."""
        from gateway.kafka.wire.topics import agent_topic_layout, ensure_topics
        from tests.integration.inprocess import settings_for  # it imports this module

        settings = settings_for(self)
        layout: dict[str, tuple[int, dict[str, str]]] = {}
        for agent in agents:
            layout.update(agent_topic_layout(settings, agent, partitions, 1))
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=60000)
        await asyncio.wait_for(admin.start(), timeout=30)
        try:
            reports = await asyncio.wait_for(ensure_topics(admin, layout), timeout=120)
        finally:
            await admin.close()
        assert [r for r in reports if r.action != "created"] == [], "topics not created"
        await self._led(layout)

    async def _led(self, layout: dict[str, tuple[int, dict[str, str]]]) -> None:
        """Wait until the broker answers for every partition: it names a leader before it
        has created the log, and creates the logs one after another (tens of ms each on a
        loaded machine), so a producer started at once can exhaust its retries on
        NotLeaderForPartition."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, request_timeout_ms=120000)
        await consumer.start()
        try:
            await consumer._client.set_topics(list(layout))  # all at once, not one per try
            tps = [TopicPartition(t, p) for t, (count, _) in layout.items() for p in range(count)]
            await asyncio.wait_for(consumer.end_offsets(tps), timeout=180)
        finally:
            await consumer.stop()


_STARTED: list[asyncio.subprocess.Process] = []


@atexit.register
def _kill_leftovers() -> None:
    """A test that failed before stopping its processes must not leave them running after
    the session (they would keep writing to its broker, and a CI host is shared)."""
    for proc in _STARTED:
        if proc.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGKILL)


def started(proc: asyncio.subprocess.Process) -> asyncio.subprocess.Process:
    """Track a subprocess a test starts, so that the session kills it if the test does not."""
    _STARTED.append(proc)
    return proc


class GatewayProcess:
    """One `agui-gateway run` subprocess with its own HTTP port and log file.

    `binary` and `cwd` default to the test venv's console script run from the
    checkout; the packaging tests pass an installed wheel's script and a
    directory outside the checkout.
    """

    def __init__(
        self,
        ns: Namespace,
        log_dir: Path,
        name: str = "gw",
        *,
        binary: Path = GATEWAY_BIN,
        cwd: Path = REPO_ROOT,
        **settings: Any,
    ) -> None:
        self.ns = ns
        self.binary = binary
        self.cwd = cwd
        self.port = free_port()
        self.log_path = log_dir / f"{name}.log"
        self.settings = settings
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, ready_timeout: float = 60, wait: bool = True) -> GatewayProcess:
        env = self.ns.env(http_port=self.port, **self.settings)
        log = self.log_path.open("ab")
        self.proc = started(
            await asyncio.create_subprocess_exec(
                str(self.binary),
                "run",
                env=env,
                stdout=log,
                stderr=log,
                cwd=str(self.cwd),
            )
        )
        log.close()
        if wait:
            await self.wait_ready(ready_timeout)
        return self

    def http(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    async def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise AssertionError(f"gateway exited {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                last = await asyncio.to_thread(self.http, "/readyz")
                if last[0] == 200:
                    return
            await asyncio.sleep(0.2)
        raise AssertionError(f"gateway not ready in {timeout}s: {last!r}\n{self.log_tail()}")

    def metrics(self) -> str:
        status, body = self.http("/metrics")
        assert status == 200
        return body.decode()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc is None or self.proc.returncode is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout=timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"gateway did not stop on {sig}:\n{self.log_tail()}") from None


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[str | None, Any]],
    headers: list[tuple[str, bytes]] | None = None,
    **security: Any,
) -> None:
    """Send (key, value) records in order; dict/list values are JSON-encoded, bytes as is."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **security
    )
    await producer.start()
    try:
        for key, value in records:
            body = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
            await producer.send_and_wait(
                topic, body, key=key.encode() if key else None, headers=headers or []
            )
    finally:
        await producer.stop()


async def collect(
    bootstrap: str,
    topic: str,
    *,
    count: int | None = None,
    timeout: float = 30,
    settle: float = 0.0,
    **security: Any,
) -> list[Any]:
    """Records of `topic` (read_committed, from the beginning) until `count` are seen.

    With `settle`, keep reading that long after reaching `count`, so that extra
    (duplicate) records would be seen too.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **security,
    )
    await consumer.start()
    out: list[Any] = []
    try:
        partitions = consumer.partitions_for_topic(topic)
        deadline = time.monotonic() + 10
        while not partitions and time.monotonic() < deadline:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic)
        assert partitions, f"topic {topic} not found"
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        deadline = time.monotonic() + timeout
        reached_at: float | None = None
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for messages in batch.values():
                out.extend(messages)
            if count is not None and len(out) >= count:
                reached_at = reached_at or time.monotonic()
                if time.monotonic() - reached_at >= settle:
                    break
        kind = record_schemas.kind_of(topic)
        if kind is not None:  # every rejection, reply and warning read follows its schema
            for record in out:
                record_schemas.check(kind, orjson.loads(record.value))
        return out
    finally:
        await consumer.stop()


def values(records: list[Any]) -> list[Any]:
    return [orjson.loads(r.value) if r.value is not None else None for r in records]


def header(record: Any, name: str) -> str | None:
    for key, value in record.headers or ():
        if key == name:
            return value.decode()
    return None


async def stable_and_high(
    bootstrap: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, tuple[int, int]]:
    """(last stable offset, high watermark) of each partition: what a read_committed
    reader may read up to, and what is written."""
    tps = list(partitions)
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        await consumer.start()
        try:
            ends.append(await consumer.end_offsets(tps))
        finally:
            await consumer.stop()
    return {tp: (ends[0][tp], ends[1][tp]) for tp in tps}


class Tail:
    """Every record of `partitions` (read_committed, from the beginning), read in the
    background for as long as the block runs: one consumer however many topics, and it
    rides out a broker restart (aiokafka reconnects)."""

    def __init__(self, bootstrap: str, partitions: Iterable[TopicPartition]) -> None:
        self.bootstrap = bootstrap
        self.partitions = list(partitions)
        self.records: list[Any] = []

    async def __aenter__(self) -> Tail:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await self.consumer.start()
        self.consumer.assign(self.partitions)
        self.reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            for messages in batch.values():
                self.records.extend(messages)

    async def __aexit__(self, *exc: object) -> None:
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.reader
        await self.consumer.stop()

    async def caught_up(self, timeout: float) -> None:
        """Until every record committed when this is called has been read."""
        ends = await self.consumer.end_offsets(self.partitions)  # last stable offsets
        deadline = time.monotonic() + timeout
        while True:
            behind = [tp for tp in self.partitions if await self.consumer.position(tp) < ends[tp]]
            if not behind:
                return
            assert time.monotonic() < deadline, f"not read to the end in {timeout} s: {behind[:3]}"
            await asyncio.sleep(0.1)

    async def held(self) -> list[str]:
        """Partitions whose last stable offset is behind their high watermark (records of
        a transaction still open, or hanging), as `topic[partition] stable/high`."""
        ends = await stable_and_high(self.bootstrap, self.partitions)
        return [
            f"{tp.topic}[{tp.partition}] {stable}/{high}"
            for tp, (stable, high) in ends.items()
            if stable < high
        ]

    async def wait(self, check: Callable[[list[Any]], bool], what: str, timeout: float) -> None:
        """Until `check(records)` holds (or fail, saying `what`)."""
        deadline = time.monotonic() + timeout
        while not check(self.records):
            if self.reader.done():
                self.reader.result()  # the reader's own failure, if any
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
            await asyncio.sleep(0.1)
