"""Hanging transactions: ones the broker never completed, and how a pair sweeps its own.

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

The pair's transactional id is its own (`<group>.<agent>.<partition>`), and a
marker completes whatever a producer id left open in a partition, whatever the
epoch that wrote it. So once the pair's producer is initialised (a transaction
of the previous owner still under way is then finished by the broker), offsets
that stay pending are swept: a transaction of the pair's own producer that adds
every partition the pair writes, and the group's offsets, then aborts. Its ABORT
markers discard what the hanging transaction left: its outputs stay invisible,
its offsets are never committed, and the requests it decided are decided again
from the last committed offsets, once. Nothing is lost and nothing is doubled.

The same restart can leave a transaction hanging that the instance saw commit
(its EndTxn answered before the broker died) and carries on after: its records
hold the last stable offset of every partition it wrote, a shared `rejections`
partition included, until the same producer id writes a marker there, which may
be never for a pair with no more work. That transaction was committed, so it is
*healed*, not swept: once the broker answers again after it was lost, each
ready pair commits one transaction that adds every partition it writes (records
or none) and its committed offsets again. Its COMMIT markers complete what the
hanging transaction left as committed, as its coordinator decided. A pair that
was committing when the broker went fails that commit, is rewound and prepared
again (its pending offsets then swept, as above), and heals once it is ready.

Reply topics named by requests (`replyTo`) cannot be listed in advance: a
hanging record in one of them stays until the pair next writes that partition.
With `producer_scope = "instance"` the pending offsets may belong to another
instance's transactional id: those cannot be swept from here, and the pair waits
(the operator's remedy, `kafka-transactions.sh find-hanging` then `abort`, is
in the README).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaProducer, TopicPartition

from gateway.kafka.exactly_once import transaction

# How long offsets may stay pending after the pair's producer was initialised
# before they are taken for a hanging transaction's and swept. A transaction of
# the previous owner is finished by then (initialising the producer waits for
# it); the wait covers brokers that apply a marker to the group a little after
# acknowledging it. Sweeping when nothing hangs does no harm: it aborts an
# empty transaction of the pair's own.
SUSPECT_AFTER_S = 5.0


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
