"""The broker the benchmark runs against, and the Kafka plumbing it needs.

`ensure_broker` starts or reuses the local broker with deploy/kafka.sh (which
honours KAFKA_PORT), unless an address was given. Topics are created in a
fresh namespace per run; producing uses batches built directly (the fastest
path aiokafka has), so pre-producing a large workload takes seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

REPO_ROOT = Path(__file__).resolve().parents[1]
CREATE_CHUNK = 500  # topics per CreateTopics request
CREATE_IN_FLIGHT = 2  # CreateTopics requests at once
PARTITION_CREATE_S = 0.1  # the wait allowed per partition created (the broker takes 10-40 ms)
KAFKA_SH = REPO_ROOT / "deploy" / "kafka.sh"


@dataclass
class Broker:
    bootstrap: str
    started_here: bool  # this run started it (and stops it unless told to keep it)
    version: str


def _kafka_sh(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KAFKA_SH), command],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def ensure_broker(bootstrap: str | None) -> Broker:
    """The broker at `bootstrap`, or the local one deploy/kafka.sh starts or reuses."""
    if bootstrap:
        return Broker(bootstrap, False, broker_version(bootstrap))
    running = _kafka_sh("status", timeout=60).returncode == 0
    result = _kafka_sh("start", timeout=300)
    if result.returncode != 0:
        raise SystemExit(
            f"bench: deploy/kafka.sh start failed (exit {result.returncode}):\n"
            f"{result.stderr}\n{result.stdout}"
        )
    lines = result.stdout.strip().splitlines()
    address = lines[-1].strip() if lines else ""
    if not re.fullmatch(r"[\w.-]+:\d+", address):
        raise SystemExit(f"bench: deploy/kafka.sh start printed {result.stdout!r}")
    return Broker(address, not running, broker_version(address))


def stop_broker() -> None:
    _kafka_sh("stop", timeout=120)


def broker_version(bootstrap: str) -> str:
    """The version in the broker's own log when deploy/kafka.sh runs it on that port."""
    port = bootstrap.rsplit(":", 1)[-1]
    state = Path(os.environ.get("KAFKA_STATE_DIR") or REPO_ROOT / ".kafka" / port)
    log = state / "logs" / "server.log"
    try:
        with log.open(errors="replace") as f:
            for line in f:
                found = re.search(r"Kafka version: (\S+)", line)
                if found:
                    return found.group(1)
    except OSError:
        pass
    configured = os.environ.get("KAFKA_VERSION")
    if configured:
        return f"{configured} (KAFKA_VERSION)"
    return "unknown"


def namespace(prefix: str = "bench") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class Admin:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)

    async def __aenter__(self) -> Admin:
        await self.client.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()

    async def create(self, topics: dict[str, tuple[int, dict[str, str]]]) -> None:
        """Create topics (name -> (partitions, configs)) and wait until all are led.

        Any number at once: CreateTopics requests of up to `CREATE_CHUNK` topics, a
        few in flight, then one wait for all of them. The broker creates each
        partition's log one after another (10-20 ms each here), so the wait allows
        for that per partition rather than a fixed time.
        """
        names = list(topics)
        chunks = [names[n : n + CREATE_CHUNK] for n in range(0, len(names), CREATE_CHUNK)]
        in_flight = asyncio.Semaphore(CREATE_IN_FLIGHT)

        async def create_chunk(chunk: list[str]) -> None:
            new = [NewTopic(n, topics[n][0], 1, topic_configs=dict(topics[n][1])) for n in chunk]
            async with in_flight:
                try:
                    response = await self.client.create_topics(new, timeout_ms=120_000)
                except TopicAlreadyExistsError:
                    return
            for error in response.topic_errors:
                if error[1] not in (0, 36):  # 36: already exists
                    raise RuntimeError(f"creating topic {error[0]!r} failed: {error}")

        await asyncio.gather(*(create_chunk(c) for c in chunks))
        partitions = sum(count for count, _ in topics.values())
        deadline = time.monotonic() + 30 + PARTITION_CREATE_S * partitions
        await self._wait_led(topics, deadline)
        # The controller names a leader before the broker has created the log; a
        # produce in between fails with NotEnoughReplicas and is retried after a
        # backoff. Wait until the broker answers ListOffsets for every partition.
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, request_timeout_ms=120_000)
        await consumer.start()
        try:
            # Every topic known to the client first: aiokafka's end_offsets would
            # otherwise learn an unknown topic per try, one metadata round trip and a
            # backoff each (20 s for 200 new topics).
            await consumer._client.set_topics(names)
            tps = [TopicPartition(n, p) for n, (count, _) in topics.items() for p in range(count)]
            await asyncio.wait_for(
                consumer.end_offsets(tps), timeout=max(1.0, deadline - time.monotonic())
            )
        finally:
            await consumer.stop()
        while True:
            described = await self.client.describe_topics(names)
            in_sync = {t["topic"] for t in described if all(p.get("isr") for p in t["partitions"])}
            if in_sync == set(names):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics not in sync: {sorted(set(names) - in_sync)[:10]}")
            await asyncio.sleep(0.2)

    async def _wait_led(
        self, topics: dict[str, tuple[int, dict[str, str]]], deadline: float
    ) -> None:
        names = list(topics)
        while True:
            described = await self.client.describe_topics(names)
            ready = {
                t["topic"]
                for t in described
                if t["error_code"] == 0
                and len(t["partitions"]) == topics[t["topic"]][0]
                and all(p["leader"] >= 0 for p in t["partitions"])
            }
            if ready == set(names):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics not ready: {sorted(set(names) - ready)[:10]}")
            await asyncio.sleep(0.2)

    async def delete_namespace(self, prefix: str) -> None:
        """Delete every topic whose name starts with `prefix` (the run's own topics)."""
        topics = [t for t in await self.client.list_topics() if t.startswith(prefix)]
        for start in range(0, len(topics), 50):
            try:
                await self.client.delete_topics(topics[start : start + 50], timeout_ms=30000)
            except Exception:  # best effort: a leftover topic only costs disk
                pass

    async def delete_containing(self, text: str) -> None:
        """Delete every topic whose name contains `text` (a library's own topics)."""
        topics = [t for t in await self.client.list_topics() if text in t]
        if topics:
            try:
                await self.client.delete_topics(topics, timeout_ms=30000)
            except Exception:  # best effort: a leftover topic only costs disk
                pass

    async def committed(self, group: str) -> dict[TopicPartition, int]:
        offsets = await self.client.list_consumer_group_offsets(group)
        return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}


@contextlib.asynccontextmanager
async def reading_from_start(
    bootstrap: str, topic: str, partitions: int, max_poll_records: int
) -> AsyncIterator[AIOKafkaConsumer]:
    """A bare read_committed consumer of every partition of `topic`, from its first record
    (the baselines the gateway's figures are compared with)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_poll_records=max_poll_records,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        yield consumer
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return await consumer.end_offsets(tps)
    finally:
        await consumer.stop()


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes | None]]
    | Iterable[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]],
) -> int:
    """Produce (partition, key, value[, headers]) records in order, in large batches.

    Returns the count.
    """
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        max_batch_size=512 * 1024,
        max_request_size=8 * 1024 * 1024,
        linger_ms=5,
    )
    await producer.start()
    count = 0
    batches: dict[int, Any] = {}
    inflight: list[asyncio.Future[Any]] = []
    try:
        for record in records:
            partition, key, value = record[0], record[1], record[2]
            headers = record[3] if len(record) > 3 else []  # type: ignore[misc]
            batch = batches.get(partition)
            if batch is None:
                batch = batches[partition] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                inflight.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None, headers=headers)
                if len(inflight) >= 32:
                    await asyncio.gather(*inflight)
                    inflight.clear()
            count += 1
        for partition, batch in batches.items():
            if batch.record_count():
                inflight.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*inflight)
    finally:
        await producer.stop()
    return count


async def produce_transactional(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int, bytes, bytes | None, list[tuple[str, bytes]]]],
    per_transaction: int,
) -> int:
    """Produce records in transactions of `per_transaction`, as the gateway's rounds do."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"bench-{uuid.uuid4().hex}",
        enable_idempotence=True,
        max_batch_size=256 * 1024,
        linger_ms=5,
    )
    await producer.start()
    count = 0
    try:
        pending: list[tuple[int, bytes, bytes | None, list[tuple[str, bytes]]]] = []

        async def flush() -> None:
            await producer.begin_transaction()
            for partition, key, value, headers in pending:
                await producer.send(
                    topic, value=value, key=key, partition=partition, headers=headers
                )
            await producer.commit_transaction()
            pending.clear()

        for record in records:
            pending.append(record)
            count += 1
            if len(pending) >= per_transaction:
                await flush()
        if pending:
            await flush()
    finally:
        await producer.stop()
    return count
