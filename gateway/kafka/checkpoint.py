"""The checkpoint: commit a round in one transaction, detect fencing, rewind.

A round's records (outputs, then changelog records) and the offsets it consumed
up to go into one transaction: its outputs and offsets become visible together
or not at all. Every send's result is checked before the commit (a record the
producer gave up on would otherwise be lost behind the committed offsets).

Today's strategy holds one transactional producer per pair, its transactional
id derived from group, agent and partition: a zombie holding the same pair is
fenced when the new owner initialises it. `commit` takes a list of rounds so a
strategy with one producer per instance (KIP-447: the group's generation fences
zombies) can write many pairs' rounds in one transaction behind the same call.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from gateway.codec.records import OutRecord
from gateway.kafka import clients, groupfence, hanging
from gateway.kafka.round import Round
from gateway.observe.metrics import Metrics
from gateway.settings import Settings

log = logging.getLogger("gateway.checkpoint")

PairKey = tuple[str, int]
WRITTEN_TOPICS_METADATA_S = 5.0  # a metadata update before writing a topic new to a producer
OFFSET_VISIBILITY_TRIES = 50  # OffsetFetch asked again while it lags our own commit
# A transactional producer's batch per partition. aiokafka keeps one produce request in
# flight per broker and sends a partition's next batch only after the previous one left,
# so with its default (16 KiB) a round's records for one partition (every reply goes to
# one reply topic) took one round trip per 16 KiB: a large round after a disturbance
# committed in seconds, and the next round grew larger still. Under the broker's default
# max.message.bytes (1 MiB) with room for one more record of up to MAX_RECORD_BYTES,
# which a batch always takes first and alone when it would not fit.
PRODUCER_BATCH_BYTES = 512 * 1024


class Outcome(enum.Enum):
    COMMITTED = "committed"
    FENCED = "fenced"  # another instance owns the pair now
    FAILED = "failed"  # aborted: rewind to the last commit and prepare a fresh producer


@dataclass(frozen=True, slots=True)
class Work:
    """One pair's round to commit, with the offsets it consumed up to."""

    key: PairKey
    round: Round
    offsets: dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    error: BaseException | None = None


class Strategy(Protocol):
    """What the assignment asks of a checkpoint, whichever producers it holds."""

    def holds(self, key: PairKey) -> bool: ...
    def producer(self, key: PairKey) -> AIOKafkaProducer | None: ...
    async def open(self, key: PairKey) -> None: ...
    async def close(self, key: PairKey) -> None: ...
    def detach(self, key: PairKey) -> AIOKafkaProducer | None: ...
    async def close_all(self) -> None: ...
    async def commit(self, works: Iterable[Work]) -> list[Result]: ...
    async def committed_offsets(
        self,
        tps: list[TopicPartition],
        ours: dict[TopicPartition, int],
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, int | None]: ...
    async def sweep(
        self,
        key: PairKey,
        partitions: list[TopicPartition],
        offsets: dict[TopicPartition, int],
    ) -> list[TopicPartition] | None: ...
    async def rewind(
        self, tps: Iterable[TopicPartition], ours: dict[TopicPartition, int]
    ) -> None: ...


async def stop_producer(producer: AIOKafkaProducer | None) -> None:
    if producer is not None:
        with contextlib.suppress(Exception):
            await producer.stop()


async def start_transactional(
    settings: Settings, client_id: str, transactional_id: str
) -> AIOKafkaProducer:
    """A started transactional producer for the loop: starting it initialises the
    transactional id, which fences a zombie holding it and aborts its open transaction."""
    producer = clients.producer(
        settings,
        client_id=client_id,
        transactional_id=transactional_id,
        enable_idempotence=True,
        transaction_timeout_ms=settings.transaction_timeout_ms,
        linger_ms=2,
        max_batch_size=PRODUCER_BATCH_BYTES,
        # Brokers that verify transactional partitions (KIP-890) answer the first
        # write of a transaction from aiokafka's older produce version with a
        # retriable NOT_ENOUGH_REPLICAS; retry soon rather than after 100 ms.
        retry_backoff_ms=10,
    )
    try:
        await producer.start()
    except BaseException:
        # a failed or cancelled start has already opened connections
        with contextlib.suppress(Exception):
            await producer.stop()
        raise
    return producer


class Checkpoint:
    def __init__(self, settings: Settings, metrics: Metrics, consumer: AIOKafkaConsumer) -> None:
        self.settings = settings
        self.metrics = metrics
        self.consumer = consumer
        self._producers: dict[PairKey, AIOKafkaProducer] = {}

    # --- producers --------------------------------------------------------------------

    def holds(self, key: PairKey) -> bool:
        return key in self._producers

    def producer(self, key: PairKey) -> AIOKafkaProducer | None:
        return self._producers.get(key)

    async def open(self, key: PairKey) -> None:
        """Start the pair's transactional producer (if it has none): fences any zombie."""
        if key in self._producers:
            return
        agent, partition = key
        s = self.settings
        self._producers[key] = await start_transactional(
            s, f"{s.client_id}-{agent}-{partition}", f"{s.group_id}.{agent}.{partition}"
        )

    async def close(self, key: PairKey) -> None:
        producer = self._producers.pop(key, None)
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()

    def detach(self, key: PairKey) -> AIOKafkaProducer | None:
        """Take the pair's producer away (to be closed later, once no commit runs)."""
        return self._producers.pop(key, None)

    @staticmethod
    async def stop(producer: AIOKafkaProducer | None) -> None:
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()

    async def close_all(self) -> None:
        for key in list(self._producers):
            await self.close(key)

    # --- committing ---------------------------------------------------------------------

    async def commit(self, works: Iterable[Work]) -> list[Result]:
        """Commit each pair's round in its own transaction, all at once; a result each."""
        works = list(works)
        return list(await asyncio.gather(*(self._commit_one(w) for w in works)))

    async def _commit_one(self, work: Work) -> Result:
        producer = self._producers.get(work.key)
        if producer is None:
            return Result(Outcome.FAILED, RuntimeError("no producer"))
        try:
            # Building the records is inside: a defect there aborts this pair's round
            # (it is read again from the last commit), it never escapes the loop.
            records = work.round.records()
            delivered = await begin_and_send(producer, records)
            if work.offsets:
                await producer.send_offsets_to_transaction(work.offsets, self.settings.group_id)
            # A record the producer gave up on does not fail the transaction by itself:
            # committed, it would be lost behind the committed offsets. Aborted instead.
            await asyncio.gather(*delivered)
            await producer.commit_transaction()
        except Exception as exc:
            agent, partition = work.key
            if fenced_producer(producer, exc):
                self.metrics.transactions.labels("fenced").inc()
                log.error(
                    "producer fenced: another instance owns this pair now",
                    extra={"agent": agent, "partition": partition},
                )
                return Result(Outcome.FENCED, exc)
            self.metrics.transactions.labels("aborted").inc()
            log.error(
                "transaction failed; rewinding to the last commit",
                extra={"agent": agent, "partition": partition, "error": repr(exc)},
            )
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            return Result(Outcome.FAILED, exc)
        self.metrics.transactions.labels("committed").inc()
        return Result(Outcome.COMMITTED)

    # --- offsets --------------------------------------------------------------------------

    async def committed_offsets(
        self,
        tps: list[TopicPartition],
        ours: dict[TopicPartition, int],
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, int | None]:
        """The group's stable committed offsets, waiting out our own commit's visibility.

        Stable (OffsetFetch `require_stable`, KIP-447): offsets that a transaction still
        being completed will commit are waited for, never read as they were before it.
        The pair's producer was opened before (fencing the previous owner's producer),
        but the broker completes that producer's last transaction asynchronously: after
        a broker restart, a plain fetch could return the offsets from before it and the
        pair would decide its records a second time. Raises `OffsetsUnstable` after
        `timeout_s` (by default longer than a transaction may stay open).
        """
        return await group_committed_offsets(self.settings, self.consumer, tps, ours, timeout_s)

    async def sweep(
        self,
        key: PairKey,
        partitions: list[TopicPartition],
        offsets: dict[TopicPartition, int],
    ) -> list[TopicPartition] | None:
        """Abort what a hanging transaction of the pair's own transactional id left
        (see `hanging`); the partitions swept, None without a producer."""
        producer = self._producers.get(key)
        if producer is None:
            return None
        return await hanging.sweep(producer, partitions, offsets, self.settings.group_id)

    async def rewind(self, tps: Iterable[TopicPartition], ours: dict[TopicPartition, int]) -> None:
        await rewind(self.consumer, tps, ours)


Fetch = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, int | None]]]


async def stable_offsets(
    fetch: Fetch, tps: list[TopicPartition], ours: dict[TopicPartition, int]
) -> dict[TopicPartition, int | None]:
    """Committed offsets, waiting out our own commit's visibility.

    A transactional offset commit becomes visible to OffsetFetch a little after
    the commit returns. Offsets only move forward, so a value behind what this
    instance itself committed (`ours`) is such a stale read: ask again (bounded).
    """
    committed: dict[TopicPartition, int | None] = {}
    for _ in range(OFFSET_VISIBILITY_TRIES):
        committed = await fetch(tps)
        stale = any(
            (committed.get(tp) or 0) < offset for tp, offset in ours.items() if tp in committed
        )
        if not stale:
            return committed
        await asyncio.sleep(0.1)
    return committed


async def group_committed_offsets(
    settings: Settings,
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    ours: dict[TopicPartition, int],
    timeout_s: float | None = None,
) -> dict[TopicPartition, int | None]:
    """The group's stable committed offsets (`groupfence.fetch_committed_offsets`), waiting
    out our own commit's visibility (`stable_offsets`).

    The fetch waits `timeout_s`, by default a transaction timeout and a margin: by then
    the broker has aborted any transaction it knows still holding these offsets (one
    it does not know of hangs: see `hanging`). Raises `OffsetsUnstable` after it.
    """
    timeout_s = timeout_s or settings.transaction_timeout_ms / 1000 + 30

    async def fetch(tp_list: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        return await groupfence.fetch_committed_offsets(consumer, tp_list, timeout_s=timeout_s)

    return await stable_offsets(fetch, tps, ours)


async def rewind(
    consumer: AIOKafkaConsumer, tps: Iterable[TopicPartition], ours: dict[TopicPartition, int]
) -> None:
    """Seek each still-assigned partition back to the last committed offset (`ours`:
    what this instance knows it committed)."""
    assignment = consumer.assignment()
    for tp in tps:
        if tp not in assignment:
            continue  # revoked meanwhile: its next owner starts at the committed offset
        offset = ours.get(tp)
        if offset is None:
            offset = await consumer.committed(tp)
        if offset is not None:
            consumer.seek(tp, offset)
        else:
            await consumer.seek_to_beginning(tp)


async def begin_and_send(
    producer: AIOKafkaProducer, records: list[OutRecord]
) -> list[asyncio.Future[object]]:
    """Begin a transaction and send `records` in it, every topic tracked first; the
    delivery futures, each to be checked before the commit."""
    await producer.begin_transaction()
    await track_topics(producer, {r.topic for r in records})
    return await send_batched(producer, records)


async def send_batched(
    producer: AIOKafkaProducer, records: list[OutRecord]
) -> list[asyncio.Future[object]]:
    """Send `records` in the open transaction, one batch per partition built directly
    (`create_batch`, `send_batch`): a `send` per record waited on metadata, ran the
    partitioner and made a future for each (a tenth of the gateway's time at 1,000
    requests/s). Each partition's records keep their order; a full batch is sent and
    the next begun. The delivery futures, one per batch, each to be checked before
    the commit. Records without a partition go where `send` would put them (the
    producer's partitioner: by key)."""
    # aiokafka internals, as `send` uses them: the topic's metadata, then the partitioner
    # over the topic's partitions (listed once per topic here, not once per record)
    partitions: dict[str, tuple[list[int], list[int]]] = {}
    for topic in {r.topic for r in records}:
        await producer.client._wait_on_metadata(topic)
        metadata = producer._metadata
        partitions[topic] = (
            list(metadata.partitions_for_topic(topic)),
            list(metadata.available_partitions_for_topic(topic)),
        )
    partitioner = producer._partitioner
    filling: dict[tuple[str, int], Any] = {}
    delivered: list[asyncio.Future[object]] = []
    for r in records:
        partition = r.partition
        if partition is None:
            every, available = partitions[r.topic]
            partition = every[0] if len(every) == 1 else partitioner(r.key, every, available)
        batch = filling.get((r.topic, partition))
        if batch is None:
            batch = filling[(r.topic, partition)] = producer.create_batch()
        if batch.append(timestamp=None, key=r.key, value=r.value, headers=r.headers) is None:
            # full: send it, and begin the next (a batch's first record always fits)
            delivered.append(await producer.send_batch(batch, r.topic, partition=partition))
            batch = filling[(r.topic, partition)] = producer.create_batch()
            if batch.append(timestamp=None, key=r.key, value=r.value, headers=r.headers) is None:
                raise RuntimeError("a record does not fit an empty batch")
    for (topic, partition), batch in filling.items():
        delivered.append(await producer.send_batch(batch, topic, partition=partition))
    return delivered


async def track_topics(producer: AIOKafkaProducer, topics: set[str]) -> None:
    """Have the producer's metadata track every topic it is about to write.

    A producer fetches metadata for all topics until its first write to a topic it
    does not know yet (typically a reply topic created after it started); from then
    on it asks only for the topics it tracks. A topic it had written while knowing
    it from the first fetch is untracked, vanishes from its metadata, and a batch
    still waiting for it (its partition being added to the transaction, or a retry)
    finds no leader until it expires after `request_timeout_ms` (40 s): the commit,
    and the pair, hang that long. Tracking every written topic before the first
    write, and waiting for a metadata update that covers them, avoids it.
    """
    client = producer.client
    added = [client.add_topic(topic) for topic in sorted(topics)]
    if all(f.done() for f in added):
        return  # all tracked already: the usual case, no round trip
    try:
        async with asyncio.timeout(WRITTEN_TOPICS_METADATA_S):
            await asyncio.gather(*added)
            # an update that was already under way when the topics were added
            # may not cover them: one more, asked for after adding them
            await client.force_metadata_update()
    except (KafkaError, TimeoutError) as exc:
        # not fatal: the sends wait for the metadata they need themselves
        log.warning("metadata update for written topics failed", extra={"error": repr(exc)})


def fenced_producer(producer: AIOKafkaProducer, exc: Exception) -> bool:
    """Whether a failed transaction means another producer took over the transactional id.

    A fence met by the producer's background sender puts it in a fatal state; the
    next call then fails on that state (an AssertionError), not with ProducerFenced.
    """
    if isinstance(exc, ProducerFenced):
        return True
    txn = getattr(producer, "_txn_manager", None)
    if txn is None or not txn.is_fatal_error():
        return False
    cause = txn.wait_for_transaction_end()
    return bool(
        cause.done() and not cause.cancelled() and isinstance(cause.exception(), ProducerFenced)
    )
