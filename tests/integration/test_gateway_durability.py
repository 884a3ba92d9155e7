"""Ordering, restarts, rebalances and refusals, on the real broker.

Every request carries a unique correlation id; a read_committed consumer of the
outputs must see each decided exactly once: no duplicate and no gap.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import orjson
import pytest

from tests.integration.support import GatewayProcess, Namespace, collect, header, produce, values

AGENT = "ops"


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    return Namespace(kafka_bootstrap)


def thread_events(thread: str) -> list[tuple[str, dict]]:
    return [
        (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": f"{thread}-r1"}),
        (thread, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "thinking"}),
        (
            thread,
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": f"{thread}-r1",
                "outcome": {
                    "type": "interrupt",
                    "interrupts": [
                        {"id": "a", "reason": "tool_call"},
                        {"id": "b", "reason": "input_required"},
                    ],
                },
            },
        ),
    ]


def request_for(thread: str, good: bool) -> dict:
    entries = [{"interruptId": "a", "status": "resolved", "payload": {"ok": True}}]
    if good:
        entries.append({"interruptId": "b", "status": "cancelled"})
    return {"threadId": thread, "runId": f"{thread}-r2", "messages": [], "resume": entries}


async def send_requests(ns: Namespace, threads: list[str], pause: float = 0.0) -> None:
    """One request per thread (even index good, odd uncovered), correlation id = thread."""
    for index, thread in enumerate(threads):
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(thread, request_for(thread, index % 2 == 0))],
            headers=[("agui-correlation-id", thread.encode())],
        )
        if pause:
            await asyncio.sleep(pause)


async def assert_exactly_once(ns: Namespace, threads: list[str]) -> None:
    good = {t for i, t in enumerate(threads) if i % 2 == 0}
    bad = set(threads) - good
    forwarded = await collect(
        ns.bootstrap, ns.run_requests(AGENT), count=len(good), timeout=90, settle=3.0
    )
    rejected = await collect(ns.bootstrap, ns.rejections, count=len(bad), timeout=60, settle=1.0)
    fwd = Counter(header(r, "agui-correlation-id") for r in forwarded)
    rej = Counter(orjson.loads(r.value)["correlationId"] for r in rejected)
    assert [c for c, n in fwd.items() if n > 1] == [], "duplicate forwards"
    assert [c for c, n in rej.items() if n > 1] == [], "duplicate rejections"
    assert set(fwd) == good, f"forward gap: missing {sorted(good - set(fwd))[:5]}"
    assert set(rej) == bad, f"rejection gap: missing {sorted(bad - set(rej))[:5]}"
    assert {r["reasons"][0]["code"] for r in values(rejected)} == {"uncovered_interrupt"}


async def wait_metric(
    gw: GatewayProcess, sample: str, at_least: float, timeout: float = 60
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    seen = 0.0
    while asyncio.get_running_loop().time() < deadline:
        seen = sum(
            float(line.rsplit(" ", 1)[1])
            for line in (await asyncio.to_thread(gw.metrics)).splitlines()
            if line.startswith(sample)
        )
        if seen >= at_least:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"{sample} reached {seen}, wanted {at_least}\n{gw.log_tail()}")


async def test_resume_right_after_run_finished_waits_for_lagging_events(ns, tmp_path) -> None:
    """The events side is 20k records behind when the resume arrives: it is still forwarded."""
    await ns.create_agent(AGENT, partitions=1)
    thread = "race"
    backlog = [(thread, {"type": "RUN_STARTED", "threadId": thread, "runId": "r1"})]
    backlog += [
        (thread, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x" * 40})
        for _ in range(20_000)
    ]
    backlog.append(
        (
            thread,
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": "r1",
                "outcome": {
                    "type": "interrupt",
                    "interrupts": [{"id": "i1", "reason": "tool_call"}],
                },
            },
        )
    )
    await produce(ns.bootstrap, ns.events(AGENT), backlog)
    await produce(
        ns.bootstrap,
        ns.requests(AGENT),
        [
            (
                thread,
                {
                    "threadId": thread,
                    "runId": "r2",
                    "messages": [],
                    "resume": [{"interruptId": "i1", "status": "resolved", "payload": True}],
                },
            )
        ],
    )
    # Small polls hold the events side back: the request is fetched long before RUN_FINISHED.
    gw = await GatewayProcess(ns, tmp_path, max_poll_records=200).start()
    try:
        forwarded = values(await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, timeout=60))
        assert [f["runId"] for f in forwarded] == ["r2"]
        rejected = await collect(ns.bootstrap, ns.rejections, count=1, timeout=2)
        assert rejected == []
        metrics = await asyncio.to_thread(gw.metrics)
        # merge waits are counted over all agents (metrics_agent_detail's default)
        assert "\nagui_gateway_merge_wait_expired_total 0.0\n" in metrics
    finally:
        await gw.stop()


async def test_live_back_to_back_publication_is_judged_on_fresh_state(ns, tmp_path) -> None:
    await ns.create_agent(AGENT, partitions=2)
    gw = await GatewayProcess(ns, tmp_path).start()
    try:
        threads = [f"live-{i}" for i in range(20)]
        for thread in threads:
            await asyncio.gather(
                produce(ns.bootstrap, ns.events(AGENT), thread_events(thread)),
                produce(ns.bootstrap, ns.requests(AGENT), []),
            )
            await produce(
                ns.bootstrap,
                ns.requests(AGENT),
                [(thread, request_for(thread, True))],
                headers=[("agui-correlation-id", thread.encode())],
            )
        forwarded = await collect(
            ns.bootstrap, ns.run_requests(AGENT), count=20, timeout=60, settle=1.0
        )
        assert sorted(header(r, "agui-correlation-id") for r in forwarded) == sorted(threads)
    finally:
        await gw.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_restart_restores_state_and_decides_each_request_once(ns, tmp_path, sig) -> None:
    await ns.create_agent(AGENT, partitions=3)
    threads = [f"t{i:03d}" for i in range(120)]
    first = await GatewayProcess(ns, tmp_path, name="first").start()
    events = [e for t in threads for e in thread_events(t)]
    await produce(ns.bootstrap, ns.events(AGENT), events)
    await wait_metric(first, 'agui_gateway_runs_closed_total{outcome="interrupt"}', len(threads))
    # Half the requests are decided by the first instance; it dies mid-stream.
    sender = asyncio.create_task(send_requests(ns, threads, pause=0.01))
    await wait_metric(first, "agui_gateway_requests_total{", 20)
    assert await first.stop(sig) in (0, -signal.SIGKILL)
    second = await GatewayProcess(ns, tmp_path, name="second").start()
    try:
        await sender
        await assert_exactly_once(ns, threads)
        status, body = second.http("/readyz")
        assert status == 200, body
    finally:
        await second.stop()


async def test_two_instances_split_partitions_and_survive_rebalance(ns, tmp_path) -> None:
    await ns.create_agent(AGENT, partitions=4)
    threads = [f"r{i:03d}" for i in range(160)]
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in thread_events(t)])
    a = await GatewayProcess(ns, tmp_path, name="a").start()
    sender = asyncio.create_task(send_requests(ns, threads[:80], pause=0.01))
    await wait_metric(a, "agui_gateway_requests_total{", 10)
    b = await GatewayProcess(ns, tmp_path, name="b").start()  # rebalance under load
    try:
        assigned = []
        for gw in (a, b):
            # a re-prepares the pairs it keeps after the rebalance (stable offsets wait
            # for its own last transaction): ready again soon, not at b's first ready
            await gw.wait_ready(60)
            status, body = gw.http("/readyz")
            assert status == 200, body
            assigned.append(set(orjson.loads(body)["assigned"]))
        assert assigned[0] and assigned[1] and not assigned[0] & assigned[1]
        assert len(assigned[0] | assigned[1]) == 4
        await sender
        # the second half is sent once b holds its partitions (the first may all have
        # been decided by a while b started): b decides some of it for certain
        sender = asyncio.create_task(send_requests(ns, threads[80:], pause=0.01))
        await wait_metric(b, "agui_gateway_requests_total{", 1)
        await a.stop(signal.SIGTERM)  # and another rebalance: b takes everything
        await sender
        await assert_exactly_once(ns, threads)
    finally:
        await a.stop()
        await b.stop()


async def test_mismatched_partition_counts_are_refused(ns, tmp_path, create_topics) -> None:
    await create_topics([ns.events(AGENT)], partitions=2)
    await create_topics([ns.requests(AGENT)], partitions=3)
    gw = await GatewayProcess(ns, tmp_path).start()
    try:
        deadline = asyncio.get_running_loop().time() + 30
        refused = {}
        while asyncio.get_running_loop().time() < deadline and not refused:
            refused = orjson.loads(gw.http("/readyz")[1]).get("refused", {})
            await asyncio.sleep(0.3)
        assert AGENT in refused
        assert "2 partitions" in refused[AGENT] and "3" in refused[AGENT]
        assert "co-partitioned" in refused[AGENT]
        assert "co-partitioned topics must have the same count" in gw.log_tail(200)
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [("x", {"threadId": "x", "runId": "r", "messages": []})],
        )
        await asyncio.sleep(2)
        decided = [
            line
            for line in (await asyncio.to_thread(gw.metrics)).splitlines()
            # counted over all agents by default: only this agent exists here
            if line.startswith("agui_gateway_requests_total{") and not line.endswith(" 0.0")
        ]
        assert decided == []
        assert 'agui_gateway_agent_refused{agent="ops"} 1.0' in await asyncio.to_thread(gw.metrics)
    finally:
        await gw.stop()


async def test_a_failed_continuation_leaves_its_interrupts_open_across_a_restart(
    ns, tmp_path
) -> None:
    """NOTES.md reading 1 on the real broker, with the state restored by a second instance."""
    await ns.create_agent(AGENT, partitions=1)
    thread = "cont"
    first = await GatewayProcess(ns, tmp_path, name="first").start()
    try:
        await produce(ns.bootstrap, ns.events(AGENT), thread_events(thread))
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(thread, request_for(thread, True))],
            headers=[("agui-correlation-id", b"answer")],
        )
        forwarded = await collect(ns.bootstrap, ns.run_requests(AGENT), count=1, timeout=60)
        assert [header(r, "agui-correlation-id") for r in forwarded] == ["answer"]
        # the continuation the answer started fails before closing
        await produce(
            ns.bootstrap,
            ns.events(AGENT),
            [
                (thread, {"type": "RUN_STARTED", "threadId": thread, "runId": f"{thread}-r2"}),
                (thread, {"type": "RUN_ERROR", "message": "the continuation failed"}),
            ],
        )
        await wait_metric(first, 'agui_gateway_runs_closed_total{outcome="failed"}', 1)
    finally:
        assert await first.stop(signal.SIGTERM) == 0
    second = await GatewayProcess(ns, tmp_path, name="second").start()
    try:
        uncovered = {"threadId": thread, "runId": f"{thread}-r3", "messages": []}
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(thread, uncovered), (thread, request_for(thread, True))],
            headers=[("agui-correlation-id", b"retry")],
        )
        rejected = values(await collect(ns.bootstrap, ns.rejections, count=1, timeout=60))
        assert [(r["reasons"][0]["code"], r["reasons"][0]["interruptId"]) for r in rejected] == [
            ("uncovered_interrupt", "a")
        ]
        # the retry identical to the failed continuation's request is forwarded again
        forwarded = await collect(
            ns.bootstrap, ns.run_requests(AGENT), count=2, timeout=60, settle=1.0
        )
        assert [header(r, "agui-correlation-id") for r in forwarded] == ["answer", "retry"]
        assert values(forwarded)[1]["resume"] == request_for(thread, True)["resume"]
    finally:
        await second.stop()
