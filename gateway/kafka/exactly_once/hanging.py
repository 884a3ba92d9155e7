"""Hanging transactions: ones the broker never completed, and how a pair settles its own.

A transaction is *hanging* when records or offsets it wrote stay pending although
its coordinator holds it finished (or knows nothing of it): no marker will ever
come. Kafka 4.4 leaves one behind after an unclean restart of a single-node
cluster: the transaction coordinator, loading a transaction that was preparing
its commit, looks for its partitions' leaders before the broker knows its own
endpoint, logs "Couldn't find leader endpoint ... these partitions are likely
deleted already and hence can be skipped", skips the markers and completes the
transaction. Its offsets then stay pending in `__consumer_offsets` for ever: a
stable offset fetch (KIP-447) answers `UNSTABLE_OFFSET_COMMIT` without end, and
its records hold the last stable offset of their partitions, so `read_committed`
readers see nothing past them.

Such a transaction may be half complete: the markers written before the broker
died stay (a rejection already visible in one partition) while the rest were
skipped (the group's offsets still pending). So it is completed the way its
coordinator decided, never the other way: aborting the rest of a transaction
decided to commit would show its records and read its requests again, deciding
them twice.

The pair's transactional id is its own (`<group>.<agent>.<partition>`), and a
marker completes whatever a producer id left open in a partition, whatever the
epoch that wrote it. Before the pair's producer is initialised (which forgets
it), its coordinator is asked how the id's last transaction ended
(`txnstates.last_states`). Once the producer is initialised (a transaction of the
previous owner still under way is then finished by the broker), offsets that stay
pending are *settled* with a transaction of the pair's own producer that adds
every partition the pair writes, and the group:

- the last transaction was decided to commit (`PrepareCommit`, `CompleteCommit`):
  it adds the group without committing any offset, and commits. Its COMMIT markers
  complete what the hanging transaction left, as committed: its records become
  visible and its offsets are the group's. Nothing is decided again.
- it was decided to abort (or was still open, which the initialisation aborts), or
  the coordinator could not say (an older broker, an `Empty` state after another
  instance initialised the id and died before settling): it adds the group's last
  committed offsets and aborts. Its ABORT markers discard what the hanging
  transaction left: its outputs stay invisible, its offsets are never committed,
  and the requests it decided are decided again from the last committed offsets.

A last transaction its coordinator aborted (`PrepareAbort`, `CompleteAbort`) is
discarded as soon as the producer started, even where the group's offsets look
stable: the abort's marker may have reached them and missed a record elsewhere,
which the pair's next commit there would otherwise show. Aborts are rare (a
failure comes before each), and so is this extra aborted transaction.

The same restart can leave a transaction hanging that the instance saw commit
(its EndTxn answered before the broker died) and carries on after: its records
hold the last stable offset of every partition it wrote, a shared `rejections`
partition included, until the same producer id writes a marker there, which may
be never for a pair with no more work. That transaction was committed, so it is
*healed*: once the broker answers again after it was lost, each
ready pair commits one transaction that adds every partition it writes (records
or none) and its committed offsets again. Its COMMIT markers complete what the
hanging transaction left as committed, as its coordinator decided. A pair that
was committing when the broker went fails that commit, is rewound and prepared
again (its pending offsets then settled, as above), and heals once it is ready.

Reply topics named by requests (`replyTo`) cannot be listed in advance: a
hanging record in one of them stays until the pair next writes that partition.
With `producer_scope = "instance"` the pending offsets may belong to another
instance's transactional id: those cannot be settled from here, and the pair waits
(the operator's remedy, `kafka-transactions.sh find-hanging` then `abort`, is
in docs/concepts/exactly-once.md, "Hanging transactions").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition

from gateway.kafka.exactly_once import transaction
from gateway.kafka.wire import txnstates

# How long offsets may stay pending after the pair's producer was initialised
# before they are taken for a hanging transaction's and swept. A transaction of
# the previous owner is finished by then (initialising the producer waits for
# it); the wait covers brokers that apply a marker to the group a little after
# acknowledging it. Sweeping when nothing hangs does no harm: it aborts an
# empty transaction of the pair's own.
SUSPECT_AFTER_S = 5.0
# A last transaction in one of these states was aborted by its coordinator, whose markers
# may have missed some of its partitions as they may miss a commit's: the pair discards
# what it left as soon as its producer started, whether or not the group's offsets
# look stable. Rare (a failure before it), so the extra aborted transaction is too.
# (A transaction still `Ongoing` is aborted by the producer's start itself.)
ABORTED_BEFORE = txnstates.ABORTED - {"Ongoing"}
# How long adding the group to a completing transaction may take (its coordinator
# answers CONCURRENT_TRANSACTIONS while the previous transaction completes).
ADD_GROUP_S = 30.0


@dataclass(frozen=True, slots=True)
class Settled:
    """How a pair settled what its hanging transaction left."""

    partitions: list[TopicPartition]  # those its transaction added, in order
    committed: bool  # completed as committed (else aborted)
    last_state: str | None  # what the coordinator held before the producer started


async def settle(
    producer: AIOKafkaProducer,
    partitions: Iterable[TopicPartition],
    offsets: dict[TopicPartition, int],
    group_id: str,
    last_state: str | None,
) -> Settled:
    """Complete what `producer`'s transactional id left pending in `partitions` and in
    the group's offsets, as its coordinator decided the last transaction (`last_state`,
    asked before the producer started): committed, or else aborted (`offsets`: the
    last committed ones, sent only to add the group to the aborted transaction)."""
    if txnstates.outcome(last_state) is True:
        return Settled(await complete(producer, partitions, group_id), True, last_state)
    return Settled(await sweep(producer, partitions, offsets, group_id), False, last_state)


async def complete(
    producer: AIOKafkaProducer, partitions: Iterable[TopicPartition], group_id: str
) -> list[TopicPartition]:
    """Commit, with `producer`'s transactional id, whatever it left open in `partitions`
    and in the group's offsets; the partitions completed, in order. No offset is sent:
    the group's pending ones are committed as they are."""
    ordered = sorted(set(partitions))
    await transaction.begin(producer)
    try:
        add_partitions(producer, ordered)
        await txnstates.add_group(producer, group_id, ADD_GROUP_S)
    except BaseException:
        await transaction.abort_quietly(producer)
        raise
    await producer.commit_transaction()
    return ordered


async def sweep(
    producer: AIOKafkaProducer,
    partitions: Iterable[TopicPartition],
    offsets: dict[TopicPartition, int],
    group_id: str,
) -> list[TopicPartition]:
    """Abort, with `producer`'s transactional id, whatever it left open in
    `partitions` and in the group's offsets; the partitions swept, in order.

    `offsets` are sent only to add the group to the transaction (they are
    aborted with it): pass the last committed ones.
    """
    ordered = sorted(set(partitions))
    await transaction.begin(producer)
    try:
        add_partitions(producer, ordered)
        await producer.send_offsets_to_transaction(offsets, group_id)
    finally:
        transaction.watch_transaction(producer)
        await producer.abort_transaction()
    return ordered


def add_partitions(producer: AIOKafkaProducer, partitions: Iterable[TopicPartition]) -> None:
    """Add `partitions` to the producer's open transaction, records or none.

    aiokafka adds a partition to a transaction only when a record is sent to it;
    a sweep or a heal writes no record there, so it asks for the partitions
    directly. The transaction's marker then reaches each of them.
    """
    partitions = list(partitions)
    if not partitions:  # the usual commit: nothing to reach for
        return
    txn = producer._txn_manager  # reach: no public call adds a partition alone
    for tp in partitions:
        txn.maybe_add_partition_to_txn(tp)


def written_partitions(
    partitions_for: Callable[[str], set[int] | None],
    spread: Iterable[str],
    fixed: Iterable[TopicPartition],
) -> list[TopicPartition]:
    """Every partition a pair may write: all of each existing topic in `spread`
    (written by key), and `fixed` (its own changelog partition)."""
    found = set(fixed)
    for topic in spread:
        found.update(TopicPartition(topic, p) for p in partitions_for(topic) or ())
    return sorted(found)
