"""The bridge's loop: consume run-requests, hand them to their partition's runs.

One consumer group (`bridge_group_id`) reads every served agent's run-requests
topic (`read_committed`, a pattern subscription: new agents are picked up
without a restart). An agent of a group (`Settings.groups`) is served on its
group's topic, shared with the group's other agents: the bridge subscribes to
the run-requests topic of every group it serves an agent of (`served_groups`),
and runs each request with the agent it names (`agui-agent`).

On assignment a new partition is paused, its transactional producer
initialised (fencing a previous owner and aborting its open transaction), its
marker read back, runs left started closed with `bridge_restarted`, and
consumption resumed from the marker's offset. A partition no longer assigned
has its runs cancelled and what they had not committed aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from gateway.bridge.ledger import MarkerState, PartitionLedger, RunRequest, decode_marker
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.outbox import Outbox
from gateway.bridge.partition import REFUSALS, AgentEndpoint, PartitionRuns, Refusal, Resolve
from gateway.codec.records import HEADER_AGENT, HEADER_CORRELATION_ID
from gateway.core.values.codes import Reason
from gateway.kafka.pairs.agents import MAX_AGENT_CHARS
from gateway.kafka.wire import clients, txnids
from gateway.kafka.wire.attestation import HEADER_IDENTITY, parse_forwarded
from gateway.kafka.wire.brokerwatch import BrokerWatch
from gateway.kafka.wire.readto import read_to
from gateway.kafka.wire.topics import changelog_configs, ensure_topics
from gateway.settings import BridgeAgent, Settings

log = logging.getLogger("gateway.bridge")


def served_groups(settings: Settings) -> list[str]:
    """The groups the bridge serves an agent of (so it reads their run-requests topics):
    a group one of whose listed agents, or one of bridge_agents, is the group's and has an
    endpoint; or a group with a pattern (or open to any name) when bridge_agent_pattern
    with bridge_default may serve its agents."""
    by_pattern = bool(settings.bridge_agent_pattern) and settings.bridge_default is not None
    served = []
    for name, group in settings.groups.items():
        listed = [*group.agents, *settings.bridge_agents]
        if any(
            settings.group_of(agent) == name and settings.bridge_agent(agent) is not None
            for agent in listed
        ) or (by_pattern and (group.open or group.agent_pattern is not None)):
            served.append(name)
    return served


def subscription(settings: Settings) -> str:
    """The run-requests topics of every agent (with topics of its own) and every group the
    bridge serves, as one regex."""
    names = [re.escape(name) for name in settings.bridge_agents if not settings.group_of(name)]
    names += [re.escape(group) for group in served_groups(settings)]
    if settings.bridge_agent_pattern and settings.bridge_default is not None:
        names.append(f"(?:{settings.bridge_agent_pattern})")
    head, tail = settings.run_requests_topic.split("{agent}")
    return f"^{re.escape(head)}(?:{'|'.join(names) or '(?!)'}){re.escape(tail)}$"


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions are let go on the new assignment, not on revocation: a partition the
    bridge keeps goes on relaying its runs through a rebalance. One given to another
    bridge meanwhile is fenced by it (its next transaction fails), so nothing it does
    after the handover becomes visible, and the new owner closes its started runs."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.bridge.reassign(list(assigned))


class Bridge:
    def __init__(self, settings: Settings, metrics: BridgeMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.consumer: AIOKafkaConsumer | None = None
        self.partitions: dict[TopicPartition, PartitionRuns] = {}
        self.restoring: dict[TopicPartition, asyncio.Task[None]] = {}
        self.backpressured: set[TopicPartition] = set()
        self.endpoints: dict[str, AgentEndpoint] = {}
        # one HTTP client for every agent served by bridge_default (a group of thousands
        # of agents is one connection pool, not thousands); its own for each other agent
        self._default_client: httpx.AsyncClient | None = None
        self._runs_topics_ready: set[str] = set()
        self._topic_agent = settings.topic_regex(settings.run_requests_topic)
        self._groups = set(served_groups(settings))
        self._consuming = False  # the consumer has started and subscribed
        self.broker = BrokerWatch(lambda: clients.probe(self.consumer), settings.broker_timeout_s)

    # --- readiness -------------------------------------------------------------------

    def ready(self) -> tuple[bool, dict[str, Any]]:
        ok = self._consuming and not self.restoring
        broker_ok, broker = self.broker.state()
        return ok and broker_ok, {
            "broker": broker,
            "assigned": sorted(str(tp) for tp in self.partitions),
            "restoring": sorted(str(tp) for tp in self.restoring),
            "agents": sorted(self.endpoints),
            "groups": sorted(self._groups),
        }

    # --- agents ----------------------------------------------------------------------

    def _endpoint(self, agent: str) -> AgentEndpoint | None:
        if agent in self.endpoints:
            return self.endpoints[agent]
        config = self.settings.bridge_agent(agent)
        if config is None:
            return None
        shared = config is self.settings.bridge_default
        if shared and self._default_client is None:
            self._default_client = _make_client(config, shared=True)
        endpoint = _make_endpoint(agent, config, self._default_client if shared else None)
        self.endpoints[agent] = endpoint
        log.info(
            "serving agent",
            extra={
                "agent": agent,
                "url": endpoint.url,
                "headers": {name: "**********" for name in config.headers},
            },
        )
        return endpoint

    def _resolver(self, owner: str, grouped: bool) -> Resolve:
        """The agent each request of `owner`'s topic is run by, or why none is."""
        s = self.settings
        legal = re.compile(s.agent_name_pattern)

        def resolve(request: RunRequest) -> AgentEndpoint | Refusal:
            agent = request.agent
            if not grouped:
                if agent is not None and agent != owner:
                    return Refusal(
                        Reason.AGENT_NOT_ALLOWED,
                        f"a run request on agent {owner!r}'s topic names another agent in "
                        f"its {HEADER_AGENT} header: {agent[:MAX_AGENT_CHARS]!r}",
                        owner,
                    )
                endpoint = self._endpoint(owner)
                assert endpoint is not None  # the partition was opened for it
                return endpoint
            if agent is None:
                return Refusal(
                    Reason.AGENT_MISSING,
                    f"a run request on group {owner!r}'s topic names no agent in its "
                    f"{HEADER_AGENT} header",
                )
            if len(agent) > MAX_AGENT_CHARS or not legal.fullmatch(agent):
                return Refusal(
                    Reason.AGENT_NAME_ILLEGAL,
                    f"the {HEADER_AGENT} header of a run request on group {owner!r}'s topic "
                    f"is not a legal agent name: {agent[:MAX_AGENT_CHARS]!r}",
                )
            if s.group_of(agent) != owner:  # another group's, or with topics of its own
                return Refusal(Reason.AGENT_NOT_ALLOWED, f"group {owner!r} has no agent {agent!r}")
            endpoint = self._endpoint(agent)
            if endpoint is None:
                return Refusal(
                    "agent_not_served",
                    f"this bridge serves no agent {agent!r} (of group {owner!r})",
                    agent,
                )
            return endpoint

        return resolve

    # --- assignment ------------------------------------------------------------------

    async def reassign(self, assigned: list[TopicPartition]) -> None:
        """The group's new assignment: let go of what is no longer ours, open what is new."""
        keep = set(assigned)
        await self.revoke([tp for tp in [*self.partitions, *self.restoring] if tp not in keep])
        self.backpressured -= keep  # a new assignment resumes every partition
        self.assign(assigned)

    def assign(self, assigned: list[TopicPartition]) -> None:
        assert self.consumer is not None
        fresh = [tp for tp in assigned if tp not in self.partitions and tp not in self.restoring]
        if fresh:
            self.consumer.pause(*fresh)
        for tp in fresh:
            self.restoring[tp] = asyncio.create_task(self._open(tp), name=f"open-{tp}")

    async def revoke(self, revoked: list[TopicPartition]) -> None:
        for tp in revoked:
            task = self.restoring.pop(tp, None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            runs = self.partitions.pop(tp, None)
            if runs is not None:
                await self._close(runs)
            self.backpressured.discard(tp)

    async def _close(self, runs: PartitionRuns) -> None:
        await runs.stop()
        with contextlib.suppress(Exception):
            await runs.outbox.producer.stop()

    async def _open(self, tp: TopicPartition) -> None:
        try:
            runs = await self._restore(tp)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("opening a partition failed; retrying", extra={"partition": str(tp)})
            await asyncio.sleep(1.0)
            self.restoring[tp] = asyncio.create_task(self._open(tp), name=f"open-{tp}")
            return
        if runs is None:
            self.restoring.pop(tp, None)
            return
        assert self.consumer is not None
        self.partitions[tp] = runs
        self.restoring.pop(tp, None)
        self.consumer.seek(tp, runs.ledger.next_to_consume)
        self.consumer.resume(tp)

    async def _restore(self, tp: TopicPartition) -> PartitionRuns | None:
        match = self._topic_agent.match(tp.topic)
        owner = match.group("agent") if match else None
        grouped = owner in self.settings.groups
        if owner is None:
            served = False
        else:
            served = owner in self._groups if grouped else self._endpoint(owner) is not None
        if owner is None or not served:
            log.error("assigned a topic of no served agent or group", extra={"topic": tp.topic})
            return None
        s = self.settings
        self.metrics.agent(owner)  # the metrics' agent label is the topics' owner
        self.metrics.owner(owner, REFUSALS)
        runs_topic = s.topic(s.bridge_runs_topic, owner)
        await self._ensure_runs_topic(tp.topic, runs_topic)
        producer = clients.producer(
            s,
            client_id=f"{s.client_id}-bridge-{owner}-{tp.partition}",
            transactional_id=txnids.bridge_id(s, owner, tp.partition),
            enable_idempotence=True,
            transaction_timeout_ms=s.transaction_timeout_ms,
            linger_ms=2,
            retry_backoff_ms=10,  # KIP-890's first-write NOT_ENOUGH_REPLICAS, as the gateway
        )
        try:
            await producer.start()  # fences a previous owner, aborts its open transaction
            state = await self._read_marker(runs_topic, tp)
            ledger = PartitionLedger(state)
            outbox = Outbox(
                producer,
                ledger,
                tp=tp,
                events_topic=s.topic(s.events_topic, owner),
                runs_topic=runs_topic,
                group_id=s.bridge_group_id,
                capacity_bytes=s.bridge_buffer_bytes,
                metrics=self.metrics,
                linger_s=s.bridge_linger_ms / 1000,
            )
            outbox.start()
            runs = PartitionRuns(
                owner,
                self._resolver(owner, grouped),
                ledger,
                outbox,
                self.metrics,
                s.bridge_max_event_bytes,
                grouped,
                s.bridge_identity_header,
            )
            await runs.close_restarted()
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        log.info(
            "partition ready",
            extra={"partition": str(tp), "next": ledger.next_to_consume},
        )
        return runs

    async def _ensure_runs_topic(self, run_requests: str, runs_topic: str) -> None:
        if runs_topic in self._runs_topics_ready:
            return
        assert self.consumer is not None
        partitions = self.consumer.partitions_for_topic(run_requests) or set()
        admin = clients.admin(self.settings, client_id=f"{self.settings.client_id}-bridge-admin")
        await admin.start()
        try:
            reports = await ensure_topics(
                admin, {runs_topic: (len(partitions), changelog_configs())}
            )
        finally:
            await admin.close()
        for report in reports:
            if report.action in ("mismatch", "refused"):
                raise RuntimeError(f"{runs_topic}: {report.detail}")
        self._runs_topics_ready.add(runs_topic)

    async def _read_marker(self, runs_topic: str, tp: TopicPartition) -> MarkerState:
        """The partition's last committed marker; without one, the group's offset."""
        s = self.settings
        reader = clients.consumer(
            s,
            client_id=f"{s.client_id}-bridge-restore",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        marker_tp = TopicPartition(runs_topic, tp.partition)
        last: bytes | None = None
        await reader.start()
        try:
            reader.assign([marker_tp])
            end = (await reader.end_offsets([marker_tp]))[marker_tp]
            await reader.seek_to_beginning(marker_tp)
            async for records in read_to(reader, marker_tp, end):
                for message in records:
                    if message.key == str(tp.partition).encode():
                        last = message.value
        finally:
            with contextlib.suppress(Exception):
                await reader.stop()
        if last is not None:
            return decode_marker(last)
        assert self.consumer is not None
        committed = await self.consumer.committed(tp)
        if committed is None:
            committed = (await self.consumer.beginning_offsets([tp]))[tp]
        return MarkerState(committed)

    # --- the loop --------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        self.consumer = clients.consumer(
            s,
            client_id=f"{s.client_id}-bridge",
            group_id=s.bridge_group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=s.max_poll_records,
            metadata_max_age_ms=s.discovery_interval_ms,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
        )
        await self.consumer.start()
        self.broker.start()
        try:
            self.consumer.subscribe(pattern=subscription(s), listener=_Listener(self))
            self._consuming = True
            while not stop.is_set():
                batch = await self.consumer.getmany(timeout_ms=s.poll_timeout_ms)
                for tp, messages in batch.items():
                    runs = self.partitions.get(tp)
                    if runs is None:
                        continue  # restoring: it seeks back to its marker's offset
                    for message in messages:
                        runs.accept(_request(message))
                await self._housekeeping()
        finally:
            # a stop lets the runs in flight end (bounded); what does not is closed by the
            # next owner with bridge_restarted
            partitions = list(self.partitions.values())
            await asyncio.gather(
                *(runs.drain(s.revoke_timeout_s) for runs in partitions), return_exceptions=True
            )
            await self.revoke(list(self.partitions) + list(self.restoring))
            with contextlib.suppress(Exception):
                await clients.stop(self.consumer)
            await self.broker.stop()
            for client in {id(e.client): e.client for e in self.endpoints.values()}.values():
                await client.aclose()

    async def _housekeeping(self) -> None:
        """Rebuild failed partitions; pause and resume for bounded pending work."""
        assert self.consumer is not None
        assignment = self.consumer.assignment()
        for tp, runs in list(self.partitions.items()):
            if runs.failed:
                del self.partitions[tp]
                await self._close(runs)
                self.backpressured.discard(tp)
                if tp in assignment:
                    self.assign([tp])
                continue
            full = len(runs.ledger) >= self.settings.bridge_pending_requests
            if full and tp not in self.backpressured:
                self.consumer.pause(tp)
                self.backpressured.add(tp)
            elif not full and tp in self.backpressured:
                self.consumer.resume(tp)
                self.backpressured.discard(tp)


def _request(message: Any) -> RunRequest:
    correlation = agent = identity = None
    for name, value in message.headers or ():
        if name == HEADER_CORRELATION_ID and value is not None:
            correlation = value.decode("utf-8", "replace")
        elif name == HEADER_AGENT and value:
            agent = value.decode("utf-8", "replace")
        elif name == HEADER_IDENTITY and identity is None:
            identity = _identity_header(value)
    return RunRequest(
        message.offset, message.key or b"", message.value or b"", correlation, agent, identity
    )


def _identity_header(value: bytes | None) -> str | None:
    """The forward's identity as an HTTP header value: its JSON, non-ASCII escaped (HTTP
    header values are ASCII); None when absent or not an identity."""
    identity = parse_forwarded(value)
    if identity is None:
        return None
    doc = {
        "groups": list(identity.groups),
        "issuer": identity.issuer,
        "signer": identity.signer,
        "subject": identity.subject,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _make_client(config: BridgeAgent, shared: bool = False) -> httpx.AsyncClient:
    """An HTTP client for an agent's endpoint; `shared` by many agents, its pool is not
    bounded by one agent's concurrent_runs (each agent's own slots bound its runs)."""
    timeout = httpx.Timeout(
        connect=config.connect_timeout_s,
        read=config.read_timeout_s,
        write=config.read_timeout_s,
        pool=None,
    )
    return httpx.AsyncClient(
        timeout=timeout,
        limits=httpx.Limits(max_connections=None if shared else config.concurrent_runs),
        follow_redirects=False,
        trust_env=False,
    )


def _make_endpoint(
    agent: str, config: BridgeAgent, client: httpx.AsyncClient | None = None
) -> AgentEndpoint:
    headers = {name: value.get_secret_value() for name, value in config.headers.items()}
    return AgentEndpoint(
        agent,
        config.url.replace("{agent}", agent),
        client or _make_client(config),
        headers,
        config.concurrent_runs,
    )
