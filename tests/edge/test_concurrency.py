"""Many concurrent SSE streams through the edge: every stream complete and in order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.demo import events as ev
from tests.client.simulated_agent import SimulatedAgent
from tests.edge.support import EdgeProcess, post_run, sse_events
from tests.integration.support import GatewayProcess, Namespace

AGENT = "crowd"
WORDS = 6


def numbered_run(run_input: dict[str, Any]) -> list[dict[str, Any]]:
    thread, run = run_input["threadId"], run_input["runId"]
    return [
        ev.run_started(thread, run),
        *ev.text_message(f"m-{run}", [f"{run}:{i}" for i in range(WORDS)]),
        ev.run_finished(thread, run, ev.success()),
    ]


def assert_complete_and_in_order(run: str, status: int, raw: bytes) -> None:
    assert status == 200, raw[:500]
    events, _ = sse_events(raw)
    assert [e["type"] for e in events] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * WORDS,
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ], events
    assert events[0]["runId"] == run and events[-1]["runId"] == run
    assert [e["delta"] for e in events[2:-2]] == [f"{run}:{i} " for i in range(WORDS)]


@pytest.fixture
async def ns(kafka_bootstrap: str, create_topics) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=3)
    await create_topics([f"{namespace.prefix}.edge-replies"], partitions=3)
    return namespace


async def test_200_concurrent_streams_through_one_edge(ns: Namespace, tmp_path: Path) -> None:
    gateway = await GatewayProcess(ns, tmp_path).start()
    edge = await EdgeProcess(
        ns, tmp_path, edge_verdict_timeout_s=120, edge_run_start_timeout_s=180
    ).start()
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT), numbered_run)
    limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
    try:
        async with agent, httpx.AsyncClient(timeout=300, limits=limits) as http:

            async def one(i: int) -> None:
                run = f"run-{i}"
                body = {"threadId": f"thread-{i}", "runId": run, "messages": []}
                status, _, raw = await post_run(http, f"{edge.url}/agents/{AGENT}", body)
                assert_complete_and_in_order(run, status, raw)

            await asyncio.gather(*(one(i) for i in range(200)))
        # A fresh connection: the server may close a pooled one that sat idle past its
        # keep-alive while the last streams ran, and httpx does not retry on that.
        async with httpx.AsyncClient(timeout=30) as fresh:
            metrics = (await fresh.get(edge.url + "/metrics")).text
        assert 'agui_gateway_edge_requests_total{status="200",verdict="forward"} 200.0' in metrics
        assert 'agui_gateway_edge_streams_ended_total{end="closed"} 200.0' in metrics
        assert "agui_gateway_edge_open_streams 0.0" in metrics
    finally:
        await edge.stop()
        await gateway.stop()


async def test_edge_instances_side_by_side_share_a_reply_topic(
    ns: Namespace, tmp_path: Path
) -> None:
    gateway = await GatewayProcess(ns, tmp_path).start()
    edges = [
        await EdgeProcess(
            ns, tmp_path, name=f"edge{n}", edge_verdict_timeout_s=120, edge_run_start_timeout_s=180
        ).start()
        for n in range(2)
    ]
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT), numbered_run)
    try:
        async with agent, httpx.AsyncClient(timeout=300) as http:

            async def one(i: int) -> None:
                run = f"side-{i}"
                body = {"threadId": f"side-thread-{i}", "runId": run, "messages": []}
                url = f"{edges[i % 2].url}/agents/{AGENT}"
                status, _, raw = await post_run(http, url, body)
                assert_complete_and_in_order(run, status, raw)

            await asyncio.gather(*(one(i) for i in range(20)))
    finally:
        for edge in edges:
            await edge.stop()
        await gateway.stop()
