"""Warm standbys on the real broker: a replica read from a changelog, handed to a restore.

A restore that starts from a standby's replica reads only the changelog past it, and
ends with the very store, active runs and open interrupts a restore from the
beginning builds, so a pair holding either decides the same requests alike: through tombstones, an aborted transaction and records written
after the replica stopped. The standbys' reader keeps a replica up to date, says how
far behind it is, and hands it over (once) when its pair becomes this instance's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gateway.codec import changelog
from gateway.core import InterruptRecord, RunStatus, ThreadState
from gateway.kafka.assign import standby as standby_module
from gateway.kafka.assign.replica import Replica, Restored
from gateway.kafka.assign.restore import Restorer
from gateway.kafka.assign.standby import StandbyReport, Standbys
from gateway.kafka.wire import readto
from gateway.settings import Settings
from tests.kafka.test_pair import Feed, make_pair

pytestmark = pytest.mark.integration


def state(thread: str, status: RunStatus, interrupts: int = 0, at: int = 0) -> ThreadState:
    return ThreadState(
        thread,
        status,
        interrupts=tuple(InterruptRecord(f"i{n}", f"r-{thread}") for n in range(interrupts)),
        updated_ms=at,
    )


class Changelog:
    """Writes a changelog partition as the gateway does: values with hints, in transactions."""

    def __init__(self, bootstrap: str, topic: str, txn: str) -> None:
        self.tp = TopicPartition(topic, 0)
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn)

    async def write(self, *changes: ThreadState | str, abort: bool = False) -> None:
        """States, or a thread id to delete, in one transaction."""
        async with self.producer.transaction() if not abort else _aborting(self.producer):
            for change in changes:
                if isinstance(change, str):
                    await self.producer.send(self.tp.topic, None, key=change.encode(), partition=0)
                else:
                    await self.producer.send(
                        self.tp.topic,
                        changelog.encode(change),
                        key=change.thread_id.encode(),
                        partition=0,
                        headers=changelog.hints(change),
                    )


class _aborting:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        await self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.abort_transaction()


def verdicts(restored: Restored) -> list[tuple[str, bytes | None, bytes | None]]:
    """What a pair holding this state decides for one resume on every thread (answering
    interrupt i0): its records out, in order."""
    pair, _ = make_pair()
    pair.load_store(restored.store, restored.active, restored.open_interrupts)
    feed = Feed()
    requests = [
        feed.rec(
            "requests",
            {
                "threadId": t,
                "runId": f"n-{t}",
                "messages": [],
                "resume": [{"interruptId": "i0", "status": "resolved"}],
            },
            10 + n,
            key=t,
            headers=[("agui-correlation-id", f"c-{t}".encode())],
        )
        for n, t in enumerate("abcdefg")
    ]
    pair.take("requests", requests, 0.0)
    pair.set_fence(0)
    pair.process(0, 0.0, 0)
    return [(r.topic, r.key, r.value) for r in pair.round.out]


def contents(restored: Restored) -> tuple[dict[str, ThreadState | None], set[str], int]:
    store = restored.store
    return {t: store.get(t) for t in store.ids()}, restored.active, restored.open_interrupts


async def read_into(bootstrap: str, tp: TopicPartition, replica: Replica, until: int) -> None:
    """Apply the committed records before offset `until` (as a standby would have)."""
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await reader.start()
    try:
        reader.assign([tp])
        while await reader.position(tp) < until:
            batch = await reader.getmany(tp, timeout_ms=1000)
            replica.apply(m for m in batch.get(tp, ()) if m.offset < until)
        replica.reached(until, until)  # past the last commit marker
    finally:
        await reader.stop()


async def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def log(
    kafka_bootstrap: str,
    create_topics: Callable[..., Awaitable[list[str]]],
    unique_name: Callable[[str], str],
):
    owner = unique_name("sb")
    topic = f"agui.{owner}.gateway-changelog"
    await create_topics([topic], configs={"cleanup.policy": "compact"})
    written = Changelog(kafka_bootstrap, topic, unique_name("txn"))
    await written.producer.start()
    try:
        yield owner, written
    finally:
        await written.producer.stop()


async def test_a_restore_from_a_replica_builds_what_a_restore_from_the_beginning_does(
    kafka_bootstrap: str, log
) -> None:
    owner, written = log
    tp = written.tp
    await written.write(
        state("a", RunStatus.INTERRUPTED, 2),
        state("b", RunStatus.ACTIVE),
        state("c", RunStatus.SUCCEEDED),
    )
    await written.write(state("d", RunStatus.INTERRUPTED, 1), state("b", RunStatus.INTERRUPTED, 1))
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    head = Replica()
    end = await _ends(kafka_bootstrap, tp)
    await read_into(kafka_bootstrap, tp, head, end)
    ahead = head.records
    assert ahead == 5 and len(head) == 4
    # the owner goes on: a tombstone for a thread the replica holds, changes, an abort
    await written.write("a", state("d", RunStatus.ACTIVE), state("e", RunStatus.INTERRUPTED, 3))
    await written.write(state("c", RunStatus.INTERRUPTED, 5), "d", abort=True)
    await written.write(state("f", RunStatus.ACTIVE), "c")
    restorer = Restorer(settings)
    whole = await restorer.restore(tp.topic, 0)
    read_whole = restorer.last_records[tp]
    tail = await restorer.restore(tp.topic, 0, head=head)
    read_tail = restorer.last_records[tp]
    assert contents(tail) == contents(whole)
    decided = verdicts(whole)
    assert verdicts(tail) == decided  # the same verdicts for the same requests
    forwarded = sorted(k for topic, k, _ in decided if topic == "agui.bot.run-requests")
    # b answered; a, c (deleted) and g (never seen) unknown: forwarded, with a warning
    assert forwarded == [b"a", b"b", b"c", b"g"], decided
    rejected = sorted(k for topic, k, _ in decided if topic == "agui.rejections")
    assert rejected == [b"d", b"e", b"f"], decided  # runs active (d, f), e's i1 and i2 open
    assert sorted(whole.store.ids()) == ["b", "d", "e", "f"]
    assert whole.active == {"d", "f"} and whole.open_interrupts == 1 + 3
    assert read_whole == 10 and read_tail == 5  # only what the replica had not read
    assert tail.store is head.store  # its store carried on, not copied


async def test_a_replica_outside_the_changelogs_offsets_is_not_used(
    kafka_bootstrap: str, log
) -> None:
    _, written = log
    await written.write(state("a", RunStatus.ACTIVE))
    head = Replica()
    head.store.load(changelog.encode_held(state("ghost", RunStatus.SUCCEEDED)), "ghost")
    head.position = 10_000  # past the end: another changelog's, or a recreated topic's
    restorer = Restorer(Settings(bootstrap_servers=kafka_bootstrap))
    restored = await restorer.restore(written.tp.topic, 0, head=head)
    assert restored.store.ids() == ["a"] and restored.active == {"a"}


async def test_a_replica_just_before_a_commit_marker_is_taken_over_without_waiting_it_out(
    kafka_bootstrap: str, log, monkeypatch
) -> None:
    """The usual takeover: the standby read the last records, not the marker after them.
    The restore crosses the marker alone, asking the reader for records in short waits
    (a fetch that brings only a marker gives no records, and a long wait is waited out)."""
    _, written = log
    await written.write(state("a", RunStatus.INTERRUPTED, 1), state("b", RunStatus.ACTIVE))
    tp = written.tp
    end = await _ends(kafka_bootstrap, tp)
    head = Replica()
    await read_into(kafka_bootstrap, tp, head, end)
    head.position = end - 1  # after the last record, before its transaction's marker
    waits: list[int] = []
    getmany = AIOKafkaConsumer.getmany

    async def spied(self: AIOKafkaConsumer, *tps: TopicPartition, timeout_ms: int = 0, **kw):
        waits.append(timeout_ms)
        return await getmany(self, *tps, timeout_ms=timeout_ms, **kw)

    monkeypatch.setattr(AIOKafkaConsumer, "getmany", spied)
    restorer = Restorer(Settings(bootstrap_servers=kafka_bootstrap))
    restored = await restorer.restore(tp.topic, 0, head=head)
    assert restorer.last_records[tp] == 0
    assert sorted(restored.store.ids()) == ["a", "b"] and restored.active == {"b"}
    assert waits and max(waits) <= readto.STEP_MS, waits


async def test_standbys_keep_a_replica_current_and_hand_it_over_once(
    kafka_bootstrap: str, log, monkeypatch
) -> None:
    owner, written = log
    tp = written.tp
    await written.write(*(state(f"t{i}", RunStatus.INTERRUPTED, 1) for i in range(20)))
    reports: list[StandbyReport] = []
    standbys = Standbys(
        Settings(bootstrap_servers=kafka_bootstrap),
        lambda o: (f"agui.{o}.gateway-changelog", lambda key: key),
        reports.append,
    )
    monkeypatch.setattr(standby_module, "REPORT_S", 0.05)
    try:
        await standbys.place([(owner, 0), ("topic:other", 0)], active=[])
        assert list(standbys.replicas) == [tp]  # a topic of no owner has no changelog
        replica = standbys.replicas[tp]
        await wait_for(lambda: len(replica) == 20 and replica.caught_up_at is not None, "replica")
        await written.write("t0", state("t1", RunStatus.ACTIVE))
        await wait_for(lambda: len(replica) == 19 and "t1" in replica.active, "the next commit")
        await wait_for(
            lambda: reports[-1] == StandbyReport(held=1, lag=0, lag_max=0, threads=19), "lag 0"
        )
        # the pair becomes this instance's own: handed over, read no more
        await standbys.place([], active=[(owner, 0)])
        assert standbys.replicas == {} and reports[-1].held == 0
        assert standbys.take(tp) is replica and standbys.take(tp) is None
        assert replica.restored().open_interrupts == 18
    finally:
        await standbys.close()


async def test_a_replica_not_caught_up_lately_is_not_handed_over(
    kafka_bootstrap: str, log, monkeypatch
) -> None:
    owner, written = log
    await written.write(state("a", RunStatus.ACTIVE))
    standbys = Standbys(
        Settings(bootstrap_servers=kafka_bootstrap),
        lambda o: (f"agui.{o}.gateway-changelog", lambda key: key),
    )
    try:
        await standbys.place([(owner, 0)], active=[])
        replica = standbys.replicas[written.tp]
        await wait_for(lambda: replica.caught_up_at is not None, "replica")
        monkeypatch.setattr(standby_module, "STALE_S", 0.0)
        await standbys.place([], active=[(owner, 0)])
        assert standbys.take(written.tp) is None  # restored from the beginning instead
    finally:
        await standbys.close()


async def _ends(bootstrap: str, tp: TopicPartition) -> int:
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await reader.start()
    try:
        return (await reader.end_offsets([tp]))[tp]
    finally:
        await reader.stop()
