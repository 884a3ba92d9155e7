"""Several edges serving one agent, on the real broker: a shared reply topic, or one each.

Three `agui-gateway edge` processes in front of one agent: two share a reply topic,
the third has its own. Conversations run at once, each started through one edge and
resumed through another (as a load balancer may send a person's requests anywhere):
every answer reaches the edge that asked, with that request's own run, never
another's (an edge on the shared topic reads every reply on it and keeps those it
waits for).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest

from tests.client.simulated_agent import SimulatedAgent
from tests.edge.support import EdgeProcess, post_run, sse_events
from tests.integration.support import GatewayProcess, Namespace

AGENT = "desk"
CONVERSATIONS = 6


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(AGENT, partitions=2)
    return namespace


async def conversation(
    http: httpx.AsyncClient, first: EdgeProcess, then: EdgeProcess, n: int
) -> None:
    thread, run, again = f"t-{n}", f"r-{n}", f"r-{n}-resumed"
    status, _, raw = await post_run(
        http,
        f"{first.url}/agents/{AGENT}",
        {"threadId": thread, "runId": run, "messages": []},
    )
    assert status == 200, raw
    events, _ = sse_events(raw)
    assert {(e.get("threadId"), e.get("runId")) for e in events if "runId" in e} == {
        (thread, run)
    }  # its own run, not another conversation's
    assert events[-1]["outcome"]["type"] == "interrupt"
    # a resume that answers nothing: rejected, the 422 from the edge it was sent to
    status, _, raw = await post_run(
        http, f"{then.url}/agents/{AGENT}", {"threadId": thread, "runId": "x", "messages": []}
    )
    assert status == 422 and orjson.loads(raw)["threadId"] == thread, raw
    status, _, raw = await post_run(
        http,
        f"{then.url}/agents/{AGENT}",
        {
            "threadId": thread,
            "runId": again,
            "messages": [],
            "resume": [
                {
                    "interruptId": f"approve-{run}",
                    "status": "resolved",
                    "payload": {"approved": True},
                }
            ],
        },
    )
    assert status == 200, raw
    events, _ = sse_events(raw)
    assert {(e.get("threadId"), e.get("runId")) for e in events if "runId" in e} == {
        (thread, again)
    }
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "success"


async def test_edges_on_a_shared_reply_topic_or_their_own_each_get_their_own_answers(
    ns: Namespace, tmp_path: Path
) -> None:
    gateway = await GatewayProcess(ns, tmp_path).start()
    shared = [await EdgeProcess(ns, tmp_path, f"edge-{n}").start() for n in ("a", "b")]
    own = await EdgeProcess(
        ns, tmp_path, "edge-c", edge_reply_topic=f"{ns.prefix}.edge-replies-c"
    ).start()
    edges = [*shared, own]
    agent = SimulatedAgent(ns.bootstrap, ns.run_requests(AGENT), ns.events(AGENT))
    try:
        async with agent, httpx.AsyncClient(timeout=60) as http:
            await asyncio.gather(
                *(
                    conversation(http, edges[n % 3], edges[(n + 1) % 3], n)
                    for n in range(CONVERSATIONS)
                )
            )
    finally:
        for edge in edges:
            await edge.stop()
        await gateway.stop()
