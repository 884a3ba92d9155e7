"""A backlog read in bounded memory, on the real broker.

With `pending_max_bytes` at its smallest (1 MiB), a catch-up of thousands of
interrupted threads whose states are about 3 KB each holds its pair back while its
commits are under way (`agui_gateway_fetch_held_back_total`), and still commits every
event once, keeps every thread, and forwards each answer queued behind the events once.
"""

from __future__ import annotations

import orjson
from aiokafka import AIOKafkaProducer

from gateway.codec import changelog
from tests.integration.inprocess import (
    eventually,
    forwarded_once,
    running,
    send_answer,
    settings_for,
)
from tests.integration.support import Namespace, collect

AGENT = "backlog"
THREADS = 4_000
MESSAGE = "Approve the transfer? " + "x" * 3_000  # each thread's state about 3 KB


def events_of(thread: str) -> list[bytes]:
    run = f"{thread}-r1"
    interrupt = {"id": "a", "reason": "tool", "message": MESSAGE}
    return [
        orjson.dumps({"type": "RUN_STARTED", "threadId": thread, "runId": run}),
        orjson.dumps(
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "outcome": {"type": "interrupt", "interrupts": [interrupt]},
            }
        ),
    ]


async def produce_backlog(bootstrap: str, topic: str, threads: list[str]) -> None:
    """Every thread's events, in order, sent in batches (not one round trip each)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for thread in threads:
            for value in events_of(thread):
                await producer.send(topic, value, key=thread.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def test_a_backlog_over_the_bound_is_held_back_and_nothing_is_lost(kafka_bootstrap: str):
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    threads = [f"t{i}" for i in range(THREADS)]
    await produce_backlog(ns.bootstrap, ns.events(AGENT), threads)
    answered = threads[::100]  # answers queued behind the whole backlog
    for thread in answered:
        await send_answer(ns, AGENT, thread)
    settings = settings_for(ns, pending_max_bytes=2**20)

    async with running(settings) as gateway:
        await eventually(lambda: gateway.ready()[0], "the gateway ready")
        assert gateway.assignment is not None
        slot = gateway.assignment.slots[(AGENT, 0)]
        await eventually(
            lambda: slot.committed.get(slot.events_tp) == 2 * THREADS,
            "every event committed",
            timeout=120,
        )
        await forwarded_once(ns, AGENT, answered)
        held = gateway.metrics.fetch_held_back._value.get()
        assert held >= 1, "the backlog was never held back"
        assert len(slot.pair.store) == THREADS

    written = await collect(ns.bootstrap, ns.changelog(AGENT), count=THREADS, timeout=60)
    latest = {r.key: r.value for r in written}
    assert len(latest) == THREADS
    assert all(len(changelog.decode(v).interrupts) == 1 for k, v in latest.items() if v)
