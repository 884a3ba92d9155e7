"""Simulated clients: they learn interrupts from the events and answer them.

The clients consume the agent's events topic (their own group), and for each
run that closed with the interrupt outcome pick a scenario after a think
time and publish its requests to the requests topic (key = threadId, headers
naming the reply topic and a correlation id). They consume the reply topic to
count the gateway's verdicts and compare each with what the scenario expected.
On a group's topics a run's agent is the one its events name (`agui-agent`), and
the answers name it too; on an agent's own topics they name that agent.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gateway.codec.records import HEADER_AGENT, HEADER_CORRELATION_ID, HEADER_REPLY_TO
from gateway.demo import wire
from gateway.demo.agents import Headers, named_agent
from gateway.demo.scenarios import FORWARD, Interrupted, Send, choose
from gateway.demo.stats import DemoStats
from gateway.kafka.wire.topics import AgentTopics
from gateway.settings import Settings

log = logging.getLogger("gateway.demo.clients")

THINK_S = (0.3, 2.0)  # a client answers this long after it saw the interrupts
PENDING_KEPT_S = 60.0  # a request with no reply after this long is no longer awaited
MAX_ANSWERS_IN_FLIGHT = 5_000
SEEN_KEPT = 50_000
_FINISHED = b'{"type":"RUN_FINISHED"'


@dataclass(slots=True)
class Pending:
    send: Send
    sent_at: float  # monotonic
    seen_at: float  # monotonic: when the client saw the interrupts


class Clients:
    def __init__(
        self,
        settings: Settings,
        topics: AgentTopics,
        reply_topic: str,
        stats: DemoStats,
        group_prefix: str,
        seed: int | None = None,
        agent: str | None = None,
        grouped: bool = False,
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.agent = agent  # the topics' own agent (None on a group's topics)
        self.grouped = grouped
        self.reply_topic = reply_topic
        self.stats = stats
        self.group_prefix = group_prefix
        self.rng = random.Random(seed)
        self.pending: dict[str, Pending] = {}
        self.seen: OrderedDict[tuple[str | None, str, str], None] = OrderedDict()
        self.tasks: set[asyncio.Task[None]] = set()
        self.producer: AIOKafkaProducer | None = None
        self.events: AIOKafkaConsumer | None = None
        self.replies: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self.producer = await wire.producer(self.settings, "agui-demo-clients")
        self.events = await wire.consumer_at_end(
            self.settings, self.topics.events, f"{self.group_prefix}.clients", "agui-demo-clients"
        )
        self.replies = await wire.consumer_at_end(
            self.settings, self.reply_topic, f"{self.group_prefix}.replies", "agui-demo-replies"
        )

    async def answer(self, stop: asyncio.Event) -> None:
        """Watch for interrupts and answer them until `stop`."""
        assert self.events is not None
        while not stop.is_set():
            batch = await self.events.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    if record.value is not None and record.value.startswith(_FINISHED):
                        self._interrupted(record.key, record.value, record.headers)

    async def count_replies(self, stop: asyncio.Event) -> None:
        """Count the gateway's replies until `stop`."""
        assert self.replies is not None
        last_sweep = time.monotonic()
        while not stop.is_set():
            batch = await self.replies.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    self._reply(record.value, record.headers)
            if time.monotonic() - last_sweep > 5:
                last_sweep = time.monotonic()
                self._forget_stale(last_sweep)

    async def cancel_answers(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)

    async def close(self) -> None:
        await self.cancel_answers()
        await wire.stop_quietly(self.events, self.replies, self.producer)

    # --- interrupts -----------------------------------------------------------------------

    def _interrupted(self, key: bytes | None, value: bytes, headers: Headers = ()) -> None:
        try:
            event = orjson.loads(value)
            outcome = event.get("outcome") or {}
            if outcome.get("type") != "interrupt":
                return
            run = Interrupted(key.decode() if key else "", event["runId"], outcome["interrupts"])
            agent = named_agent(headers) or (None if self.grouped else self.agent)
        except (orjson.JSONDecodeError, KeyError, AttributeError, UnicodeDecodeError):
            self.stats.errors["unreadable RUN_FINISHED"] += 1
            return
        if agent is None and self.grouped:
            self.stats.errors["interrupt naming no agent"] += 1
            return
        if (agent, run.thread_id, run.run_id) in self.seen:
            return
        self.seen[(agent, run.thread_id, run.run_id)] = None
        while len(self.seen) > SEEN_KEPT:
            self.seen.popitem(last=False)
        if len(self.tasks) >= MAX_ANSWERS_IN_FLIGHT:
            self.stats.errors["client answers in flight at the limit"] += 1
            return
        task = asyncio.create_task(self._answer(run, agent, time.monotonic()))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, run: Interrupted, agent: str | None, seen_at: float) -> None:
        assert self.producer is not None
        await asyncio.sleep(self.rng.uniform(*THINK_S))
        scenario = choose(run, self.rng, self.settings.strict)
        self.stats.scenarios[scenario.name] += 1
        key = run.thread_id.encode()
        try:
            for send in scenario.sends:
                if send.not_before is not None:
                    await asyncio.sleep(max(0.0, send.not_before - time.time()))
                correlation = uuid.uuid4().hex
                headers = [
                    (HEADER_REPLY_TO, self.reply_topic.encode()),
                    (HEADER_CORRELATION_ID, correlation.encode()),
                ]
                if agent is not None:
                    headers.append((HEADER_AGENT, agent.encode()))
                self.pending[correlation] = Pending(send, time.monotonic(), seen_at)
                self.stats.awaiting += 1
                await self.producer.send_and_wait(
                    self.topics.requests, send.body, key=key, headers=headers
                )
                self.stats.sent += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.stats.errors["client send failed"] += 1
            log.warning("client send failed", extra={"threadId": run.thread_id, "error": repr(exc)})

    # --- replies --------------------------------------------------------------------------

    def _reply(self, value: bytes | None, headers: object) -> None:
        try:
            reply = orjson.loads(value or b"")
            verdict = reply["verdict"]
            correlation = reply.get("correlationId")
            codes = frozenset(r["code"] for r in reply.get("reasons") or ())
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.stats.errors["unreadable reply"] += 1
            return
        self.stats.verdicts[verdict] += 1
        self.stats.reasons.update(codes)
        pending = self.pending.pop(correlation, None) if isinstance(correlation, str) else None
        if pending is None:
            self.stats.errors["reply to no request awaited"] += 1
            return
        self.stats.awaiting -= 1
        now = time.monotonic()
        self.stats.verdict_s.append(now - pending.sent_at)
        send = pending.send
        if verdict != send.expect or (send.expect == "reject" and codes != send.reasons):
            got = verdict + (f" {'+'.join(sorted(codes))}" if codes else "")
            expected = send.expect + (f" {'+'.join(sorted(send.reasons))}" if send.reasons else "")
            self.stats.unexpected[f"{expected} -> {got}"] += 1
            log.warning("unexpected verdict", extra={"expected": expected, "reply": reply})
        if verdict == FORWARD and send.answers:
            self.stats.answer_s.append(now - pending.seen_at)

    def _forget_stale(self, now: float) -> None:
        stale = [c for c, p in self.pending.items() if now - p.sent_at > PENDING_KEPT_S]
        for correlation in stale:
            del self.pending[correlation]
            self.stats.awaiting -= 1
            self.stats.errors["request never replied to"] += 1
