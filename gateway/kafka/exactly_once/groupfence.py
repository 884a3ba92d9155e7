"""Exactly-once with one transactional producer per instance: fencing by the group (KIP-447).

The primitive under `producer_scope = "instance"` (instancecheckpoint.py): what
lets the loop hold one producer per instance rather than one per partition pair.

Why one producer per instance is exactly-once
---------------------------------------------
A pair's work is "read requests and events at offsets o, write forwards and
verdicts, commit the consumer group's offsets o' in the same transaction". The
transaction makes the output and the offsets visible together or not at all. The
danger is a zombie: an instance that lost a partition (its session expired, it
paused, the network split) but still runs, and commits output and offsets for
records the new owner is processing too. Before KIP-447 the only fence was the
transactional id: one per partition, so the new owner's `InitProducerId` for the
same id bumps the epoch and the old producer is refused. That costs a producer
(and its connections) per partition.

KIP-447 moves the fence to the consumer group. `TxnOffsetCommit` from version 3
carries the group's generation id, member id and group instance id, and the group
coordinator refuses the offsets of a member that is no longer in the generation
(`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `FENCED_INSTANCE_ID`, ...). The
offsets are part of the transaction, so a refused `TxnOffsetCommit` means the
zombie cannot commit: it can only abort, and its output, written inside that
transaction, is never seen by `read_committed` readers. A partition moves only
through a rebalance, and a rebalance makes a new generation, so the old owner's
generation can no longer commit anything once the new owner can start.

The other half is the read side. The new owner must not start from offsets that
a pending transaction of the old owner may still commit (the zombie sent its
offsets before the rebalance and its `EndTxn` is still to come). `OffsetFetch`
from version 7 with `require_stable` answers `UNSTABLE_OFFSET_COMMIT` while such
a transaction is open; `groupoffsets.fetch_committed_offsets` retries until it is decided
(committed: the new owner starts after it; aborted: before it). Between these
two, every input offset is committed exactly once together with its output.

What the transactional id must be
---------------------------------
It no longer needs to be tied to partitions: one per instance, stable across the
instance's restarts (for example `<transactional_id_prefix>.<instance name>`),
and distinct between live instances (two instances with the same id fence each
other through the epoch, which is safe but makes one of them useless). A stable
id matters for the dangling transaction below; uniqueness is the deployment's job.

A crashed instance's dangling transaction
-----------------------------------------
A transaction of an instance that died between its writes and its `EndTxn`
stays open on the broker. It is closed either when the same transactional id
starts again (`InitProducerId` aborts it, which is why the id is stable per
instance) or by the transaction coordinator when `transaction.timeout.ms` (the
producer's `transaction_timeout_ms`) expires: it aborts the transaction. Until
then its offsets are "unstable": the partitions' new owner waits in
`fetch_committed_offsets` (bounded by that timeout, so the fetch's timeout must
be longer than the producer's transaction timeout) and `read_committed` readers
of the output see nothing past it (the last stable offset). Nothing is lost:
the aborted work is replayed by the new owner from the committed offsets.

What the loop must do
---------------------
- take `group_metadata(consumer)` when it starts the work of a transaction, and
  pass that snapshot to `send_offsets_to_transaction`: a rebalance in between
  (a new generation) then refuses the commit, even if the partition came back;
- on `GroupFenced` abort the transaction (`producer.abort_transaction()`) and
  drop the work; the new owner replays it;
- on an assignment, read the starting offsets with `groupoffsets.fetch_committed_offsets`
  (not the consumer's own committed-offset fetch, which is not `require_stable`).

Reaches into aiokafka (0.14) internals, here and in groupoffsets.py
-----------------------------------------------------------------
aiokafka sends only `TxnOffsetCommit` v0 and `OffsetFetch` without
`require_stable`. The fence keeps its reaches small, the producer side's here
and the read side's (the stable fetch: 4 and 5) in groupoffsets.py:
1. `AIOKafkaProducer._sender._do_txn_offset_commit` is replaced on the producer
   instance (not the class) by one that sends version 3 (`_install`);
   `AddOffsetsToTxn`, coordinator lookup and retries remain aiokafka's.
2. The handler subclasses `aiokafka.producer.sender.TxnOffsetCommitHandler`
   (its `create_request` / `handle_response` contract).
3. A refusal puts the transaction manager in its abortable-error state
   (`_fail_abortable`) without forgetting the transaction's partitions and
   group, unlike aiokafka's `error_transaction`, which forgets them, so that its
   abort never sends `EndTxn` and the refused output stays in an open
   transaction the next commit would commit.
4. The consumer's group coordinator (`consumer._coordinator`: `group_id`,
   `generation`, `member_id`, `_group_instance_id`) and client (`consumer._client`).
5. The versions a connection negotiated (`client._get_conn(...)._versions`), to
   refuse plainly when the broker lacks v3 / v7 instead of letting aiokafka's
   sender fail on them.
The protocol classes (`fencewire`) use aiokafka's own flexible-version types (`CompactString`,
`CompactArray`, `TaggedFields`, `RequestStruct.FLEXIBLE_VERSION`).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.client import ConnectionGroup, CoordinationType
from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.producer.sender import TxnOffsetCommitHandler
from aiokafka.producer.transaction_manager import TransactionState
from aiokafka.protocol.api import Request

from gateway.kafka.exactly_once.groupoffsets import COORDINATOR_MOVED, group_coordinator
from gateway.kafka.exactly_once.transaction import topic_refused
from gateway.kafka.wire.fencewire import GroupMetadata, TxnOffsetCommitRequestV3, prepare

# Error codes of the KIP-447 fence (Kafka's protocol error table); aiokafka 0.14
# knows only some of them.
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
FENCED_INSTANCE_ID = 82
STALE_MEMBER_EPOCH = 113
GROUP_FENCE_CODES = {
    ILLEGAL_GENERATION: "ILLEGAL_GENERATION",
    UNKNOWN_MEMBER_ID: "UNKNOWN_MEMBER_ID",
    REBALANCE_IN_PROGRESS: "REBALANCE_IN_PROGRESS",
    FENCED_INSTANCE_ID: "FENCED_INSTANCE_ID",
    STALE_MEMBER_EPOCH: "STALE_MEMBER_EPOCH",
}
# Retried with a new coordinator lookup (COORDINATOR_MOVED) / after a backoff.
REQUEST_TIMED_OUT = 7
RETRIABLE = {3, 51}  # unknown topic or partition, concurrent transactions
PRODUCER_FENCED = {47, 90}  # invalid producer epoch, producer fenced


class GroupFenced(Exception):
    """The consumer group refused this member's offsets: it is no longer the owner.

    The transaction can only be aborted; its work belongs to the partitions' new
    owner, which replays it from the committed offsets.
    """

    def __init__(self, group: GroupMetadata | str, reason: str) -> None:
        if isinstance(group, GroupMetadata):
            where = (
                f"group {group.group_id!r} generation {group.generation_id} "
                f"member {group.member_id!r}"
            )
            self.group_id = group.group_id
        else:
            where = f"group {group!r}"
            self.group_id = group
        super().__init__(f"fenced by the group: {where}: {reason}")
        self.reason = reason


# --- the consumer side ------------------------------------------------------------


def group_metadata(consumer: AIOKafkaConsumer) -> GroupMetadata:
    """The member's current group metadata; `GroupFenced` if it is not a member now.

    A member without a generation (never joined, or reset after the coordinator
    dropped it) must not commit: the broker would take generation -1 with no
    member id as an old client's unfenced commit.
    """
    coordinator = group_coordinator(consumer)
    generation = int(coordinator.generation)
    member_id = str(coordinator.member_id or "")
    if generation < 0 or not member_id:
        raise GroupFenced(coordinator.group_id, "not a member of the group now (no generation)")
    return GroupMetadata(
        group_id=coordinator.group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=coordinator._group_instance_id,
    )


# --- the producer side ------------------------------------------------------------


class _Fence:
    """Per producer: the group metadata of the offsets being committed, one at a time."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.group: GroupMetadata | None = None


def _fail_abortable(txn_manager: Any, exc: BaseException) -> None:
    """aiokafka's `error_transaction`, but the transaction keeps its partitions and group.

    So the abort that must follow sends `EndTxn(abort)` and the refused output is
    aborted on the broker now (reach 3).
    """
    txn_manager._transition_to(TransactionState.ABORTABLE_ERROR)
    txn_manager._pending_txn_partitions.clear()
    for _, _, fut in txn_manager._pending_txn_offsets:
        if not fut.done():
            fut.set_exception(exc)
    txn_manager._pending_txn_offsets.clear()
    if not txn_manager._transaction_waiter.done():
        txn_manager._transaction_waiter.set_exception(exc)


class _Kip447CommitHandler(TxnOffsetCommitHandler):  # type: ignore[misc]  # reach 2
    """aiokafka's TxnOffsetCommit handler speaking version 3, with the group fence."""

    def __init__(self, sender: Any, offsets: Any, group: GroupMetadata) -> None:
        super().__init__(sender, offsets, group.group_id)
        self._group = group

    def create_request(self) -> Request[Any]:
        txn_manager = self._sender._txn_manager
        return TxnOffsetCommitRequestV3(
            transactional_id=txn_manager.transactional_id,
            producer_id=txn_manager.producer_id,
            producer_epoch=txn_manager.producer_epoch,
            group=self._group,
            offsets={tp: (o.offset, o.metadata) for tp, o in self._offsets.items()},
        )

    def handle_response(self, resp: Any) -> float | None:
        txn_manager = self._sender._txn_manager
        for topic, partitions, _ in resp.topics:
            for partition, error_code, _ in partitions:
                tp = TopicPartition(topic, partition)
                if error_code == 0:
                    txn_manager.offset_committed(tp, self._offsets[tp].offset, self._group_id)
                    continue
                if error_code in GROUP_FENCE_CODES:
                    _fail_abortable(
                        txn_manager, GroupFenced(self._group, GROUP_FENCE_CODES[error_code])
                    )
                    return None
                if error_code in COORDINATOR_MOVED or error_code == REQUEST_TIMED_OUT:
                    self._sender._coordinator_dead(CoordinationType.GROUP)
                    return float(self._default_backoff)
                if error_code in RETRIABLE:
                    return float(self._default_backoff)
                error_type = kafka_errors.for_code(error_code)
                if error_code in PRODUCER_FENCED:
                    raise kafka_errors.ProducerFenced()
                if error_type is kafka_errors.TransactionalIdAuthorizationFailed:
                    raise error_type(txn_manager.transactional_id)
                if error_type is kafka_errors.GroupAuthorizationFailedError:
                    _fail_abortable(txn_manager, error_type(self._group_id))  # names the group
                    return None
                if error_type is kafka_errors.TopicAuthorizationFailedError:
                    # no Read on the topic: the refusal names it, as a missing ACL
                    _fail_abortable(txn_manager, topic_refused([topic]))
                    return None
                # anything else (a refused group ACL, an unknown code): abort, never commit
                _fail_abortable(
                    txn_manager,
                    error_type(
                        f"TxnOffsetCommit refused for group {self._group_id!r}: "
                        f"{error_type.__name__} (code {error_code}) on {tp}"
                    ),
                )
                return None
        return None


def _install(producer: AIOKafkaProducer) -> _Fence:
    """Make this producer's sender commit transactional offsets with v3 (reach 1)."""
    sender = producer._sender
    fence: _Fence | None = getattr(sender, "_agui_group_fence", None)
    if fence is not None:
        return fence
    fence = _Fence()

    async def do_txn_offset_commit(self: Any, offsets: Any, group_id: str) -> None:
        if not offsets:
            return
        group = fence.group
        if group is None or group.group_id != group_id:
            _fail_abortable(
                self._txn_manager,
                GroupFenced(group_id, "offsets sent without the group's metadata"),
            )
            return
        try:
            node_id = await self._find_coordinator(CoordinationType.GROUP, group_id)
        except kafka_errors.GroupAuthorizationFailedError as exc:
            _fail_abortable(self._txn_manager, exc)
            return
        try:
            conn = await self.client._get_conn(node_id, group=ConnectionGroup.COORDINATION)
        except kafka_errors.KafkaError:  # the coordinator left the metadata: look again
            self._coordinator_dead(CoordinationType.GROUP)
            await asyncio.sleep(self._retry_backoff)
            return
        if conn is not None:
            try:
                prepare(TxnOffsetCommitRequestV3("", 0, 0, group, {}), conn._versions)
            except IncompatibleBrokerVersion as exc:
                _fail_abortable(self._txn_manager, exc)
                return
        await _Kip447CommitHandler(self, offsets, group).do(node_id)

    sender._do_txn_offset_commit = types.MethodType(do_txn_offset_commit, sender)
    sender._agui_group_fence = fence
    return fence


async def send_offsets_to_transaction(
    producer: AIOKafkaProducer,
    offsets: Mapping[TopicPartition, int],
    group: GroupMetadata,
) -> None:
    """Add the group's `offsets` (next offsets to read) to the producer's open transaction.

    The group coordinator checks `group` (generation, member id, instance id): a
    member that is no longer in that generation raises `GroupFenced`, and the
    transaction can then only be aborted (`producer.abort_transaction()`), which
    aborts its output too. Other refusals raise aiokafka's errors and likewise
    leave only the abort.
    """
    if not offsets:
        return
    if group.generation_id < 0 or not group.member_id:
        raise GroupFenced(group, "not a member of the group (no generation)")
    fence = _install(producer)
    async with fence.lock:
        fence.group = group
        try:
            await producer.send_offsets_to_transaction(dict(offsets), group.group_id)
        finally:
            fence.group = None
