"""Request/reply on Kafka: one reply consumer, pinned before anything is sent.

The reply consumer is assigned every partition of the reply topic (no group:
several processes may share one reply topic, each keeps the replies it waits
for) and its position is resolved to the end *before* the first request goes
out, so no reply can land behind it. Waiters are keyed by correlation id; a
reply nobody waits for (another process's, or one whose wait timed out) is
dropped. Memory is bounded by the requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from gateway.client.replies import DuplicateReply, ForwardReply, RejectReply, parse_reply
from gateway.codec.records import HEADER_CORRELATION_ID

log = logging.getLogger("gateway.client.replies")

AnyReply = ForwardReply | RejectReply | DuplicateReply


class ReplyTopicMissing(RuntimeError):
    """The reply topic does not exist (and the client was not asked to create it)."""


class Rendezvous:
    """Matches replies on one reply topic to the requests waiting for them."""

    def __init__(self, consumer: AIOKafkaConsumer, topic: str) -> None:
        self.consumer = consumer
        self.topic = topic
        self._waiting: dict[str, asyncio.Future[AnyReply]] = {}
        self._task: asyncio.Task[None] | None = None
        self.pinned = False

    async def start(self, metadata_timeout: float = 10.0) -> None:
        """Assign the reply topic's partitions and pin the position at their end."""
        consumer = self.consumer
        await consumer.start()
        partitions = consumer.partitions_for_topic(self.topic)
        deadline = asyncio.get_running_loop().time() + metadata_timeout
        while not partitions:
            if asyncio.get_running_loop().time() > deadline:
                raise ReplyTopicMissing(f"reply topic {self.topic!r} does not exist")
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(self.topic)
            if not partitions:
                await asyncio.sleep(0.2)
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:  # resolve now: a lazy position would be taken after our first send
            await consumer.position(tp)
        self.pinned = True
        self._task = asyncio.create_task(self._read(), name=f"replies:{self.topic}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for future in self._waiting.values():
            if not future.done():
                future.cancel()
        self._waiting.clear()
        await self.consumer.stop()

    def expect(self, correlation_id: str | None = None) -> tuple[str, asyncio.Future[AnyReply]]:
        """Register a wait before sending; returns (correlation id, future of the reply)."""
        cid = correlation_id or uuid.uuid4().hex
        if cid in self._waiting:
            raise ValueError(f"correlation id {cid!r} is already awaited")
        future: asyncio.Future[AnyReply] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = future
        return cid, future

    def forget(self, correlation_id: str) -> None:
        future = self._waiting.pop(correlation_id, None)
        if future is not None and not future.done():
            future.cancel()

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    async def _read(self) -> None:
        while True:
            try:
                batch = await self.consumer.getmany(timeout_ms=500, max_records=500)
            except asyncio.CancelledError:
                raise
            except Exception:  # a broker hiccup: aiokafka reconnects, keep reading
                log.warning("reading replies failed; retrying", exc_info=True)
                await asyncio.sleep(0.5)
                continue
            for records in batch.values():
                for record in records:
                    self._deliver(record)

    def _deliver(self, record: Any) -> None:
        cid = _header(record, HEADER_CORRELATION_ID)
        if cid is None:
            return
        future = self._waiting.pop(cid, None)
        if future is None or future.done():
            return
        try:
            future.set_result(parse_reply(record.value or b""))
        except (ValidationError, ValueError) as exc:
            future.set_exception(
                UnreadableReply(f"the reply for correlation id {cid!r} is not a reply: {exc}")
            )


class UnreadableReply(ValueError):
    """A record on the reply topic carried our correlation id but is not a reply."""


def _header(record: Any, name: str) -> str | None:
    for key, value in record.headers or ():
        if key == name and value is not None:
            try:
                return bytes(value).decode()
            except UnicodeDecodeError:
                return None
    return None
