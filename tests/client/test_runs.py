"""Routing a run's events to its watch (records built by hand; Kafka is in test_client.py)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest

from gateway.client.runs import RunNotStarted, RunOverflow, RunTap, RunTimedOut


@dataclass
class Record:
    key: bytes | None
    value: bytes | None


def rec(thread: str, event: dict) -> Record:
    return Record(thread.encode(), orjson.dumps(event))


def tap(buffer: int = 100) -> RunTap:
    return RunTap(consumer=None, topic="agui.a.events", buffer=buffer)  # type: ignore[arg-type]


async def drain(t: RunTap, watch, start: float = 0.5, end: float = 0.5) -> list[str]:
    return [e.type async for e in t.events(watch, start, end)]


async def test_a_watch_gets_its_run_only_from_its_run_started_to_its_close() -> None:
    t = tap()
    watch = t.watch("t1", "r2")
    for record in (
        rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}),  # another run
        rec("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"}),
        rec("t2", {"type": "RUN_STARTED", "threadId": "t2", "runId": "r2"}),  # another thread
        Record(b"t1", b"not json"),
        Record(None, b"{}"),
        rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r2"}),
        rec("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "y"}),
        rec("t1", {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r2"}),
        rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r3"}),  # after the close
    ):
        t._route(record)
    assert t.watching == 0  # closed: the watch is gone
    assert await drain(t, watch) == ["RUN_STARTED", "TEXT_MESSAGE_CONTENT", "RUN_FINISHED"]


async def test_a_run_error_before_the_start_ends_the_watch() -> None:
    t = tap()
    watch = t.watch("t1", "r1")
    t._route(rec("t1", {"type": "RUN_ERROR", "message": "agent down"}))
    assert await drain(t, watch) == ["RUN_ERROR"]


async def test_multi_line_json_is_sent_on_one_line() -> None:
    t = tap()
    watch = t.watch("t1", "r1")
    t._route(Record(b"t1", b'{"type": "RUN_STARTED",\n "threadId": "t1", "runId": "r1"}'))
    t._route(rec("t1", {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}))
    events = [e async for e in t.events(watch, 1, 1)]
    assert all(b"\n" not in e.json for e in events)
    assert orjson.loads(events[0].json)["runId"] == "r1"


async def test_timeouts_and_overflow_end_the_stream_with_their_code() -> None:
    t = tap(buffer=2)
    with pytest.raises(RunNotStarted) as not_started:
        await drain(t, t.watch("t1", "r1"), start=0.05, end=5)
    assert not_started.value.code == "run_not_started"

    watch = t.watch("t1", "r2")
    t._route(rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r2"}))
    with pytest.raises(RunTimedOut) as timed_out:
        await drain(t, watch, start=5, end=0.05)
    assert timed_out.value.code == "run_timeout"

    watch = t.watch("t1", "r3")
    t._route(rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r3"}))
    for _ in range(3):
        t._route(rec("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "z"}))
    assert t.watching == 0
    seen = []
    with pytest.raises(RunOverflow):
        async for event in t.events(watch, 5, 5):
            seen.append(event.type)
    assert seen == ["RUN_STARTED", "TEXT_MESSAGE_CONTENT"]
