"""The whole loop with a real pydantic-ai agent: request -> gateway -> bridge -> agent -> events
-> gateway -> interrupt -> resume -> the approved tool runs exactly once."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

from tests.bridge.agents import Served, approval_agent
from tests.bridge.support import BridgeProcess, TopicReader, bridge_settings, closed_runs
from tests.integration.support import GatewayProcess, Namespace, header, produce

pytestmark = pytest.mark.integration

AGENT = "payments"
FIRST = {
    "threadId": "",
    "runId": "",
    "messages": [{"id": "u1", "role": "user", "content": "please pay alice"}],
    "tools": [],
    "context": [],
    "state": {},
    "forwardedProps": {},
}


def first_input(thread: str) -> dict[str, Any]:
    return {**FIRST, "threadId": thread, "runId": f"run-{uuid.uuid4().hex[:8]}"}


def resume_input(
    thread: str, events: list[dict[str, Any]], entries: list[dict[str, Any]]
) -> dict[str, Any]:
    """The next input as a client holding the history builds it (as @ag-ui/client does)."""
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assistant = {
        "id": start.get("parentMessageId") or "a1",
        "role": "assistant",
        "content": "",
        "toolCalls": [
            {
                "id": start["toolCallId"],
                "type": "function",
                "function": {"name": start["toolCallName"], "arguments": args},
            }
        ],
    }
    return {
        **FIRST,
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "messages": FIRST["messages"] + [assistant],
        "resume": entries,
    }


async def test_real_agent_behind_gateway_and_bridge(ns: Namespace, create_topics, tmp_path) -> None:
    await ns.create_agent(AGENT, partitions=2)
    replies_topic = (await create_topics([f"{ns.prefix}.replies"], partitions=1))[0]
    app, counters = approval_agent()
    thread = f"t-{uuid.uuid4().hex[:8]}"

    async def send(body: dict[str, Any], correlation: str) -> None:
        await produce(
            ns.bootstrap,
            ns.requests(AGENT),
            [(thread, body)],
            headers=[
                ("agui-reply-to", replies_topic.encode()),
                ("agui-correlation-id", correlation.encode()),
            ],
        )

    async with Served(app) as agent:
        gateway = await GatewayProcess(ns, tmp_path, "gateway").start()
        bridge = await BridgeProcess(
            ns, tmp_path, "bridge", **bridge_settings(ns, {AGENT: {"url": agent.url}})
        ).start()
        try:
            async with (
                TopicReader(ns.bootstrap, ns.events(AGENT)) as events,
                TopicReader(ns.bootstrap, replies_topic) as replies,
            ):

                def verdict(correlation: str) -> list[Any]:
                    return [
                        orjson.loads(r.value)
                        for r in replies.records
                        if header(r, "agui-correlation-id") == correlation
                    ]

                async def reply(correlation: str) -> dict[str, Any]:
                    await replies.wait(lambda _: bool(verdict(correlation)))
                    return verdict(correlation)[0]

                # 1. a request: the agent asks for approval
                await send(first_input(thread), "c-1")
                assert (await reply("c-1"))["verdict"] == "forward"
                await events.wait(lambda _: closed_runs(events.thread(thread)) >= 1)
                run1 = events.thread(thread)
                finished = run1[-1]
                assert finished["type"] == "RUN_FINISHED"
                assert finished["outcome"]["type"] == "interrupt"
                interrupt = finished["outcome"]["interrupts"][0]
                assert counters.requests == 1 and counters.tool_calls == 0
                # the events carry the correlation id of the request that caused the run
                assert {header(r, "agui-correlation-id") for r in events.records} == {"c-1"}

                # 2. resumes the gateway refuses never reach the agent
                uncovered = resume_input(thread, run1, [])
                await send(uncovered, "c-uncovered")
                rejected = await reply("c-uncovered")
                assert rejected["verdict"] == "reject"
                assert [r["code"] for r in rejected["reasons"]] == ["uncovered_interrupt"]
                bad = resume_input(
                    thread,
                    run1,
                    [
                        {
                            "interruptId": interrupt["id"],
                            "status": "resolved",
                            "payload": {"approved": "yes"},
                        }
                    ],
                )
                await send(bad, "c-bad")
                rejected = await reply("c-bad")
                assert rejected["verdict"] == "reject"
                assert {r["code"] for r in rejected["reasons"]} == {"payload_schema_mismatch"}
                assert counters.requests == 1

                # 3. the approving resume: the tool runs, the run succeeds
                approve = resume_input(
                    thread,
                    run1,
                    [
                        {
                            "interruptId": interrupt["id"],
                            "status": "resolved",
                            "payload": {"approved": True},
                        }
                    ],
                )
                await send(approve, "c-approve")
                assert (await reply("c-approve"))["verdict"] == "forward"
                await events.wait(lambda _: closed_runs(events.thread(thread)) >= 2)
                run2 = events.thread(thread)[len(run1) :]
                assert run2[0]["type"] == "RUN_STARTED"
                assert run2[-1]["type"] == "RUN_FINISHED"
                assert run2[-1]["outcome"]["type"] == "success"
                assert counters.tool_calls == 1
                assert counters.requests == 2

                # 4. the same resume again: a duplicate, the tool does not run again
                await send(approve, "c-replay")
                assert (await reply("c-replay"))["verdict"] == "duplicate"
                await events.poll(2.0)
                assert closed_runs(events.thread(thread)) == 2
                assert counters.requests == 2
                assert counters.tool_calls == 1

            metrics = bridge.metrics()
            assert (
                f'agui_gateway_bridge_runs_total{{agent="{AGENT}",result="interrupt"}} 1.0'
                in metrics
            )
            assert (
                f'agui_gateway_bridge_runs_total{{agent="{AGENT}",result="success"}} 1.0' in metrics
            )
        finally:
            await bridge.stop()
            await gateway.stop()
