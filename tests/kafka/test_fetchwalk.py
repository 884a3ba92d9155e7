"""The fetcher's walk, skipped while every node has a fetch in flight."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from gateway.kafka.wire.fetchwalk import lean

A, B, C = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Buffered:
    def __init__(self, backoff: float) -> None:
        self.backoff = backoff

    def calculate_backoff(self) -> float:
        return self.backoff


def fetcher(in_flight: set[int], nodes: list[int], records: dict[Any, Any]) -> SimpleNamespace:
    brokers = [SimpleNamespace(nodeId=n) for n in nodes]
    return SimpleNamespace(
        _in_flight=in_flight,
        _client=SimpleNamespace(cluster=SimpleNamespace(brokers=lambda: brokers)),
        _records=records,
        _fetcher_timeout=0.2,
        _select_read_replica=lambda tp: 1 if tp.topic == "a" else 2,
    )


def walked(calls: list[Any]) -> Any:
    def walk(assignment: Any) -> Any:
        calls.append(assignment)
        return "walked"

    return walk


ASSIGNMENT = SimpleNamespace(tps={A, B, C})


def test_with_a_node_not_in_flight_the_fetcher_walks() -> None:
    calls: list[Any] = []
    for in_flight in (set(), {1}):
        actions = lean(fetcher(in_flight, [1, 2], {}), walked(calls))
        assert actions(ASSIGNMENT) == "walked"
    assert calls == [ASSIGNMENT, ASSIGNMENT]
    # no broker known yet (only the bootstrap address): walk
    assert lean(fetcher({1}, [], {}), walked(calls))(ASSIGNMENT) == "walked"


def test_with_every_node_in_flight_only_the_buffered_records_backoff_is_answered() -> None:
    calls: list[Any] = []
    records = {A: Buffered(0.05), B: Buffered(0.08), C: Buffered(0.03), ("gone", 0): Buffered(9)}
    fetches, resets, timeout, invalid, resumes = lean(
        fetcher({1, 2}, [1, 2], records), walked(calls)
    )(ASSIGNMENT)
    assert calls == []
    assert (fetches, dict(resets), invalid, resumes) == ([], {}, False, [])
    assert timeout == 0.03  # the shortest over nodes of each node's longest backoff
    # nothing buffered, or nothing waiting: the fetcher's own timeout
    quiet = lean(fetcher({1, 2}, [1, 2], {A: Buffered(0)}), walked(calls))(ASSIGNMENT)
    assert quiet[2] == 0.2 and calls == []
