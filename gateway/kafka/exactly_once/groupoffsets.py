"""The group's committed offsets: read stable, waited for past our own commit, rewound to.

The read side of exactly-once (the argument is in groupfence.py): a pair's new
owner starts from offsets no pending transaction may still commit. OffsetFetch
v7 with `require_stable` (`fetch_committed_offsets`) is retried while a
transaction holds them; `stable_offsets` waits out our own commit's visibility;
`rewind` seeks a pair's partitions back to its last commit after a failure.
Reaches into aiokafka internals: the consumer's group coordinator and client,
and the versions a connection negotiated (groupfence.py's reaches 4 and 5).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.client import ConnectionGroup, CoordinationType

from gateway.kafka.wire.fencewire import OffsetFetchStableRequest, prepare
from gateway.settings import Settings

log = logging.getLogger(
    "gateway.kafka.exactly_once.groupfence"
)  # the fence's read side, logged as such

RETRY_BACKOFF_S = 0.1
OFFSET_VISIBILITY_TRIES = 50  # OffsetFetch asked again while it lags our own commit
UNSTABLE_OFFSET_COMMIT = 88
# Retried with a new coordinator lookup / after a backoff.
COORDINATOR_MOVED = {14, 15, 16}  # load in progress, not available, not coordinator


class OffsetsUnstable(TimeoutError):
    """A pending transaction still holds the group's offsets after the timeout."""


def group_coordinator(consumer: AIOKafkaConsumer) -> Any:
    """The consumer's group coordinator (reach 4); a consumer without a group has none."""
    coordinator = consumer._coordinator
    if coordinator is None or not getattr(coordinator, "group_id", None):
        raise ValueError("the consumer has no group (group_id is not set)")
    return coordinator


async def fetch_committed_offsets(
    consumer: AIOKafkaConsumer,
    partitions: Iterable[TopicPartition],
    *,
    timeout_s: float,
) -> dict[TopicPartition, int | None]:
    """The group's committed offsets, stable: never ones a pending transaction may commit.

    Sends OffsetFetch v7 with `require_stable` to the group coordinator and retries
    while the broker answers `UNSTABLE_OFFSET_COMMIT` (a transaction holding offsets
    for these partitions is still open) or the coordinator moves. None means no
    offset is committed. Raises `OffsetsUnstable` after `timeout_s` (make it longer
    than the producers' transaction timeout, after which the broker aborts).
    """
    coordinator = group_coordinator(consumer)
    group_id: str = coordinator.group_id
    client = consumer._client  # reach 4
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        answer = await _fetch_once(client, group_id, wanted)
        if isinstance(answer, dict):
            return answer
        last = answer
        log.debug("committed offsets of group %r not stable yet: %s", group_id, answer)
        if time.monotonic() >= deadline:
            raise OffsetsUnstable(
                f"committed offsets of group {group_id!r} not stable after {timeout_s} s ({last})"
            )
        await asyncio.sleep(RETRY_BACKOFF_S)


async def _fetch_once(
    client: Any, group_id: str, wanted: list[TopicPartition]
) -> dict[TopicPartition, int | None] | str:
    """The offsets, or why to retry (a short text)."""
    try:
        node_id = await client.coordinator_lookup(CoordinationType.GROUP, group_id)
        if not await client.ready(node_id, group=ConnectionGroup.COORDINATION):
            return "group coordinator not ready"
        conn = await client._get_conn(node_id, group=ConnectionGroup.COORDINATION)
        versions = conn._versions if conn is not None else {}
        request = OffsetFetchStableRequest(group_id, wanted)
        prepare(request, versions)  # a clear error if the broker lacks v7
        response = await client.send(node_id, request, group=ConnectionGroup.COORDINATION)
    except (
        kafka_errors.CoordinatorNotAvailableError,
        kafka_errors.NotCoordinatorError,
        kafka_errors.CoordinatorLoadInProgressError,
        kafka_errors.NodeNotReadyError,
        kafka_errors.RequestTimedOutError,
        kafka_errors.KafkaConnectionError,
    ) as exc:
        return type(exc).__name__
    except kafka_errors.GroupAuthorizationFailedError:
        # aiokafka's look-up names no group: the refusal names it (see describe_denial)
        raise kafka_errors.GroupAuthorizationFailedError(group_id) from None
    top = response.error_code
    if top in COORDINATOR_MOVED:
        return kafka_errors.for_code(top).__name__
    if top != 0:
        raise _error(top, group_id, f"OffsetFetch for group {group_id!r}")
    offsets: dict[TopicPartition, int | None] = {}
    for topic, parts, _ in response.topics:
        for partition, offset, _epoch, _metadata, error_code, _ in parts:
            tp = TopicPartition(topic, partition)
            if error_code == UNSTABLE_OFFSET_COMMIT:
                return f"UNSTABLE_OFFSET_COMMIT on {tp.topic}[{tp.partition}]"
            if error_code in COORDINATOR_MOVED:
                return kafka_errors.for_code(error_code).__name__
            if error_code != 0:
                raise _error(error_code, group_id, f"OffsetFetch {tp} of group {group_id!r}")
            offsets[tp] = offset if offset >= 0 else None
    return {tp: offsets.get(tp) for tp in wanted}


def _error(code: int, group_id: str, what: str) -> Exception:
    """The error of `code`; a refused group's names the group alone, as aiokafka's do."""
    error = kafka_errors.for_code(code)
    if error is kafka_errors.GroupAuthorizationFailedError:
        return error(group_id)
    return error(what)


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
    """The group's stable committed offsets (`fetch_committed_offsets`), waiting
    out our own commit's visibility (`stable_offsets`).

    The fetch waits `timeout_s`, by default a transaction timeout and a margin: by then
    the broker has aborted any transaction it knows still holding these offsets (one
    it does not know of hangs: see `hanging`). Raises `OffsetsUnstable` after it.
    """
    timeout_s = timeout_s or settings.transaction_timeout_ms / 1000 + 30

    async def fetch(tp_list: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        return await fetch_committed_offsets(consumer, tp_list, timeout_s=timeout_s)

    return await stable_offsets(fetch, tps, ours)


async def rewind(
    consumer: AIOKafkaConsumer, tps: Iterable[TopicPartition], ours: dict[TopicPartition, int]
) -> None:
    """Seek each still-assigned partition back to the last committed offset (`ours`:
    what this instance knows it committed)."""
    for tp in tps:
        # asked afresh each time: a rebalance may revoke partitions at any await here,
        # and aiokafka asserts at a seek on a partition no longer assigned
        if tp not in consumer.assignment():
            continue  # revoked meanwhile: its next owner starts at the committed offset
        offset = ours.get(tp)
        if offset is None:
            offset = await consumer.committed(tp)
            if tp not in consumer.assignment():
                continue  # revoked while its offset was looked up
        if offset is not None:
            consumer.seek(tp, offset)
        else:
            await consumer.seek_to_beginning(tp)
