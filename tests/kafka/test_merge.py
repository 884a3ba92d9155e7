"""The merge: timestamp order, requests held until the events side is read up to them."""

from __future__ import annotations

from gateway.codec.records import InRecord
from gateway.kafka.pairs.merge import Merge, Step


def record(side: str, offset: int, timestamp: int, received: float = 0.0) -> InRecord:
    return InRecord(f"agui.bot.{side}", 0, offset, timestamp, 0, b"t", b"{}", (), received)


def drain(merge: Merge, position: int | None, now: float) -> list[tuple[Step, int]]:
    taken = []
    while (step := merge.next(position, now)) is not None:
        taken.append((step.kind, step.record.offset))
    return taken


def test_records_come_in_timestamp_order_an_event_first_on_a_tie() -> None:
    merge = Merge(max_wait_s=1.0)
    merge.take("events", [record("events", 0, 10), record("events", 1, 30)])
    merge.take("requests", [record("requests", 0, 10), record("requests", 1, 20)])
    assert drain(merge, None, 0.0)[:3] == [
        (Step.EVENT, 0),
        (Step.REQUEST, 0),
        (Step.REQUEST, 1),
    ]


def test_a_request_waits_for_the_fence_then_for_at_most_the_wait() -> None:
    merge = Merge(max_wait_s=1.0)
    merge.take("requests", [record("requests", 5, 10, received=100.0)])
    assert merge.needs_fence()
    merge.set_fence(events_end=8)
    assert not merge.needs_fence()
    assert drain(merge, 7, 100.2) == []  # the events side is not read up to the fence
    assert drain(merge, 8, 100.3) == [(Step.REQUEST, 5)]  # now it is


def test_a_request_still_waiting_after_the_wait_comes_out_lagging() -> None:
    merge = Merge(max_wait_s=1.0)
    merge.take("requests", [record("requests", 0, 10, received=100.0)])
    assert merge.next(None, 100.5) is None
    step = merge.next(None, 101.5)
    # the wait counts from when the merge first held it back (100.5), not from before
    assert step is not None and step.kind is Step.LAGGING and step.waited == 1.0
    merge.clear()
    assert not merge.has_work() and merge.fence is None and merge.waiting_since is None
