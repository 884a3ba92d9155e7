"""Running `agui-gateway bridge` as a subprocess, and reading topics as they fill."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.support import (
    GATEWAY_BIN,
    REPO_ROOT,
    GatewayProcess,
    Namespace,
    started,
)


def bridge_settings(
    ns: Namespace, agents: dict[str, dict[str, Any]], **more: Any
) -> dict[str, Any]:
    return {
        "bridge_agents": orjson.dumps(agents).decode(),
        "bridge_group_id": f"{ns.prefix}-bridge",
        "bridge_runs_topic": f"{ns.prefix}.{{agent}}.bridge-runs",
        **more,
    }


class BridgeProcess(GatewayProcess):
    """One `agui-gateway bridge` subprocess (HTTP on its own port)."""

    async def start(self, ready_timeout: float = 60) -> BridgeProcess:
        env = self.ns.env(bridge_http_port=self.port, **self.settings)
        log = self.log_path.open("ab")
        self.proc = started(
            await asyncio.create_subprocess_exec(
                str(GATEWAY_BIN), "bridge", env=env, stdout=log, stderr=log, cwd=str(REPO_ROOT)
            )
        )
        log.close()
        await self.wait_ready(ready_timeout)
        return self

    async def readiness(self) -> tuple[int, dict[str, Any]]:
        """`/readyz`: its status and its JSON (`assigned`, `restoring`, ...)."""
        status, body = await asyncio.to_thread(self.http, "/readyz")
        return status, orjson.loads(body)


async def wait_balanced(
    bridges: list[BridgeProcess], partitions: int, timeout: float = 60
) -> list[set[int]]:
    """Wait until the bridges share the group's `partitions` run-requests partitions,
    each owning its even share, all of them opened (ready). Returns each one's share."""
    deadline = time.monotonic() + timeout
    last: list[tuple[int, dict[str, Any]]] = []
    while True:
        last = [await bridge.readiness() for bridge in bridges]
        shares = [{int(tp.rsplit("=", 1)[1].rstrip(")")) for tp in r["assigned"]} for _, r in last]
        if (
            all(status == 200 and not r["restoring"] for status, r in last)
            and set().union(*shares) == set(range(partitions))
            and all(len(share) == partitions // len(bridges) for share in shares)
        ):
            return shares
        assert time.monotonic() < deadline, f"the group did not settle: {last}"
        await asyncio.sleep(0.2)


class TopicReader:
    """Reads a topic (read_committed, from the beginning) into `records` as it fills."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.records: list[Any] = []
        self._consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> TopicReader:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await self._consumer.start()
        deadline = time.monotonic() + 10
        partitions = self._consumer.partitions_for_topic(self.topic)
        while not partitions and time.monotonic() < deadline:
            await self._consumer._client.force_metadata_update()
            partitions = self._consumer.partitions_for_topic(self.topic)
        assert partitions, f"topic {self.topic} not found"
        self._consumer.assign([TopicPartition(self.topic, p) for p in partitions])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._consumer is not None
        await self._consumer.stop()

    async def poll(self, seconds: float) -> None:
        assert self._consumer is not None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            batch = await self._consumer.getmany(timeout_ms=100)
            for messages in batch.values():
                self.records.extend(messages)

    async def wait(self, done: Callable[[list[Any]], bool], timeout: float = 30) -> list[Any]:
        assert self._consumer is not None
        deadline = time.monotonic() + timeout
        while not done(self.records):
            assert time.monotonic() < deadline, f"timed out; read {self.events_by_thread()}"
            batch = await self._consumer.getmany(timeout_ms=200)
            for messages in batch.values():
                self.records.extend(messages)
        return self.records

    def events_by_thread(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for record in self.records:
            out.setdefault(record.key.decode(), []).append(orjson.loads(record.value))
        return out

    def thread(self, key: str) -> list[dict[str, Any]]:
        return self.events_by_thread().get(key, [])


def closed_runs(events: list[dict[str, Any]]) -> int:
    return sum(1 for e in events if e.get("type") in ("RUN_FINISHED", "RUN_ERROR"))


def log_dir(tmp_path: Path) -> Path:
    return tmp_path
