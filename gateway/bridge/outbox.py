"""One partition's transactional output: events, its run marker and its offset, together.

Runs hand their events to the outbox, which holds at most `capacity_bytes` of
them (a run waits for room: a slow broker slows the agent's stream through TCP,
never the bridge's memory). A loop writes what is held in one transaction with
the partition's marker record and the consumed offset, group-committing
whatever arrived meanwhile. Once woken it lingers `linger_s`
(`bridge_linger_ms`) first, so what arrives together (a run's last events and
its end, other runs' starts) shares a transaction. The offset is written only
when it moved: a transaction that only starts a run (its marker made durable
before the agent is called) would commit the same offset again, two of its five
round trips to the broker (the marker, not the group's offset, is what a new
owner resumes from; the two stay equal). `commit()` returns once everything
handed in before it, and the ledger's state at that moment, is committed.

A failed transaction fails the outbox for good: the partition is rebuilt from
what Kafka holds (a run it was relaying is then closed as `bridge_restarted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from gateway.bridge.ledger import PartitionLedger, encode_marker
from gateway.bridge.metrics import BridgeMetrics
from gateway.kafka.exactly_once import transaction

log = logging.getLogger("gateway.bridge.outbox")

Record = tuple[bytes, bytes, list[tuple[str, bytes]]]  # key, value, headers


class OutboxFailed(Exception):
    pass


class Outbox:
    def __init__(
        self,
        producer: AIOKafkaProducer,
        ledger: PartitionLedger,
        *,
        tp: TopicPartition,
        events_topic: str,
        runs_topic: str,
        group_id: str,
        capacity_bytes: int,
        metrics: BridgeMetrics,
        linger_s: float = 0.0,
    ) -> None:
        self.producer = producer
        self.ledger = ledger
        self.tp = tp
        self.events_topic = events_topic
        self.runs_topic = runs_topic
        self.group_id = group_id
        self.capacity_bytes = capacity_bytes
        self.linger_s = linger_s
        self._held_bytes = 0
        self.metrics = metrics
        self.failed: BaseException | None = None
        self._held: list[Record] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None
        # the group's offset this outbox last committed: a transaction that leaves it
        # as it was (a run started, none ended) does not commit it again
        self._offset_committed: int | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"outbox-{self.tp}")

    async def emit(self, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        """Hold one event for the next transaction; waits while the outbox is full."""
        while self._held and self._held_bytes + len(value) > self.capacity_bytes:
            self._check()
            self._room.clear()
            await self._room.wait()
        self._check()
        self._held.append((key, value, headers))
        self._held_bytes += len(value)
        self._wake.set()

    async def commit(self) -> None:
        """Wait until what was emitted so far and the ledger's current state are committed."""
        self._check()
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wake.set()
        await waiter

    def _check(self) -> None:
        if self.failed is not None:
            raise OutboxFailed(f"{self.tp}: {self.failed!r}")

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            if self.linger_s > 0:  # what arrives meanwhile shares the transaction
                await asyncio.sleep(self.linger_s)
            self._wake.clear()
            held, self._held = self._held, []
            self._held_bytes = 0
            waiters, self._waiters = self._waiters, []
            self._room.set()
            try:
                await self._transaction(held)
            except asyncio.CancelledError:
                self._fail(waiters, OutboxFailed("stopped"))
                raise
            except Exception as exc:
                log.error(
                    "bridge transaction failed; the partition is rebuilt",
                    extra={"partition": str(self.tp), "error": repr(exc)},
                )
                self.metrics.transactions.labels("failed").inc()
                self._fail(waiters, exc)
                return
            self.metrics.transactions.labels("committed").inc()
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _transaction(self, held: list[Record]) -> None:
        marker = self.ledger.marker()
        await transaction.begin(self.producer)
        try:
            for key, value, headers in held:
                sent = await self.producer.send(self.events_topic, value, key=key, headers=headers)
                transaction.watch_failures([sent])  # read if it fails: never left unread
            sent = await self.producer.send(
                self.runs_topic,
                encode_marker(self.tp.partition, marker),
                key=str(self.tp.partition).encode(),
                partition=self.tp.partition,
            )
            transaction.watch_failures([sent])
            if marker.next != self._offset_committed:
                await self.producer.send_offsets_to_transaction(
                    {self.tp: OffsetAndMetadata(marker.next, "")}, self.group_id
                )
            await self.producer.commit_transaction()
        except BaseException:
            transaction.watch_transaction(self.producer)
            with contextlib.suppress(Exception):
                await asyncio.shield(self.producer.abort_transaction())
            raise
        self._offset_committed = marker.next
        self.ledger.committed(marker.next)

    def _fail(self, waiters: list[asyncio.Future[None]], exc: BaseException) -> None:
        self.failed = exc
        self._room.set()
        for waiter in waiters + self._waiters:
            if not waiter.done():
                waiter.set_exception(OutboxFailed(f"{self.tp}: {exc!r}"))
        self._waiters = []

    async def stop(self) -> None:
        """Stop writing; what was not committed is aborted (read_committed readers never see it)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        self._fail([], self.failed or OutboxFailed("stopped"))
