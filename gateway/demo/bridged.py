"""`agui-gateway demo --real-agent`: a real agent behind the bridge, driven through the gateway.

Beside the simulated agents the demo then runs, in-process: the offline
pydantic-ai agent (`gateway.demo.real_agent`) served by uvicorn, the bridge
(`gateway.bridge`) for that agent's topics, and a `GatewayClient`
(`gateway.client`) that holds conversations with it through the gateway, one
new thread every `CONVERSATION_EVERY_S`, at most `MAX_CONVERSATIONS` at a time:

1. a request; the agent calls its tool, which needs approval: the run ends
   with an interrupt;
2. sometimes a bad resume first (the interrupt left uncovered, or a payload
   breaking its `responseSchema`): the gateway rejects it, the agent never sees it;
3. the approving resume: forwarded, the agent runs the tool, the run succeeds;
4. sometimes the same resume again: a duplicate, the tool does not run again.

The console shows the bridge's metrics for the agent next to the tool's real
call count and the approvals the gateway forwarded: they must be equal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.service import Bridge
from gateway.client import GatewayClient, Reply, encode_input
from gateway.client.runs import RunStreamError, RunWatch
from gateway.demo.console import Row, Section, by_label, pairs
from gateway.demo.real_agent import AgentCounters, ServedAgent
from gateway.demo.wire import DemoSetupError
from gateway.observe.metrics import PREFIX
from gateway.settings import BridgeAgent, Settings

log = logging.getLogger("gateway.demo.bridged")

CONVERSATION_EVERY_S = 1.0
MAX_CONVERSATIONS = 4
CLIENT_ID = "agui-demo-real"  # the client's Kafka client ids start with it
STEP_TIMEOUT_S = 30.0  # a verdict, or a run's end, not seen within this is given up
BAD_RESUME_P = 0.4
REPLAY_P = 0.3
READY_TIMEOUT_S = 60.0
DRAIN_S = 20.0  # after the traffic stops, the conversations in flight get this long
BRIDGE_STOP_S = 30.0
USER = [{"id": "u1", "role": "user", "content": "please pay alice 100"}]
RESULTS_SHOWN = ("success", "interrupt")


class StepFailed(RuntimeError):
    """A conversation step did not happen as the demo expected."""


@dataclass
class BridgedStats:
    conversations: int = 0
    completed: int = 0  # approved runs that ended with success
    approvals_forwarded: int = 0
    sent: Counter[str] = field(default_factory=Counter)  # request | bad_resume | approval | replay
    verdicts: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)  # "step: expected -> got"
    gave_up: Counter[str] = field(default_factory=Counter)  # step -> conversations given up


def run_input(thread: str, messages: list[Any], resume: list[Any] | None = None) -> dict[str, Any]:
    """A RunAgentInput (wire names) for the real agent's thread."""
    body: dict[str, Any] = {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:12]}",
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    if resume is not None:
        body["resume"] = resume
    return body


def history(events: list[dict[str, Any]]) -> list[Any]:
    """The messages a client holding the run's events sends next: the user's, the tool call."""
    start = next((e for e in events if e.get("type") == "TOOL_CALL_START"), None)
    if start is None:
        return USER
    args = "".join(e.get("delta", "") for e in events if e.get("type") == "TOOL_CALL_ARGS")
    call = {
        "id": start["toolCallId"],
        "type": "function",
        "function": {"name": start["toolCallName"], "arguments": args},
    }
    assistant = {
        "id": start.get("parentMessageId") or f"a-{start['toolCallId']}",
        "role": "assistant",
        "content": "",
        "toolCalls": [call],
    }
    return [*USER, assistant]


class BridgedClient:
    """Holds conversations with the real agent through the gateway, as a `GatewayClient`:
    its requests and verdicts, and each forwarded run's events, watched before it is sent."""

    def __init__(
        self,
        settings: Settings,
        agent: str,
        reply_topic: str,
        stats: BridgedStats,
        seed: int | None = None,
    ) -> None:
        self.agent = agent
        self.stats = stats
        self.rng = random.Random(seed)
        self.client = GatewayClient(
            reply_topic=reply_topic, settings=settings.model_copy(update={"client_id": CLIENT_ID})
        )
        self.conversations: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.client.start()

    async def close(self) -> None:
        for task in list(self.conversations):
            task.cancel()
        if self.conversations:
            await asyncio.wait(list(self.conversations), timeout=5)
        await self.client.stop()

    # --- conversations ----------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Start conversations until `stop`, then let those in flight end (bounded)."""
        while not stop.is_set():
            if len(self.conversations) < MAX_CONVERSATIONS:
                task = asyncio.create_task(self._conversation(stop))
                self.conversations.add(task)
                task.add_done_callback(self.conversations.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CONVERSATION_EVERY_S)

    async def drain(self) -> None:
        if self.conversations:
            await asyncio.wait(list(self.conversations), timeout=DRAIN_S)

    async def _conversation(self, stop: asyncio.Event) -> None:
        thread = f"real-{uuid.uuid4().hex[:12]}"
        self.stats.conversations += 1
        step = "request"
        try:
            watch = await self._forward(run_input(thread, USER), step)
            step = "interrupt"
            first = await self._closed(watch)
            outcome = first[-1].get("outcome") or {}
            if first[-1].get("type") != "RUN_FINISHED" or outcome.get("type") != "interrupt":
                raise StepFailed(f"the first run ended with {first[-1]}")
            interrupt = outcome["interrupts"][0]
            messages = history(first)
            if stop.is_set():
                return  # no new approval once the demo stops
            if self.rng.random() < BAD_RESUME_P:
                step = "bad_resume"
                if self.rng.random() < 0.5:
                    await self._send(run_input(thread, messages, []), "reject", step)
                else:
                    breaking = [
                        {
                            "interruptId": interrupt["id"],
                            "status": "resolved",
                            "payload": {"approved": "yes"},
                        }
                    ]
                    await self._send(run_input(thread, messages, breaking), "reject", step)
            step = "approval"
            approving = [
                {
                    "interruptId": interrupt["id"],
                    "status": "resolved",
                    "payload": {"approved": True},
                }
            ]
            approve = run_input(thread, messages, approving)
            watch = await self._forward(approve, step)
            self.stats.approvals_forwarded += 1
            step = "approved_run"
            second = await self._closed(watch)
            outcome = second[-1].get("outcome") or {"type": "success"}
            if second[-1].get("type") != "RUN_FINISHED" or outcome.get("type") != "success":
                raise StepFailed(f"the approved run ended with {second[-1]}")
            self.stats.completed += 1
            if self.rng.random() < REPLAY_P:
                step = "replay"
                await self._send(approve, "duplicate", step)
        except (StepFailed, TimeoutError, RunStreamError) as exc:
            self.stats.gave_up[step] += 1
            log.warning("real agent conversation given up", extra={"step": step, "error": str(exc)})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.stats.gave_up[step] += 1
            log.warning("real agent conversation failed", extra={"step": step, "error": repr(exc)})

    async def _forward(self, body: dict[str, Any], step: str) -> RunWatch:
        """Send a request expected to be forwarded, its run watched first: the watch."""
        thread_id, run_id, data = encode_input(body)
        self.stats.sent[step] += 1
        reply, watch = await self.client.open_run(
            self.agent, thread_id, run_id, data, STEP_TIMEOUT_S
        )
        self._verdict(reply, "forward", step)
        assert watch is not None  # forwarded
        return watch

    async def _send(self, body: dict[str, Any], expect: str, step: str) -> None:
        """Send a request whose verdict must be `expect`."""
        self.stats.sent[step] += 1
        self._verdict(await self.client.send(self.agent, body, STEP_TIMEOUT_S), expect, step)

    def _verdict(self, reply: Reply, expect: str, step: str) -> None:
        """Count the verdict; StepFailed (counted unexpected) unless it is `expect`."""
        verdict = str(reply.verdict)
        self.stats.verdicts[verdict] += 1
        if verdict != expect:
            self.stats.unexpected[f"{step}: {expect} -> {verdict}"] += 1
            raise StepFailed(f"{step}: expected {expect}, got {reply!r}")

    async def _closed(self, watch: RunWatch) -> list[dict[str, Any]]:
        """The watched run's events, through its closing one."""
        tap = await self.client.tap(self.agent)
        return [e.value async for e in tap.events(watch, STEP_TIMEOUT_S, STEP_TIMEOUT_S)]


def bridge_settings(settings: Settings, agent: str, url: str) -> Settings:
    """The demo's settings, with the bridge serving only the real agent at `url`."""
    return settings.model_copy(
        update={
            "bridge_agents": {agent: BridgeAgent(url=url, read_timeout_s=30.0)},
            "bridge_agent_pattern": None,
            "bridge_default": None,
            "bridge_group_id": f"{settings.bridge_group_id}.demo",
        }
    )


def bridged_section(
    agent: str, registry: CollectorRegistry, stats: BridgedStats, counters: AgentCounters
) -> Section:
    bridge = "agui_gateway_bridge_"

    def labelled(sample: str, label: str, always: tuple[str, ...] = ()) -> str:
        return pairs(by_label(registry, sample, agent, label), always)

    in_flight = registry.get_sample_value(bridge + "runs_in_flight", {"agent": agent}) or 0.0
    relayed = registry.get_sample_value(
        bridge + "events_total", {"agent": agent, "source": "agent"}
    )
    written = registry.get_sample_value(
        bridge + "events_total", {"agent": agent, "source": "bridge"}
    )
    unexpected = sum(stats.unexpected.values())
    gave_up = sum(stats.gave_up.values())
    rows = [
        Row(
            "bridge runs by result",
            labelled(bridge + "runs_total", "result", RESULTS_SHOWN),
        ),
        Row("bridge runs in flight", str(int(in_flight))),
        Row(
            "events relayed",
            f"{int(relayed or 0)} from the agent, {int(written or 0)} by the bridge",
        ),
        Row("agent HTTP errors", labelled(bridge + "agent_http_errors_total", "status")),
        Row("agent HTTP requests", str(counters.requests), "runs the agent was asked for"),
        Row(
            "tool calls / approvals",
            f"{counters.tool_calls} / {stats.approvals_forwarded}",
            "the tool's real calls next to the approving resumes the gateway forwarded",
        ),
        Row("conversations started", str(stats.conversations)),
        Row("requests sent by kind", pairs(stats.sent)),
        Row("approved runs completed", str(stats.completed)),
        Row("gateway verdicts", labelled(PREFIX + "requests_total", "verdict")),
        Row("rejection reasons", labelled(PREFIX + "rejections_total", "reason")),
        Row(
            "unexpected verdicts",
            str(unexpected) + (f" ({pairs(stats.unexpected)})" if unexpected else ""),
        ),
    ]
    if gave_up:
        rows.append(Row("conversations given up", pairs(stats.gave_up)))
    return Section(f"real agent {agent!r} (pydantic-ai, behind the bridge)", tuple(rows))


class RealAgentDemo:
    """The agent, the bridge and the client, started and stopped as one part of the demo."""

    def __init__(
        self,
        settings: Settings,
        agent: str,
        reply_topic: str,
        registry: CollectorRegistry,
    ) -> None:
        self.agent = agent
        self.settings = settings
        self.registry = registry
        self.stats = BridgedStats()
        self.served = ServedAgent()
        self.client = BridgedClient(settings, agent, reply_topic, self.stats)
        self.bridge: Bridge | None = None
        self.bridge_task: asyncio.Task[None] | None = None
        self.stop_bridge = asyncio.Event()

    def section(self) -> Section:
        return bridged_section(self.agent, self.registry, self.stats, self.served.counters)

    async def start(self) -> None:
        """Serve the agent, run the bridge until it is ready, start the client."""
        logging.getLogger("httpx").setLevel(logging.WARNING)  # the bridge logs its runs
        try:
            url = await self.served.start()
        except (OSError, TimeoutError) as exc:
            raise DemoSetupError(f"the real agent cannot be served: {exc!r}") from None
        self.bridge = Bridge(
            bridge_settings(self.settings, self.agent, url), BridgeMetrics(self.registry)
        )
        self.bridge_task = asyncio.create_task(self.bridge.run(self.stop_bridge), name="bridge")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.bridge.ready()[0] or not self.bridge.partitions:
            if self.bridge_task.done():
                problem = self.bridge_task.exception() if not self.bridge_task.cancelled() else None
                raise DemoSetupError(f"the bridge stopped while starting: {problem!r}")
            if time.monotonic() > deadline:
                raise DemoSetupError(
                    f"the bridge was not ready within {READY_TIMEOUT_S:.0f} s: "
                    f"{self.bridge.ready()[1]}"
                )
            await asyncio.sleep(0.1)
        await self.client.start()

    def converse(self, stop: asyncio.Event) -> asyncio.Task[None]:
        """Start conversations until `stop`."""
        return asyncio.create_task(self.client.run(stop), name="real agent client")

    def watched(self) -> list[asyncio.Task[None]]:
        return [self.bridge_task] if self.bridge_task is not None else []

    async def drain(self) -> None:
        await self.client.drain()

    async def close(self) -> None:
        """Stop the client, the bridge, the agent (in that order), each bounded."""
        await self.client.close()
        self.stop_bridge.set()
        if self.bridge_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.bridge_task), BRIDGE_STOP_S)
            if not self.bridge_task.done():
                self.bridge_task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self.bridge_task, 5)
        await self.served.stop()
