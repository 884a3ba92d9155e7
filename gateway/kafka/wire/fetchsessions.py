"""Incremental fetch sessions (KIP-227) under aiokafka's fetcher.

aiokafka sends every fetch in full and outside any session: each request names
every fetchable partition with its offset, and each response carries an entry for
every one of them, records or not. The cost grows with the partitions assigned,
not with the records: at 1,600 partitions encoding the request and decoding the
response took about 17 ms of CPU per fetch, every long poll while idle and every
fetch under load. In a session the broker keeps the partitions and their offsets;
a request names only what changed since the last one (a new offset, a partition
added, `forgotten` ones dropped), and a response only the partitions with records,
a moved high watermark or an error. A quiet fetch is a few dozen bytes each way.

`FetchSessions` sits between the consumer's fetcher and its network client
(`install`): the fetcher builds its full request as it always does and hands the
response, partial or not, to its own processing unchanged, which ignores the
partitions a response leaves out. Every other request passes through.

A session lives per broker node, one fetch in flight at a time (the fetcher sends
the next fetch to a node only after the last one is processed). After a full
request (`session_id` 0 or the old id, epoch 0) the broker answers with the new
session's id; each incremental request carries the next epoch. Any failure (a
session error, a broken connection, a fetch cancelled mid-flight, whose effect on
the broker's session is then unknown) sends the next request in full, closing the
old session. A broker that creates no session (its cache is full) or speaks no
session version (Fetch below v7) gets full requests, as without this module.

The fence (`fences.py`) needs the last stable offset of an events partition as of
a response processed after the requests it guards were delivered. aiokafka stamps
a partition's figures only when a response names it; in a session a quiet
partition is left out. What a session response leaves out is unchanged as of that
response (a new last stable offset moves the high watermark too: a transaction's
marker is a record), so `fetched_end` answers the offset the session last reported
with the time of the session's latest response. Figures are kept from the wire,
whether or not the fetcher used the response, and only for partitions the
session holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest, FetchRequestStruct

log = logging.getLogger("gateway.fetch")

INITIAL_EPOCH = 0  # a full request: open a session (closing the one named, if any)
MAX_EPOCH = 2**31 - 1
FIRST_SESSION_VERSION = 7  # Fetch v7 brought sessions
SESSION_ID_NOT_FOUND = 70  # FETCH_SESSION_ID_NOT_FOUND: open a new one, close none

# (partition, offset, max bytes) as the fetcher lists them under a topic
PartitionFetch = tuple[int, int, int]
Topics = list[tuple[str, list[PartitionFetch]]]


def _by_topic(topics: Iterable[tuple[str, Iterable[Any]]]) -> dict[str, frozenset[Any]]:
    return {topic: frozenset(partitions) for topic, partitions in topics}


class SessionRequest(FetchRequest):
    """The fetch that goes on the wire: the session's fields, and only what changed."""

    def __init__(
        self,
        full: FetchRequest,
        wanted: dict[str, frozenset[PartitionFetch]],
        session_id: int,
        epoch: int,
        topics: Topics,
        forgotten: Topics,
    ) -> None:
        super().__init__(
            full._max_wait_ms,
            full._min_bytes,
            full._max_bytes,
            full._isolation_level,
            topics,
            rack_id=full._rack_id,
        )
        self.full = full
        self.wanted = wanted  # every partition the fetcher asked for, by topic
        self.session_id = session_id
        self.epoch = epoch
        self.forgotten = forgotten
        self.version: int | None = None  # the version the connection chose

    def build(self, request_struct_class: type[FetchRequestStruct]) -> FetchRequestStruct:
        self.version = request_struct_class.API_VERSION
        if self.version < FIRST_SESSION_VERSION:
            return self.full.build(request_struct_class)
        struct = super().build(request_struct_class)
        struct.session_id = self.session_id
        struct.session_epoch = self.epoch
        struct.forgotten_topics_data = [
            (topic, [p for p, _, _ in parts]) for topic, parts in self.forgotten
        ]
        return struct


@dataclass
class Session:
    """What one broker node's fetch session holds, as its last response acknowledged."""

    id: int = 0
    epoch: int = INITIAL_EPOCH
    held: dict[str, frozenset[PartitionFetch]] = field(default_factory=dict)
    # partition -> its last stable offset as the session last reported it
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    confirmed_at: int = 0  # wall ms the latest successful response was received

    @property
    def incremental(self) -> bool:
        return self.id != 0 and self.epoch > INITIAL_EPOCH

    def restart(self, found: bool = True) -> None:
        """The broker's session is unknown: the next request is full (closing it if found)."""
        if not found:
            self.id = 0
        self.epoch = INITIAL_EPOCH
        self.held = {}
        self.ends.clear()

    def request(self, full: FetchRequest) -> SessionRequest:
        """The wire request for the fetcher's full one."""
        wanted = _by_topic(full.topics)
        if not self.incremental:
            self.ends.clear()
            return SessionRequest(full, wanted, self.id, self.epoch, full.topics, [])
        changed: Topics = []
        forgotten: Topics = []
        for topic, now in wanted.items():
            before = self.held.get(topic)
            if before == now:
                continue
            if before is None:
                changed.append((topic, list(now)))
                continue
            if now - before:
                changed.append((topic, list(now - before)))
            kept = {p for p, _, _ in now}
            gone = [part for part in before if part[0] not in kept]
            if gone:
                forgotten.append((topic, gone))
        for topic in self.held.keys() - wanted.keys():
            forgotten.append((topic, list(self.held[topic])))
        for topic, parts in forgotten:
            for p, _, _ in parts:
                self.ends.pop((topic, p), None)  # no longer reported on
        return SessionRequest(full, wanted, self.id, self.epoch, changed, forgotten)

    def received(self, sent: SessionRequest, response: Any, now_ms: int) -> None:
        """Take in the response to `sent`: the session's next id and epoch, and the
        partitions' figures."""
        if sent.version is None or sent.version < FIRST_SESSION_VERSION:
            self.restart(found=False)  # a fetch outside sessions: nothing is held
            self._record(response, now_ms, held=False)
            return
        if response.error_code:
            log.info(
                "fetch session %d refused (error %d); the next fetch is full",
                self.id,
                response.error_code,
            )
            self.restart(found=response.error_code != SESSION_ID_NOT_FOUND)
            return
        if self.incremental:
            self.epoch = self.epoch + 1 if self.epoch < MAX_EPOCH else 1
        elif response.session_id:
            self.id, self.epoch = response.session_id, 1
        else:  # the broker opened no session (none to spare): full requests go on
            self.restart(found=False)
            self._record(response, now_ms, held=False)
            return
        self.held = sent.wanted
        self._record(response, now_ms, held=True)

    def _record(self, response: Any, now_ms: int, held: bool) -> None:
        for topic, partitions in response.topics:
            for partition, error_code, _high, lso, *_ in partitions:
                if error_code or not held:
                    self.ends.pop((topic, partition), None)
                else:
                    self.ends[(topic, partition)] = lso
        if held:
            self.confirmed_at = now_ms

    def fetched_end(self, tp: TopicPartition, beside: TopicPartition) -> tuple[int, int] | None:
        """(last stable offset of `tp`, wall ms it held) when both partitions are in
        this session (so their responses come on one connection, in order)."""
        lso = self.ends.get(tp)
        if lso is None or beside not in self.ends or lso < 0:
            return None
        return lso, self.confirmed_at


class FetchSessions:
    """The consumer's network client as its fetcher sees it: fetches go in sessions."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._sessions: dict[int, Session] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def send(self, node_id: int, request: Any, **kwargs: Any) -> Any:
        if not isinstance(request, FetchRequest):
            return await self._client.send(node_id, request, **kwargs)
        session = self._sessions.setdefault(node_id, Session())
        wire = session.request(request)
        try:
            response = await self._client.send(node_id, wire, **kwargs)
        except BaseException:
            # sent or not, processed or not: the broker's session is unknown
            session.restart(found=True)
            raise
        session.received(wire, response, int(time.time() * 1000))
        return response

    def fetched_end(self, tp: TopicPartition, beside: TopicPartition) -> tuple[int, int] | None:
        """(last stable offset, wall ms) of `tp` from the session it shares with `beside`."""
        leader = self._client.cluster.leader_for_partition(tp)
        session = self._sessions.get(leader) if leader is not None else None
        if session is None or leader != self._client.cluster.leader_for_partition(beside):
            return None
        return session.fetched_end(tp, beside)


def install(consumer: AIOKafkaConsumer) -> FetchSessions:
    """Put the started consumer's fetches in sessions."""
    fetcher = consumer._fetcher
    assert fetcher is not None, "install after the consumer started"
    sessions = FetchSessions(fetcher._client)
    fetcher._client = sessions
    return sessions


def installed(consumer: AIOKafkaConsumer) -> FetchSessions | None:
    client = getattr(getattr(consumer, "_fetcher", None), "_client", None)
    return client if isinstance(client, FetchSessions) else None
