"""The second feed of the view: the last hour of warnings and rejections, for the summary.

The summary counts, per agent over the last hour, resume entries that named no open
interrupt (`unrecognised_entry`: a warning, or in strict mode a rejection's reason)
and open interrupts a resume left without an entry (`uncovered_interrupt`, a
rejection's reason). This reader starts an hour back (by timestamp) on every warnings
and rejections topic: the ones for all, or with {agent} in `warnings_topic` or
`rejections_topic` each owner's (looked for again every `DISCOVER_S`), reads committed
records only, and hands the view those two codes, once per record; every other record
is skipped before it is parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.inbox.index import HOUR_MS
from gateway.inbox.view import COUNTED_WARNINGS, InboxView
from gateway.kafka.wire import clients
from gateway.settings import Settings

log = logging.getLogger("gateway.inbox")

DISCOVER_S = 30.0
_NEEDLES = tuple(code.encode() for code in COUNTED_WARNINGS)


class FindingsReader:
    def __init__(
        self, settings: Settings, view: InboxView, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.view = view
        self.clock = clock

    def _wanted(self, topics: set[str]) -> list[str]:
        wanted: set[str] = set()
        for template in (self.settings.warnings_topic, self.settings.rejections_topic):
            if not self.settings.per_owner(template):
                wanted |= {template} & topics
            else:
                regex = self.settings.topic_regex(template)
                wanted |= {t for t in topics if regex.match(t)}
        return sorted(wanted)

    async def run(self, stop: asyncio.Event) -> None:
        consumer = reader(self.settings, "findings")
        await consumer.start()
        try:
            assigned: set[TopicPartition] = set()
            looked = -DISCOVER_S
            while not stop.is_set():
                if self.clock() - looked >= DISCOVER_S:
                    looked = self.clock()
                    assigned = await self._discover(consumer, assigned)
                if not assigned:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 1.0)
                    continue
                batch = await consumer.getmany(timeout_ms=500, max_records=5_000)
                for found in batch.values():
                    for record in found:
                        self._take(record.value)
        finally:
            await clients.stop(consumer)

    def _take(self, value: bytes | None) -> None:
        if not value or not any(needle in value for needle in _NEEDLES):
            return
        try:
            body = orjson.loads(value)
            agent, at = body.get("agent"), body.get("at")
            codes = {body.get("code")} | {
                r.get("code") for r in body.get("reasons") or () if isinstance(r, dict)
            }
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return
        at_ms = _ms(at) if isinstance(at, str) else None
        if not isinstance(agent, str):
            return
        for code in codes:
            if isinstance(code, str):
                self.view.warning(agent, code, at_ms or int(self.clock() * 1000))

    async def _discover(
        self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition]
    ) -> set[TopicPartition]:
        """Assign the warnings topics' partitions, new ones from an hour back."""
        topics = self._wanted(await consumer.topics())
        if not topics:
            return assigned
        return await assign_more(consumer, topics, assigned, int(self.clock() * 1000) - HOUR_MS)


def reader(settings: Settings, name: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer of the inbox's: committed records only, no group, nothing committed."""
    return clients.consumer(
        settings,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        client_id=f"{settings.inbox_group_id}-{name}",
        **options,
    )


async def assign_more(
    consumer: AIOKafkaConsumer,
    topics: list[str],
    assigned: set[TopicPartition],
    since_ms: int | None,
) -> set[TopicPartition]:
    """Assign every partition of `topics`: those assigned already stay where they are,
    new ones start at `since_ms` (see `seek_since`)."""
    await clients.know_topics(consumer, topics)
    every = {
        TopicPartition(t, p) for t in topics for p in (clients.partitions_for(consumer, t) or ())
    }
    new = every - assigned
    if not new:
        return assigned
    kept = {tp: await consumer.position(tp) for tp in assigned}
    consumer.assign(sorted(every))
    for tp, offset in kept.items():
        consumer.seek(tp, offset)
    await seek_since(consumer, new, since_ms)
    return every


async def seek_since(
    consumer: AIOKafkaConsumer, tps: set[TopicPartition], since_ms: int | None
) -> None:
    """Place each partition at its first record from `since_ms` on (by timestamp), or at
    its beginning when `since_ms` is None."""
    if since_ms is None:
        await consumer.seek_to_beginning(*tps)
        return
    starts = await consumer.offsets_for_times({tp: since_ms for tp in tps})
    # nothing that recent: from the end as it is now (an offset, not the lazy "latest",
    # which would skip what arrives before the first fetch)
    empty = [tp for tp in tps if starts.get(tp) is None]
    ends = await consumer.end_offsets(empty) if empty else {}
    for tp in tps:
        found = starts.get(tp)
        consumer.seek(tp, found.offset if found is not None else ends[tp])


def _ms(text: str) -> int | None:
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None
