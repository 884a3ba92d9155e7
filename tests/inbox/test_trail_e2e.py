"""The audit trail's reader on the real broker: a topic per agent found as it appears (the
threads of an agent whose topic is missing say so, and nothing stops), read from its
window back, and a verdict read again by a restarted reader kept once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from gateway.inbox.trail import TrailReader
from gateway.inbox.view import InboxView
from tests.inbox.support import audit, check, opened
from tests.integration.inprocess import settings_for
from tests.integration.support import Namespace


async def until(test: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.1)


async def send(bootstrap: str, topic: str, *records: tuple[bytes, int]) -> None:
    """(value, timestamp ms) records, keyed as the gateway keys them (one thread)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for value, at_ms in records:
            await producer.send_and_wait(topic, value, key=b"bot/t1", timestamp_ms=at_ms)
    finally:
        await producer.stop()


async def test_a_missing_topic_is_said_then_found_and_read_from_its_window_back(
    kafka_bootstrap: str, create_topics, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.inbox")
    ns = Namespace(kafka_bootstrap)
    settings = settings_for(ns, inbox_verdicts_lookback_s=3600).model_copy(
        update={"audit_topic": f"{ns.prefix}.{{agent}}.audit"}
    )
    view = InboxView(10)
    stop = asyncio.Event()
    reader = TrailReader(settings, view)
    reader.discover_s = 0.5
    task = asyncio.create_task(reader.run(stop))
    try:
        await until(lambda: view.trail.state == "reading")
        view.apply(*_opened(), {})
        missing = view.thread("bot", "t1")
        assert missing is not None
        check("thread", missing)
        assert (missing["verdicts"], missing["verdictsUnknownReason"]) == (None, "topic_missing")
        assert "the audit topic does not exist yet" in caplog.text

        topic = (await create_topics([f"{ns.prefix}.bot.audit"]))[0]
        now_ms = int(time.time() * 1000)
        await send(
            kafka_bootstrap,
            topic,
            (audit(verdict="reject", correlation="too-old", at_ms=now_ms - 7_200_000), now_ms - 7_200_000),
            (audit(verdict="reject", codes=("uncovered_interrupt",), correlation="c1", at_ms=now_ms - 60_000), now_ms - 60_000),
            (audit(run="n2", correlation="c2", at_ms=now_ms), now_ms),
        )  # fmt: skip
        await until(lambda: len((view.thread("bot", "t1") or {}).get("verdicts") or []) == 2)
        await until(lambda: view.trail.caught_up)
        found = view.thread("bot", "t1")
        assert found is not None
        check("thread", found)
        assert [v["correlationId"] for v in found["verdicts"]] == ["c2", "c1"]  # not too-old
        assert found["verdicts"][1]["reasons"] == ["uncovered_interrupt"]
        assert found["verdictsKnown"] and found["verdictsCaughtUp"]
        since = found["verdictsSinceMs"]
        assert since is not None and now_ms - 3_700_000 < since < now_ms - 3_500_000

        # another agent's topic still missing: its threads say so, bot's are read
        view.apply(*_opened("cat"), {})
        cat = view.thread("cat", "t1")
        assert cat is not None and cat["verdictsUnknownReason"] == "topic_missing"
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)

    # a reader started again (after a failure) reads the same window: kept once
    stop = asyncio.Event()
    view.trail.caught_up = False
    again = TrailReader(settings, view)
    task = asyncio.create_task(again.run(stop))
    try:
        await until(lambda: view.trail.caught_up)
        answer = view.thread("bot", "t1")
        assert answer is not None
        assert [v["correlationId"] for v in answer["verdicts"]] == ["c2", "c1"]
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 30)


def _opened(agent: str = "bot") -> tuple[bytes, bytes]:
    return opened(agent, "t1", "a", 1_000)
