"""Where a request's reply may go: an existing topic that is none of the gateway's own.

A reply must never land in a topic the gateway itself reads or writes, for any
agent: in a changelog it would corrupt restored state, elsewhere it would pose
as the gateway's own output or input. A service may create its reply topic just
before sending the request: one metadata refresh per round covers every request
naming a topic not seen yet.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from gateway.codec.records import HEADER_REPLY_TO, InRecord
from gateway.kafka.wire import clients
from gateway.kafka.wire.topics import LEGAL_TOPIC
from gateway.observe.metrics import Metrics
from gateway.settings import Settings

log = logging.getLogger("gateway.runner")


class ReplyTopics:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.metrics = metrics
        self.consumer: AIOKafkaConsumer | None = None  # its metadata shows what exists
        # the audit topic even when the trail is off: a reply must never pose as its record
        outputs = (settings.rejections_topic, settings.warnings_topic, settings.audit_topic)
        self._own_topics = {t for t in outputs if not settings.per_owner(t)}
        self._own_patterns: list[re.Pattern[str]] = [
            settings.topic_regex(template)
            for template in (
                settings.events_topic,
                settings.requests_topic,
                settings.run_requests_topic,
                settings.changelog_topic,
                *(t for t in outputs if settings.per_owner(t)),
            )
        ]
        self._refreshed_at = float("-inf")

    def allowed(self, topic: str) -> bool:
        """Whether a request may have its reply written to `topic`."""
        return self.allowed_by_name(topic) and self.exists(topic)

    def allowed_by_name(self, topic: str) -> bool:
        """Whether `topic` is none of the gateway's own topics."""
        return topic not in self._own_topics and not any(p.match(topic) for p in self._own_patterns)

    def exists(self, topic: str) -> bool:
        return self.consumer is not None and clients.topic_exists(self.consumer, topic)

    async def refresh_for(self, requests: Iterable[InRecord]) -> None:
        """Refresh the metadata once if a buffered request names a reply topic not seen yet.

        A topic still unknown after it is warned about when its request is judged.
        """
        if self.consumer is None:
            return
        unknown: set[str] = set()
        for request in requests:
            if request.received < self._refreshed_at:
                continue  # a refresh since it was consumed shows what it names
            topic = request.header(HEADER_REPLY_TO)
            if (
                topic
                and topic not in unknown
                and LEGAL_TOPIC.match(topic)
                and self.allowed_by_name(topic)
                and not self.exists(topic)
            ):
                unknown.add(topic)
        if not unknown:
            return
        self._refreshed_at = time.monotonic()
        self.metrics.reply_topic_refreshes.inc()
        log.debug("refreshing metadata for reply topics", extra={"topics": sorted(unknown)[:10]})
        try:
            await asyncio.wait_for(clients.refresh_metadata(self.consumer), timeout=5)
        except (KafkaError, TimeoutError) as exc:
            log.warning("metadata refresh for reply topics failed", extra={"error": repr(exc)})
