"""The checkpoint with one transactional producer per instance, fenced by the group (KIP-447).

`producer_scope = "instance"`: every pair's rounds go through one transactional
producer (two broker connections in all, not two per pair). Rounds asked to
commit while a transaction is open wait for the next one, which takes them all:
one transaction covers many pairs' rounds. Its offsets carry the consumer
group's generation and member id (`groupfence.send_offsets_to_transaction`), so
a zombie that lost its partitions in a rebalance is refused by the group and can
only abort; the new owner reads offsets with `require_stable`, never ones a
pending transaction may still commit (`groupoffsets.fetch_committed_offsets`). See
`gateway/kafka/exactly_once/groupfence.py` for the argument.

With `instance_producers` above 1 the instance holds that many, each with a
transactional id of its own: rounds asked for while one producer's transaction
is open start the next producer's at once, so a round waits for no other
transaction to end (a pair still commits one round at a time). Each id is stable
across restarts (index 0 keeps the single producer's id), so a restart's start
of every producer aborts what each left open.

A failed transaction fails every round in it (each pair is rewound and prepared
again); its producer is replaced, as it may be in a fatal state. A transaction
the group refuses reports its rounds as fenced: their pairs wait for the
rebalance under way, which hands them to their new owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced

from gateway.kafka.exactly_once import groupfence, hanging
from gateway.kafka.exactly_once.checkpoint import Outcome, PairKey, Result, Work
from gateway.kafka.exactly_once.groupoffsets import group_committed_offsets, rewind
from gateway.kafka.exactly_once.transaction import (
    abort_quietly,
    begin_and_send,
    bounded,
    fenced_producer,
    start_transactional,
    stop_producer,
)
from gateway.kafka.wire import txnids
from gateway.observe.metrics import Metrics
from gateway.settings import Settings

log = logging.getLogger("gateway.checkpoint")


class InstanceCheckpoint:
    def __init__(self, settings: Settings, metrics: Metrics, consumer: AIOKafkaConsumer) -> None:
        self.settings = settings
        self.metrics = metrics
        self.consumer = consumer
        self._keys: set[PairKey] = set()
        count = settings.instance_producers
        self._producers: list[AIOKafkaProducer | None] = [None] * count
        self._starting = [asyncio.Lock() for _ in range(count)]
        self._queue: list[tuple[Work, asyncio.Future[Result]]] = []
        self._writers: list[asyncio.Task[None] | None] = [None] * count

    # --- the producer -------------------------------------------------------------------

    @property
    def transactional_id(self) -> str:
        """The first producer's transactional id (the only one's by default)."""
        return self.transactional_id_of(0)

    def transactional_id_of(self, index: int) -> str:
        return txnids.instance_id(self.settings, index)

    def holds(self, key: PairKey) -> bool:
        return key in self._keys

    def producer(self, key: PairKey) -> AIOKafkaProducer | None:
        return self._producers[0] if key in self._keys else None

    async def open(self, key: PairKey, asked: Mapping[PairKey, str | None] | None = None) -> None:
        """Take the pair in; start the instance's producers it does not hold yet."""
        for index in range(len(self._producers)):
            await self._started(index)
        self._keys.add(key)

    async def _started(self, index: int) -> AIOKafkaProducer:
        async with self._starting[index]:
            producer = self._producers[index]
            if producer is None:
                s = self.settings
                suffix = "" if index == 0 else f"-{index}"
                # aborts what this id left open (this instance before a restart)
                producer = self._producers[index] = await start_transactional(
                    s, f"{s.client_id}-txn{suffix}", self.transactional_id_of(index)
                )
            return producer

    async def close(self, key: PairKey) -> None:
        self._keys.discard(key)

    def detach(self, key: PairKey) -> AIOKafkaProducer | None:
        """The pair leaves; the shared producer stays (nothing of its own to close)."""
        self._keys.discard(key)
        return None

    async def close_all(self) -> None:
        self._keys.clear()
        await asyncio.gather(*(w for w in self._writers if w is not None), return_exceptions=True)
        producers, self._producers = self._producers, [None] * len(self._producers)
        for producer in producers:
            await stop_producer(producer)

    # --- committing ---------------------------------------------------------------------

    async def commit(self, works: Iterable[Work]) -> list[Result]:
        """Each round's result; rounds asked for together, or while a transaction is
        open, share the next transaction."""
        loop = asyncio.get_running_loop()
        waiting = []
        for work in works:
            done: asyncio.Future[Result] = loop.create_future()
            self._queue.append((work, done))
            waiting.append(done)
        for index, writer in enumerate(self._writers):
            if writer is None or writer.done():  # an idle producer takes them now
                self._writers[index] = asyncio.create_task(self._write(index))
                break
        return list(await asyncio.gather(*(asyncio.shield(w) for w in waiting)))

    async def _write(self, index: int) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                results = await self._transaction(index, [w for w, _ in batch])
            except BaseException as exc:  # cancelled: the rounds are not committed
                results = [Result(Outcome.FAILED, exc)] * len(batch)
                for (_, done), result in zip(batch, results, strict=True):
                    if not done.done():
                        done.set_result(result)
                raise
            for (_, done), result in zip(batch, results, strict=True):
                if not done.done():
                    done.set_result(result)

    async def _transaction(self, index: int, asked: list[Work]) -> list[Result]:
        """One transaction for every round asked (a result each, in order)."""
        works = [w for w in asked if w.key in self._keys]  # pairs given up meanwhile: not
        results = await self._write_rounds(index, works) if works else []
        by_key = dict(zip((w.key for w in works), results, strict=True))
        gone = Result(Outcome.FAILED, RuntimeError("the pair was given up"))
        return [by_key.get(w.key, gone) for w in asked]

    async def _write_rounds(self, index: int, works: list[Work]) -> list[Result]:
        try:
            producer = await self._started(index)
        except Exception as exc:
            return [Result(Outcome.FAILED, exc) for _ in works]
        offsets: dict[TopicPartition, int] = {}
        try:
            group = groupfence.group_metadata(self.consumer)
            records = [r for w in works for r in w.round.records()]
            for w in works:
                offsets.update(w.offsets)
            async with bounded(self.settings):
                delivered = await begin_and_send(producer, records)
                hanging.add_partitions(producer, sorted({tp for w in works for tp in w.touch}))
                await groupfence.send_offsets_to_transaction(producer, offsets, group)
                await asyncio.gather(*delivered)
                await producer.commit_transaction()
        except Exception as exc:
            fenced = isinstance(exc, (groupfence.GroupFenced, ProducerFenced)) or fenced_producer(
                producer, exc
            )
            self.metrics.transactions.labels("fenced" if fenced else "aborted").inc(len(works))
            log.error(
                "transaction of %d pairs' rounds failed; they are rewound to the last commit",
                len(works),
                extra={"error": repr(exc), "fenced": fenced},
            )
            await abort_quietly(producer)
            # the producer may be in a fatal state: a fresh one for the next transaction
            self._producers[index] = None
            await stop_producer(producer)
            outcome = Outcome.FENCED if fenced else Outcome.FAILED
            return [Result(outcome, exc) for _ in works]
        self.metrics.transactions.labels("committed").inc(len(works))
        return [Result(Outcome.COMMITTED) for _ in works]

    # --- offsets --------------------------------------------------------------------------

    async def committed_offsets(
        self,
        tps: list[TopicPartition],
        ours: dict[TopicPartition, int],
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, int | None]:
        """The group's stable committed offsets (never ones a pending transaction of a
        zombie may still commit), waiting out our own commit's visibility."""
        return await group_committed_offsets(self.settings, self.consumer, tps, ours, timeout_s)

    async def sweep(
        self,
        key: PairKey,
        partitions: list[TopicPartition],
        offsets: dict[TopicPartition, int],
    ) -> hanging.Settled | None:
        """Never: the instance's producer is shared by every pair (an abort would take
        other pairs' rounds with it), and pending offsets may be another instance's."""
        return None

    async def ask(self, keys: Iterable[PairKey]) -> dict[PairKey, str | None]:
        """Nothing to ask: see `sweep`."""
        return {}

    def last_aborted(self, key: PairKey) -> bool:
        """Never asked: see `sweep`."""
        return False

    async def rewind(self, tps: Iterable[TopicPartition], ours: dict[TopicPartition, int]) -> None:
        await rewind(self.consumer, tps, ours)
