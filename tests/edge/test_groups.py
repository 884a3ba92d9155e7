"""The edge and a group of agents on one set of topics, over real HTTP and the real broker.

`POST /agents/alpha` and `POST /agents/beta` (agents of group `team`) publish to
`team`'s requests topic naming their agent, and each stream follows its own
agent's run on `team`'s events topic, though both runs share one thread id and
even one run id. The gateway's part (judging, forwarding) is played here by a
stand-in that forwards every request as the gateway does for a group: to the
group's run-requests topic with the request's `agui-agent` header, and a
`forward` reply naming the agent. The whole loop with the real gateway is in
`tests/edge/test_groups_loop.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.demo import events as ev
from gateway.demo import wire
from gateway.settings import Settings
from tests.client.simulated_agent import SimulatedAgent, header_agent
from tests.edge.support import EdgeProcess, post_run, sse_events
from tests.integration.support import Namespace

pytestmark = pytest.mark.integration

GROUP = "team"
GROUPS = orjson.dumps({GROUP: {"agents": ["alpha", "beta"]}}).decode()


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(GROUP, partitions=2)
    return namespace


class ForwardEverything:
    """Stands in for the gateway: every request on the group's requests topic is forwarded
    (same key, correlation id and agent header) and answered with a `forward` reply."""

    def __init__(self, ns: Namespace) -> None:
        self.ns = ns
        self.settings = Settings(bootstrap_servers=ns.bootstrap)
        self.task: asyncio.Task[None] | None = None
        self.forwarded: list[str | None] = []  # the agent each forwarded request named

    async def __aenter__(self) -> ForwardEverything:
        self.consumer = await wire.consumer_at_end(
            self.settings, self.ns.requests(GROUP), f"{self.ns.prefix}-stand-in", "stand-in"
        )
        self.producer = await wire.producer(self.settings, "stand-in")
        self.task = asyncio.create_task(self._forward())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        await wire.stop_quietly(self.consumer, self.producer)

    async def _forward(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    await self._one(record)

    async def _one(self, record: Any) -> None:
        headers = dict(record.headers)
        agent = header_agent(record.headers)
        run_input = orjson.loads(record.value)
        self.forwarded.append(agent)
        await self.producer.send_and_wait(
            self.ns.run_requests(GROUP),
            record.value,
            key=record.key,
            headers=[(k, v) for k, v in record.headers if k != "agui-reply-to"],
        )
        reply = {
            "verdict": "forward",
            "agent": agent,
            "threadId": record.key.decode(),
            "runId": run_input["runId"],
            "correlationId": headers["agui-correlation-id"].decode(),
            "warnings": [],
            "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        }
        await self.producer.send_and_wait(
            headers["agui-reply-to"].decode(),
            orjson.dumps(reply),
            headers=[("agui-correlation-id", headers["agui-correlation-id"])],
        )


def speaks(run_input: dict[str, Any]) -> list[dict[str, Any]]:
    """A run whose text says who was asked (`forwardedProps.who`)."""
    thread, run = run_input["threadId"], run_input["runId"]
    who = run_input["forwardedProps"]["who"]
    return [
        ev.run_started(thread, run),
        *ev.text_message(f"m-{who}", [who, "speaking", "here"]),
        ev.run_finished(thread, run, ev.success()),
    ]


async def test_two_agents_of_a_group_with_one_thread_id_never_see_each_others_events(
    ns: Namespace, tmp_path: Path
) -> None:
    edge = await EdgeProcess(ns, tmp_path, groups=GROUPS).start()
    agents = SimulatedAgent(
        ns.bootstrap, ns.run_requests(GROUP), ns.events(GROUP), script=speaks, gap_s=0.05
    )
    try:
        async with ForwardEverything(ns) as stand_in, agents, httpx.AsyncClient(timeout=60) as http:
            answers = await asyncio.gather(
                *(
                    post_run(
                        http,
                        f"{edge.url}/agents/{who}",
                        {
                            "threadId": "same",
                            "runId": "r-1",  # one run id too: only the agent tells them apart
                            "messages": [],
                            "forwardedProps": {"who": who},
                        },
                    )
                    for who in ("alpha", "beta")
                )
            )
            assert sorted(stand_in.forwarded, key=str) == ["alpha", "beta"]
            assert sorted(agents.served, key=str) == ["alpha", "beta"]
            for who, (status, _, raw) in zip(("alpha", "beta"), answers, strict=True):
                assert status == 200, raw
                events, _ = sse_events(raw)
                assert [e["type"] for e in events] == [
                    "RUN_STARTED",
                    "TEXT_MESSAGE_START",
                    *["TEXT_MESSAGE_CONTENT"] * 3,
                    "TEXT_MESSAGE_END",
                    "RUN_FINISHED",
                ]
                text = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
                assert "".join(text).split() == [who, "speaking", "here"]

            # an agent no group names, with no topics of its own: 404
            status, _, raw = await post_run(
                http, f"{edge.url}/agents/gamma", {"threadId": "t", "runId": "r"}
            )
            assert status == 404 and orjson.loads(raw)["error"] == "unknown_agent"
    finally:
        await edge.stop()
