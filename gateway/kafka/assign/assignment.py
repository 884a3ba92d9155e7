"""Assignment: which pairs this instance holds, and taking them in and out.

`assign` takes an assignment (every pair paused until prepared), `prepare`
checks each agent, fences zombies (a fresh transactional producer), restores
state when the committed offsets moved, and lets the pair's partitions flow.
`revoke` commits what revoked pairs decided and holds them until the next
assignment; `drop` and `discard` give a pair up. Preparing runs concurrently
across pairs (restores bounded by the restorer), so a rebalance's cost grows
with the pairs it moves, not with their square.

Committing is the assignment's `Committer` (committer.py): the assignment is
its holder, asked to pause, drop or prepare again a pair whose commit failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from gateway.kafka.assign.prepare import Preparer
from gateway.kafka.exactly_once.committer import Committer
from gateway.kafka.exactly_once.pacing import CommitPacing
from gateway.kafka.exactly_once.transaction import stop_producer
from gateway.kafka.pairs.pair import PartitionPair
from gateway.kafka.pairs.round import Round
from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.kafka.wire.denials import RETRY_MAX_S, RETRY_S

log = logging.getLogger("gateway.runner")

PREPARE_CONCURRENCY = 32  # pairs prepared at once (producer start, offsets, restore)


def _keep(tasks: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> None:
    """Run `work` in the background, held in `tasks` (to wait on or cancel) until it ends."""
    task = asyncio.create_task(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


class Assignment:
    def __init__(
        self,
        preparer: Preparer,
        make_pair: Callable[[str, int], PartitionPair],
        revoke_timeout_s: float,
        changed: Callable[[], None] = lambda: None,
        counted: Callable[[list[Round]], None] = lambda rounds: None,
        pacing: CommitPacing | None = None,
    ) -> None:
        self.preparer = preparer
        # The preparer's own clients, checkpoint and denials: one of each per instance.
        self.names = preparer.names
        self.consumer = preparer.consumer
        self.checkpoint = preparer.checkpoint
        self.denials = preparer.denials
        self.make_pair = make_pair
        self.revoke_timeout_s = revoke_timeout_s
        self.changed = changed  # what the gauges show changed
        self.lock = asyncio.Lock()  # held by a round, a revoke, a shutdown
        self.slots: dict[PairKey, PairSlot] = {}
        self.by_tp: dict[TopicPartition, tuple[PairKey, str]] = {}
        self.refused: dict[str, str] = {}
        # Pairs given up (fenced, or revoked mid-round) whose partitions may still be
        # assigned here, paused: not ready until the next assignment settles them.
        self.dropped: set[PairKey] = set()
        self.assigned_once = False
        self._prepares: set[asyncio.Task[None]] = set()
        self._closers: set[asyncio.Task[None]] = set()
        self._heals: set[asyncio.Task[None]] = set()
        # commits in the background, one at a time per pair; this assignment is its holder
        self.committer = Committer(
            self.checkpoint, self.denials, self, changed, counted, pacing=pacing
        )
        self._preparing = asyncio.Semaphore(PREPARE_CONCURRENCY)

    # --- what is held ------------------------------------------------------------------------

    def holds(self, slot: PairSlot) -> bool:
        """Whether the slot is still this instance's current one for its pair."""
        return self.slots.get(slot.key) is slot

    def slot_for(self, tp: TopicPartition) -> tuple[PairSlot, str] | None:
        entry = self.by_tp.get(tp)
        if entry is None:
            return None
        slot = self.slots.get(entry[0])
        return (slot, entry[1]) if slot is not None else None

    def preparing(self) -> bool:
        return bool(self._prepares)

    def observe_commits(self, observer: Callable[[PairSlot, Round], None]) -> None:
        """Call `observer(slot, round)` each time a pair's round has committed.

        It runs right after the transaction committed, once `slot.committed` holds the
        offsets the round consumed up to; `round.decided` lists the requests it decided.
        For watching from outside (the benchmark times commits with it): the gateway
        never uses it itself, and an observer that raises is logged, never fails the round.
        """
        self.committer.observe(observer)

    # --- rebalancing ----------------------------------------------------------------------

    async def revoke(self, revoked: set[TopicPartition]) -> None:
        """Commit what the revoked pairs decided, then hold them until the next assignment.

        A pair whose commit does not finish in time, or every revoked pair when the
        round does not finish in time, is discarded: its transaction may still
        complete in the background, so its memory can no longer be trusted. A later
        assignment rebuilds it from Kafka (committed offsets, changelog), and its new
        producer's initialisation settles that transaction first.
        """
        try:
            await asyncio.wait_for(self.lock.acquire(), timeout=self.revoke_timeout_s)
        except TimeoutError:
            log.error(
                "round did not finish within revoke_timeout_s; dropping the revoked pairs "
                "(their transaction is aborted when the next owner fences this instance)"
            )
            self.cancel_prepares()
            for slot in self._revoked(revoked):
                self.discard(slot)
            self.changed()
            return
        started = time.monotonic()
        try:
            self.cancel_prepares()
            slots = self._revoked(revoked)
            committed = await self._commit_revoked(slots)
            for slot in slots:
                if slot.discarded:
                    continue
                slot.pair.aborted()  # drop buffers: positions restart at the committed offsets
                slot.ready = False
            self.changed()
            log.info(
                "pairs revoked",
                extra={
                    "pairs": len(slots),
                    "committed": committed,
                    "seconds": round(time.monotonic() - started, 3),
                },
            )
        finally:
            self.lock.release()

    async def _commit_revoked(self, slots: list[PairSlot]) -> int:
        """Commit what the revoked pairs decided, all at once (one transaction for all
        with one producer per instance), within revoke_timeout_s in all; a pair whose
        commit did not finish by then is discarded. Returns how many were due."""
        due = [s for s in slots if s.ready and s.pair.has_pending()]
        if not due:
            return 0
        commits = {s: asyncio.ensure_future(self.committer.commit([s])) for s in due}
        _, late = await asyncio.wait(commits.values(), timeout=self.revoke_timeout_s)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        for slot, task in commits.items():
            if task in late:
                log.error(
                    "commit on revoke timed out; dropping the pair",
                    extra={"agent": slot.pair.agent, "partition": slot.pair.partition},
                )
                self.discard(slot)
        for task in commits.values():
            if task not in late:
                task.result()  # a defect propagates, as it would have from the commit
        return len(due)

    def _revoked(self, revoked: set[TopicPartition]) -> list[PairSlot]:
        return [s for s in self.slots.values() if set(s.tps()) & revoked]

    async def assign(self, assigned: set[TopicPartition]) -> None:
        """Take the assignment: every pair stays paused until prepared."""
        self.assigned_once = True
        self.dropped.clear()  # settled: rebuilt below if still ours, else gone
        wanted: dict[PairKey, dict[str, TopicPartition]] = {}
        for tp in assigned:
            found = self.names.classify(tp.topic)
            if found is not None:
                agent, side = found
                wanted.setdefault((agent, tp.partition), {})[side] = tp
        for key in [k for k in self.slots if k not in wanted]:
            await self.drop(self.slots[key], notify=False)
        if assigned:
            self.consumer.pause(*assigned)
        pending: list[PairSlot] = []
        for key, sides in wanted.items():
            slot = self.slots.get(key)
            if slot is None:
                slot = PairSlot(self.make_pair(*key), None, None)
                self.slots[key] = slot
            slot.events_tp, slot.requests_tp = sides.get("events"), sides.get("requests")
            for side, tp in sides.items():
                self.by_tp[tp] = (key, side)
            slot.ready = False
            pending.append(slot)
        if pending:
            self.start_prepare(pending)
        self.changed()

    def cancel_prepares(self) -> None:
        for task in list(self._prepares):
            task.cancel()

    # --- preparing ---------------------------------------------------------------------------

    def start_prepare(self, slots: list[PairSlot], after: float = 0.0) -> None:
        _keep(self._prepares, self.prepare(slots, after))

    async def settled(self) -> None:
        """Wait until no preparation is under way, nor a given-up producer closing."""
        while self._prepares or self._closers:
            await asyncio.gather(*self._prepares, *self._closers, return_exceptions=True)

    async def prepare(self, slots: list[PairSlot], after: float = 0.0) -> None:
        """Check each agent, fence zombies, restore state, then let the pairs' partitions flow.

        Failures are retried with backoff until they succeed or the pairs are revoked:
        a pair is never processed unprepared, and its partitions stay paused meanwhile.
        Agents are checked and pairs prepared concurrently: one that keeps failing
        holds up no other.
        """
        if after:
            await asyncio.sleep(after)
        started = time.monotonic()
        delay = RETRY_S
        refused: dict[str, str] = {}
        checked: set[str] = set()
        todo = list(slots)
        while True:
            todo = [s for s in todo if self.holds(s) and s.pair.agent not in refused]
            agents = [a for a in dict.fromkeys(s.pair.agent for s in todo) if a not in checked]
            found = await asyncio.gather(
                *(self.preparer.check_agent(a) for a in agents), return_exceptions=True
            )
            for agent, why in zip(agents, found, strict=True):
                if isinstance(why, BaseException):
                    if not isinstance(why, Exception):
                        raise why
                    log.error(
                        "could not check agent; retrying",
                        extra={"agent": agent, "error": repr(why), "retry_in_s": delay},
                    )
                    for slot in todo:
                        if slot.pair.agent == agent:
                            self.denials.note(slot.key, why, "DescribeConfigs", preparing=True)
                    continue
                checked.add(agent)
                if why:
                    refused[agent] = self.refused[agent] = why
                    log.error(why, extra={"agent": agent})
                else:
                    self.refused.pop(agent, None)
            todo = [s for s in todo if s.pair.agent not in refused and self.holds(s)]
            tried = [s for s in todo if s.pair.agent in checked]
            checked_at = time.monotonic()
            # the pairs' producers started, then all their committed offsets in one request
            kept = await self.preparer.prefetch(tried)
            prefetched_at = time.monotonic()
            try:
                ok = await asyncio.gather(*(self._prepare_guarded(s, delay) for s in tried))
            finally:
                self.preparer.forget_prefetched(tried)
            failed = [s for s, done in zip(tried, ok, strict=True) if not done]
            failed += [s for s in todo if s.pair.agent not in checked]
            self.changed()
            if len(slots) > 1:
                log.info(
                    "pairs prepared",
                    extra={
                        "pairs": sum(ok),
                        "offsets_prefetched": kept,
                        "failed": len(failed),
                        "seconds": round(time.monotonic() - started, 3),
                        "checks_s": round(checked_at - started, 3),
                        "prefetch_s": round(prefetched_at - checked_at, 3),
                        **self.preparer.timings,
                    },
                )
            if not failed:
                return
            todo = failed
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    async def _prepare_guarded(self, slot: PairSlot, delay: float) -> bool:
        try:
            async with self._preparing:
                if self.holds(slot):
                    await self.preparer.prepare_one(slot)
                    if self.committer.healing(slot):  # asked while it was not ready
                        self.committer.launch([slot])
            return True
        except Exception as exc:
            log.error(
                "could not prepare pair; retrying",
                extra={
                    "agent": slot.pair.agent,
                    "partition": slot.pair.partition,
                    "error": repr(exc),
                    "retry_in_s": delay,
                },
            )
            self.denials.note(slot.key, exc, "Read", preparing=True)
            return False

    def heal(self) -> asyncio.Task[None]:
        """After the broker was lost: every pair held commits once more, adding every
        partition it writes (see `hanging`); a pair not ready heals once prepared.
        Asked under the lock, between rounds (never while a revoke commits)."""
        task = asyncio.create_task(self._heal())
        self._heals.add(task)
        task.add_done_callback(self._heals.discard)
        return task

    async def _heal(self) -> None:
        async with self.lock:
            slots = [s for s in self.slots.values() if not s.discarded]
            for slot in slots:
                self.committer.heal(slot, self.preparer.written(slot))
        log.info(
            "kafka broker answers again: every pair commits once more", extra={"pairs": len(slots)}
        )

    # --- what the committer asks of the holder ---------------------------------------------

    async def fenced(self, slot: PairSlot) -> None:
        """Another instance owns the pair now: listed as dropped until the next assignment."""
        if self.holds(slot):
            self.dropped.add(slot.key)
        await self.drop(slot)

    def retry(self, slot: PairSlot) -> None:
        """Prepare the pair again with a fresh producer, after its denials' backoff."""
        self.start_prepare([slot], after=self.denials.backoff([slot.key]))

    def pause(self, slot: PairSlot) -> None:
        assignment = self.consumer.assignment()
        live = [tp for tp in slot.tps() if tp in assignment]
        if live:
            self.consumer.pause(*live)

    # --- giving pairs up -------------------------------------------------------------------

    async def drop(self, slot: PairSlot, notify: bool = True) -> None:
        self.committer.forget(slot.key)
        if self.holds(slot):
            del self.slots[slot.key]
            self.denials.forget(slot.key)
            for tp in slot.tps():
                self.by_tp.pop(tp, None)
            await self.checkpoint.close(slot.key)
        if notify:
            self.changed()

    def discard(self, slot: PairSlot) -> None:
        """Forget a pair entirely; it stays listed as dropped until the next assignment.

        Its producer is closed once its commit under way (if any) ended and no round
        runs: stopping a producer inside a transaction leaves that await hanging forever.
        """
        slot.discarded = True
        slot.ready = False
        self.committer.forget(slot.key)
        if not self.holds(slot):
            return
        del self.slots[slot.key]
        self.denials.forget(slot.key)
        for tp in slot.tps():
            self.by_tp.pop(tp, None)
        self.dropped.add(slot.key)
        producer = self.checkpoint.detach(slot.key)
        inflight = self.committer.under_way(slot.key)
        _keep(self._closers, self._close_after_round(producer, inflight))

    async def _close_after_round(
        self, producer: AIOKafkaProducer | None, inflight: asyncio.Task[None] | None
    ) -> None:
        if inflight is not None:  # its transaction may still complete: let it
            await asyncio.gather(asyncio.shield(inflight), return_exceptions=True)
        async with self.lock:
            await stop_producer(producer)

    async def close(self, commit: bool) -> None:
        """Shutdown: commit what ready pairs decided (only after a clean stop), close
        every producer. Nothing here raises."""
        for heal in list(self._heals):  # nothing is asked of pairs being given up
            heal.cancel()
        async with self.lock:
            self.cancel_prepares()
            self.committer.unpace_all()  # the final commit below takes their rounds
            await self.committer.drain()  # commits under way end (committed or rewound) first
            if commit:
                ready = [s for s in self.slots.values() if s.ready and s.pair.has_pending()]
                try:
                    await self.committer.commit(ready)
                except Exception:
                    log.exception("final commit failed")
            await self.checkpoint.close_all()
            self.slots.clear()
            self.by_tp.clear()
        if self._closers:  # producers of pairs given up mid-round: they need the lock
            await asyncio.gather(*list(self._closers), return_exceptions=True)
