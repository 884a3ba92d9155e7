"""`GatewayClient`: publish run requests to the gateway, read its verdicts and the runs.

    async with GatewayClient(bootstrap_servers="127.0.0.1:9092",
                             reply_topic="billing.replies",
                             create_reply_topic=True) as client:
        reply = await client.send("support", run_input, timeout=10)
        async for event in client.run("support", next_input):
            ...

The reply consumer is pinned before anything is sent (`rendezvous.py`); a run
is watched before its request is sent (`runs.py`). Topic names, security and
the gateway's discovery interval come from `Settings`. An agent of a group
(`Settings.groups`) is reached through its group's topics: its requests go to
`agui.<group>.requests` naming it in the `agui-agent` header, and its runs are
read from `agui.<group>.events`, filtered by that header and the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ag_ui.core import BaseEvent, Event, RunAgentInput
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from pydantic import TypeAdapter, ValidationError

from gateway.client.errors import (
    InvalidRunInput,
    ReplyTimeout,
    RequestDuplicate,
    RequestRejected,
    UnknownAgent,
)
from gateway.client.rendezvous import AnyReply, Rendezvous, ReplyTopicMissing
from gateway.client.replies import DuplicateReply, ForwardReply, RejectReply
from gateway.client.runs import RunEvent, RunTap, RunWatch
from gateway.codec import jsonio
from gateway.codec.records import HEADER_AGENT, HEADER_CORRELATION_ID, HEADER_REPLY_TO
from gateway.core.values.identity import Identity
from gateway.kafka.wire import clients
from gateway.kafka.wire.attestation import AttestationError, Signer
from gateway.settings import Settings

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
_TOPICS_TTL_S = 2.0  # how long a look-up of the cluster's topics is trusted for a miss


@dataclass(frozen=True, slots=True)
class Pending:
    """A published request awaiting its reply."""

    correlation_id: str
    future: asyncio.Future[AnyReply]


def encode_input(run_input: RunAgentInput | dict[str, Any]) -> tuple[str, str, bytes]:
    """(threadId, runId, JSON bytes) of a run input given as the model or its wire dict."""
    if isinstance(run_input, RunAgentInput):
        wire = run_input.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif isinstance(run_input, dict):
        wire = run_input
    else:
        raise InvalidRunInput(f"a run input is a RunAgentInput or a dict, not {type(run_input)}")
    thread_id, run_id = wire.get("threadId"), wire.get("runId")
    if not isinstance(thread_id, str) or not isinstance(run_id, str):
        raise InvalidRunInput("a run input needs a string threadId and a string runId")
    return thread_id, run_id, jsonio.dumps(wire)


class GatewayClient:
    def __init__(
        self,
        bootstrap_servers: str | None = None,
        reply_topic: str = "",
        *,
        create_reply_topic: bool = False,
        reply_topic_partitions: int = 1,
        settings: Settings | None = None,
        event_buffer: int = 10_000,
        identity: Identity | None = None,
        signer: Signer | None = None,
    ) -> None:
        if not reply_topic:
            raise ValueError("GatewayClient needs a reply_topic")
        if settings is None:
            settings = (
                Settings()
                if not bootstrap_servers
                else Settings(bootstrap_servers=bootstrap_servers)
            )
        elif bootstrap_servers:
            settings = settings.model_copy(update={"bootstrap_servers": bootstrap_servers})
        self.settings = settings
        self.reply_topic = reply_topic
        self.create_reply_topic = create_reply_topic
        self.reply_topic_partitions = reply_topic_partitions
        self.event_buffer = event_buffer
        # who this client's requests come from, signed with `signer` (or the settings' key)
        self.identity = identity
        if signer is None and settings.attest_private_key_file is not None:
            signer = Signer.from_file(
                settings.attest_key_id or "", settings.attest_private_key_file
            )
        self.signer = signer
        if identity is not None and signer is None:
            raise AttestationError(
                "an identity is only carried signed: give a signer (or the settings' "
                "attest_key_id and attest_private_key_file)"
            )
        self._agent_name = re.compile(f"^(?:{settings.agent_name_pattern})$")
        self._producer: AIOKafkaProducer | None = None
        self._rendezvous: Rendezvous | None = None
        self._taps: dict[str, RunTap] = {}
        self._tap_lock = asyncio.Lock()
        self._topics: set[str] = set()
        self._topics_at = -1e9
        self._send_after = 0.0  # a reply topic we created is seen by the gateway from then

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        if self.create_reply_topic:
            created = await self._ensure_reply_topic()
            if created:
                # The gateway checks a reply topic against its metadata, refreshed every
                # discovery_interval_ms: until then it would answer reply_topic_unknown.
                self._send_after = time.monotonic() + s.discovery_interval_ms / 1000 + 1.0
        self._producer = clients.producer(
            s, client_id=f"{s.client_id}-client", acks="all", enable_idempotence=True
        )
        await self._producer.start()
        self._rendezvous = Rendezvous(
            clients.consumer(
                s,
                client_id=f"{s.client_id}-client-replies",
                isolation_level="read_committed",
                enable_auto_commit=False,
            ),
            self.reply_topic,
        )
        try:
            await self._rendezvous.start()
        except ReplyTopicMissing:
            await self.stop()
            raise

    async def stop(self) -> None:
        for tap in self._taps.values():
            with contextlib.suppress(Exception):
                await tap.stop()
        self._taps.clear()
        if self._rendezvous is not None:
            with contextlib.suppress(Exception):
                await self._rendezvous.stop()
            self._rendezvous = None
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
            self._producer = None

    async def __aenter__(self) -> GatewayClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def producer(self) -> AIOKafkaProducer | None:
        """The client's producer once started (its connection answers the broker probe)."""
        return self._producer

    @property
    def ready(self) -> bool:
        """Started, and past the wait for the gateway to see a reply topic just created."""
        started = self._producer is not None and self._rendezvous is not None
        return started and time.monotonic() >= self._send_after

    async def _ensure_reply_topic(self) -> bool:
        """Create the reply topic if missing; True when this call created it."""
        admin = clients.admin(self.settings, client_id=f"{self.settings.client_id}-client")
        await admin.start()
        try:
            existing = await admin.list_topics()
            if self.reply_topic in existing:
                return False
            response = await admin.create_topics(
                [NewTopic(self.reply_topic, self.reply_topic_partitions, 1)]
            )
            for topic_error in response.topic_errors:
                code = topic_error[1]
                if code == TopicAlreadyExistsError.errno:
                    return False
                if code != 0:
                    raise ReplyTopicMissing(
                        f"creating reply topic {self.reply_topic!r} failed: error {code} "
                        f"{topic_error[2] if len(topic_error) > 2 else ''}"
                    )
            await self._wait_for_leaders(admin)
            return True
        finally:
            await admin.close()

    async def _wait_for_leaders(self, admin: AIOKafkaAdminClient, timeout: float = 30.0) -> None:
        """Until every partition of the new reply topic has a leader: a write before that
        fails, and the gateway's first reply must not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described = await admin.describe_topics([self.reply_topic])
            partitions = described[0].get("partitions", []) if described else []
            if (
                described
                and described[0].get("error_code") == 0
                and len(partitions) == self.reply_topic_partitions
                and all(p.get("leader", -1) >= 0 for p in partitions)
            ):
                return
            await asyncio.sleep(0.1)
        raise ReplyTopicMissing(
            f"reply topic {self.reply_topic!r} has no leaders after {timeout:g} s"
        )

    # --- request/reply ---------------------------------------------------------------------

    async def requests_topic(self, agent: str) -> str:
        """The requests topic that carries `agent` (its group's, or its own); UnknownAgent
        if its name or topic is not there."""
        if not self._agent_name.match(agent):
            raise UnknownAgent(f"{agent!r} is not a legal agent name")
        topic = self.settings.topic(self.settings.requests_topic, self.settings.owner_of(agent))
        if topic in self._topics:
            return topic
        assert self._producer is not None, "the client is not started"
        if time.monotonic() - self._topics_at > _TOPICS_TTL_S:
            cluster = await self._producer.client.fetch_all_metadata()
            self._topics = set(cluster.topics())
            self._topics_at = time.monotonic()
        if topic not in self._topics:
            group = self.settings.group_of(agent)
            whose = f"agent {agent!r}" + (f" (of group {group!r})" if group else "")
            raise UnknownAgent(f"{whose} has no requests topic {topic!r}")
        return topic

    async def publish(
        self,
        agent: str,
        thread_id: str,
        body: bytes,
        correlation_id: str | None = None,
        identity: Identity | None = None,
    ) -> Pending:
        """Publish a request's bytes as they are; `verdict` waits for its reply.

        `identity` (else the client's own, if it has one) is attested on the record,
        signed with the client's key over the identity, the bytes, the thread, the agent
        and the correlation id."""
        assert self._producer is not None and self._rendezvous is not None, "not started"
        identity = identity if identity is not None else self.identity
        if identity is not None and self.signer is None:
            raise AttestationError("this client has no signing key: it cannot attest an identity")
        topic = await self.requests_topic(agent)
        wait = self._send_after - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        cid, future = self._rendezvous.expect(correlation_id or uuid.uuid4().hex)
        key = thread_id.encode()
        headers = [
            (HEADER_CORRELATION_ID, cid.encode()),
            (HEADER_REPLY_TO, self.reply_topic.encode()),
            (HEADER_AGENT, agent.encode()),
        ]
        try:
            if identity is not None:
                assert self.signer is not None
                headers += self.signer.headers(identity, agent.encode(), key, cid.encode(), body)
            await self._producer.send_and_wait(topic, body, key=key, headers=headers)
        except BaseException:
            self._rendezvous.forget(cid)
            raise
        return Pending(cid, future)

    async def verdict(self, pending: Pending, timeout: float) -> AnyReply:
        """The reply `publish` promised, or ReplyTimeout."""
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), timeout)
        except TimeoutError:
            assert self._rendezvous is not None
            self._rendezvous.forget(pending.correlation_id)
            raise ReplyTimeout(pending.correlation_id, timeout) from None
        except asyncio.CancelledError:
            if self._rendezvous is not None:
                self._rendezvous.forget(pending.correlation_id)
            raise

    async def send(
        self,
        agent: str,
        run_input: RunAgentInput | dict[str, Any],
        timeout: float = 10.0,
        correlation_id: str | None = None,
        identity: Identity | None = None,
    ) -> ForwardReply | RejectReply | DuplicateReply:
        """Publish one run input and return the gateway's typed verdict (`identity`: as
        `publish`)."""
        thread_id, _run_id, body = encode_input(run_input)
        pending = await self.publish(agent, thread_id, body, correlation_id, identity)
        return await self.verdict(pending, timeout)

    # --- runs ------------------------------------------------------------------------------

    async def tap(self, agent: str) -> RunTap:
        """The shared reader of the events topic carrying `agent` (its group's, shared by
        the group's agents, or its own), started on first use. Watch `agent`'s runs with
        `tap.watch(thread_id, run_id, agent)`."""
        owner = self.settings.owner_of(agent)
        tap = self._taps.get(owner)
        if tap is not None:
            return tap
        async with self._tap_lock:
            tap = self._taps.get(owner)
            if tap is None:
                s = self.settings
                tap = RunTap(
                    clients.consumer(
                        s,
                        client_id=f"{s.client_id}-client-events",
                        isolation_level="read_committed",
                        enable_auto_commit=False,
                    ),
                    s.topic(s.events_topic, owner),
                    self.event_buffer,
                    agent=None if owner in s.groups else owner,
                )
                try:
                    await tap.start()
                except LookupError as exc:
                    with contextlib.suppress(Exception):
                        await tap.consumer.stop()
                    raise UnknownAgent(str(exc)) from None
                self._taps[owner] = tap
        return tap

    async def open_run(
        self,
        agent: str,
        thread_id: str,
        run_id: str,
        body: bytes,
        timeout: float,
        correlation_id: str | None = None,
        identity: Identity | None = None,
    ) -> tuple[AnyReply, RunWatch | None]:
        """Watch the run, then publish its request and wait for the verdict.

        Returns the reply and, on `forward`, the watch to read the run's events
        from (`RunTap.events`); on any other outcome the watch is dropped.
        """
        await self.requests_topic(agent)
        tap = await self.tap(agent)
        # before the request exists: nothing is missed
        watch = tap.watch(thread_id, run_id, agent)
        try:
            pending = await self.publish(agent, thread_id, body, correlation_id, identity)
            reply = await self.verdict(pending, timeout)
        except BaseException:
            tap.unwatch(watch)
            raise
        if not isinstance(reply, ForwardReply):
            tap.unwatch(watch)
            return reply, None
        return reply, watch

    async def run(
        self,
        agent: str,
        run_input: RunAgentInput | dict[str, Any],
        timeout: float = 10.0,
        start_timeout: float = 30.0,
        run_timeout: float = 600.0,
    ) -> AsyncIterator[BaseEvent]:
        """Send, then yield the forwarded run's events (the protocol's models) until it closes.

        Raises RequestRejected or RequestDuplicate instead of streaming, ReplyTimeout
        when no verdict comes, and RunStreamError (RunNotStarted, RunTimedOut) when
        the run does not start or close in time. Event types this version of the
        protocol's models does not know are skipped, as the protocol says.
        """
        thread_id, run_id, body = encode_input(run_input)
        reply, watch = await self.open_run(agent, thread_id, run_id, body, timeout)
        if isinstance(reply, RejectReply):
            raise RequestRejected(reply)
        if isinstance(reply, DuplicateReply):
            raise RequestDuplicate(reply)
        assert watch is not None
        tap = await self.tap(agent)
        async for event in tap.events(watch, start_timeout, run_timeout):
            typed = typed_event(event)
            if typed is not None:
                yield typed


def typed_event(event: RunEvent) -> BaseEvent | None:
    """An event as the protocol's model; None for a type or shape the models reject."""
    try:
        return _EVENT.validate_python(event.value)  # type: ignore[no-any-return]
    except ValidationError:
        return None
