"""GatewayClient with a real `agui-gateway run` and a group of simulated agents.

Two agents of group `team` are sent runs on one thread id (and one run id) at
the same time; each `client.run` yields its own agent's run only, and each
verdict names its agent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from ag_ui.core import RunFinishedEvent, RunStartedEvent, TextMessageContentEvent

from gateway.client import ForwardReply, GatewayClient, RequestDuplicate
from gateway.demo import events as ev
from gateway.settings import AgentGroup
from tests.client.simulated_agent import SimulatedAgent
from tests.client.test_client import settings_for
from tests.integration.support import GatewayProcess, Namespace

pytestmark = pytest.mark.integration

GROUP = "team"
AGENTS = ("alpha", "beta")
GROUPS = orjson.dumps({GROUP: {"agents": list(AGENTS)}}).decode()


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(GROUP, partitions=2)
    return namespace


def speaks(run_input: dict[str, Any]) -> list[dict[str, Any]]:
    """A run whose text says who was asked (`forwardedProps.who`)."""
    thread, run = run_input["threadId"], run_input["runId"]
    who = run_input["forwardedProps"]["who"]
    return [
        ev.run_started(thread, run),
        *ev.text_message(f"m-{who}", [who, "speaking"]),
        ev.run_finished(thread, run, ev.success()),
    ]


async def test_two_agents_of_a_group_on_one_thread_id_each_get_their_own_run(
    ns: Namespace, tmp_path: Path, create_topics
) -> None:
    replies = (await create_topics([f"{ns.prefix}.replies"], partitions=1))[0]
    gateway = await GatewayProcess(ns, tmp_path, groups=GROUPS).start()
    settings = settings_for(ns).model_copy(
        update={"groups": {GROUP: AgentGroup(agents=list(AGENTS))}}
    )
    agents = SimulatedAgent(
        ns.bootstrap, ns.run_requests(GROUP), ns.events(GROUP), script=speaks, gap_s=0.05
    )

    async def converse(client: GatewayClient, who: str) -> list[Any]:
        run_input = {
            "threadId": "same",
            "runId": "r-1",
            "messages": [],
            "forwardedProps": {"who": who},
        }
        return [event async for event in client.run(who, run_input, timeout=30)]

    try:
        async with agents, GatewayClient(reply_topic=replies, settings=settings) as client:
            runs = await asyncio.gather(*(converse(client, who) for who in AGENTS))
            for who, events in zip(AGENTS, runs, strict=True):
                assert isinstance(events[0], RunStartedEvent) and events[0].run_id == "r-1"
                assert isinstance(events[-1], RunFinishedEvent)
                text = "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))
                assert text.split() == [who, "speaking"]
            assert sorted(agents.served, key=str) == sorted(AGENTS)
            # the same request again, for one agent: its duplicate, naming it
            again = await client.send(
                "alpha",
                {"threadId": "same", "runId": "r-1", "messages": [], "forwardedProps": {}},
                timeout=30,
            )
            assert not isinstance(again, ForwardReply) and again.agent == "alpha"
            with pytest.raises(RequestDuplicate):
                async for _ in client.run(
                    "beta",
                    {"threadId": "same", "runId": "r-1", "messages": [], "forwardedProps": {}},
                    timeout=30,
                ):
                    pass
    finally:
        await gateway.stop()
