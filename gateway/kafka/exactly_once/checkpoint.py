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

    checkpoint -> transaction (start a producer, send a round batched, fenced?)
               -> groupoffsets (the group's stable committed offsets, rewind)
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gateway.kafka.exactly_once import hanging
from gateway.kafka.exactly_once.groupoffsets import group_committed_offsets, rewind
from gateway.kafka.exactly_once.transaction import (
    abort_quietly,
    begin_and_send,
    bounded,
    fenced_producer,
    start_transactional,
    stop_producer,
)
from gateway.kafka.pairs.round import Round
from gateway.kafka.wire import txnids, txnstates
from gateway.kafka.wire.batched import Batched
from gateway.observe.metrics import Metrics
from gateway.settings import Settings

log = logging.getLogger("gateway.checkpoint")

PairKey = tuple[str, int]

# How long a producer's start waits to learn how its transactional id's last
# transaction ended (see `hanging`): past it, the start goes on not knowing.
DESCRIBE_TIMEOUT_S = 5.0
DESCRIBE_MARGIN_S = 2.0  # for a request under way at that time, then not waited for


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
    # partitions the transaction adds though the round may write nothing there: a heal
    # (see `hanging`), whose COMMIT markers complete what a hanging transaction left
    touch: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    error: BaseException | None = None


class Strategy(Protocol):
    """What the assignment asks of a checkpoint, whichever producers it holds."""

    def holds(self, key: PairKey) -> bool: ...
    def producer(self, key: PairKey) -> AIOKafkaProducer | None: ...
    async def open(
        self, key: PairKey, asked: Mapping[PairKey, str | None] | None = None
    ) -> None: ...
    async def ask(self, keys: Iterable[PairKey]) -> dict[PairKey, str | None]: ...
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
    ) -> hanging.Settled | None: ...
    def last_aborted(self, key: PairKey) -> bool: ...
    async def rewind(
        self, tps: Iterable[TopicPartition], ours: dict[TopicPartition, int]
    ) -> None: ...


class Checkpoint:
    def __init__(self, settings: Settings, metrics: Metrics, consumer: AIOKafkaConsumer) -> None:
        self.settings = settings
        self.metrics = metrics
        self.consumer = consumer
        self._producers: dict[PairKey, AIOKafkaProducer] = {}
        # how each pair's transactional id's last transaction ended, asked as its
        # producer started (the pairs starting together ask in one batch)
        self._last_states: dict[PairKey, str | None] = {}
        self._describe: Batched[str, str | None] = Batched(self._describe_ids)
        self._describe_failed = False  # said once: every pair's start may fail alike

    # --- producers --------------------------------------------------------------------

    def holds(self, key: PairKey) -> bool:
        return key in self._producers

    def producer(self, key: PairKey) -> AIOKafkaProducer | None:
        return self._producers.get(key)

    async def open(self, key: PairKey, asked: Mapping[PairKey, str | None] | None = None) -> None:
        """Start the pair's transactional producer (if it has none): fences any zombie.

        First learns how its transactional id's last transaction ended (from `asked`,
        what `ask` answered just before, or by asking), which starting the producer
        makes the coordinator forget: settling needs it (see `hanging`)."""
        if key in self._producers:
            return
        agent, partition = key
        s = self.settings
        transactional_id = txnids.pair_id(s, agent, partition)
        if asked is not None and key in asked:
            state = asked[key]
        else:
            state = await self._last_state(transactional_id)
        # a start that failed after initialising the id left it `Empty`: what was asked
        # before that start still says how the last transaction ended
        if txnstates.outcome(state) is not None or key not in self._last_states:
            self._last_states[key] = state
        self._producers[key] = await start_transactional(
            s, f"{s.client_id}-{agent}-{partition}", transactional_id
        )

    async def ask(self, keys: Iterable[PairKey]) -> dict[PairKey, str | None]:
        """How the last transaction of each pair's id ended (pairs whose producer is
        started already left out), all in one look-up, for the `open`s that follow at
        once (pairs opened a few at a time would otherwise ask a few at a time)."""
        keys = [key for key in dict.fromkeys(keys) if key not in self._producers]
        s = self.settings
        states = await asyncio.gather(
            *(self._last_state(txnids.pair_id(s, agent, partition)) for agent, partition in keys)
        )
        return dict(zip(keys, states, strict=True))

    async def _last_state(self, transactional_id: str) -> str | None:
        try:
            async with asyncio.timeout(DESCRIBE_TIMEOUT_S + DESCRIBE_MARGIN_S):
                return await self._describe.get(transactional_id)
        except Exception as exc:  # unknown: a hanging transaction is then aborted
            if not self._describe_failed:
                self._describe_failed = True
                log.warning(
                    "could not ask how a pair's transactional id's last transaction ended; "
                    "a hanging transaction found while preparing is aborted, not completed",
                    extra={"transactional_id": transactional_id, "error": repr(exc)},
                )
            return None

    async def _describe_ids(self, ids: list[str]) -> dict[str, str | None]:
        found = await txnstates.last_states(self.consumer._client, ids, DESCRIBE_TIMEOUT_S)
        return {transactional_id: found.get(transactional_id) for transactional_id in ids}

    async def close(self, key: PairKey) -> None:
        self._last_states.pop(key, None)
        await stop_producer(self._producers.pop(key, None))

    def detach(self, key: PairKey) -> AIOKafkaProducer | None:
        """Take the pair's producer away (to be closed later, once no commit runs)."""
        self._last_states.pop(key, None)
        return self._producers.pop(key, None)

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
            async with bounded(self.settings):
                delivered = await begin_and_send(producer, records)
                hanging.add_partitions(producer, work.touch)
                if work.offsets:
                    await producer.send_offsets_to_transaction(work.offsets, self.settings.group_id)
                # A record the producer gave up on does not fail the transaction by
                # itself: committed, it would be lost behind the committed offsets.
                # Aborted instead.
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
            await abort_quietly(producer)
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
    ) -> hanging.Settled | None:
        """Complete what a hanging transaction of the pair's own transactional id left,
        as its coordinator decided it (see `hanging`); None without a producer."""
        producer = self._producers.get(key)
        if producer is None:
            return None
        settled = await hanging.settle(
            producer, partitions, offsets, self.settings.group_id, self._last_states.get(key)
        )
        # its own transaction is the id's last now: asked again, the state says nothing
        # of what was settled (a hanging transaction found later is aborted)
        self._last_states[key] = None
        return settled

    def last_aborted(self, key: PairKey) -> bool:
        """Whether the pair's transactional id's last transaction, before its producer
        started, was aborted (not merely left open: starting the producer aborts that)."""
        return self._last_states.get(key) in hanging.ABORTED_BEFORE

    async def rewind(self, tps: Iterable[TopicPartition], ours: dict[TopicPartition, int]) -> None:
        await rewind(self.consumer, tps, ours)
