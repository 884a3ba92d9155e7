"""Incremental fetch sessions: the session's bookkeeping against a scripted broker, and
a consumer reading in sessions from the real one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest, FetchRequest_v4, FetchRequest_v11

from gateway.kafka.wire import fetchsessions, fetchwalk
from gateway.kafka.wire.fetchsessions import FetchSessions, SessionRequest
from tests.integration.conftest import CreateTopics

NODE = 1


def fetch(offsets: dict[tuple[str, int], int]) -> FetchRequest:
    """The fetcher's full request: every partition at its offset."""
    topics: dict[str, list[tuple[int, int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append((partition, offset, 1048576))
    return FetchRequest(500, 1, 52428800, 1, list(topics.items()))


def response(
    session_id: int = 0,
    error: int = 0,
    partitions: dict[tuple[str, int], tuple[int, int]] | None = None,
    version: int = 11,
) -> SimpleNamespace:
    """A fetch response: (error, last stable offset) per partition it names."""
    topics: dict[str, list[tuple[Any, ...]]] = {}
    for (topic, partition), (code, lso) in (partitions or {}).items():
        topics.setdefault(topic, []).append((partition, code, lso, lso, 0, None, -1, b""))
    return SimpleNamespace(
        API_VERSION=version, error_code=error, session_id=session_id, topics=list(topics.items())
    )


class ScriptedBroker:
    """The network client under the sessions: answers each fetch from a script and
    keeps what went on the wire (built at the version the script says)."""

    def __init__(self) -> None:
        self.answers: list[SimpleNamespace | BaseException] = []
        self.sent: list[Any] = []
        self.cluster = SimpleNamespace(leader_for_partition=lambda tp: NODE)

    async def send(self, node_id: int, request: Any, **kwargs: Any) -> Any:
        answer = self.answers.pop(0)
        struct_class = (
            FetchRequest_v4 if getattr(answer, "API_VERSION", 11) < 7 else FetchRequest_v11
        )
        self.sent.append(request.build(struct_class))
        if isinstance(answer, BaseException):
            raise answer
        return answer


def wire_partitions(struct: Any) -> dict[tuple[str, int], int]:
    return {(topic, p[0]): p[2] for topic, parts in struct.topics for p in parts}


def forgotten(struct: Any) -> set[tuple[str, int]]:
    return {(topic, p) for topic, parts in struct.forgotten_topics_data for p in parts}


ALL = {("a", 0): 10, ("a", 1): 20, ("b", 0): 5}


async def exchange(
    broker: ScriptedBroker,
    sessions: FetchSessions,
    offsets: dict[tuple[str, int], int],
    answer: Any,
) -> Any:
    broker.answers.append(answer)
    await sessions.send(NODE, fetch(offsets))
    return broker.sent[-1]


async def test_after_a_full_fetch_opens_a_session_quiet_fetches_name_nothing() -> None:
    broker = ScriptedBroker()
    sessions = FetchSessions(broker)
    first = await exchange(broker, sessions, ALL, response(session_id=7))
    assert (first.session_id, first.session_epoch) == (0, 0)
    assert wire_partitions(first) == ALL
    quiet = [await exchange(broker, sessions, ALL, response(session_id=7)) for _ in range(3)]
    assert [(s.session_id, s.session_epoch) for s in quiet] == [(7, 1), (7, 2), (7, 3)]
    assert all(s.topics == [] and s.forgotten_topics_data == [] for s in quiet)


async def test_an_incremental_fetch_names_moved_added_and_forgotten_partitions() -> None:
    broker = ScriptedBroker()
    sessions = FetchSessions(broker)
    await exchange(broker, sessions, ALL, response(session_id=7))
    moved = {("a", 0): 10, ("a", 1): 25, ("c", 3): 0}  # a-1 moved, b-0 gone, c-3 new
    sent = await exchange(broker, sessions, moved, response(session_id=7))
    assert wire_partitions(sent) == {("a", 1): 25, ("c", 3): 0}
    assert forgotten(sent) == {("b", 0)}
    # the next one compares with what the broker now holds
    again = await exchange(broker, sessions, {("a", 0): 10, ("c", 3): 0}, response(session_id=7))
    assert wire_partitions(again) == {}
    assert forgotten(again) == {("a", 1)}


@pytest.mark.parametrize(
    ("error", "next_id"),
    [(71, 7), (70, 0)],  # INVALID_FETCH_SESSION_EPOCH: close it; SESSION_ID_NOT_FOUND: none
)
async def test_a_refused_session_sends_the_next_fetch_in_full(error: int, next_id: int) -> None:
    broker = ScriptedBroker()
    sessions = FetchSessions(broker)
    await exchange(broker, sessions, ALL, response(session_id=7))
    await exchange(broker, sessions, ALL, response(session_id=7, error=error))
    full = await exchange(broker, sessions, ALL, response(session_id=8))
    assert (full.session_id, full.session_epoch) == (next_id, 0)
    assert wire_partitions(full) == ALL
    after = await exchange(broker, sessions, ALL, response(session_id=8))
    assert (after.session_id, after.session_epoch) == (8, 1)


@pytest.mark.parametrize("failure", [asyncio.CancelledError(), ConnectionError("reset")])
async def test_a_fetch_lost_in_flight_closes_its_session(failure: BaseException) -> None:
    """Sent or not, the broker's epoch is unknown: the next fetch is full, closing it."""
    broker = ScriptedBroker()
    sessions = FetchSessions(broker)
    await exchange(broker, sessions, ALL, response(session_id=7))
    with pytest.raises(type(failure)):
        await exchange(broker, sessions, ALL, failure)
    full = await exchange(broker, sessions, ALL, response(session_id=9))
    assert (full.session_id, full.session_epoch) == (7, 0)
    assert wire_partitions(full) == ALL


async def test_without_a_session_every_fetch_stays_full() -> None:
    broker = ScriptedBroker()
    sessions = FetchSessions(broker)
    await exchange(broker, sessions, ALL, response(session_id=0))  # no session to spare
    again = await exchange(broker, sessions, ALL, response(session_id=0))
    assert (again.session_id, again.session_epoch) == (0, 0)
    assert wire_partitions(again) == ALL
    # a broker speaking Fetch below v7: the fetcher's own request, as without sessions
    old = await exchange(broker, sessions, ALL, response(version=4))
    assert not hasattr(old, "session_id")
    assert {(t, p[0]) for t, parts in old.topics for p in parts} == set(ALL)
    assert sessions.fetched_end(TopicPartition("a", 0), TopicPartition("a", 1)) is None


EV, RQ = TopicPartition("a", 0), TopicPartition("a", 1)


async def reported_session() -> tuple[ScriptedBroker, FetchSessions]:
    """A session opened by a full fetch whose response reported every partition."""
    broker = ScriptedBroker()
    sessions = FetchSessions(broker)
    reported = {("a", 0): (0, 10), ("a", 1): (0, 20), ("b", 0): (0, 5)}
    await exchange(broker, sessions, ALL, response(session_id=7, partitions=reported))
    return broker, sessions


async def test_a_quiet_partitions_figure_holds_as_of_the_latest_response() -> None:
    broker, sessions = await reported_session()
    first = sessions.fetched_end(EV, RQ)
    assert first is not None and first[0] == 10
    time.sleep(0.003)
    # a quiet fetch names nothing: the figure is unchanged, as of this response
    await exchange(broker, sessions, ALL, response(session_id=7))
    later = sessions.fetched_end(EV, RQ)
    assert later is not None and later[0] == 10 and later[1] > first[1]
    # a moved figure comes in its response
    await exchange(broker, sessions, ALL, response(session_id=7, partitions={("a", 0): (0, 12)}))
    assert sessions.fetched_end(EV, RQ) == (12, sessions._sessions[NODE].confirmed_at)
    # an error on the partition: no figure
    await exchange(broker, sessions, ALL, response(session_id=7, partitions={("a", 0): (6, -1)}))
    assert sessions.fetched_end(EV, RQ) is None


async def test_a_partition_out_of_the_session_has_no_figure() -> None:
    broker, sessions = await reported_session()
    # the events partition is paused or buffered: left out of the fetch, forgotten
    await exchange(broker, sessions, {("a", 1): 20, ("b", 0): 5}, response(session_id=7))
    assert sessions.fetched_end(EV, RQ) is None
    assert sessions.fetched_end(TopicPartition("b", 0), RQ) is not None
    # a failed session knows nothing
    await exchange(broker, sessions, ALL, response(session_id=7, error=71))
    assert sessions.fetched_end(TopicPartition("b", 0), RQ) is None


def test_other_requests_and_attributes_pass_through() -> None:
    inner = SimpleNamespace(cluster="the cluster")
    assert FetchSessions(inner).cluster == "the cluster"


def test_the_wire_request_encodes_the_session_fields() -> None:
    full = fetch(ALL)
    wire = SessionRequest(full, {}, 7, 3, [("a", [(1, 25, 1048576)])], [("b", [(0, 5, 1)])])
    struct = wire.build(FetchRequest_v11)
    encoded = struct.encode()
    assert (struct.session_id, struct.session_epoch) == (7, 3)
    assert struct.forgotten_topics_data == [("b", [0])]
    assert (
        encoded
        == FetchRequest_v11(
            -1, 500, 1, 52428800, 1, 7, 3, [("a", [(1, -1, 25, -1, 1048576)])], [("b", [0])], ""
        ).encode()
    )


# --- against the real broker ------------------------------------------------------------


class Tap:
    """Counts what the consumer's fetches carried on the wire."""

    def __init__(self, sessions: FetchSessions) -> None:
        self.requests: list[int] = []  # partitions named per request
        self.responses: list[int] = []  # partitions named per response
        inner = sessions._client
        send = inner.send

        async def tapped(node_id: int, request: Any, **kwargs: Any) -> Any:
            result = await send(node_id, request, **kwargs)
            if isinstance(request, SessionRequest):
                self.requests.append(sum(len(parts) for _, parts in request.topics))
                self.responses.append(sum(len(parts) for _, parts in result.topics))
            return result

        inner.send = tapped  # this client only


@pytest.mark.integration
async def test_a_consumer_in_sessions_reads_exactly_the_committed_records(
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    """Many quiet partitions and a few busy ones, committed and aborted transactions:
    the consumer reads what read_committed shows, while quiet fetches name nothing."""
    topics = await create_topics([unique_name("fs") for _ in range(25)], partitions=4)
    busy = [TopicPartition(topics[n], n % 4) for n in range(0, 25, 6)]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=unique_name("fs-tx")
    )
    await consumer.start()
    await producer.start()
    try:
        fetchwalk.install(consumer)  # as the gateway runs it
        sessions = fetchsessions.install(consumer)
        assert fetchsessions.installed(consumer) is sessions
        tap = Tap(sessions)
        consumer.assign([TopicPartition(t, p) for t in topics for p in range(4)])
        expected: list[tuple[TopicPartition, bytes]] = []
        seen: list[tuple[TopicPartition, bytes]] = []

        async def read_for(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=100)
                for tp, records in batch.items():
                    seen.extend((tp, r.value) for r in records)

        await read_for(1.0)  # the session opens, every partition quiet
        for round_ in range(4):
            for commit in (True, False):
                await producer.begin_transaction()
                for tp in busy:
                    value = f"{round_}-{commit}-{tp.partition}".encode()
                    await producer.send_and_wait(tp.topic, value, partition=tp.partition)
                    if commit:
                        expected.append((tp, value))
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
            await read_for(0.5)
        await read_for(1.5)
        assert sorted(seen) == sorted(expected)
        assert len(tap.requests) > 5
        assert tap.requests[0] == 100 and tap.responses[0] == 100  # the first is full
        # later fetches name only moved partitions: never all of them again
        assert max(tap.requests[1:]) <= len(busy)
        assert max(tap.responses[1:]) <= len(busy)
        quiet = sum(q == r == 0 for q, r in zip(tap.requests, tap.responses, strict=True))
        assert quiet >= 3, (tap.requests, tap.responses)
        # the figures kept for the fence are the broker's end offsets
        ends = await consumer.end_offsets(busy)
        quiet_tp = TopicPartition(topics[1], 0)
        for tp in busy:
            found = sessions.fetched_end(tp, quiet_tp)
            assert found is not None and found[0] == ends[tp]
    finally:
        await producer.stop()
        await consumer.stop()
