"""Following runs on an events topic: one shared consumer per topic.

A `RunTap` reads every partition of `agui.<agent>.events` (or a group's
`agui.<group>.events`; `read_committed`, no group) from the end it pinned at
start. Callers *watch* a run (agent, thread and runId) before its request is
sent, so the run's `RUN_STARTED` cannot be missed: it is written only after
the gateway forwarded the request. A watch receives the run's events, from its
`RUN_STARTED` (matched by `runId`, the forwarded input's) to its
`RUN_FINISHED` or `RUN_ERROR`, into a bounded queue. An event goes to the
watches of its agent and thread only: its agent is the one its `agui-agent`
header names, or, with no header, the agent whose own topic the tap reads (on
a group's topic an event naming no agent is no one's). Memory is bounded by the open watches; a watch whose reader falls
behind by more than its buffer is ended (`RunOverflow`), never the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.codec import jsonio
from gateway.codec.records import HEADER_AGENT, peek_type

log = logging.getLogger("gateway.client.runs")

CLOSING = frozenset({"RUN_FINISHED", "RUN_ERROR"})
BATCH_BYTES = 64 << 10  # `RunTap.batches`: JSON taken together, at least one event


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a watched run: its type, its JSON (one line) and its value."""

    type: str
    json: bytes
    value: dict[str, Any]

    @property
    def closes(self) -> bool:
        return self.type in CLOSING


class RunStreamError(Exception):
    """A run's stream ended without its `RUN_FINISHED` or `RUN_ERROR`. `code` says why."""

    code = "run_stream_failed"


class RunNotStarted(RunStreamError):
    code = "run_not_started"


class RunTimedOut(RunStreamError):
    code = "run_timeout"


class RunOverflow(RunStreamError):
    code = "run_buffer_overflow"


class TapStopped(RunStreamError):
    code = "events_reader_stopped"


@dataclass(eq=False, slots=True)
class RunWatch:
    """The events of one run, as they arrive. Iterate with `RunTap.events`."""

    thread_id: str
    run_id: str
    buffer: int
    agent: str | None = None
    started: bool = False
    queue: asyncio.Queue[RunEvent | RunStreamError] = field(init=False)

    def __post_init__(self) -> None:
        self.queue = asyncio.Queue()

    def offer(self, event: RunEvent) -> bool:
        """Queue an event; False once the watch is over (closed or overflowed)."""
        if self.queue.qsize() >= self.buffer:
            self.queue.put_nowait(RunOverflow(f"more than {self.buffer} events unread"))
            return False
        self.queue.put_nowait(event)
        return not event.closes


class RunTap:
    """The shared reader of one events topic: an agent's own, or a group's.

    `agent`: the agent whose own topic this is (its events may name no agent);
    None for a group's topic, where each event names its agent in `agui-agent`.
    """

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        topic: str,
        buffer: int = 10_000,
        agent: str | None = None,
    ) -> None:
        self.consumer = consumer
        self.topic = topic
        self.buffer = buffer
        self.agent = agent
        self._watches: dict[tuple[str | None, str], list[RunWatch]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.failed: BaseException | None = None

    async def start(self) -> None:
        consumer = self.consumer
        await consumer.start()
        partitions = consumer.partitions_for_topic(self.topic)
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(self.topic)
        if not partitions:
            raise LookupError(f"events topic {self.topic!r} does not exist")
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:  # pinned before any watch is handed out
            await consumer.position(tp)
        self._task = asyncio.create_task(self._read(), name=f"runs:{self.topic}")
        self._ready.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._end_all(TapStopped("the events reader stopped"))
        await self.consumer.stop()

    @property
    def watching(self) -> int:
        return sum(len(w) for w in self._watches.values())

    def watch(self, thread_id: str, run_id: str, agent: str | None = None) -> RunWatch:
        """Start following `agent`'s run (default: the tap's own agent). Call before its
        request is sent; `unwatch` when done."""
        if self.failed is not None:
            raise TapStopped(f"the events reader failed: {self.failed!r}")
        watch = RunWatch(thread_id, run_id, self.buffer, agent or self.agent)
        self._watches.setdefault((watch.agent, thread_id), []).append(watch)
        return watch

    def unwatch(self, watch: RunWatch) -> None:
        key = (watch.agent, watch.thread_id)
        watches = self._watches.get(key)
        if watches is None:
            return
        with contextlib.suppress(ValueError):
            watches.remove(watch)
        if not watches:
            del self._watches[key]

    async def events(
        self, watch: RunWatch, start_timeout: float, run_timeout: float
    ) -> AsyncIterator[RunEvent]:
        """The run's events through its closing event; RunStreamError if it does not get there.

        `start_timeout` counts from now to the run's `RUN_STARTED`; `run_timeout`
        from now to its close. The watch is removed however the iteration ends.
        """
        async with contextlib.aclosing(self.batches(watch, start_timeout, run_timeout)) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    async def batches(
        self,
        watch: RunWatch,
        start_timeout: float,
        run_timeout: float,
        max_bytes: int = BATCH_BYTES,
    ) -> AsyncGenerator[list[RunEvent], None]:
        """`events`, what has already arrived taken together: for a writer that sends
        each batch at once (the edge: one write for a run's events read in one fetch,
        not one per event). A batch holds at least one event, more while under
        `max_bytes` of JSON; the events before an error are yielded before it is raised.
        """
        loop = asyncio.get_running_loop()
        start_by = loop.time() + start_timeout
        end_by = loop.time() + run_timeout
        queue = watch.queue
        try:
            while True:
                deadline = end_by if watch.started else min(start_by, end_by)
                remaining = deadline - loop.time()
                try:
                    if remaining <= 0:
                        raise TimeoutError
                    item = queue.get_nowait() if queue.qsize() else await _get(queue, remaining)
                except TimeoutError:
                    if not watch.started and start_by <= end_by:
                        raise RunNotStarted(
                            f"run {watch.run_id!r} did not start within {start_timeout:g} s"
                        ) from None
                    raise RunTimedOut(
                        f"run {watch.run_id!r} did not finish within {run_timeout:g} s"
                    ) from None
                if isinstance(item, RunStreamError):
                    raise item
                batch, size = [item], len(item.json)
                while not item.closes and size < max_bytes and queue.qsize():
                    queued = queue.get_nowait()
                    if isinstance(queued, RunStreamError):
                        yield batch
                        raise queued
                    item = queued
                    batch.append(item)
                    size += len(item.json)
                yield batch
                if item.closes:
                    return
        finally:
            self.unwatch(watch)

    async def _read(self) -> None:
        try:
            while True:
                try:
                    batch = await self.consumer.getmany(timeout_ms=500, max_records=2000)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.warning("reading %s failed; retrying", self.topic, exc_info=True)
                    await asyncio.sleep(0.5)
                    continue
                if not self._watches:
                    continue
                for records in batch.values():
                    for record in records:
                        self._route(record)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a defect here must end every stream, not hang it
            self.failed = exc
            log.exception("the events reader of %s failed", self.topic)
            self._end_all(TapStopped(f"the events reader failed: {exc!r}"))

    def _route(self, record: Any) -> None:
        key = record.key
        if key is None:
            return
        try:
            thread_id = key.decode()
        except UnicodeDecodeError:
            return
        agent = _agent(record.headers, self.agent)
        watches = self._watches.get((agent, thread_id))
        if not watches:
            return
        event = _event(record.value)
        if event is None:
            return
        for watch in list(watches):
            if not watch.started:
                # RUN_STARTED names its run; a RUN_ERROR (which names none) before it
                # is the run failing to start (README, "Calling agents through the gateway").
                if event.type == "RUN_STARTED" and event.value.get("runId") == watch.run_id:
                    watch.started = True
                elif event.type != "RUN_ERROR":
                    continue
            if not watch.offer(event):
                self.unwatch(watch)

    def _end_all(self, error: RunStreamError) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.queue.put_nowait(error)
        self._watches.clear()


def _agent(headers: Any, default: str | None) -> str | None:
    """The agent an event names in `agui-agent`; `default` when it names none."""
    for name, value in headers or ():
        if name == HEADER_AGENT and value is not None:
            try:
                return str(value.decode())
            except UnicodeDecodeError:
                return None  # no agent's name: no one's event
    return default


def _event(value: bytes | None) -> RunEvent | None:
    """An event record as a RunEvent; None for what is not an AG-UI event object."""
    if not value:
        return None
    try:
        parsed = jsonio.loads(value)
    except (jsonio.JSONDecodeError, jsonio.TooDeep):
        return None
    if not isinstance(parsed, dict):
        return None
    kind = peek_type(value) or parsed.get("type")
    if not isinstance(kind, str):
        return None
    line = value if b"\n" not in value and b"\r" not in value else jsonio.dumps(parsed)
    return RunEvent(kind, line, parsed)


async def _get(
    queue: asyncio.Queue[RunEvent | RunStreamError], timeout: float
) -> RunEvent | RunStreamError:
    async with asyncio.timeout(timeout):
        return await queue.get()
