"""The runs of one assigned run-requests partition: one thread at a time, threads concurrently.

Each thread with requests has one task that runs its requests in offset order.
A run takes one of its agent's slots (`concurrent_runs`), records "started" in
the ledger and waits until that marker is committed, and only then calls the
agent. Its events go through the partition's outbox; its end (the ledger's
"ended" and the committable offset) is committed with its last events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import httpx

from gateway.bridge.ledger import PartitionLedger, RunRequest
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.outbox import Outbox, OutboxFailed
from gateway.bridge.relay import relay, run_error
from gateway.codec.records import HEADER_CORRELATION_ID

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


def correlation_headers(correlation_id: str | None) -> list[tuple[str, bytes]]:
    return [(HEADER_CORRELATION_ID, correlation_id.encode())] if correlation_id else []


class PartitionRuns:
    def __init__(
        self,
        endpoint: AgentEndpoint,
        ledger: PartitionLedger,
        outbox: Outbox,
        metrics: BridgeMetrics,
        max_event_bytes: int,
    ) -> None:
        self.endpoint = endpoint
        self.ledger = ledger
        self.outbox = outbox
        self.metrics = metrics
        self.max_event_bytes = max_event_bytes
        self._threads: dict[bytes, asyncio.Task[None]] = {}
        self.closing = False  # no new run starts (the bridge is stopping)

    @property
    def failed(self) -> bool:
        return self.outbox.failed is not None

    async def close_restarted(self) -> int:
        """Close every run a previous owner started and never ended: `RUN_ERROR`
        `bridge_restarted`, never a second call to the agent."""
        restarted = sorted(self.ledger.started.values(), key=lambda r: r.offset)
        for run in restarted:
            await self.outbox.emit(
                run.key,
                run_error(
                    "bridge_restarted",
                    "the bridge relaying this run stopped before it ended; "
                    "the run is not started again",
                ),
                correlation_headers(run.correlation_id),
            )
            self.ledger.end(run.offset)
        if restarted:
            await self.outbox.commit()
            for _ in restarted:
                self.metrics.runs.labels(self.endpoint.agent, "bridge_restarted").inc()
                self.metrics.events.labels(self.endpoint.agent, "bridge").inc()
            log.warning(
                "closed runs a stopped bridge had started",
                extra={
                    "agent": self.endpoint.agent,
                    "partition": self.outbox.tp.partition,
                    "offsets": [r.offset for r in restarted],
                },
            )
        return len(restarted)

    def accept(self, request: RunRequest) -> None:
        if not self.ledger.accept(request):
            return
        if request.key not in self._threads:
            self._threads[request.key] = asyncio.create_task(
                self._thread(request.key), name=f"thread-{self.outbox.tp}"
            )
        self.metrics.requests_pending.labels(self.endpoint.agent).inc()

    async def _thread(self, key: bytes) -> None:
        try:
            while not self.closing and (request := self.ledger.next_of(key)) is not None:
                await self._run(request)
        except OutboxFailed:
            pass  # the partition is being rebuilt
        except Exception:
            log.exception("bridge run failed", extra={"agent": self.endpoint.agent})
            self.outbox.failed = self.outbox.failed or RuntimeError("run task failed")
        finally:
            self._threads.pop(key, None)

    async def _run(self, request: RunRequest) -> None:
        agent = self.endpoint.agent
        headers = correlation_headers(request.correlation_id)
        async with self.endpoint.slots:
            if self.closing:
                return
            self.ledger.start(request)
            await self.outbox.commit()  # the marker is durable before the agent is called

            async def emit(data: bytes, event_type: str) -> None:
                await self.outbox.emit(request.key, data, headers)

            began = time.monotonic()
            self.metrics.in_flight.labels(agent).inc()
            try:
                result = await relay(
                    self.endpoint.client,
                    self.endpoint.url,
                    request.value,
                    self.endpoint.headers,
                    emit,
                    self.max_event_bytes,
                )
            finally:
                self.metrics.in_flight.labels(agent).dec()
            self.ledger.end(request.offset)
            self.metrics.requests_pending.labels(agent).dec()
            await self.outbox.commit()
        self.metrics.run_seconds.labels(agent).observe(time.monotonic() - began)
        self.metrics.runs.labels(agent, result.result).inc()
        self.metrics.events.labels(agent, "agent").inc(result.events)
        if result.code is not None:
            self.metrics.events.labels(agent, "bridge").inc()
        if result.http_status is not None and not 200 <= result.http_status < 300:
            self.metrics.http_errors.labels(agent, str(result.http_status)).inc()
        log.info(
            "run ended",
            extra={
                "agent": agent,
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
        self.metrics.requests_pending.labels(self.endpoint.agent).dec(len(self.ledger))
        await self.outbox.stop()
