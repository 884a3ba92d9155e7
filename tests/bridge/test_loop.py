"""The whole loop with real agents: request -> gateway -> bridge -> agent -> events -> gateway
-> interrupt -> resume -> the approved action runs exactly once.

One gateway and one bridge serve two real agents: pydantic-ai (its AG-UI adapter,
a tool with `requires_approval=True`) and LangGraph (ag-ui-langgraph, a node that
calls `interrupt()`).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest

from gateway.demo.bridged import run_input
from tests.bridge.agents import Counters, Served, approval_agent, langgraph_agent
from tests.bridge.support import BridgeProcess, TopicReader, bridge_settings, closed_runs
from tests.integration.support import GatewayProcess, Namespace, header, produce

pytestmark = pytest.mark.integration

PYDANTIC_AI = "payments"
LANGGRAPH = "approvals"
USER = [{"id": "u1", "role": "user", "content": "please pay alice"}]


def history_after(events: list[dict[str, Any]]) -> list[Any]:
    """The messages a client holding the history sends next (as @ag-ui/client builds them)."""
    start = next((e for e in events if e["type"] == "TOOL_CALL_START"), None)
    if start is None:
        return USER
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    call = {
        "id": start["toolCallId"],
        "type": "function",
        "function": {"name": start["toolCallName"], "arguments": args},
    }
    assistant = {
        "id": start.get("parentMessageId") or "a1",
        "role": "assistant",
        "content": "",
        "toolCalls": [call],
    }
    return USER + [assistant]


class Conversation:
    """One thread of one agent, through the gateway's requests topic and reply topic."""

    def __init__(self, ns: Namespace, agent: str, replies_topic: str, replies: TopicReader):
        self.ns = ns
        self.agent = agent
        self.thread = f"t-{uuid.uuid4().hex[:8]}"
        self.replies_topic = replies_topic
        self.replies = replies

    async def send(self, body: dict[str, Any], correlation: str) -> dict[str, Any]:
        """Send a request to the gateway; its verdict (the reply)."""
        await produce(
            self.ns.bootstrap,
            self.ns.requests(self.agent),
            [(self.thread, body)],
            headers=[
                ("agui-reply-to", self.replies_topic.encode()),
                ("agui-correlation-id", correlation.encode()),
            ],
        )

        def found(_: Any) -> list[Any]:
            return [
                orjson.loads(r.value)
                for r in self.replies.records
                if header(r, "agui-correlation-id") == correlation
            ]

        await self.replies.wait(lambda _: bool(found(_)))
        return found(None)[0]


async def scenario(convo: Conversation, events: TopicReader, counters: Counters, tag: str) -> None:
    thread = convo.thread
    # 1. a request: the agent asks for approval
    assert (await convo.send(run_input(thread, USER), f"{tag}-1"))["verdict"] == "forward"
    await events.wait(lambda _: closed_runs(events.thread(thread)) >= 1)
    run1 = events.thread(thread)
    assert run1[0]["type"] == "RUN_STARTED"
    assert run1[-1]["type"] == "RUN_FINISHED"
    assert run1[-1]["outcome"]["type"] == "interrupt"
    interrupt = run1[-1]["outcome"]["interrupts"][0]
    assert counters.requests == 1 and counters.tool_calls == 0
    mine = [r for r in events.records if r.key.decode() == thread]
    assert {header(r, "agui-correlation-id") for r in mine} == {f"{tag}-1"}

    # 2. resumes the gateway refuses never reach the agent
    messages = history_after(run1)
    uncovered = await convo.send(run_input(thread, messages, []), f"{tag}-uncovered")
    assert uncovered["verdict"] == "reject"
    assert [r["code"] for r in uncovered["reasons"]] == ["uncovered_interrupt"]
    breaking = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": "yes"}}
    ]
    bad = await convo.send(run_input(thread, messages, breaking), f"{tag}-bad")
    assert bad["verdict"] == "reject"
    assert {r["code"] for r in bad["reasons"]} == {"payload_schema_mismatch"}
    assert counters.requests == 1

    # 3. the approving resume: the approved action runs, the run succeeds
    approving = [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
    ]
    approve = run_input(thread, messages, approving)
    assert (await convo.send(approve, f"{tag}-approve"))["verdict"] == "forward"
    await events.wait(lambda _: closed_runs(events.thread(thread)) >= 2)
    run2 = events.thread(thread)[len(run1) :]
    assert run2[0]["type"] == "RUN_STARTED"
    assert run2[-1]["type"] == "RUN_FINISHED"
    assert run2[-1].get("outcome", {"type": "success"})["type"] == "success"
    assert counters.tool_calls == 1
    assert counters.requests == 2

    # 4. the same resume again: a duplicate; the action does not run again
    assert (await convo.send(approve, f"{tag}-replay"))["verdict"] == "duplicate"
    await events.poll(1.5)
    assert closed_runs(events.thread(thread)) == 2
    assert counters.requests == 2
    assert counters.tool_calls == 1


async def test_real_agents_behind_gateway_and_bridge(
    ns: Namespace, create_topics, tmp_path
) -> None:
    await asyncio.gather(
        ns.create_agent(PYDANTIC_AI, partitions=2), ns.create_agent(LANGGRAPH, partitions=1)
    )
    replies_topic = (await create_topics([f"{ns.prefix}.replies"], partitions=1))[0]
    pyd_app, pyd_counters = approval_agent()
    lg_app, lg_counters = langgraph_agent()
    async with Served(pyd_app) as pyd, Served(lg_app) as lg:
        endpoints = {PYDANTIC_AI: {"url": pyd.url}, LANGGRAPH: {"url": lg.url}}
        gateway = await GatewayProcess(ns, tmp_path, "gateway").start()
        bridge = await BridgeProcess(
            ns, tmp_path, "bridge", **bridge_settings(ns, endpoints)
        ).start()
        try:
            async with TopicReader(ns.bootstrap, replies_topic) as replies:
                for agent, counters in ((PYDANTIC_AI, pyd_counters), (LANGGRAPH, lg_counters)):
                    async with TopicReader(ns.bootstrap, ns.events(agent)) as events:
                        convo = Conversation(ns, agent, replies_topic, replies)
                        await scenario(convo, events, counters, agent)
            metrics = bridge.metrics()
            for agent in (PYDANTIC_AI, LANGGRAPH):
                for result in ("interrupt", "success"):
                    line = (
                        f'agui_gateway_bridge_runs_total{{agent="{agent}",result="{result}"}} 1.0'
                    )
                    assert line in metrics
        finally:
            await bridge.stop()
            await gateway.stop()
