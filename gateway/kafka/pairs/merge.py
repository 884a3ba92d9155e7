"""The merge: a pair's two inputs, buffered, taken in timestamp order.

A request is taken only once the events side is known to be read up to it: an
event is buffered before it, or the fence (`Fence`: how far the events log
reached when the request had arrived) shows the events position past it. Until
then the merge waits, at most `merge_max_wait_s` per request; a request still
waiting then is handed out as lagging (the pair rejects it, retryable), never
judged against an events side that is not read up to it. Pure bookkeeping: no
Kafka, no clock (time comes in).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any

from gateway.codec.records import InRecord, from_consumer


@dataclass(frozen=True, slots=True)
class Fence:
    """Events up to `events_end` were in the log when requests up to `covers` had arrived."""

    covers: int  # highest request offset the fence covers
    events_end: int  # the events partition's end offset, looked up after those requests


class Step(enum.Enum):
    EVENT = "event"  # apply it
    REQUEST = "request"  # judge it
    LAGGING = "lagging"  # the events side lagged past the wait: reject it, retryable


@dataclass(frozen=True, slots=True)
class Next:
    kind: Step
    record: Any
    waited: float = 0.0  # seconds a lagging request waited


class Merge:
    def __init__(self, max_wait_s: float) -> None:
        self.max_wait_s = max_wait_s
        self.events: deque[Any] = deque()  # aiokafka's records (as read or not), InRecords
        self.requests: deque[InRecord] = deque()
        self.fence: Fence | None = None
        self.waiting_since: float | None = None

    def take(
        self,
        side: str,
        records: list[Any],
        received: float = 0.0,
        where: tuple[str, int] | None = None,
    ) -> None:
        """Buffer consumed records of one side: aiokafka's (`where` they were read when
        they were read as they are: `from_consumer`) or InRecords."""
        if side == "events":
            self.events.extend(records)
        else:
            self.requests.extend(from_consumer(r, received, where) for r in records)

    def needs_fence(self) -> bool:
        if not self.requests:
            return False
        return self.fence is None or self.requests[0].offset > self.fence.covers

    def set_fence(self, events_end: int) -> None:
        if self.requests:
            self.fence = Fence(self.requests[-1].offset, events_end)

    def has_work(self) -> bool:
        return bool(self.events or self.requests)

    def clear(self) -> None:
        """Forget what is buffered (it is read again from the last commit)."""
        self.events.clear()
        self.requests.clear()
        self.fence = None
        self.waiting_since = None

    def next(self, events_position: int | None, mono_now: float) -> Next | None:
        """The next record to take, or None: nothing buffered, or a request must wait."""
        events, requests = self.events, self.requests
        if not (events or requests):
            return None
        if not requests or (events and events[0].timestamp <= requests[0].timestamp):
            return Next(Step.EVENT, events.popleft())
        head = requests[0]
        if not events and not self._fenced(head, events_position):
            if self.waiting_since is None:
                self.waiting_since = mono_now
            waited = mono_now - max(self.waiting_since, head.received)
            if waited < self.max_wait_s:
                return None  # the events side lags: wait for it, bounded
            # The wait goes on for the next request (it lags too).
            return Next(Step.LAGGING, requests.popleft(), waited)
        self.waiting_since = None
        return Next(Step.REQUEST, requests.popleft())

    def _fenced(self, head: InRecord, events_position: int | None) -> bool:
        fence = self.fence
        if fence is None or head.offset > fence.covers or events_position is None:
            return False
        return events_position >= fence.events_end
