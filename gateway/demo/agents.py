"""Simulated agents: they start conversations and run whatever the gateway forwards.

New conversations start at `rate` per second, each on a fresh threadId, and
publish their first run's events (keyed by threadId) to the events topic.
The agents also consume the run-requests topic: each forwarded request
starts the next run on its thread, under the request's runId.

The simulated agents are one agent on its own topics, or the agents of a group
sharing the group's topics (`members`): conversations go to the members in
turn, every event names its agent in the `agui-agent` header, and a forwarded
request is continued by the agent its header names (on a group's topics, a
request naming none is counted, not run).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gateway.codec.records import HEADER_AGENT
from gateway.demo import wire
from gateway.demo.runs import RunPlan, plan_run
from gateway.demo.stats import DemoStats
from gateway.kafka.wire.topics import AgentTopics
from gateway.settings import Settings

log = logging.getLogger("gateway.demo.agents")

Headers = Iterable[tuple[str, bytes | None]] | None

THREADS_KEPT = 50_000  # conversations remembered for continuation (oldest forgotten)
MAX_RUNS_IN_FLIGHT = 2_000
CONTINUE_AFTER_S = (0.5, 1.2)  # an agent picks a forwarded request up after this long
EVENT_GAP_S = (0.002, 0.02)  # pacing between a run's events
LATE_ERROR_AFTER_S = 0.05


@dataclass(slots=True)
class Conversation:
    depth: int = 0  # runs so far
    suspended: list[str] = field(default_factory=list)  # subagents awaiting a later run
    busy: bool = False  # a run is being published


class Agents:
    def __init__(
        self,
        settings: Settings,
        topics: AgentTopics,
        stats: DemoStats,
        rate: float,
        group_id: str,
        seed: int | None = None,
        members: list[str] | None = None,
        agent: str | None = None,
    ) -> None:
        self.settings = settings
        self.topics = topics
        # the agents played: the group's members, or the one agent owning the topics
        self.members = members or ([agent] if agent else [])
        self.grouped = bool(members)
        self.stats = stats
        self.rate = rate
        self.group_id = group_id
        self.rng = random.Random(seed)
        self.prefix = uuid.uuid4().hex[:6]
        self.conversations: OrderedDict[tuple[str | None, str], Conversation] = OrderedDict()
        self.tasks: set[asyncio.Task[None]] = set()
        self.producer: AIOKafkaProducer | None = None
        self.consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self.producer = await wire.producer(self.settings, "agui-demo-agents")
        self.consumer = await wire.consumer_at_end(
            self.settings, self.topics.run_requests, self.group_id, "agui-demo-agents"
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Start conversations and serve run requests until `stop`."""
        await asyncio.gather(self._start_conversations(stop), self._serve_requests(stop))

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)
        await wire.stop_quietly(self.consumer, self.producer)

    # --- conversations -----------------------------------------------------------------------

    async def _start_conversations(self, stop: asyncio.Event) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        count = 0
        while not stop.is_set():
            if len(self.tasks) < MAX_RUNS_IN_FLIGHT:
                count += 1
                thread_id = f"thread-{self.prefix}-{count}"
                agent = self.members[count % len(self.members)] if self.members else None
                self._remember((agent, thread_id), Conversation())
                self.stats.conversations += 1
                if agent is not None and self.grouped:
                    self.stats.conversations_by_agent[agent] += 1
                self._spawn((agent, thread_id), f"run-{uuid.uuid4().hex[:10]}", 0.0)
            else:
                self.stats.errors["agent runs in flight at the limit"] += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay < -1.0:
                next_at = time.monotonic()  # fell behind: do not burst to catch up
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                except TimeoutError:
                    pass

    def _remember(self, thread: tuple[str | None, str], conversation: Conversation) -> None:
        self.conversations[thread] = conversation
        while len(self.conversations) > THREADS_KEPT:
            self.conversations.popitem(last=False)

    def _spawn(self, thread: tuple[str | None, str], run_id: str, after_s: float) -> None:
        task = asyncio.create_task(self._run(thread, run_id, after_s))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, thread: tuple[str | None, str], run_id: str, after_s: float) -> None:
        agent, thread_id = thread
        conversation = self.conversations.get(thread)
        if conversation is None:
            return
        conversation.busy = True
        try:
            if after_s:
                await asyncio.sleep(after_s)
            plan = plan_run(self.rng, thread_id, run_id, conversation.depth, conversation.suspended)
            conversation.depth += 1
            conversation.suspended = list(plan.suspended)
            await self._publish(agent, thread_id, plan)
            self._count(plan)
            if plan.outcome != "interrupt":
                self.conversations.pop(thread, None)  # nothing will continue it
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.stats.errors["agent publish failed"] += 1
            log.warning("agent run failed", extra={"threadId": thread_id, "error": repr(exc)})
        finally:
            conversation.busy = False

    async def _publish(self, agent: str | None, thread_id: str, plan: RunPlan) -> None:
        assert self.producer is not None
        key = thread_id.encode()
        headers = [(HEADER_AGENT, agent.encode())] if agent is not None else []
        sent = []
        for event in plan.events:
            if event["type"] == "RUN_ERROR" and plan.late_error:
                await asyncio.sleep(LATE_ERROR_AFTER_S)
            sent.append(
                await self.producer.send(
                    self.topics.events, orjson.dumps(event), key=key, headers=headers
                )
            )
            self.stats.events += 1
            await asyncio.sleep(self.rng.uniform(*EVENT_GAP_S))
        await asyncio.gather(*sent)

    def _count(self, plan: RunPlan) -> None:
        self.stats.runs[plan.outcome] += 1
        for interrupt in plan.interrupts:
            self.stats.interrupts[interrupt["reason"]] += 1
        if plan.late_error:
            self.stats.late_errors += 1
        if plan.violation:
            self.stats.violations[plan.violation] += 1

    # --- run requests the gateway forwarded ------------------------------------------------

    async def _serve_requests(self, stop: asyncio.Event) -> None:
        assert self.consumer is not None
        while not stop.is_set():
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    self._continue(record.key, record.value, record.headers)

    def _continue(self, key: bytes | None, value: bytes | None, headers: Headers = ()) -> None:
        self.stats.run_requests += 1
        try:
            thread_id = (key or b"").decode()
            run_id = orjson.loads(value or b"")["runId"]
            agent = named_agent(headers)
        except (UnicodeDecodeError, orjson.JSONDecodeError, KeyError, TypeError):
            self.stats.errors["unreadable run request"] += 1
            return
        if agent is None and not self.grouped:
            agent = self.members[0] if self.members else None  # the topics' own agent
        elif agent is None:
            self.stats.errors["run request naming no agent"] += 1
            return
        conversation = self.conversations.get((agent, thread_id))
        if conversation is None:
            self.stats.errors["run request for a thread no agent knows"] += 1
            return
        if conversation.busy:
            self.stats.errors["run request while a run is active"] += 1
            return
        conversation.busy = True  # claimed now: a second request cannot start a parallel run
        self._spawn((agent, thread_id), str(run_id), self.rng.uniform(*CONTINUE_AFTER_S))


def named_agent(headers: Headers) -> str | None:
    """The agent a record names in its `agui-agent` header (UnicodeDecodeError if unreadable)."""
    for name, value in headers or ():
        if name == HEADER_AGENT and value is not None:
            return str(value.decode())
    return None
