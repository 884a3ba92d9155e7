"""A simulated AG-UI agent on Kafka, for tests: it runs what the gateway forwards.

It reads `agui.<agent>.run-requests` (a group consumer pinned at the end before
`start` returns) and, for each forwarded input, publishes a run's AG-UI events
to `agui.<agent>.events` keyed by threadId, under the input's runId. On a
group's topics it plays every agent of the group: a run's events carry the
`agui-agent` header of the request that caused it (`served` lists, in order,
the agent each request named, None for none). What a run
says is `script(input) -> events`. It stands in for the agent bridge with a real
agent: anything with the same `start`/`stop` (or `async with`) can replace it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from gateway.codec.records import HEADER_AGENT
from gateway.demo import events as ev
from gateway.demo import wire
from gateway.settings import Settings

Script = Callable[[dict[str, Any]], list[dict[str, Any]]]

APPROVAL_SCHEMA = ev.APPROVAL_SCHEMA


def approval_then_answer(run_input: dict[str, Any]) -> list[dict[str, Any]]:
    """A first run asks for approval (an interrupt); a resumed run answers and succeeds."""
    thread, run = run_input["threadId"], run_input["runId"]
    if not run_input.get("resume"):
        interrupt = {
            "id": f"approve-{run}",
            "reason": "approval_required",
            "message": "May I send the e-mail?",
            "responseSchema": APPROVAL_SCHEMA,
        }
        return [
            ev.run_started(thread, run),
            *ev.text_message(f"m-{run}", ["I", "need", "your", "approval"]),
            ev.run_finished(thread, run, ev.interrupted([interrupt])),
        ]
    return [
        ev.run_started(thread, run),
        *ev.text_message(f"m-{run}", ["Sent", "as", "approved"]),
        ev.run_finished(thread, run, ev.success()),
    ]


class SimulatedAgent:
    def __init__(
        self,
        bootstrap: str,
        run_requests_topic: str,
        events_topic: str,
        script: Script = approval_then_answer,
        gap_s: float = 0.0,
    ) -> None:
        self.settings = Settings(bootstrap_servers=bootstrap)
        self.run_requests_topic = run_requests_topic
        self.events_topic = events_topic
        self.script = script
        self.gap_s = gap_s
        self.inputs: list[dict[str, Any]] = []
        self.served: list[str | None] = []
        self._task: asyncio.Task[None] | None = None
        self._runs: set[asyncio.Task[None]] = set()

    async def start(self) -> SimulatedAgent:
        tag = uuid.uuid4().hex[:8]
        self.consumer = await wire.consumer_at_end(
            self.settings, self.run_requests_topic, f"sim-agent-{tag}", f"sim-agent-{tag}"
        )
        self.producer = await wire.producer(self.settings, f"sim-agent-{tag}")
        self._task = asyncio.create_task(self._serve())
        return self

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._runs) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await wire.stop_quietly(self.consumer, self.producer)

    async def __aenter__(self) -> SimulatedAgent:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    run_input = orjson.loads(record.value)
                    agent = header_agent(record.headers)
                    self.inputs.append(run_input)
                    self.served.append(agent)
                    task = asyncio.create_task(self._run(run_input, agent))
                    self._runs.add(task)
                    task.add_done_callback(self._runs.discard)

    async def _run(self, run_input: dict[str, Any], agent: str | None) -> None:
        key = run_input["threadId"].encode()
        headers = [(HEADER_AGENT, agent.encode())] if agent is not None else []
        for event in self.script(run_input):
            await self.producer.send_and_wait(
                self.events_topic, orjson.dumps(event), key=key, headers=headers
            )
            if self.gap_s:
                await asyncio.sleep(self.gap_s)


def header_agent(headers: Any) -> str | None:
    """The agent a record names in its `agui-agent` header, or None."""
    for name, value in headers or ():
        if name == HEADER_AGENT and value is not None:
            return str(value.decode())
    return None
