"""Warm standbys: replicas of other instances' pairs, read from their changelogs.

The group's leader names each instance's standby units in its assignment
(pairassign.py). `Standbys.place` takes them: one `Replica` per unit's changelog
partition, all read by one reader of their own (`read_committed`, no group) in a
background task, continuously, as the owner commits. Read-only: a standby writes
nothing and decides nothing.

When a unit it keeps warm becomes one of this instance's own pairs (its owner
died or left), `place` hands the replica over and the pair's restore `take`s it:
the restore then reads, under the pair's fence as always, only the changelog
past the replica's position (restore.py). A replica is only a head start: the
store the restore ends with is the one a whole read would build. A replica that
has not reached the changelog's end within `STALE_S` is not handed over (a
compacted changelog drops a tombstone `delete.retention.ms` after it was
written, Kafka's default 24 h: a replica that far behind could miss one).

A replica holds what the pair's own store would (its changelog's threads, as
bytes until read), and the owner's sweeps delete threads from both alike:
`standby_threads` counts them.

How far behind the replicas are shows in records (`lag`, the changelogs' stable
ends minus their positions) and in seconds (`lag_seconds_max`, `behind_seconds`):
how long the worst replica has been behind, from the last time a check of its
position found it at its changelog's end. Both come from the checks the reader
makes anyway (those of the partitions just read, and all of them once a second),
so the seconds cost no request, and a replica that keeps up shows 0. While the
reader fails, the replicas count as behind since their last check at the end
(their records' lag stays as last seen).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.kafka.assign.pairassign import Unit
from gateway.kafka.assign.replica import Replica
from gateway.kafka.wire import clients
from gateway.settings import Settings

log = logging.getLogger("gateway.standby")

STALE_S = 3600.0  # a replica not caught up within this long is not handed over
READ_WAIT_MS = 1000  # the reader's longest wait for records
REPORT_S = 1.0  # the gauges are told at most this often
RETRY_S = 1.0  # after a failed read


@dataclass(frozen=True)
class StandbyReport:
    held: int  # standby partitions held
    lag: int  # records behind the changelogs' stable ends, summed
    lag_max: int  # the worst replica's
    threads: int  # threads held in replicas
    lag_seconds_max: float = 0.0  # the worst replica's time behind (behind_seconds)


def behind_seconds(
    lag: int | None, caught_up_at: float | None, placed_at: float, now: float
) -> float:
    """How long a replica has been behind its changelog's stable end as of `now`: 0 when
    its latest check found it at the end (`lag` 0); else the time since a check last
    did (`caught_up_at`), or since it was placed if none ever did (`lag` None: not
    checked yet)."""
    if lag == 0:
        return 0.0
    since = caught_up_at if caught_up_at is not None else placed_at
    return max(0.0, now - since)


class Standbys:
    def __init__(
        self,
        settings: Settings,
        changelog_of: Callable[[str], tuple[str, Callable[[str], str | None]]],
        report: Callable[[StandbyReport], None] = lambda report: None,
    ) -> None:
        """`changelog_of(owner)`: the owner's changelog topic and how its keys map to
        threadIds; `report`: told what the gauges show."""
        self.settings = settings
        self.changelog_of = changelog_of
        self.report = report
        self.replicas: dict[TopicPartition, Replica] = {}
        self.handoff: dict[TopicPartition, Replica] = {}  # to this instance's own pairs
        self.lag: dict[TopicPartition, int] = {}
        self.placed_at: dict[TopicPartition, float] = {}  # when each replica was made
        self.failing = False  # the latest read failed: the lags are not known now
        self._reader: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._reported = 0.0

    def tp_of(self, unit: Unit) -> TopicPartition | None:
        owner, partition = unit
        if owner.startswith("topic:"):
            return None  # a topic no owner claims has no changelog
        return TopicPartition(self.changelog_of(owner)[0], partition)

    async def place(self, standby: Iterable[Unit], active: Iterable[Unit]) -> None:
        """The units to keep warm now, and this instance's own: a replica of one of its
        own is handed over (for its restore to `take`), one of neither is dropped."""
        await self._stop_reading()
        own = {tp for tp in map(self.tp_of, active) if tp is not None}
        now = time.monotonic()
        self.handoff = {
            tp: replica
            for tp, replica in self.replicas.items()
            if tp in own
            and replica.caught_up_at is not None
            and now - replica.caught_up_at < STALE_S
        }
        replicas: dict[TopicPartition, Replica] = {}
        for unit in standby:
            tp = self.tp_of(unit)
            if tp is None or tp in own:
                continue  # never a standby of its own pair
            replicas[tp] = self.replicas.get(tp) or Replica(self.changelog_of(unit[0])[1])
        self.replicas = replicas
        self.lag = {tp: self.lag[tp] for tp in replicas if tp in self.lag}
        self.placed_at = {tp: self.placed_at.get(tp, now) for tp in replicas}
        if self.handoff:
            log.info(
                "standby replicas handed over",
                extra={"pairs": len(self.handoff), "threads": sum(map(len, self.handoff.values()))},
            )
        if replicas:
            self._task = asyncio.create_task(self._read(replicas))
        self._report(force=True)

    def take(self, tp: TopicPartition) -> Replica | None:
        """The replica handed over for one of this instance's own pairs (once)."""
        return self.handoff.pop(tp, None)

    async def close(self) -> None:
        await self._stop_reading()
        self.replicas, self.handoff = {}, {}
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await clients.stop(self._reader)
            self._reader = None

    async def _stop_reading(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _read(self, replicas: dict[TopicPartition, Replica]) -> None:
        """Read the replicas' changelogs on, until cancelled by the next `place`."""
        while True:
            try:
                reader = await self._open()
                reader.assign(list(replicas))
                for tp, replica in replicas.items():
                    if replica.position is not None:
                        reader.seek(tp, replica.position)  # else from the beginning
                last_full = 0.0
                while True:
                    batch = await reader.getmany(timeout_ms=READ_WAIT_MS)
                    self.failing = False
                    for tp, messages in batch.items():
                        kept = replicas.get(tp)
                        if kept is not None:
                            kept.apply(messages)
                    now = time.monotonic()
                    # positions move past control records too: looked up for the
                    # partitions read now, and for all of them once a second
                    full = now - last_full >= REPORT_S
                    if full:
                        last_full = now
                    for tp in replicas if full else batch:
                        await self._reached(reader, tp, replicas[tp], now)
                    self._report()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a standby is a head start: it waits and reads on
                log.warning("standby replicas not read", extra={"error": repr(exc)})
                self.failing = True  # behind since their last check at the end
                self._report()
                await asyncio.sleep(RETRY_S)

    async def _reached(
        self, reader: AIOKafkaConsumer, tp: TopicPartition, replica: Replica, now: float
    ) -> None:
        end = reader.last_stable_offset(tp)
        if end is None:
            return  # not fetched yet
        position = await reader.position(tp)
        replica.reached(position, end, now)
        self.lag[tp] = max(0, end - (replica.position or 0))

    async def _open(self) -> AIOKafkaConsumer:
        if self._reader is None:
            reader = clients.changelog_reader(self.settings, f"{self.settings.client_id}-standby")
            await reader.start()
            self._reader = reader
        return self._reader

    def _report(self, force: bool = False, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if not force and now - self._reported < REPORT_S:
            return
        self._reported = now
        lags = [self.lag.get(tp, 0) for tp in self.replicas]
        behind = [
            behind_seconds(
                None if self.failing else self.lag.get(tp),
                r.caught_up_at,
                self.placed_at.get(tp, now),
                now,
            )
            for tp, r in self.replicas.items()
        ]
        self.report(
            StandbyReport(
                held=len(self.replicas),
                lag=sum(lags),
                lag_max=max(lags, default=0),
                threads=sum(map(len, self.replicas.values())),
                lag_seconds_max=round(max(behind, default=0.0), 3),
            )
        )
