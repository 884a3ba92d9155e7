"""A transaction that never ends is given up (fake producers; both producer scopes).

aiokafka can wait for ever in `commit_transaction` once its broker died and came
back; with one producer per instance that one commit held every pair. Here a
producer's commit (and its abort) never returns: the round fails within the
deadline, like any failed transaction, and its pair is rewound by the committer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from gateway.kafka.exactly_once import checkpoint, groupfence, instancecheckpoint, transaction
from gateway.kafka.exactly_once.checkpoint import Checkpoint, Outcome, Work
from gateway.kafka.exactly_once.instancecheckpoint import InstanceCheckpoint
from gateway.kafka.exactly_once.transaction import TransactionStuck
from gateway.observe.metrics import Metrics
from gateway.settings import Settings


class StuckProducer:
    """Begins and takes offsets; its commit, abort and stop never return."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def begin_transaction(self) -> None:
        self.calls.append("begin")

    async def send_offsets_to_transaction(self, offsets: Any, group: Any) -> None:
        self.calls.append("offsets")

    async def commit_transaction(self) -> None:
        self.calls.append("commit")
        await asyncio.Event().wait()

    async def abort_transaction(self) -> None:
        self.calls.append("abort")
        await asyncio.Event().wait()

    async def stop(self) -> None:
        self.calls.append("stop")
        await asyncio.Event().wait()


class NoRecords:
    def records(self) -> list[Any]:
        return []


async def begin_only(producer: Any, records: list[Any]) -> list[Any]:
    await producer.begin_transaction()
    return []


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Deadlines of a test's length: transaction_timeout_ms at its least (1 s), no
    margin, and a short give-up for the abort and the stop."""
    monkeypatch.setattr(transaction, "DEADLINE_MARGIN_S", 0.0)
    monkeypatch.setattr(transaction, "GIVE_UP_S", 0.05)
    monkeypatch.setattr(checkpoint, "begin_and_send", begin_only)
    monkeypatch.setattr(instancecheckpoint, "begin_and_send", begin_only)
    return Settings(transaction_timeout_ms=1000)


def work() -> Work:
    return Work(("support", 0), NoRecords(), {TopicPartition("agui.support.requests", 0): 7})  # type: ignore[arg-type]


def test_the_deadline_is_the_brokers_transaction_timeout_and_a_margin() -> None:
    settings = Settings(transaction_timeout_ms=60000)
    assert transaction.deadline_s(settings) == 60.0 + transaction.DEADLINE_MARGIN_S


@pytest.mark.timeout(30)
async def test_a_pairs_commit_that_never_ends_fails_and_its_abort_is_not_waited_for(
    short: Settings,
) -> None:
    registry = CollectorRegistry()
    cp = Checkpoint(short, Metrics(registry), consumer=None)  # type: ignore[arg-type]
    producer = StuckProducer()
    cp._producers[("support", 0)] = producer  # type: ignore[assignment]

    (result,) = await cp.commit([work()])

    assert result.outcome is Outcome.FAILED
    assert isinstance(result.error, TransactionStuck)
    assert "did not end within 1 s" in str(result.error)
    assert producer.calls == ["begin", "offsets", "commit", "abort"]
    assert registry.get_sample_value("agui_gateway_transactions_total", {"result": "aborted"}) == 1
    # the committer then closes the pair's producer: a stop that hangs is given up too
    await cp.close(("support", 0))
    assert producer.calls[-1] == "stop" and not cp.holds(("support", 0))


@pytest.mark.timeout(30)
async def test_an_instance_transaction_that_never_ends_fails_its_rounds_and_replaces_the_producer(
    short: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def offsets(producer: Any, offsets: Any, group: Any) -> None:
        await producer.send_offsets_to_transaction(offsets, group)

    monkeypatch.setattr(groupfence, "group_metadata", lambda consumer: "generation 3")
    monkeypatch.setattr(groupfence, "send_offsets_to_transaction", offsets)
    started: list[StuckProducer] = []

    async def start(settings: Any, client_id: str, transactional_id: str) -> StuckProducer:
        started.append(StuckProducer())
        return started[-1]

    monkeypatch.setattr(instancecheckpoint, "start_transactional", start)
    registry = CollectorRegistry()
    cp = InstanceCheckpoint(short, Metrics(registry), consumer=None)  # type: ignore[arg-type]
    await cp.open(("support", 0))
    await cp.open(("support", 1))
    other = Work(("support", 1), NoRecords(), {})  # type: ignore[arg-type]

    results = await cp.commit([work(), other])

    assert [r.outcome for r in results] == [Outcome.FAILED, Outcome.FAILED]
    assert all(isinstance(r.error, TransactionStuck) for r in results)
    assert started[0].calls == ["begin", "offsets", "commit", "abort", "stop"]
    assert registry.get_sample_value("agui_gateway_transactions_total", {"result": "aborted"}) == 2
    # the next transaction starts on a fresh producer, not on the stuck one
    assert cp._producers == [None]
    await cp.commit([work()])
    assert len(started) == 2 and started[1].calls[0] == "begin"
