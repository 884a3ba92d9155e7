"""The committer: each pair's rounds committed one at a time, in the background, paced.

`launch` seals a pair's open round and commits it through the checkpoint while
the loop goes on judging the next one (a second pending layer over the one
committing); a slow commit holds back no other pair. `commit` commits pending
rounds now (a revoke, a shutdown); `drain` waits for the commits under way.
`heal` has a pair's next transaction add every partition it writes, and start
at once even with nothing to commit (see `hanging`: after the broker was lost).

What a failed commit does to the pair's place in the instance (pause it, drop
it when fenced, prepare it again) is asked of its `Holder`, the assignment:
the committer knows the checkpoint, never the assignment.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Protocol

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from gateway.kafka.exactly_once.checkpoint import Outcome, Strategy, Work
from gateway.kafka.exactly_once.pacing import CommitPacing
from gateway.kafka.pairs.round import Round
from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.kafka.wire.denials import Denials

log = logging.getLogger("gateway.runner")


class Holder(Protocol):
    """What the committer asks of whoever holds the pairs."""

    def holds(self, slot: PairSlot) -> bool:
        """Whether the slot is still the holder's current one for its pair."""
        ...

    def pause(self, slot: PairSlot) -> None:
        """Stop reading the pair's partitions (after a failed commit)."""
        ...

    async def fenced(self, slot: PairSlot) -> None:
        """Another instance owns the pair now: give it up."""
        ...

    def retry(self, slot: PairSlot) -> None:
        """Prepare the pair again (a fresh producer), after a backoff."""
        ...


class Committer:
    def __init__(
        self,
        checkpoint: Strategy,
        denials: Denials,
        holder: Holder,
        changed: Callable[[], None] = lambda: None,
        counted: Callable[[list[Round]], None] = lambda rounds: None,
        pacing: CommitPacing | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.denials = denials
        self.holder = holder
        self.changed = changed  # what the gauges show changed
        self.counted = counted  # rounds committed (their deltas move the gauges)
        # a floor on a pair's commits under load (off unless one is given)
        self.pacing = pacing if pacing is not None else CommitPacing()
        self._observers: list[Callable[[PairSlot, Round], None]] = []
        self._inflight: dict[PairKey, asyncio.Task[None]] = {}  # commits under way
        self._paced: dict[PairKey, asyncio.TimerHandle] = {}  # commits waiting for the floor
        # pairs to heal: their next transaction adds these partitions (see `heal`)
        self._healing: dict[PairKey, tuple[TopicPartition, ...]] = {}

    def observe(self, observer: Callable[[PairSlot, Round], None]) -> None:
        """Call `observer(slot, round)` each time a pair's round has committed (see
        `Assignment.observe_commits`); an observer that raises is logged."""
        self._observers.append(observer)

    # --- what is under way ---------------------------------------------------------------

    def in_flight(self, slot: PairSlot) -> bool:
        """Whether the pair's sealed round is being committed."""
        return slot.key in self._inflight

    def under_way(self, key: PairKey) -> asyncio.Task[None] | None:
        """The pair's commit under way, if any."""
        return self._inflight.get(key)

    def forget(self, key: PairKey) -> None:
        """The pair is given up: no paced commit starts for it, its floor is forgotten."""
        self._unpace(key)
        self.pacing.forget(key)
        self._healing.pop(key, None)

    def healing(self, slot: PairSlot) -> bool:
        """Whether the pair's heal has not committed yet."""
        return slot.key in self._healing

    def heal(self, slot: PairSlot, partitions: list[TopicPartition]) -> None:
        """Have the pair's next transaction add `partitions` and its committed offsets,
        and start it now (or once its commit under way ended, or once it is prepared
        again), whether or not it decided anything. Its COMMIT markers complete what a
        hanging transaction of the pair's producer left in them (see `hanging`); it is
        asked again until one commits."""
        self._healing[slot.key] = tuple(partitions)
        self.launch([slot])

    def unpace_all(self) -> None:
        """No paced commit starts by itself any more (a final commit takes their rounds)."""
        for key in list(self._paced):
            self._unpace(key)

    # --- committing in the background ----------------------------------------------------

    def launch(self, slots: list[PairSlot]) -> None:
        """Seal each pair's open round and commit it in the background.

        The loop goes on judging the next round meanwhile (a second pending layer
        over the one committing); a pair commits one round at a time, and a slow
        commit holds back no other pair. When a commit ends with decided requests
        waiting in the open round, their commit starts at once.
        """
        now = time.monotonic()
        for slot in slots:
            if self.in_flight(slot) or slot.discarded or not slot.ready:
                continue
            if slot.pair.sealed is not None:  # being committed now (`commit`)
                continue
            touch = self._healing.get(slot.key)
            if (slot.pair.round.empty() and touch is None) or not self.checkpoint.holds(slot.key):
                continue
            wait = self.pacing.wait(slot.key, slot.pair.round.size(), now) if touch is None else 0
            if wait > 0:  # the floor: this round keeps filling until then
                if slot.key not in self._paced:
                    self._paced[slot.key] = asyncio.get_running_loop().call_later(
                        wait, self._paced_launch, slot
                    )
                continue
            self._unpace(slot.key)
            self.pacing.began(slot.key, now)
            sealed = slot.pair.seal()
            if touch is None:
                work = Work(slot.key, sealed, slot.offsets_of(sealed))
            else:  # the offsets it committed, again, so the group's partition is marked too
                offsets = {**slot.committed, **slot.offsets_of(sealed)}
                work = Work(slot.key, sealed, offsets, touch)
            task = asyncio.create_task(self._commit_in_background(slot, work))
            self._inflight[slot.key] = task
            task.add_done_callback(functools.partial(self._landed, slot.key))

    def _paced_launch(self, slot: PairSlot) -> None:
        if self._paced.pop(slot.key, None) is not None and self.holder.holds(slot):
            self.launch([slot])

    def _unpace(self, key: PairKey) -> None:
        handle = self._paced.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _landed(self, key: PairKey, task: asyncio.Task[None] | None) -> None:
        if task is not None and self._inflight.get(key) is task:
            del self._inflight[key]

    async def _commit_in_background(self, slot: PairSlot, work: Work) -> None:
        try:
            done, retry = await self._commit_work(slot, work)
        except Exception:
            log.exception("internal error committing a round", extra={"agent": slot.key[0]})
            return
        self._landed(slot.key, asyncio.current_task())
        if retry:
            self.holder.retry(slot)
        elif done is not None and (slot.pair.round.decided_any or self.healing(slot)):
            self.launch([slot])  # decided requests (or a heal) wait on this commit: at once

    async def drain(self, slots: list[PairSlot] | None = None) -> None:
        """Wait for the commits under way (of `slots`, or all) to end."""
        keys = {s.key for s in slots} if slots is not None else None
        while True:  # a commit that ends with decided requests waiting starts the next
            tasks = [t for k, t in self._inflight.items() if keys is None or k in keys]
            if not tasks:
                return
            await asyncio.gather(*(asyncio.shield(t) for t in tasks), return_exceptions=True)

    # --- committing now -------------------------------------------------------------------

    async def commit(self, slots: list[PairSlot]) -> tuple[list[Round], list[PairSlot]]:
        """Commit each pair's pending rounds now (after any commit under way): the rounds
        committed, and the pairs that failed and must be prepared again."""
        await self.drain(slots)
        todo = [s for s in slots if not s.discarded and self.checkpoint.holds(s.key)]
        todo = [s for s in todo if not s.pair.round.empty()]
        works = [Work(s.key, s.pair.seal(), s.offsets_of(s.pair.sealed)) for s in todo]
        outcomes = await asyncio.gather(
            *(self._commit_work(s, w) for s, w in zip(todo, works, strict=True))
        )
        done = [r for r, _ in outcomes if r is not None]
        retry = [s for s, (_, again) in zip(todo, outcomes, strict=True) if again]
        return done, retry

    async def _commit_work(self, slot: PairSlot, work: Work) -> tuple[Round | None, bool]:
        """Commit one sealed round: (the round, if committed; whether to prepare again).

        A failed transaction leaves the pair not ready and without a producer: the
        failure may have put that producer in a fatal state where every later
        transaction fails, so the pair is prepared again with a fresh one (whose
        initialisation also fences any zombie holding the same transactional id).
        Both pending layers are forgotten and the pair rewound to the last commit.
        A fenced pair is given up: another instance owns it now.
        """
        (result,) = await self.checkpoint.commit([work])
        pair = slot.pair
        if result.outcome is Outcome.COMMITTED:
            # the heal asked, not one asked again while it committed (a new tuple each)
            if work.touch and self._healing.get(slot.key) is work.touch:
                del self._healing[slot.key]
            if self.denials.granted(slot.key):
                self.changed()
            slot.committed.update(work.offsets)
            pair.committed_round(work.round, time.monotonic())
            self.counted([work.round])
            for observer in self._observers:
                try:
                    observer(slot, work.round)
                except Exception:
                    log.exception("a commit observer failed")
            return work.round, False
        pair.aborted()
        if slot.discarded:
            return None, False  # its producer is closed by whoever discarded it
        slot.ready = False
        self.holder.pause(slot)  # never read past the committed offset
        if result.outcome is Outcome.FENCED:
            await self.holder.fenced(slot)
            return None, False
        assert result.error is not None
        if self.denials.note(slot.key, result.error):
            self.changed()
        await self.checkpoint.close(slot.key)
        try:
            await self.checkpoint.rewind(slot.tps(), slot.committed)
        except KafkaError as exc:
            # the group's offsets refused it, or aiokafka raised an error it kept for the
            # group: the pair stays paused, and its prepare, which follows, seeks to the
            # committed offsets again (with its own retries)
            if self.denials.note(slot.key, exc, "Read"):
                self.changed()
            else:
                log.warning(
                    "could not rewind a pair after its commit failed; it is prepared again",
                    extra={"agent": slot.key[0], "partition": slot.key[1], "error": repr(exc)},
                )
        return None, self.holder.holds(slot)
