"""Routing a run's events to its watch (records built by hand; Kafka is in test_client.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
import pytest

from gateway.client.runs import RunNotStarted, RunOverflow, RunTap, RunTimedOut


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def rec(thread: str, event: dict, agent: str | None = None) -> Record:
    headers = (("agui-agent", agent.encode()),) if agent is not None else ()
    return Record(thread.encode(), orjson.dumps(event), headers)


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


async def test_what_has_arrived_is_taken_together_within_the_batch_bound() -> None:
    t = tap(buffer=100)
    watch = t.watch("t1", "r1")
    t._route(rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}))
    for word in ("a", "b", "c"):
        t._route(rec("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": word}))
    t._route(rec("t1", {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}))
    batches = [[e.type for e in b] async for b in t.batches(watch, 1, 1)]
    assert batches == [["RUN_STARTED"] + ["TEXT_MESSAGE_CONTENT"] * 3 + ["RUN_FINISHED"]]
    assert t.watching == 0

    # a batch stops once it holds max_bytes of JSON (at least one event each)
    watch = t.watch("t1", "r2")
    t._route(rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r2"}))
    for word in ("a", "b", "c"):
        t._route(rec("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": word}))
    t._route(rec("t1", {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r2"}))
    one = len(orjson.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "a"}))
    sizes = [len(b) async for b in t.batches(watch, 1, 1, max_bytes=one + 1)]
    assert sum(sizes) == 5 and max(sizes) == 2 and len(sizes) == 3, sizes


async def test_events_before_an_overflow_come_before_its_error() -> None:
    t = tap(buffer=2)
    watch = t.watch("t1", "r1")
    t._route(rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}))
    for _ in range(3):
        t._route(rec("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "z"}))
    seen = []
    with pytest.raises(RunOverflow):
        async for batch in t.batches(watch, 5, 5):
            seen.append([e.type for e in batch])
    assert seen == [["RUN_STARTED", "TEXT_MESSAGE_CONTENT"]]
    assert t.watching == 0


async def test_a_run_past_its_deadline_times_out_though_events_keep_coming() -> None:
    t = tap(buffer=1000)
    watch = t.watch("t1", "r1")
    t._route(rec("t1", {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}))
    seen = 0
    with pytest.raises(RunTimedOut):
        async for batch in t.batches(watch, 5, 0.05):
            seen += len(batch)
            await asyncio.sleep(0.02)  # the reader is slow; the agent always has more queued
            for _ in range(3):
                t._route(
                    rec("t1", {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "z"})
                )
    assert 1 <= seen < 100


def _run(agent: str | None, thread: str, run: str, text: str) -> list[Record]:
    return [
        rec(thread, {"type": "RUN_STARTED", "threadId": thread, "runId": run}, agent),
        rec(thread, {"type": "TEXT_MESSAGE_CONTENT", "messageId": run, "delta": text}, agent),
        rec(thread, {"type": "RUN_FINISHED", "threadId": thread, "runId": run}, agent),
    ]


async def test_on_a_groups_topic_a_watch_gets_its_agents_events_only() -> None:
    """Two agents of one group, one thread id: interleaved, each gets its own run only;
    an event naming no agent is no one's."""
    t = RunTap(consumer=None, topic="agui.team.events", buffer=100)  # type: ignore[arg-type]
    alpha = t.watch("same", "r-a", "alpha")
    beta = t.watch("same", "r-b", "beta")
    a, b = _run("alpha", "same", "r-a", "for alpha"), _run("beta", "same", "r-b", "for beta")
    stray = _run(None, "same", "r-a", "for no one")
    for record in [stray[0], a[0], b[0], stray[1], a[1], b[1], a[2], stray[2], b[2]]:
        t._route(record)
    assert t.watching == 0
    got_a = [e async for e in t.events(alpha, 0.5, 0.5)]
    got_b = [e async for e in t.events(beta, 0.5, 0.5)]
    assert [e.value.get("delta") for e in got_a] == [None, "for alpha", None]
    assert [e.value.get("delta") for e in got_b] == [None, "for beta", None]


async def test_on_an_agents_own_topic_a_header_naming_another_agent_is_not_its_event() -> None:
    t = RunTap(consumer=None, topic="agui.solo.events", buffer=100, agent="solo")  # type: ignore[arg-type]
    watch = t.watch("t1", "r1")
    assert watch.agent == "solo"
    for record in [
        *_run("other", "t1", "r1", "not solo's"),
        _run(None, "t1", "r1", "solo's")[0],  # no header: the topic's own agent
        _run("solo", "t1", "r1", "solo's")[1],
        _run(None, "t1", "r1", "solo's")[2],
    ]:
        t._route(record)
    got = [e.value.get("delta") async for e in t.events(watch, 0.5, 0.5)]
    assert got == [None, "solo's", None]
