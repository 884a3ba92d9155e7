"""Records as the fetch read them (`asread`): only for the consumers that ask, and only the
records aiokafka would give, aborted transactions and markers skipped as before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import ConsumerRecord

from gateway.codec import changelog
from gateway.core import RunStatus, ThreadState
from gateway.kafka.assign import replica as replica_module
from gateway.kafka.assign.restore import Restorer
from gateway.kafka.wire import asread, clients
from gateway.kafka.wire.readto import read_to
from gateway.settings import Settings

TP = TopicPartition("t", 0)


def fetched(count: int) -> MemoryRecords:
    batch = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for n in range(count):
        batch.append(n, timestamp=1000 + n, key=b"k%d" % n, value=b"v%d" % n, headers=[("h", b"x")])
    return MemoryRecords(bytes(batch.build()))


def unpacked(key_deserializer: object) -> list[object]:
    uncommitted = fetcher.READ_UNCOMMITTED
    return list(
        fetcher.PartitionRecords(TP, fetched(3), [], 0, key_deserializer, None, True, uncommitted)
    )


def test_only_a_consumer_that_asks_gets_the_records_as_read() -> None:
    asread.install()
    installed = fetcher.PartitionRecords
    asread.install()
    assert fetcher.PartitionRecords is installed  # once, whoever asks again

    ordinary = unpacked(None)
    lean = unpacked(asread.as_read)
    assert all(type(r) is ConsumerRecord for r in ordinary)
    assert not any(isinstance(r, ConsumerRecord) for r in lean)
    seen = [(r.offset, r.key, r.value, list(r.headers)) for r in lean]  # type: ignore[attr-defined]
    assert seen == [(r.offset, r.key, r.value, list(r.headers)) for r in ordinary]  # type: ignore[attr-defined]
    assert seen == [(n, b"k%d" % n, b"v%d" % n, [("h", b"x")]) for n in range(3)]


def test_the_records_are_built_alike_whether_the_fetcher_names_its_arguments() -> None:
    asread.install()
    named = fetcher.PartitionRecords(
        TP,
        fetched(2),
        [],
        0,
        key_deserializer=asread.as_read,
        value_deserializer=None,
        check_crcs=True,
        isolation_level=fetcher.READ_UNCOMMITTED,
    )
    records = list(named)
    assert [(r.offset, r.key) for r in records] == [(0, b"k0"), (1, b"k1")]
    assert not any(isinstance(r, ConsumerRecord) for r in records)


def test_an_aiokafka_whose_fetcher_builds_records_otherwise_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Other:  # the key deserializer elsewhere among the arguments
        def __init__(self, tp, records, key_deserializer, *rest) -> None:  # type: ignore[no-untyped-def]
            pass

        def _consumer_record(self, tp, record):  # type: ignore[no-untyped-def]
            return record

    monkeypatch.setattr(asread, "_Base", Other)
    monkeypatch.setattr(fetcher, "PartitionRecords", Other)
    asread.install()
    assert fetcher.PartitionRecords is Other


def test_as_read_is_the_identity_where_it_is_not_installed() -> None:
    """A consumer built with it and no hook gets ordinary records, keys unchanged."""
    assert asread.as_read(b"k") == b"k" and asread.as_read(None) is None


@pytest.mark.integration
async def test_the_restore_reads_only_committed_records_as_read(
    kafka_bootstrap: str,
    create_topics: Callable[..., Awaitable[list[str]]],
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Committed, aborted and deleted states in one changelog partition: a changelog
    reader reads what an ordinary `read_committed` consumer does (aiokafka's own
    skipping of aborted transactions), as read; the restore builds from those."""
    topic = (await create_topics([unique_name("asread")]))[0]
    tp = TopicPartition(topic, 0)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=unique_name("t")
    )
    await producer.start()

    async def write(*changes: ThreadState | str, abort: bool = False) -> None:
        await producer.begin_transaction()
        for change in changes:
            if isinstance(change, str):
                await producer.send(topic, None, key=change.encode(), partition=0)
            else:
                await producer.send(
                    topic,
                    changelog.encode(change),
                    key=change.thread_id.encode(),
                    partition=0,
                    headers=changelog.hints(change),
                )
        await (producer.abort_transaction() if abort else producer.commit_transaction())

    try:
        await write(ThreadState("a", RunStatus.ACTIVE), ThreadState("b", RunStatus.SUCCEEDED))
        await write(ThreadState("c", RunStatus.ACTIVE), "a", abort=True)
        await write("b", ThreadState("d", RunStatus.ACTIVE))
    finally:
        await producer.stop()

    settings = Settings(bootstrap_servers=kafka_bootstrap)

    async def read(lean: bool) -> list[tuple[int, bytes | None, bytes | None, list, bool]]:
        if lean:
            reader = clients.changelog_reader(settings, "asread-test")
        else:
            reader = clients.consumer(
                settings, isolation_level="read_committed", auto_offset_reset="earliest"
            )
        await reader.start()
        try:
            reader.assign([tp])
            end = (await reader.end_offsets([tp]))[tp]
            out = []
            async for records in read_to(reader, tp, end):
                out += [
                    (r.offset, r.key, r.value, list(r.headers), isinstance(r, ConsumerRecord))
                    for r in records
                ]
            return out
        finally:
            await reader.stop()

    ordinary, lean = await read(lean=False), await read(lean=True)
    assert [r[:4] for r in lean] == [r[:4] for r in ordinary]
    assert [r[1] for r in lean] == [b"a", b"b", b"b", b"d"]  # c and a's deletion aborted
    assert all(r[4] for r in ordinary) and not any(r[4] for r in lean)

    applied: list[type] = []
    apply = replica_module.Replica.apply

    def spy(self: replica_module.Replica, messages: list) -> None:
        applied.extend(type(m) for m in messages)
        apply(self, messages)

    monkeypatch.setattr(replica_module.Replica, "apply", spy)
    restored = await Restorer(settings).restore(topic, 0)
    assert sorted(restored.store.ids()) == ["a", "d"] and restored.active == {"a", "d"}
    assert applied and ConsumerRecord not in applied
