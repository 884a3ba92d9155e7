"""GatewayClient and agents of a group (many agents on one set of topics), on the real broker.

No gateway here: what the client writes is read back from the group's requests
topic, and the group's events are written as its agents (the bridge) write them,
each naming its agent in the `agui-agent` header.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from gateway.client import GatewayClient, UnknownAgent
from gateway.client.runs import RunTap, RunWatch
from gateway.settings import AgentGroup, Settings
from tests.client.test_client import settings_for
from tests.integration.support import Namespace, collect, header

pytestmark = pytest.mark.integration

GROUP = "team"


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(GROUP, partitions=2)
    return namespace


def group_settings(ns: Namespace) -> Settings:
    return settings_for(ns).model_copy(
        update={
            "groups": {
                GROUP: AgentGroup(agents=["alpha", "beta"]),
                "ghost": AgentGroup(agents=["casper"]),  # no topics made for it
            }
        }
    )


def run_events(thread: str, run: str, text: str) -> list[dict]:
    return [
        {"type": "RUN_STARTED", "threadId": thread, "runId": run},
        {"type": "TEXT_MESSAGE_START", "messageId": f"m-{run}", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": f"m-{run}", "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": f"m-{run}"},
        {"type": "RUN_FINISHED", "threadId": thread, "runId": run},
    ]


async def read(tap: RunTap, watch: RunWatch) -> list[dict]:
    return [e.value async for e in tap.events(watch, 30, 30)]


async def test_requests_go_to_the_groups_topic_naming_their_agent(ns: Namespace) -> None:
    async with GatewayClient(
        reply_topic=f"{ns.prefix}.replies", create_reply_topic=True, settings=group_settings(ns)
    ) as client:
        assert await client.requests_topic("alpha") == ns.requests(GROUP)
        assert await client.requests_topic("beta") == ns.requests(GROUP)
        for agent in ("alpha", "beta"):
            body = orjson.dumps({"threadId": "same", "runId": f"r-{agent}", "messages": []})
            await client.publish(agent, "same", body)
        with pytest.raises(UnknownAgent, match="casper.*ghost"):
            await client.publish("casper", "same", b"{}")
    records = await collect(ns.bootstrap, ns.requests(GROUP), count=2, settle=1.0)
    assert len(records) == 2
    assert {header(r, "agui-agent"): orjson.loads(r.value)["runId"] for r in records} == {
        "alpha": "r-alpha",
        "beta": "r-beta",
    }
    assert all(r.key == b"same" for r in records)
    assert all(header(r, "agui-reply-to") == f"{ns.prefix}.replies" for r in records)


async def test_two_agents_of_a_group_on_one_thread_id_never_see_each_others_events(
    ns: Namespace,
) -> None:
    async with GatewayClient(
        reply_topic=f"{ns.prefix}.replies", create_reply_topic=True, settings=group_settings(ns)
    ) as client:
        tap = await client.tap("alpha")
        assert tap is await client.tap("beta")  # one reader of the group's events topic
        assert tap.topic == ns.events(GROUP)
        alpha = tap.watch("same", "r-1", "alpha")
        beta = tap.watch("same", "r-1", "beta")  # even the same run id
        reading = asyncio.gather(read(tap, alpha), read(tap, beta))
        producer = AIOKafkaProducer(bootstrap_servers=ns.bootstrap, acks="all")
        await producer.start()
        try:
            runs = {
                "alpha": run_events("same", "r-1", "alpha speaking"),
                "beta": run_events("same", "r-1", "beta speaking"),
                None: run_events("same", "r-1", "no agent named"),
            }
            for step in range(5):  # interleaved, one partition (same key)
                for agent, events in runs.items():
                    headers = [("agui-agent", agent.encode())] if agent else []
                    await producer.send_and_wait(
                        ns.events(GROUP),
                        orjson.dumps(events[step]),
                        key=b"same",
                        headers=headers,
                    )
        finally:
            await producer.stop()
        got_alpha, got_beta = await asyncio.wait_for(reading, 60)
    assert got_alpha == runs["alpha"]
    assert got_beta == runs["beta"]
