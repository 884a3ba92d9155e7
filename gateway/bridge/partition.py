"""The runs of one assigned run-requests partition: one thread at a time, threads concurrently.

Each thread with requests has one task that runs its requests in offset order.
A run takes one of its agent's slots (`concurrent_runs`), records "started" in
the ledger and waits until that marker is committed, and only then calls the
agent. Its events go through the partition's outbox; its end (the ledger's
"ended" and the committable offset) is committed with its last events.

The partition's topic is an agent's own or a group's (many agents): each
request is run by the agent it names (`agui-agent`; on an agent's own topic,
the topic's agent), every event it causes names that agent too. A request the
bridge cannot run (on a group's topic it names no agent, or an agent the group
does not have or this bridge does not serve; on an agent's own topic it names
another agent) is never lost and never holds anything up: its run is closed at
once with a `RUN_ERROR` the bridge writes (`agent_missing`, `agent_name_illegal`,
`agent_not_allowed`: the gateway's codes for the same faults; `agent_not_served`),
and the request ends like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gateway.bridge.ledger import PartitionLedger, RunRequest, Thread
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.outbox import Outbox, OutboxFailed
from gateway.bridge.relay import relay, run_error
from gateway.codec.records import HEADER_AGENT, HEADER_CORRELATION_ID
from gateway.core.values.codes import Reason

log = logging.getLogger("gateway.bridge.partition")


class AgentEndpoint:
    """One agent's HTTP side: its client, URL, extra headers and run slots."""

    def __init__(
        self,
        agent: str,
        url: str,
        client: httpx.AsyncClient,
        headers: dict[str, str],
        slots: int,
    ) -> None:
        self.agent = agent
        self.url = url
        self.client = client
        self.headers = headers
        self.slots = asyncio.Semaphore(slots)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the bridge runs no agent for a request: the code and message of its RUN_ERROR."""

    code: str  # one of REFUSALS
    message: str
    agent: str | None = None  # the agent its RUN_ERROR names (a legal name the request gave)


# the gateway's codes for the same faults, and the bridge's own for an agent it has no
# endpoint for
REFUSALS = (
    str(Reason.AGENT_MISSING),
    str(Reason.AGENT_NAME_ILLEGAL),
    str(Reason.AGENT_NOT_ALLOWED),
    "agent_not_served",
)

# The agent a request is run by (its endpoint), or why none is.
Resolve = Callable[[RunRequest], "AgentEndpoint | Refusal"]


def correlation_headers(correlation_id: str | None) -> list[tuple[str, bytes]]:
    return [(HEADER_CORRELATION_ID, correlation_id.encode())] if correlation_id else []


def event_headers(correlation_id: str | None, agent: str | None) -> list[tuple[str, bytes]]:
    """An event's headers: the correlation id of the request that caused it, and its agent."""
    agent_header = [(HEADER_AGENT, agent.encode())] if agent is not None else []
    return correlation_headers(correlation_id) + agent_header


class PartitionRuns:
    def __init__(
        self,
        owner: str,
        resolve: Resolve,
        ledger: PartitionLedger,
        outbox: Outbox,
        metrics: BridgeMetrics,
        max_event_bytes: int,
        grouped: bool = False,
        identity_header: str = "X-AGUI-Identity",
    ) -> None:
        self.owner = owner  # the agent, or the group, whose topics these are
        self.grouped = grouped
        self.resolve = resolve
        self.ledger = ledger
        self.outbox = outbox
        self.metrics = metrics
        self.max_event_bytes = max_event_bytes
        self.identity_header = identity_header  # who answered, for the agent (its name)
        self._threads: dict[Thread, asyncio.Task[None]] = {}
        self._pending: set[int] = set()  # offsets counted in requests_pending
        self.closing = False  # no new run starts (the bridge is stopping)

    @property
    def failed(self) -> bool:
        return self.outbox.failed is not None

    async def close_restarted(self) -> int:
        """Close every run a previous owner started and never ended: `RUN_ERROR`
        `bridge_restarted`, never a second call to the agent."""
        restarted = sorted(self.ledger.started.values(), key=lambda r: r.offset)
        for run in restarted:
            agent = run.agent if run.agent is not None or self.grouped else self.owner
            await self.outbox.emit(
                run.key,
                run_error(
                    "bridge_restarted",
                    "the bridge relaying this run stopped before it ended; "
                    "the run is not started again",
                ),
                event_headers(run.correlation_id, agent),
            )
            self.ledger.end(run.offset)
        if restarted:
            await self.outbox.commit()
            self.metrics.runs.labels(self.owner, "bridge_restarted").inc(len(restarted))
            self.metrics.events.labels(self.owner, "bridge").inc(len(restarted))
            log.warning(
                "closed runs a stopped bridge had started",
                extra={
                    "owner": self.owner,
                    "agents": sorted({run.agent or self.owner for run in restarted}),
                    "partition": self.outbox.tp.partition,
                    "offsets": [r.offset for r in restarted],
                },
            )
        return len(restarted)

    def accept(self, request: RunRequest) -> None:
        if not self.ledger.accept(request):
            return
        thread = request.thread
        if thread not in self._threads:
            self._threads[thread] = asyncio.create_task(
                self._thread(thread), name=f"thread-{self.outbox.tp}"
            )
        target = self.resolve(request)
        if isinstance(target, AgentEndpoint):
            self._pending.add(request.offset)
            self.metrics.requests_pending.labels(self.owner).inc()

    async def _thread(self, thread: Thread) -> None:
        try:
            while not self.closing and (request := self.ledger.next_of(thread)) is not None:
                await self._run(request)
        except OutboxFailed:
            pass  # the partition is being rebuilt
        except Exception:
            log.exception("bridge run failed", extra={"owner": self.owner})
            self.outbox.failed = self.outbox.failed or RuntimeError("run task failed")
        finally:
            self._threads.pop(thread, None)

    async def _refuse(self, request: RunRequest, refusal: Refusal) -> None:
        """Close the request's run at once with the bridge's RUN_ERROR: no agent is called."""
        await self.outbox.emit(
            request.key,
            run_error(str(refusal.code), refusal.message),
            event_headers(request.correlation_id, refusal.agent),
        )
        self.ledger.end(request.offset)
        await self.outbox.commit()
        self.metrics.refused.labels(self.owner, str(refusal.code)).inc()
        log.warning(
            "run request refused",
            extra={
                "owner": self.owner,
                "partition": self.outbox.tp.partition,
                "offset": request.offset,
                "threadId": request.key.decode("utf-8", "replace")[:200],
                "agent": None if request.agent is None else request.agent[:200],
                "code": str(refusal.code),
                "detail": refusal.message,
                "correlationId": request.correlation_id,
            },
        )

    def _headers(self, endpoint: AgentEndpoint, request: RunRequest) -> dict[str, str]:
        """The POST's extra headers: the endpoint's, and who answered (when the gateway
        verified someone) under `bridge_identity_header`, never one of the endpoint's own
        of that name (an identity is only the gateway's to give)."""
        name = self.identity_header.lower()
        headers = {k: v for k, v in endpoint.headers.items() if k.lower() != name}
        if request.identity is not None:
            headers[self.identity_header] = request.identity
        return headers

    async def _run(self, request: RunRequest) -> None:
        endpoint = self.resolve(request)
        if isinstance(endpoint, Refusal):
            await self._refuse(request, endpoint)
            return
        agent = endpoint.agent
        label = self.owner  # the metrics' agent label: the topics' owner (bounded series)
        headers = event_headers(request.correlation_id, agent)
        async with endpoint.slots:
            if self.closing:
                return
            self.ledger.start(request)
            await self.outbox.commit()  # the marker is durable before the agent is called

            async def emit(data: bytes, event_type: str) -> None:
                await self.outbox.emit(request.key, data, headers)

            began = time.monotonic()
            self.metrics.in_flight.labels(label).inc()
            try:
                result = await relay(
                    endpoint.client,
                    endpoint.url,
                    request.value,
                    self._headers(endpoint, request),
                    emit,
                    self.max_event_bytes,
                )
            finally:
                self.metrics.in_flight.labels(label).dec()
            self.ledger.end(request.offset)
            if request.offset in self._pending:
                self._pending.discard(request.offset)
                self.metrics.requests_pending.labels(label).dec()
            await self.outbox.commit()
        self.metrics.run_seconds.labels(label).observe(time.monotonic() - began)
        self.metrics.runs.labels(label, result.result).inc()
        self.metrics.events.labels(label, "agent").inc(result.events)
        if result.code is not None:
            self.metrics.events.labels(label, "bridge").inc()
        if result.http_status is not None and not 200 <= result.http_status < 300:
            self.metrics.http_errors.labels(label, str(result.http_status)).inc()
        log.info(
            "run ended",
            extra={
                "agent": agent,
                "owner": self.owner,
                "partition": self.outbox.tp.partition,
                "offset": request.offset,
                "result": result.result,
                "code": result.code,
                "events": result.events,
                "correlationId": request.correlation_id,
            },
        )

    async def drain(self, timeout: float) -> None:
        """Start no new run; give the runs in flight up to `timeout` seconds to end."""
        self.closing = True
        tasks = list(self._threads.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def stop(self) -> None:
        """Cancel the runs (their uncommitted events are aborted) and stop the outbox."""
        tasks = list(self._threads.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self.metrics.requests_pending.labels(self.owner).dec(len(self._pending))
        self._pending.clear()
        await self.outbox.stop()
