"""Writing one transaction with a transactional producer: start, send batched, track, fenced?

What a checkpoint does with its producers, whichever it holds (one per pair or
one per instance): start one (which fences a zombie holding its transactional
id), begin a transaction and send a round's records in it batch by batch (the
reaches into aiokafka's producer internals, all here), and tell a fence from
another failure. Committing, and what a failure means for the pairs, are the
checkpoint's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import types
from collections.abc import AsyncIterator, Iterable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.client import CoordinationType
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaError,
    ProducerFenced,
    TopicAuthorizationFailedError,
)
from aiokafka.producer.sender import TxnOffsetCommitHandler

from gateway.codec.records import OutRecord
from gateway.kafka.wire import clients
from gateway.kafka.wire.partitioning import Partitioner
from gateway.settings import Settings

log = logging.getLogger("gateway.checkpoint")

WRITTEN_TOPICS_METADATA_S = 5.0  # a metadata update before writing a topic new to a producer
# A transactional producer's batch per partition. aiokafka keeps one produce request in
# flight per broker and sends a partition's next batch only after the previous one left,
# so with its default (16 KiB) a round's records for one partition (every reply goes to
# one reply topic) took one round trip per 16 KiB: a large round after a disturbance
# committed in seconds, and the next round grew larger still. Under the broker's default
# max.message.bytes (1 MiB) with room for one more record of up to MAX_RECORD_BYTES,
# which a batch always takes first and alone when it would not fit.
PRODUCER_BATCH_BYTES = 512 * 1024


# How long an abort or a stop after a failed transaction may take: a producer whose
# commit never ended may never answer these either.
GIVE_UP_S = 5.0
# Past the broker's own timeout a transaction not yet committed has been aborted by
# the broker: waiting longer than this margin beyond it cannot help.
DEADLINE_MARGIN_S = 10.0


class TransactionStuck(Exception):
    """A transaction that did not end within its deadline (see `deadline_s`)."""


def deadline_s(settings: Settings) -> float:
    """How long one transaction's work (begin, send, offsets, commit) may take.

    aiokafka can wait for ever in `commit_transaction` when its broker died and came
    back (the `EndTxn` is never sent); one such commit held a pair, and with one
    producer per instance every pair, for good. Past `transaction_timeout_ms` the
    broker has aborted a transaction it was not asked to commit, so the deadline is
    that timeout plus a margin; a transaction past it fails like any other (its
    rounds are rewound to the last commit and read again), whether or not it
    committed in the end: the stable offset fetch that follows tells which."""
    return settings.transaction_timeout_ms / 1000 + DEADLINE_MARGIN_S


@contextlib.asynccontextmanager
async def bounded(settings: Settings) -> AsyncIterator[None]:
    """Run one transaction's work within `deadline_s`; `TransactionStuck` past it."""
    limit = deadline_s(settings)
    try:
        async with asyncio.timeout(limit) as scope:
            yield
    except TimeoutError:
        if not scope.expired():
            raise
        raise TransactionStuck(
            f"the transaction did not end within {limit:g} s (transaction_timeout_ms plus a margin)"
        ) from None


def read_failure(future: asyncio.Future[Any]) -> None:
    """Mark a failed future's exception as read (a done callback): whoever awaits the
    future still gets it raised."""
    if not future.cancelled():
        future.exception()


def watch_failures(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Read each future's exception once it fails, so that one nobody awaits any more
    (the transaction failed earlier, at its offsets) is not logged by asyncio as
    "Future exception was never retrieved": the transaction's failure is logged once,
    where it is handled."""
    for future in futures:
        future.add_done_callback(read_failure)


def watch_transaction(producer: AIOKafkaProducer) -> None:
    """Read the error aiokafka keeps for the producer's current transaction.

    A transaction that fails (a refused AddPartitionsToTxn or TxnOffsetCommit, a
    missing ACL) has its error set on the call that failed, which raises it, and on
    the transaction manager's waiter too; the abort that follows replaces that waiter
    unread, and asyncio then logs the error's traceback as "Future exception was never
    retrieved". Called once a transaction begins, and before an abort or a stop (a
    fatal error may have set a fresh waiter)."""
    manager = getattr(producer, "_txn_manager", None)  # reach: the waiter is aiokafka's own
    waiter = getattr(manager, "_transaction_waiter", None)
    if waiter is not None:
        waiter.add_done_callback(read_failure)


async def begin(producer: AIOKafkaProducer) -> None:
    """Begin a transaction whose error, if it fails, is read where it is raised only."""
    await producer.begin_transaction()
    watch_transaction(producer)


async def abort_quietly(producer: AIOKafkaProducer) -> None:
    """Abort the open transaction after a failure, for at most `GIVE_UP_S`."""
    watch_transaction(producer)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(GIVE_UP_S):
            await producer.abort_transaction()


async def stop_producer(producer: AIOKafkaProducer | None) -> None:
    """Stop a producer, for at most `GIVE_UP_S` (its connections are then left to close
    with the process: a producer stuck in a transaction may not stop at all)."""
    if producer is not None:
        watch_transaction(producer)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(GIVE_UP_S):
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
    install_offset_refusals(producer)
    try:
        await producer.start()
    except BaseException:
        # a failed or cancelled start has already opened connections
        with contextlib.suppress(Exception):
            await producer.stop()
        raise
    return producer


def topic_refused(topics: Iterable[str]) -> TopicAuthorizationFailedError:
    """The refusal of committing offsets of `topics` in a transaction: TxnOffsetCommit
    needs Read on each topic."""
    exc = TopicAuthorizationFailedError(",".join(sorted(set(topics))))
    exc.operation = "Read"  # type: ignore[attr-defined]  # read by clients.describe_denial
    return exc


class _OffsetCommitHandler(TxnOffsetCommitHandler):  # type: ignore[misc]
    """aiokafka's TxnOffsetCommit handler, except for a topic Kafka refuses (no Read on
    it, revoked while the gateway runs): aiokafka raises that in its sender routine,
    which ends the producer ("Unexpected error in sender routine", then every call
    fails with "Unexpected error during batch delivery"). Here it fails the
    transaction, to be aborted, as aiokafka does for a refused group."""

    def handle_response(self, resp: Any) -> float | None:
        refused = [
            topic
            for topic, partitions in resp.errors
            for _, code in partitions
            if code == TopicAuthorizationFailedError.errno
        ]
        if refused:
            self._sender._txn_manager.error_transaction(topic_refused(refused))
            return None
        result: float | None = super().handle_response(resp)
        return result


def install_offset_refusals(producer: AIOKafkaProducer) -> None:
    """Have the producer's sender commit transactional offsets with `_OffsetCommitHandler`
    (reach: aiokafka's sender builds its handler inside this method). With
    producer_scope=instance, `groupfence` installs its own, which does the same."""
    sender = getattr(producer, "_sender", None)
    if sender is None:  # not aiokafka's producer
        return

    async def do_txn_offset_commit(self: Any, offsets: Any, group_id: str) -> None:
        if not offsets:
            return
        try:
            node_id = await self._find_coordinator(CoordinationType.GROUP, group_id)
        except GroupAuthorizationFailedError:
            # aiokafka's look-up names no group: the refusal names it
            self._txn_manager.error_transaction(GroupAuthorizationFailedError(group_id))
            return
        await _OffsetCommitHandler(self, offsets, group_id).do(node_id)

    sender._do_txn_offset_commit = types.MethodType(do_txn_offset_commit, sender)


async def begin_and_send(
    producer: AIOKafkaProducer, records: list[OutRecord]
) -> list[asyncio.Future[object]]:
    """Begin a transaction and send `records` in it, every topic tracked first; the
    delivery futures, each to be checked before the commit."""
    await begin(producer)
    await track_topics(producer, {r.topic for r in records})
    delivered = await send_batched(producer, records)
    watch_failures(delivered)
    return delivered


async def send_batched(
    producer: AIOKafkaProducer, records: list[OutRecord]
) -> list[asyncio.Future[object]]:
    """Send `records` in the open transaction, one batch per partition built directly
    (`create_batch`, `send_batch`): a `send` per record waited on metadata, ran the
    partitioner and made a future for each (a tenth of the gateway's time at 1,000
    requests/s). Each partition's records keep their order; a full batch is sent and
    the next begun. The delivery futures, one per batch, each to be checked before
    the commit. Records without a partition go where `send` would put them (the
    default partitioner's choice: by key, each key hashed once per call, see
    `gateway.kafka.wire.partitioning`)."""
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
    partitioner = Partitioner()  # the producer's default one, each key hashed once
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

    The wait is only for a topic the producer's metadata does not show yet. One it
    shows (from its first fetch, of every topic) is tracked now and the update that
    asks for it runs in the background; should that update narrow the metadata
    before covering it, the sender finds no leader for the batch and asks for the
    next update, which covers it. Waiting held each transaction of a fleet's first
    minutes (each writing some agent's topics for the first time) for a metadata
    round trip over every topic tracked.
    """
    client = producer.client
    added = [client.add_topic(topic) for topic in sorted(topics)]
    if all(f.done() for f in added):
        return  # all tracked already: the usual case, no round trip
    if all(client.cluster.partitions_for_topic(topic) for topic in topics):
        return  # shown, and tracked from now on
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
